// A request as the reference wrapper (Qwen3TTSModel.generate_custom_voice / generate_voice_design) makes it
// from a checkpoint folder: the chat template around the text and the instruction (as token ids), the 0.6B
// CustomVoice rule that drops the instruction, and the sampling defaults of generation_config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

// What a command calls a request's voice, instruction and language in its messages: `synth`'s options, those of
// `loadgen` and `serve` (named after the request's fields), or the JSON fields of serve's requests (a refusal's
// `field` is one of these, so that serve's error names its param).
struct request_words {
  std::string_view speaker, instruction, language;
};
inline constexpr request_words synth_options{"--speaker", "--instruct", "--language"};
inline constexpr request_words client_options{"--voice", "--instructions", "--language"};
inline constexpr request_words request_fields{"voice", "instructions", "language"};

// Why a request's voice or language does not fit the checkpoint: the field at fault and the sentence.
struct request_refusal {
  std::string field, message;
};

// The voice against the checkpoint's type, before any work: a CustomVoice checkpoint needs one of its speakers
// (any case), a VoiceDesign one an instruction and no speaker; the message names the type and lists the
// speakers. Other types (Base) are left to make_prompt.
std::optional<request_refusal> check_voice(const talker_config& config, std::string_view speaker, bool has_instruction,
                                           const request_words& words);
// The language: "auto" or a key of talker_config.codec_language_id (any case); the message lists them.
std::optional<request_refusal> check_language(const talker_config& config, std::string_view language,
                                              const request_words& words);
// check_voice's refusal, else check_language's.
std::optional<request_refusal> check_voice_and_language(const talker_config& config, std::string_view speaker,
                                                        bool has_instruction, std::string_view language,
                                                        const request_words& words);

// The prompt, chat-templated with the checkpoint's ids. Refuses a Base model, a request with neither speaker
// nor instruction, an empty text. `note` receives what the reference would do silently (the dropped
// instruction of a 0.6B CustomVoice model).
talker_prompt make_prompt(const std::string& model_dir, const talker_config& config, const request_parts& parts,
                          std::string* note = nullptr);

} // namespace qwen3_tts
