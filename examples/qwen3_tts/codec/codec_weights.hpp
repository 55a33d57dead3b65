// The codec decoder's weights as plain float32 structs, named after the checkpoint's tensors
// (speech_tokenizer/model.safetensors, prefix "decoder."), loaded with their shapes checked against
// the config. The released decoder has no weight norm to fold: its convolutions store plain weights.
// Two things are derived at load, as the reference derives them at every call: the codebooks are
// embedding_sum / clamp(cluster_usage, 1e-5), and SnakeBeta's exp(alpha) and 1 / (exp(beta) + 1e-9).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codec_config.hpp"

namespace qwen3_tts {

// Hands out one tensor as float32 after checking that it exists with exactly this shape (the
// checkpoint reader's weight_store::require + to_f32); it throws, naming the tensor, otherwise.
using codec_tensor_source =
    std::function<std::vector<float>(const std::string& name, const std::vector<std::int64_t>& shape)>;

struct codec_linear {
  std::vector<float> weight; // [out][in]
  std::vector<float> bias;   // [out], empty when the layer has none
  int in = 0, out = 0;
};

// A causal 1-D convolution: `weight` as stored, [out][in / groups][kernel]; `taps` the same weights
// re-laid [kernel][out][in / groups] so that one output's dot product reads contiguous memory.
struct codec_conv {
  std::vector<float> weight;
  std::vector<float> bias;
  std::vector<float> taps;
  int in = 0, out = 0, kernel = 1, dilation = 1, groups = 1;
  int context() const { return (kernel - 1) * dilation; } // input frames carried to the next window
};

// A transposed convolution of stride `stride`: `weight` as stored, [in][out][kernel]; `taps` re-laid
// [kernel][out][in]. The reference trims kernel - stride outputs on the right.
struct codec_trans_conv {
  std::vector<float> weight;
  std::vector<float> bias;
  std::vector<float> taps;
  int in = 0, out = 0, kernel = 1, stride = 1;
  // Earlier input frames whose outputs reach into this window's (ceil((kernel - stride) / stride)).
  int context() const { return (kernel - stride + stride - 1) / stride; }
};

struct codec_snake_beta {
  std::vector<float> alpha, beta;     // as stored (log scale)
  std::vector<float> exp_alpha;       // exp(alpha)
  std::vector<float> inv_exp_beta;    // 1 / (exp(beta) + 1e-9)
};

struct codec_codebook {
  std::vector<float> embedding; // [codebook_size][dim]: embedding_sum / clamp(cluster_usage, 1e-5)
};

struct codec_rvq {            // rvq_first or rvq_rest
  std::vector<codec_codebook> layers;
  std::vector<float> output_proj; // [codebook_dim][codebook_dim / 2] (a kernel-1 conv, no bias)
};

struct codec_transformer_layer {
  codec_linear q_proj, k_proj, v_proj, o_proj;
  codec_linear gate_proj, up_proj, down_proj;
  std::vector<float> input_layernorm, post_attention_layernorm;
  std::vector<float> self_attn_layer_scale, mlp_layer_scale;
};

struct codec_pre_transformer {
  codec_linear input_proj, output_proj;
  std::vector<codec_transformer_layer> layers;
  std::vector<float> norm;
};

struct codec_convnext {
  codec_conv dwconv; // depthwise, kernel 7
  std::vector<float> norm_weight, norm_bias;
  codec_linear pwconv1, pwconv2;
  std::vector<float> gamma;
};

struct codec_upsample_stage {
  codec_trans_conv trans_conv; // kernel == stride: no overlap
  codec_convnext convnext;
};

struct codec_residual_unit {
  codec_snake_beta act1;
  codec_conv conv1; // kernel 7, dilation 1, 3 or 9
  codec_snake_beta act2;
  codec_conv conv2; // kernel 1
};

struct codec_decoder_block {
  codec_snake_beta snake;
  codec_trans_conv trans_conv; // kernel 2 * rate, stride rate
  std::vector<codec_residual_unit> units;
};

struct codec_weights {
  codec_rvq rvq_first, rvq_rest;
  codec_conv pre_conv;
  codec_pre_transformer pre_transformer;
  std::vector<codec_upsample_stage> upsample;
  codec_conv decoder_in;                  // decoder.0
  std::vector<codec_decoder_block> blocks; // decoder.1 .. decoder.N
  codec_snake_beta final_snake;           // decoder.N+1
  codec_conv decoder_out;                 // decoder.N+2
};

// Dilations of each decoder block's residual units, as the reference builds them.
inline constexpr int codec_unit_dilations[3] = {1, 3, 9};

// `prefix` is what precedes the decoder module's names in the file ("decoder." in the official layout).
codec_weights load_codec_weights(const codec_config& config, const codec_tensor_source& source,
                                 const std::string& prefix = "decoder.");

} // namespace qwen3_tts
