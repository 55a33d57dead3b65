// Reading a JSON file of a checkpoint (config.json, the shard index) with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>

namespace qwen3_tts {

// The file parsed as a JSON object; a checkpoint_error names the file when it is missing, unreadable, not
// JSON or not an object.
nlohmann::json read_json_object(const std::filesystem::path& path);

} // namespace qwen3_tts
