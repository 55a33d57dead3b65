// Opening a Qwen3-TTS checkpoint folder (see checkpoint.hpp).
#include "qwen3_tts/checkpoint/checkpoint.hpp"

#include "qwen3_tts/checkpoint/json_file.hpp"

#include <string>
#include <string_view>

namespace qwen3_tts {

namespace {

constexpr std::string_view layout_hint =
    "a Qwen3-TTS 12 Hz checkpoint folder holds config.json, model.safetensors (or an index and shards), "
    "vocab.json, merges.txt, tokenizer_config.json and speech_tokenizer/ (config.json and weights)";

void require_model_type(const nlohmann::json& config, const std::filesystem::path& file, std::string_view wanted,
                        std::string_view what) {
  const auto it = config.find("model_type");
  const std::string found = it != config.end() && it->is_string() ? it->get<std::string>() : std::string("(none)");
  if (found == wanted) return;
  std::string hint = "point at a Qwen3-TTS 12 Hz checkpoint";
  if (found == "qwen3_tts_tokenizer_25hz") hint = "this is the 25 Hz tokenizer; only the 12 Hz models are supported";
  throw checkpoint_error(file.string() + ": model_type is '" + found + "', expected '" + std::string(wanted) + "' (" +
                         std::string(what) + "); " + hint);
}

std::filesystem::path require_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw checkpoint_error(path.string() + ": missing; " + std::string(layout_hint));
  return path;
}

} // namespace

checkpoint_folder open_checkpoint(const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw checkpoint_error(folder.string() + ": not a directory; --model takes the checkpoint folder (" +
                           std::string(layout_hint) + ")");
  const auto codec_folder = folder / "speech_tokenizer";
  if (!std::filesystem::is_directory(codec_folder, ec))
    throw checkpoint_error(codec_folder.string() + ": missing; the codec lives there (config.json and weights of "
                                                   "the 12 Hz speech tokenizer): copy it from the official checkpoint");

  auto config = read_json_object(require_file(folder / "config.json"));
  require_model_type(config, folder / "config.json", "qwen3_tts", "the Qwen3-TTS model");
  if (!config.contains("talker_config") || !config["talker_config"].is_object())
    throw checkpoint_error((folder / "config.json").string() + ": field 'talker_config' is missing or not an object; " +
                           "fetch config.json from the same checkpoint again");
  auto codec_config = read_json_object(require_file(codec_folder / "config.json"));
  require_model_type(codec_config, codec_folder / "config.json", "qwen3_tts_tokenizer_12hz", "the 12 Hz codec");
  if (!codec_config.contains("decoder_config") || !codec_config["decoder_config"].is_object())
    throw checkpoint_error((codec_folder / "config.json").string() + ": field 'decoder_config' is missing or not an "
                                                                     "object; fetch the file again");

  auto vocab = require_file(folder / "vocab.json");
  auto merges = require_file(folder / "merges.txt");
  auto tokenizer_config = require_file(folder / "tokenizer_config.json");
  auto weights = weight_store::open(folder);
  auto codec_weights = weight_store::open(codec_folder);
  return checkpoint_folder{folder,
                           std::move(config),
                           std::move(codec_config),
                           std::move(weights),
                           std::move(codec_weights),
                           std::move(vocab),
                           std::move(merges),
                           std::move(tokenizer_config)};
}

} // namespace qwen3_tts
