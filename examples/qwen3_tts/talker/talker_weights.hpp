// The Talker's and code predictor's weights as plain float32 structs, one member per checkpoint tensor and named
// as in the checkpoint (talker.model.layers.N.self_attn.q_proj.weight -> layers[N].q_proj). Linear weights keep
// the checkpoint's [out][in] row-major layout, so a CUDA port can upload each member as it is.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "talker_config.hpp"

namespace qwen3_tts {

using tensor = std::vector<float>;

struct decoder_layer_weights {
  tensor input_layernorm;          // [hidden]
  tensor q_proj, k_proj, v_proj;   // [heads * head_dim][hidden], [kv_heads * head_dim][hidden] x2
  tensor q_norm, k_norm;           // [head_dim]
  tensor o_proj;                   // [hidden][heads * head_dim]
  tensor post_attention_layernorm; // [hidden]
  tensor gate_proj, up_proj;       // [intermediate][hidden]
  tensor down_proj;                // [hidden][intermediate]
};

struct predictor_weights {
  std::vector<decoder_layer_weights> layers;
  tensor norm;                         // [predictor hidden]
  std::vector<tensor> codec_embedding; // code_groups - 1 of [predictor vocab][talker hidden]
  std::vector<tensor> lm_head;         // code_groups - 1 of [predictor vocab][predictor hidden]
  // small_to_mtp_projection, present only when the predictor is narrower or wider than the Talker.
  tensor projection_weight; // [predictor hidden][talker hidden]
  tensor projection_bias;   // [predictor hidden]
  bool has_projection() const { return !projection_weight.empty(); }
};

struct talker_weights {
  tensor text_embedding;                 // [text vocab][text hidden]
  tensor text_fc1_weight, text_fc1_bias; // text_projection.linear_fc1: [text hidden][text hidden], [text hidden]
  tensor text_fc2_weight, text_fc2_bias; // text_projection.linear_fc2: [hidden][text hidden], [hidden]
  tensor codec_embedding;                // [vocab][hidden]
  std::vector<decoder_layer_weights> layers;
  tensor norm;       // [hidden]
  tensor codec_head; // [vocab][hidden]
  predictor_weights predictor;
};

// Where weights come from: returns the named tensor as float32, after checking it exists and has exactly
// `shape` (throwing a message that names the file and the tensor otherwise). The checkpoint loader's
// weight_store provides it (see checkpoint_source in talker.hpp); tests may provide their own.
using tensor_source = std::function<tensor(const std::string& name, const std::vector<std::int64_t>& shape)>;

// Reads every tensor the Talker and predictor use, each with the shape config implies.
talker_weights load_talker_weights(const talker_config& config, const tensor_source& source);

} // namespace qwen3_tts
