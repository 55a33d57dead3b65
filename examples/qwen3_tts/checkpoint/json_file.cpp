// Reading a JSON file of a checkpoint (see json_file.hpp).
#include "qwen3_tts/checkpoint/json_file.hpp"

#include "qwen3_tts/checkpoint/safetensors.hpp"

#include <fstream>
#include <sstream>

namespace qwen3_tts {

nlohmann::json read_json_object(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw checkpoint_error(path.string() + ": missing; is this a Qwen3-TTS 12 Hz checkpoint folder (config.json, "
                                           "the weights, speech_tokenizer/, vocab.json, merges.txt)?");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw checkpoint_error(path.string() + ": cannot be read; check its permissions");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) { // parse_error, and out_of_range for a number such as 1e400
    throw checkpoint_error(path.string() + ": not valid JSON (" + e.what() + "); fetch the file again");
  }
  if (!j.is_object())
    throw checkpoint_error(path.string() + ": holds a JSON " + std::string(j.type_name()) +
                           ", not an object; fetch the file again");
  return j;
}

} // namespace qwen3_tts
