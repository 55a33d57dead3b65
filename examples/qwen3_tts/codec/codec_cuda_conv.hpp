// The CUDA codec's causal convolutions as CUTLASS implicit-GEMM convolutions (codec_cuda_math::cutlass_tf32 and
// cutlass_fp16): the product reads each row's [left context | window] where k::extend left it, the taps part of its
// reduction, instead of the im2col writing every position's window out for cuBLAS. On the tensor cores with float32
// sums: TF32 over float32 operands (rounded to nearest), or fp16 operands (the extended input as k::extend rounded
// it, the weights as uploaded); float32 out, the bias added in the epilogue. Only codec_cuda_conv.cu includes CUTLASS,
// so the rest of the codec does not pay its compile time; a build without CUTLASS compiles that file to refusals.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "codec_conv_shape.hpp"

namespace qwen3_tts::implicit_conv {

// Whether this build has CUTLASS: meson found its headers (scripts/cutlass.sh fetches them into
// third_party/cutlass/include, -Dcutlass_include names another folder).
bool available();

// Allows the kernels their shared memory on the current device: once per decoder, before any launch and outside any
// graph capture (codec_cuda's constructor, for either CUTLASS math), so that run() enqueues its kernel and nothing
// else.
void prepare();

// Why the CUTLASS path does not take the shape (shape_refusal's rules, then CUTLASS's can_implement: alignment, the
// tensors' sizes, the grid), or nullptr. Host arithmetic only: no CUDA call, so it may run during a graph capture.
const char* refusal(const conv_shape& shape, conv_operands op = conv_operands::tf32);

// y[r][t][o] = bias[o] + sum over taps k and channels c of ext[r][t + k * dilation][c] * w[o][k][c], on s: ext is
// [rows][context + width][in], w [out][taps][in] (KRSC), y [rows][width][out], all 16-byte aligned, bias [out]. Only
// for a shape refusal() takes. No allocation, no synchronization, no workspace: capture-safe. Throws
// std::runtime_error where the launch fails.
void run(const conv_shape& shape, const float* ext, const float* w, const float* bias, float* y, cudaStream_t s);
// The same over fp16 operands (refusal(shape, conv_operands::fp16) must take the shape).
void run(const conv_shape& shape, const __half* ext, const __half* w, const float* bias, float* y, cudaStream_t s);

} // namespace qwen3_tts::implicit_conv
