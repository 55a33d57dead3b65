// A dilated 1-D convolution of a time-major activation ([positions][channels], float32) through cuDNN's
// implicit-GEMM kernels: no im2col written out. The codec's causal convolutions read an extended buffer
// ([context | window] per row, codec_cuda_kernels.hpp), so a convolution without padding over the whole
// buffer gives every row's outputs, with the other rows' contexts between them (codec_cuda's epilogue
// gathers them).
//
// cuDNN 9 is loaded at run time (dlopen of libcudnn.so.9: $MSTAR_CUDNN_LIB first, then the loader's path,
// then the folder the build found it in), so nothing links against it and a build or a machine without it
// refuses only this path, with a message saying how to get it. The build needs cudnn.h (the CUDA toolkit's
// or the nvidia-cudnn-cu13 wheel's); without it the constructor throws the same way.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

namespace qwen3_tts {

class cudnn_conv {
public:
  // Convolutions on `stream`; tensor_cores: TF32 (cuDNN's tensor-op math) or float32 FMA only. workspace:
  // device memory of `bytes` the algorithms may use (each shape takes the fastest that fits, by cuDNN's
  // heuristics, so nothing is timed or allocated while a graph is captured).
  cudnn_conv(cudaStream_t stream, bool tensor_cores, void* workspace, std::size_t bytes);
  ~cudnn_conv();
  cudnn_conv(const cudnn_conv&) = delete;
  cudnn_conv& operator=(const cudnn_conv&) = delete;

  // y[e][o] = sum over tap < taps, c < in of x[e + tap * dilation][c] * w[o][tap][c], for every e below
  // positions - (taps - 1) * dilation (w: [out][taps][in], the codec's layout).
  void forward(const float* x, int positions, int in, const float* w, int out, int taps, int dilation, float* y);

  // Whether cuDNN can be loaded here (false also for a build without cudnn.h); why_not() says why.
  static bool available();
  static const char* why_not();

private:
  struct impl;
  std::unique_ptr<impl> p_;
};

} // namespace qwen3_tts
