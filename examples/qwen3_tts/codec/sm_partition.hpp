// A CUDA stream whose kernels run on a part of the device's SMs: a green context (CUDA 12.4+ driver) holding
// at least the asked number of SMs, and a stream in it. Memory stays the primary context's, so buffers
// allocated with cudaMalloc, cuBLAS handles bound to the stream, events and CUDA graphs work as on any stream;
// only the SMs its kernels may occupy differ. The side lane's codec runs on one so that its large grids leave
// the rest of the GPU to the chain's many small kernels (codec_cuda_limits::sm_count).
//
// The driver's green-context entry points are looked up through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links against libcuda.
#pragma once

#include <cuda_runtime.h>

namespace qwen3_tts {

class sm_partition_stream {
public:
  // A stream on at least sm_count SMs of the current device (the driver rounds up to the architecture's
  // granularity: 8 on Hopper). Throws std::invalid_argument when sm_count is not in 1..the device's SM count,
  // std::runtime_error when the driver has no green contexts or refuses the split.
  explicit sm_partition_stream(int sm_count);
  ~sm_partition_stream();
  sm_partition_stream(const sm_partition_stream&) = delete;
  sm_partition_stream& operator=(const sm_partition_stream&) = delete;

  cudaStream_t stream() const { return stream_; }
  int sms() const { return sms_; } // SMs the partition holds

private:
  void* ctx_ = nullptr; // CUgreenCtx
  cudaStream_t stream_ = nullptr;
  int sms_ = 0;
};

} // namespace qwen3_tts
