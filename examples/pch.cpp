// examples/pch.cpp — the translation unit that builds the course programs' precompiled header
// (examples/CMakeLists.txt); it has no code of its own.
