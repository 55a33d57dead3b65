// The bridge from the host Talker's config and weight sources to the CUDA Talker (kept out of the .cu
// files so nvcc never compiles nlohmann/json).
#include "talker_config.hpp"
#include "talker_cuda.hpp"

#include <memory>

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

#ifdef QWEN3_TTS_HAS_WEIGHT_STORE
weight_source store_weight_source(const weight_store& store) {
  return [&store](const std::string& name, const std::vector<std::int64_t>& shape) {
    const tensor_view& t = store.require(name, shape); // names the tensor and its file when absent or misshapen
    return host_tensor{std::string(dtype_name(t.dtype)), t.shape, t.bytes.data(), t.bytes.size()};
  };
}
#endif

} // namespace qwen3_tts
