// What every fuzz target here does when an input breaks the contract of the parser under test (beyond a crash,
// which the sanitizers report): says which rule broke and aborts, so libFuzzer keeps the input as a reproducer.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace mstar_fuzz {
[[noreturn]] inline void broken(const char* what) {
  std::printf("fuzz: contract broken: %s\n", what);
  std::fflush(stdout);
  std::abort();
}
} // namespace mstar_fuzz
