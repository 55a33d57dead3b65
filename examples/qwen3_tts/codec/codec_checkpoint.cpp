// The codec decoder from a checkpoint folder (see codec_checkpoint.hpp).
#include "codec_checkpoint.hpp"

#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "qwen3_tts/checkpoint/load_progress.hpp"

namespace qwen3_tts {

codec_decoder load_codec_decoder(const std::string& model_dir) {
  const auto folder = open_checkpoint(model_dir);
  auto config = parse_codec_config(folder.codec_config, (folder.root / "speech_tokenizer" / "config.json").string());
  load_progress progress("codec weights", folder.codec_weights.data_bytes());
  auto weights = load_codec_weights(config, [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    const tensor_view& view = folder.codec_weights.require(name, shape);
    auto out = to_f32(view);
    progress.add(view.bytes.size());
    return out;
  });
  progress.finish();
  return codec_decoder(std::move(config), std::move(weights));
}

} // namespace qwen3_tts
