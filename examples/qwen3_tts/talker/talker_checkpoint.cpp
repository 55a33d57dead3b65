// Loading the Talker through the checkpoint loader, and the chat template's ids from vocab.json.
#include "talker_checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "qwen3_tts/checkpoint/json_file.hpp"
#include "qwen3_tts/checkpoint/load_progress.hpp"

namespace qwen3_tts {

talker_host load_talker(const std::string& model_dir) {
  const checkpoint_folder folder = open_checkpoint(model_dir);
  const talker_config config = parse_talker_config(folder.config, (folder.root / "config.json").string());
  // require() checks presence and shape and names the file and tensor when either is wrong.
  load_progress progress("talker weights", folder.weights.data_bytes());
  const tensor_source source = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    const tensor_view& view = folder.weights.require(name, shape);
    auto out = to_f32(view);
    progress.add(view.bytes.size());
    return out;
  };
  auto weights = load_talker_weights(config, source);
  progress.finish();
  return talker_host(config, std::move(weights));
}

talker_config read_talker_config(const std::string& model_dir) {
  const auto path = std::filesystem::path(model_dir) / "config.json";
  return parse_talker_config(read_json_object(path), path.string());
}

chat_ids read_chat_ids(const std::string& model_dir, const talker_config& config) {
  const std::string path = model_dir + "/vocab.json";
  std::ifstream f(path);
  if (!f)
    throw std::runtime_error(path + ": cannot open; the chat template's ids come from the checkpoint's vocab.json");
  const nlohmann::json vocab = nlohmann::json::parse(f, nullptr, false);
  if (!vocab.is_object()) throw std::runtime_error(path + ": not a JSON object of token -> id");
  auto id = [&](const char* token) {
    auto it = vocab.find(token);
    if (it == vocab.end() || !it->is_number_integer())
      throw std::runtime_error(path + ": no integer id for token \"" + token + "\", which the chat template needs");
    return it->get<std::int32_t>();
  };
  const std::int32_t newline = id("\xC4\x8A"); // "Ċ", the byte-level form of "\n"
  return {
      {config.im_start, id("assistant"), newline}, {config.im_start, id("user"), newline}, {config.im_end, newline}};
}

} // namespace qwen3_tts
