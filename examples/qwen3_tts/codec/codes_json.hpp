// Reads a request's codec frames from the JSON the Talker's --dump-codes writes,
// {"frames": [[16 codes], ...]}, into the decoder's flat [frames][num_quantizers] form. Anything that
// is not a code of this codec is refused with the frame, codebook and value at fault: the Talker's
// control ids (end of speech, padding: codebook_size and up) must never reach the decoder (the
// reference's decoder fails on them with an index error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace qwen3_tts {

// `source` names the file in error messages.
std::vector<std::int32_t> parse_codes_json(const nlohmann::json& doc, int num_quantizers, int codebook_size,
                                           const std::string& source);
std::vector<std::int32_t> read_codes_json(const std::string& path, int num_quantizers, int codebook_size);

} // namespace qwen3_tts
