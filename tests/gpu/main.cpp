// doctest's main for mstar_gpu_tests. Without a CUDA device every test case is skipped (each one
// carries doctest::skip(!has_gpu())), the reason is printed once, and the exit code is 77, which
// meson reports as SKIP rather than as a pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include "gpu_test.hpp"

#include <cstdio>

bool mstar::test::has_gpu() {
  static const bool yes = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    (void)cudaGetLastError();  // a failed query must not leave a sticky error for the first test
    return ok;
  }();
  return yes;
}

int main(int argc, char** argv) {
  const bool gpu = mstar::test::has_gpu();
  if (!gpu) std::printf("no CUDA device: GPU tests skipped\n");
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  return gpu ? 0 : 77;
}
