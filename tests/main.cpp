// The one translation unit that holds doctest's main (compiling it costs seconds; every other
// test file only includes doctest.h).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
