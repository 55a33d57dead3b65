// Codec frames from JSON (see codes_json.hpp).
#include "codes_json.hpp"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace qwen3_tts {

std::vector<std::int32_t> parse_codes_json(const nlohmann::json& doc, int num_quantizers, int codebook_size,
                                           const std::string& source) {
  auto frames = doc.is_object() ? doc.find("frames") : doc.end();
  if (!doc.is_object() || frames == doc.end() || !frames->is_array())
    throw std::invalid_argument(source + ": expected an object {\"frames\": [[" + std::to_string(num_quantizers) +
                                " codes], ...]} (what qwen3tts --dump-codes writes)");
  std::vector<std::int32_t> out;
  out.reserve(frames->size() * std::size_t(num_quantizers));
  for (std::size_t f = 0; f < frames->size(); ++f) {
    const auto& frame = (*frames)[f];
    if (!frame.is_array() || frame.size() != std::size_t(num_quantizers))
      throw std::invalid_argument(source + ": frame " + std::to_string(f) + " is " + frame.dump() + ", expected a list of " +
                                  std::to_string(num_quantizers) + " codes (one per codebook)");
    for (std::size_t q = 0; q < frame.size(); ++q) {
      const auto& code = frame[q];
      if (!code.is_number_integer())
        throw std::invalid_argument(source + ": frame " + std::to_string(f) + ", codebook " + std::to_string(q) + ": " +
                                    code.dump() + " is not an integer code");
      const auto v = code.get<std::int64_t>();
      if (v < 0 || v >= codebook_size)
        throw std::invalid_argument(
            source + ": frame " + std::to_string(f) + ", codebook " + std::to_string(q) + ": " + std::to_string(v) +
            " is not a code of this codec (codes are 0.." + std::to_string(codebook_size - 1) +
            "; the Talker's control ids, such as the end token, start at " + std::to_string(codebook_size) +
            "): drop the end token and anything after it");
      out.push_back(std::int32_t(v));
    }
  }
  return out;
}

std::vector<std::int32_t> read_codes_json(const std::string& path, int num_quantizers, int codebook_size) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path + ": cannot open the codes file; check the path given to --codes");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) { // parse_error, and out_of_range for a number such as 1e400
    throw std::invalid_argument(path + ": not valid JSON (" + e.what() + ")");
  }
  return parse_codes_json(doc, num_quantizers, codebook_size, path);
}

} // namespace qwen3_tts
