// Tests-only instantiations of the recurrent-state launchers for the element types no model uses yet
// (the Qwen3-TTS library brings mstar::bf16 and __nv_bfloat16).
#include <mstar/kernels/recurrent.cuh>

#include <cuda_fp16.h>

#include <cstdint>

MSTAR_INSTANTIATE_RECURRENT(float);
MSTAR_INSTANTIATE_RECURRENT(double);
MSTAR_INSTANTIATE_RECURRENT(std::uint8_t);
MSTAR_INSTANTIATE_RECURRENT(mstar::f16);
MSTAR_INSTANTIATE_RECURRENT(__half);
