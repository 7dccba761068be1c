// An empty translation unit: the target that compiles tests/support/test_pch.hpp once.
