// What the GPU tests share: whether a CUDA device is present (decided once, in main.cpp), and a
// check of CUDA return codes that names the call and the error.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

namespace mstar::test {
bool has_gpu();
} // namespace mstar::test

#define MSTAR_CUDA_REQUIRE(call)                                                                  \
  do {                                                                                            \
    const cudaError_t mstar_cuda_e_ = (call);                                                     \
    REQUIRE_MESSAGE(mstar_cuda_e_ == cudaSuccess, #call " failed: ", cudaGetErrorString(mstar_cuda_e_)); \
  } while (0)
