// The bridge from the host Talker's config and weight sources to the CUDA Talker (kept out of the .cu
// files so nvcc never compiles nlohmann/json).
#include "talker_config.hpp"
#include "talker_cuda.hpp"

#include <map>
#include <memory>
#include <stdexcept>

#if __has_include("qwen3_tts/checkpoint/weight_store.hpp")
#include "qwen3_tts/checkpoint/weight_store.hpp"
#define QWEN3_TTS_HAS_WEIGHT_STORE 1
#endif

namespace qwen3_tts {

talker_cuda_dims cuda_dims(const talker_config& c) {
  auto stack = [](const stack_config& s) {
    cuda_stack_dims d;
    d.layers = s.layers;
    d.hidden = s.hidden;
    d.intermediate = s.intermediate;
    d.heads = s.heads;
    d.kv_heads = s.kv_heads;
    d.head_dim = s.head_dim;
    d.rms_eps = s.rms_eps;
    d.rope_theta = float(s.rope_theta);
    return d;
  };
  talker_cuda_dims d;
  d.talker = stack(c.talker);
  d.predictor = stack(c.predictor);
  d.codec_vocab = c.talker.vocab;
  d.predictor_vocab = c.predictor.vocab;
  d.code_groups = c.code_groups;
  d.text_vocab = c.text_vocab;
  d.text_hidden = c.text_hidden;
  d.eos_id = c.codec_eos;
  return d;
}

std::int32_t trailing_text_id(const talker_prompt& prompt, const talker_config& config, int step) {
  if (prompt.non_streaming) return config.tts_pad;
  // input_ids: 3 header ids, the text, 5 tail ids; the prompt holds the text's first id.
  const int text = int(prompt.input_ids.size()) - 8;
  if (step + 1 < text) return prompt.input_ids[std::size_t(4 + step)];
  return step + 1 == text ? config.tts_eos : config.tts_pad;
}

weight_source
f32_weight_source(std::function<std::vector<float>(const std::string&, const std::vector<std::int64_t>&)> source) {
  auto held = std::make_shared<std::vector<float>>(); // the last tensor, alive until the next call
  return [source = std::move(source), held](const std::string& name, const std::vector<std::int64_t>& shape) {
    *held = source(name, shape);
    return host_tensor{"F32", shape, held->data(), held->size() * sizeof(float)};
  };
}

weight_source host_weight_source(const talker_weights& w) {
  auto names = std::make_shared<std::map<std::string, const tensor*>>();
  auto stack = [&](const std::vector<decoder_layer_weights>& layers, const std::string& prefix) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const std::string p = prefix + "layers." + std::to_string(l) + ".";
      const decoder_layer_weights& x = layers[l];
      (*names)[p + "self_attn.q_proj.weight"] = &x.q_proj;
      (*names)[p + "self_attn.k_proj.weight"] = &x.k_proj;
      (*names)[p + "self_attn.v_proj.weight"] = &x.v_proj;
      (*names)[p + "self_attn.o_proj.weight"] = &x.o_proj;
      (*names)[p + "self_attn.q_norm.weight"] = &x.q_norm;
      (*names)[p + "self_attn.k_norm.weight"] = &x.k_norm;
      (*names)[p + "mlp.gate_proj.weight"] = &x.gate_proj;
      (*names)[p + "mlp.up_proj.weight"] = &x.up_proj;
      (*names)[p + "mlp.down_proj.weight"] = &x.down_proj;
      (*names)[p + "input_layernorm.weight"] = &x.input_layernorm;
      (*names)[p + "post_attention_layernorm.weight"] = &x.post_attention_layernorm;
    }
  };
  stack(w.layers, "talker.model.");
  stack(w.predictor.layers, "talker.code_predictor.model.");
  (*names)["talker.model.norm.weight"] = &w.norm;
  (*names)["talker.code_predictor.model.norm.weight"] = &w.predictor.norm;
  (*names)["talker.model.codec_embedding.weight"] = &w.codec_embedding;
  (*names)["talker.model.text_embedding.weight"] = &w.text_embedding;
  (*names)["talker.text_projection.linear_fc1.weight"] = &w.text_fc1_weight;
  (*names)["talker.text_projection.linear_fc1.bias"] = &w.text_fc1_bias;
  (*names)["talker.text_projection.linear_fc2.weight"] = &w.text_fc2_weight;
  (*names)["talker.text_projection.linear_fc2.bias"] = &w.text_fc2_bias;
  (*names)["talker.codec_head.weight"] = &w.codec_head;
  for (std::size_t g = 0; g < w.predictor.codec_embedding.size(); ++g)
    (*names)["talker.code_predictor.model.codec_embedding." + std::to_string(g) + ".weight"] =
        &w.predictor.codec_embedding[g];
  for (std::size_t g = 0; g < w.predictor.lm_head.size(); ++g)
    (*names)["talker.code_predictor.lm_head." + std::to_string(g) + ".weight"] = &w.predictor.lm_head[g];
  if (w.predictor.has_projection()) {
    (*names)["talker.code_predictor.small_to_mtp_projection.weight"] = &w.predictor.projection_weight;
    (*names)["talker.code_predictor.small_to_mtp_projection.bias"] = &w.predictor.projection_bias;
  }
  return [names](const std::string& name, const std::vector<std::int64_t>& shape) {
    const auto it = names->find(name);
    if (it == names->end())
      throw std::runtime_error("qwen3_tts CUDA talker: the host Talker holds no tensor " + name);
    std::size_t n = 1;
    for (auto d : shape)
      n *= std::size_t(d);
    const tensor& t = *it->second;
    // The host Talker checked each tensor's shape against the same config when it loaded them: the count
    // tells a config that disagrees.
    return host_tensor{"F32", t.size() == n ? shape : std::vector<std::int64_t>{std::int64_t(t.size())}, t.data(),
                       t.size() * sizeof(float)};
  };
}

#ifdef QWEN3_TTS_HAS_WEIGHT_STORE
weight_source store_weight_source(const weight_store& store) {
  return [&store](const std::string& name, const std::vector<std::int64_t>& shape) {
    const tensor_view& t = store.require(name, shape); // names the tensor and its file when absent or misshapen
    return host_tensor{std::string(dtype_name(t.dtype)), t.shape, t.bytes.data(), t.bytes.size()};
  };
}
#endif

} // namespace qwen3_tts
