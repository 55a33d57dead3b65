// What the kernel-level GPU tests share: a device buffer that frees itself, and deterministic random inputs made
// on the host (bf16 bit patterns, floats), so that a test's inputs never depend on the code under test.
#pragma once

#include "gpu_test.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mstar::test {

inline float bf16_value(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Deterministic bf16 bit patterns uniform in [-scale, scale).
inline std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<std::uint16_t> v(n);
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float f = (float(std::uint32_t(s >> 40)) / float(1u << 24) * 2.0f - 1.0f) * scale;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    b = std::uint16_t(u >> 16);
  }
  return v;
}

// Deterministic floats in [-3, 3), each a bf16 value.
inline std::vector<float> random_f32(std::size_t n, std::uint64_t seed) {
  const auto bits = random_bf16(n, seed, 1.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = bf16_value(bits[i]) * 3.0f;
  return v;
}

template <class T>
struct device_array {
  T* p = nullptr;
  explicit device_array(std::size_t n) { MSTAR_CUDA_REQUIRE(cudaMalloc(&p, n * sizeof(T))); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { cudaFree(p); }
  template <class H>
  void upload(const std::vector<H>& h) {
    static_assert(sizeof(H) == sizeof(T));
    MSTAR_CUDA_REQUIRE(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class H>
  std::vector<H> download(std::size_t n) const {
    static_assert(sizeof(H) == sizeof(T));
    std::vector<H> h(n);
    MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
    MSTAR_CUDA_REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

} // namespace mstar::test
