#include <doctest/doctest.h>
#include "testing.hpp"
TEST_CASE("smoke") { CHECK(true); }
