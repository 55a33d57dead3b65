// What the model's CUDA benchmarks (qwen3tts_talker_bench, qwen3tts_codec_bench, qwen3tts_beside_bench) share:
// a CUDA call's check, their list arguments and the median of their timings.
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

} // namespace qwen3_tts::bench
