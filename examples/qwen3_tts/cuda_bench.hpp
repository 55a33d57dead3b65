// What the model's CUDA benchmarks (qwen3tts_talker_bench, qwen3tts_codec_bench, qwen3tts_beside_bench) share:
// a CUDA call's check, their list arguments, the median of their timings and the device's copy rate.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace qwen3_tts::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// "1,8,32,64": integers of at least `least` (default 1), comma-separated.
inline std::vector<int> int_list(const std::string& s, int least = 1) {
  std::vector<int> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    v.push_back(std::stoi(item));
  if (v.empty() || *std::min_element(v.begin(), v.end()) < least)
    throw std::invalid_argument("a list of integers of at least " + std::to_string(least) + ", e.g. 1,8,32,64; got '" +
                                s + "'");
  return v;
}

inline double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy rate in bytes moved (read + written) per second, best of 10 copies of 1 GiB.
inline double copy_rate(cudaStream_t s) {
  const std::size_t n = std::size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, n), "cudaMalloc (copy rate)");
  check(cudaMalloc(&b, n), "cudaMalloc (copy rate)");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  float best = 1e30f;
  for (int i = 0; i < 11; ++i) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    check(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync D2D");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (i > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(n) / (double(best) * 1e-3);
}

} // namespace qwen3_tts::bench
