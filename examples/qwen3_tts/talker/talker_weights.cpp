// Loading talker_weights: the checkpoint's names and the shapes the config implies, in one place.
#include "talker_weights.hpp"

namespace qwen3_tts {
namespace {

using shape = std::vector<std::int64_t>;

decoder_layer_weights load_layer(const stack_config& s, const tensor_source& get, const std::string& prefix) {
  const std::int64_t h = s.hidden, q = std::int64_t(s.heads) * s.head_dim, kv = std::int64_t(s.kv_heads) * s.head_dim,
                     i = s.intermediate, d = s.head_dim;
  decoder_layer_weights w;
  w.input_layernorm = get(prefix + "input_layernorm.weight", shape{h});
  w.q_proj = get(prefix + "self_attn.q_proj.weight", shape{q, h});
  w.k_proj = get(prefix + "self_attn.k_proj.weight", shape{kv, h});
  w.v_proj = get(prefix + "self_attn.v_proj.weight", shape{kv, h});
  w.q_norm = get(prefix + "self_attn.q_norm.weight", shape{d});
  w.k_norm = get(prefix + "self_attn.k_norm.weight", shape{d});
  w.o_proj = get(prefix + "self_attn.o_proj.weight", shape{h, q});
  w.post_attention_layernorm = get(prefix + "post_attention_layernorm.weight", shape{h});
  w.gate_proj = get(prefix + "mlp.gate_proj.weight", shape{i, h});
  w.up_proj = get(prefix + "mlp.up_proj.weight", shape{i, h});
  w.down_proj = get(prefix + "mlp.down_proj.weight", shape{h, i});
  return w;
}

} // namespace

talker_weights load_talker_weights(const talker_config& c, const tensor_source& get) {
  talker_weights w;
  const std::int64_t h = c.talker.hidden, th = c.text_hidden, ph = c.predictor.hidden;
  w.text_embedding = get("talker.model.text_embedding.weight", shape{c.text_vocab, th});
  w.text_fc1_weight = get("talker.text_projection.linear_fc1.weight", shape{th, th});
  w.text_fc1_bias = get("talker.text_projection.linear_fc1.bias", shape{th});
  w.text_fc2_weight = get("talker.text_projection.linear_fc2.weight", shape{h, th});
  w.text_fc2_bias = get("talker.text_projection.linear_fc2.bias", shape{h});
  w.codec_embedding = get("talker.model.codec_embedding.weight", shape{c.talker.vocab, h});
  for (int l = 0; l < c.talker.layers; ++l)
    w.layers.push_back(load_layer(c.talker, get, "talker.model.layers." + std::to_string(l) + "."));
  w.norm = get("talker.model.norm.weight", shape{h});
  w.codec_head = get("talker.codec_head.weight", shape{c.talker.vocab, h});

  predictor_weights& p = w.predictor;
  const std::string pre = "talker.code_predictor.";
  for (int l = 0; l < c.predictor.layers; ++l)
    p.layers.push_back(load_layer(c.predictor, get, pre + "model.layers." + std::to_string(l) + "."));
  p.norm = get(pre + "model.norm.weight", shape{ph});
  for (int g = 0; g + 1 < c.code_groups; ++g) {
    // The predictor's embeddings have the Talker's width; the projection (if any) follows the lookup.
    p.codec_embedding.push_back(
        get(pre + "model.codec_embedding." + std::to_string(g) + ".weight", shape{c.predictor.vocab, h}));
    p.lm_head.push_back(get(pre + "lm_head." + std::to_string(g) + ".weight", shape{c.predictor.vocab, ph}));
  }
  if (ph != h) {
    p.projection_weight = get(pre + "small_to_mtp_projection.weight", shape{ph, h});
    p.projection_bias = get(pre + "small_to_mtp_projection.bias", shape{ph});
  }
  return w;
}

} // namespace qwen3_tts
