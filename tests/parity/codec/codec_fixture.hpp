// The codec fixtures (tests/fixtures/qwen3tts/<fixture>/expected/codec.safetensors: code sequences and the
// reference decoder's whole-sequence audio over them) and the comparisons the codec tests make, shared by
// the host parity test and the CUDA decoder's GPU test. Needs MSTAR_SOURCE_ROOT and doctest.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qwen3_tts/checkpoint/safetensors.hpp"

namespace qwen3_tts::codec_fixture {

inline const std::string fixtures = std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/";

struct sequence {
  std::vector<std::int32_t> frames; // [n][16], frame-major as the decoder takes them
  std::vector<float> audio;         // the reference's forward over the whole sequence
  int n = 0;                        // frames
};

// The fixture stores codes codebook-major, [16][n], as the reference's forward takes them.
inline sequence load_sequence(const std::string& fixture, const std::string& name) {
  const safetensors_file file(fixtures + fixture + "/expected/codec.safetensors");
  const auto* codes = file.find(name + ".codes");
  const auto* audio = file.find(name + ".audio");
  REQUIRE(codes != nullptr);
  REQUIRE(audio != nullptr);
  REQUIRE(codes->shape.size() == 2);
  const auto q = std::size_t(codes->shape[0]), n = std::size_t(codes->shape[1]);
  const auto raw = to_i64(*codes);
  sequence s;
  s.n = int(n);
  s.frames.resize(q * n);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < q; ++j)
      s.frames[t * q + j] = std::int32_t(raw[j * n + t]);
  s.audio = to_f32(*audio);
  return s;
}

inline float max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace qwen3_tts::codec_fixture
