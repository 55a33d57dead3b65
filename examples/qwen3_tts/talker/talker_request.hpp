// A request as the reference wrapper (Qwen3TTSModel.generate_custom_voice / generate_voice_design) makes it
// from a checkpoint folder: the chat template around the text and the instruction (as token ids), the 0.6B
// CustomVoice rule that drops the instruction, and the sampling defaults of generation_config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "talker.hpp"

namespace qwen3_tts {

// Comma-separated token ids ("1,2,3"); `option` names the source in the error.
std::vector<std::int32_t> parse_ids(const std::string& text, const char* option);

// The reference wrapper's defaults, overridden by the checkpoint's generation_config.json where it has a value.
talker_sampling sampling_from(const std::string& model_dir);

struct request_parts {
  std::vector<std::int32_t> text_ids;     // the text's ids, without the chat template (see templated)
  std::vector<std::int32_t> instruct_ids; // the instruction's ids, without the template; empty: none
  // The ids above already carry the chat template (the text tokenizer's assistant_text_ids / instruct_ids,
  // which encode the templated string whole, as the reference does: the text's first and last characters
  // meet the template's newlines in one pre-token pass).
  bool templated = false;
  std::string speaker;                    // CustomVoice speaker; empty: none
  std::string language = "auto";
  bool streaming = false;                 // one text row a decode step (model.generate's layout) instead of
                                          // all the text in the prompt (the wrapper's default)
};

// The prompt, chat-templated with the checkpoint's ids. Refuses a Base model, a request with neither speaker
// nor instruction, an empty text. `note` receives what the reference would do silently (the dropped
// instruction of a 0.6B CustomVoice model).
talker_prompt make_prompt(const std::string& model_dir, const talker_config& config, const request_parts& parts,
                          std::string* note = nullptr);

} // namespace qwen3_tts
