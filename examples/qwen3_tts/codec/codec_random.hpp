// The released 12 Hz decoder's configuration (8 layers of hidden 512, window 72, latent 1024, decoder_dim 1536,
// rates 8-5-4-3 after 2-2: 1920 samples a frame) and deterministic random weights for it, for benchmarks that
// need the codec at its real size without a checkpoint (qwen3tts_codec_bench, qwen3tts_beside_bench).
//
//   const codec_config c = released_codec_config();
//   const codec_weights w = load_codec_weights(c, random_codec_tensor);
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec_config.hpp"

namespace qwen3_tts {

inline codec_config released_codec_config() {
  return parse_codec_config(nlohmann::json::parse(R"({"decoder_config": {
      "codebook_dim": 512, "codebook_size": 2048, "latent_dim": 1024, "hidden_size": 512, "intermediate_size": 1024,
      "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 64,
      "sliding_window": 72, "decoder_dim": 1536, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
      "num_quantizers": 16}})"),
                            "released");
}

// Deterministic weights by name: matrices uniform in +-1/sqrt(fan-in), norms near 1, SnakeBeta's log
// scales near 0, codebook usage near 1 (the decoder divides by it).
inline std::vector<float> random_codec_tensor(const std::string& name, const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape)
    n *= std::size_t(d);
  std::uint32_t h = 2166136261u;
  for (unsigned char c : name)
    h = (h ^ c) * 16777619u;
  std::uint64_t state = h * 0x9e3779b97f4a7c15ull + 1;
  const bool norm = name.find("norm") != std::string::npos || name.find("usage") != std::string::npos;
  const bool log_scale = name.find("alpha") != std::string::npos || name.find("beta") != std::string::npos;
  const std::size_t fan_in = shape.size() > 1 ? n / std::size_t(shape[0]) : 1;
  const float scale = norm                                      ? 0.2f
                      : log_scale                               ? 0.1f
                      : name.find("scale") != std::string::npos ? 0.01f
                                                                : 1.0f / std::sqrt(float(fan_in));
  std::vector<float> t(n);
  for (auto& v : t) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = float(std::uint32_t(state >> 40)) / float(1u << 24) * 2.0f - 1.0f;
    v = (norm ? 1.0f : 0.0f) + u * scale;
  }
  return t;
}

} // namespace qwen3_tts
