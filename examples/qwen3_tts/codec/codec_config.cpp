// Parses the codec decoder's fields from speech_tokenizer/config.json (see codec_config.hpp).
#include "codec_config.hpp"

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

namespace qwen3_tts {
namespace {

// A JSON integer that fits an int: a 32-bit conversion would wrap 2^32 + 2 into 2, which passes every check.
bool fits_int(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<int>::max());
  return v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
         v.get<std::int64_t>() <= std::numeric_limits<int>::max();
}

// Bounds far above the released decoder (1920 samples a frame, a 72-frame window, 5.2 MB of state a
// request) that keep every size computed from the config inside an int and a request's state allocatable.
constexpr std::int64_t max_samples_per_frame = std::int64_t{1} << 20;
constexpr std::int64_t max_window_kv_floats = std::int64_t{1} << 28; // 1 GiB of float32 a request

struct field_reader {
  const nlohmann::json& object;
  std::string_view source;
  std::string_view scope;

  [[noreturn]] void fail(std::string_view field, const std::string& why) const {
    throw std::runtime_error(std::string(source) + ": " + std::string(scope) + "." + std::string(field) + " " + why);
  }

  const nlohmann::json* find(std::string_view field) const {
    auto it = object.find(field);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }

  void read(std::string_view field, int& out, int min_value = 1) const {
    if (auto* v = find(field)) {
      if (!v->is_number_integer() || !fits_int(*v))
        fail(field, "must be an integer within 32 bits, found " + v->dump());
      out = v->get<int>();
    }
    if (out < min_value)
      fail(field, "is " + std::to_string(out) + ", must be at least " + std::to_string(min_value) +
                      "; is this the 12 Hz speech tokenizer's config.json?");
  }
  void read(std::string_view field, double& out) const {
    if (auto* v = find(field)) {
      if (!v->is_number())
        fail(field, "must be a number, found " + v->dump());
      out = v->get<double>();
    }
    if (!(out > 0))
      fail(field, "is " + std::to_string(out) + ", must be positive");
  }
  void read(std::string_view field, bool& out) const {
    if (auto* v = find(field)) {
      if (!v->is_boolean())
        fail(field, "must be true or false, found " + v->dump());
      out = v->get<bool>();
    }
  }
  void read(std::string_view field, std::vector<int>& out) const {
    if (auto* v = find(field)) {
      if (!v->is_array() || v->empty())
        fail(field, "must be a non-empty list of integers, found " + v->dump());
      out.clear();
      for (auto& e : *v) {
        if (!e.is_number_integer() || !fits_int(e) || e.get<int>() < 1)
          fail(field, "must list positive integers, found " + v->dump());
        out.push_back(e.get<int>());
      }
    }
  }
};

} // namespace

int codec_config::samples_per_frame() const {
  int n = 1;
  for (int r : upsampling_ratios)
    n *= r;
  for (int r : upsample_rates)
    n *= r;
  return n;
}

codec_config parse_codec_config(const nlohmann::json& tokenizer_config, std::string_view source) {
  if (!tokenizer_config.is_object())
    throw std::runtime_error(std::string(source) + ": the speech tokenizer's config must be a JSON object");
  auto dec = tokenizer_config.find("decoder_config");
  if (dec == tokenizer_config.end() || !dec->is_object())
    throw std::runtime_error(std::string(source) +
                             ": no decoder_config object; point --model at a Qwen3-TTS 12 Hz checkpoint folder "
                             "(its speech_tokenizer/config.json has one)");
  codec_config c;
  const field_reader top{tokenizer_config, source, "config"};
  top.read("output_sample_rate", c.output_sample_rate);

  const field_reader r{*dec, source, "decoder_config"};
  r.read("codebook_size", c.codebook_size);
  // The reference's config class has no default for codebook_dim: the decoder cannot be built without it.
  if (!r.find("codebook_dim"))
    r.fail("codebook_dim", "is missing (the reference decoder requires it; the released value is 512)");
  r.read("codebook_dim", c.codebook_dim, 2);
  if (c.codebook_dim % 2 != 0)
    r.fail("codebook_dim", "is " + std::to_string(c.codebook_dim) + ", must be even (each quantizer works at half of it)");
  r.read("num_quantizers", c.num_quantizers, 2);
  r.read("latent_dim", c.latent_dim);
  r.read("hidden_size", c.hidden_size);
  r.read("intermediate_size", c.intermediate_size);
  r.read("num_hidden_layers", c.num_hidden_layers, 0);
  r.read("num_attention_heads", c.num_attention_heads);
  r.read("num_key_value_heads", c.num_key_value_heads);
  c.head_dim = c.hidden_size / c.num_attention_heads; // the reference's fallback when head_dim is absent
  r.read("head_dim", c.head_dim, 2);
  if (c.head_dim % 2 != 0)
    r.fail("head_dim", "is " + std::to_string(c.head_dim) + ", must be even (rotary embedding rotates halves)");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", "is " + std::to_string(c.num_key_value_heads) + ", must divide num_attention_heads " +
                                      std::to_string(c.num_attention_heads));
  r.read("sliding_window", c.sliding_window);
  // A request's carried state holds the window's keys and values for every layer: the engine's pool and the
  // decode command allocate it from these fields alone (the product in double: it may pass 64 bits).
  const double window_kv = double(c.sliding_window - 1) * 2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim;
  if (window_kv > double(max_window_kv_floats))
    r.fail("sliding_window", "is " + std::to_string(c.sliding_window) + ": with " + std::to_string(c.num_hidden_layers) +
                                 " layers of " + std::to_string(c.num_key_value_heads) + " x " +
                                 std::to_string(c.head_dim) + " keys and values, a request's state would pass " +
                                 std::to_string(max_window_kv_floats) + " floats (released: 72, 5.2 MB of state)");
  r.read("attention_bias", c.attention_bias);
  r.read("rope_theta", c.rope_theta);
  r.read("rms_norm_eps", c.rms_norm_eps);
  r.read("upsampling_ratios", c.upsampling_ratios);
  r.read("upsample_rates", c.upsample_rates);
  r.read("decoder_dim", c.decoder_dim);
  std::int64_t samples = 1;
  for (const auto& [field, factors] : {std::pair{"upsampling_ratios", &c.upsampling_ratios},
                                       std::pair{"upsample_rates", &c.upsample_rates}})
    for (int f : *factors)
      if ((samples *= f) > max_samples_per_frame)
        r.fail(field, "multiplies the samples a frame past " + std::to_string(max_samples_per_frame) +
                          " (released: 1920 from [2, 2] and [8, 5, 4, 3]); is this the 12 Hz speech tokenizer's config?");
  if (c.upsample_rates.size() > 30 || c.decoder_dim % (std::int64_t{1} << c.upsample_rates.size()) != 0)
    r.fail("decoder_dim", "is " + std::to_string(c.decoder_dim) + ", must halve evenly through " +
                              std::to_string(c.upsample_rates.size()) + " decoder blocks");

  if (auto* act = r.find("hidden_act"); act && *act != "silu")
    r.fail("hidden_act", "is " + act->dump() + "; this decoder computes the released \"silu\" only");
  if (auto* rs = r.find("rope_scaling")) {
    auto type = rs->is_object() ? rs->value("rope_type", rs->value("type", std::string("default"))) : std::string("?");
    if (type != "default")
      r.fail("rope_scaling", "is " + rs->dump() + "; this decoder computes the released default rotary embedding only");
  }
  return c;
}

} // namespace qwen3_tts
