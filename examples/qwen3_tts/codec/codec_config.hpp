// The 12 Hz codec decoder's configuration, typed: every field of speech_tokenizer/config.json that the
// reference decoder (Qwen3TTSTokenizerV2Decoder, qwen-tts 0.1.1) reads, with the reference config
// class's defaults where the file leaves a field out. Parsing refuses a field of the wrong type or an
// impossible value with a message naming the file and the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace qwen3_tts {

struct codec_config {
  // Split residual vector quantizer: one semantic codebook, then num_quantizers - 1 acoustic ones, each
  // of codebook_size entries of codebook_dim / 2; both halves project back to codebook_dim.
  int codebook_size = 2048;
  int codebook_dim = 512;
  int num_quantizers = 16;
  int latent_dim = 1024;

  // The pre-transformer (sliding-window attention over frames).
  int hidden_size = 1024;
  int intermediate_size = 3072;
  int num_hidden_layers = 8;
  int num_attention_heads = 16;
  int num_key_value_heads = 16;
  int head_dim = 64;
  int sliding_window = 72;
  bool attention_bias = false;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;

  // Upsampling: the ConvNeXt stages (upsampling_ratios), then the SnakeBeta decoder blocks
  // (upsample_rates), from decoder_dim channels halving at each block.
  std::vector<int> upsampling_ratios = {2, 2};
  std::vector<int> upsample_rates = {8, 5, 4, 3};
  int decoder_dim = 1536;

  // Top level of the tokenizer's config.json (not decoder_config).
  int output_sample_rate = 24000;

  // The only semantic split the reference builds.
  static constexpr int num_semantic_quantizers = 1;

  // Audio samples per frame: the product of every upsampling factor (1920 at the released size).
  int samples_per_frame() const;
  // Channels of decoder block b's output (decoder_dim / 2^(b+1)).
  int block_out_dim(std::size_t b) const { return decoder_dim >> (b + 1); }
  int block_in_dim(std::size_t b) const { return decoder_dim >> b; }
};

// `tokenizer_config` is the whole speech_tokenizer/config.json (its decoder_config object is read);
// `source` names the file in error messages.
codec_config parse_codec_config(const nlohmann::json& tokenizer_config, std::string_view source);

} // namespace qwen3_tts
