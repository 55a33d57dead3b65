// The Talker fixtures' prompts (tests/fixtures/qwen3tts/<case>/expected/talker.json) as the Talker takes
// them: shared by the Talker's parity tests and the end-to-end pipeline tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "talker.hpp"

namespace qwen3_tts::testing {

inline const std::string fixture_root = std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/";

inline talker_prompt prompt_of(const nlohmann::json& p) {
  talker_prompt out;
  out.input_ids = p.at("input_ids").get<std::vector<std::int32_t>>();
  if (!p.at("instruct_ids").is_null()) out.instruct_ids = p.at("instruct_ids").get<std::vector<std::int32_t>>();
  if (!p.at("speaker").is_null()) out.speaker = p.at("speaker").get<std::string>();
  out.language = p.at("language").get<std::string>();
  out.non_streaming = p.at("non_streaming_mode").get<bool>();
  return out;
}

} // namespace qwen3_tts::testing
