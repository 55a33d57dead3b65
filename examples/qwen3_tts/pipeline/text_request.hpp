// A request's text and instruction through the checkpoint's text tokenizer, chat-templated as the reference's
// wrapper encodes them: what `qwen3tts synth --text`, `serve` and `loadgen` hand to make_prompt. Needs the
// text tokenizer's library (qwen3tts_text_dep).
//
//   request_parts parts = templated_parts(tok, "Hello.", "");   // then speaker, language; make_prompt(...)
#pragma once

#include <string_view>

#include "talker_request.hpp"
#include "tokenizer.hpp"

namespace qwen3_tts::pipeline {

inline request_parts templated_parts(const text_tokenizer& tok, std::string_view text, std::string_view instruct) {
  request_parts parts;
  parts.text_ids = assistant_text_ids(tok, text);
  if (!instruct.empty())
    if (auto ids = instruct_ids(tok, instruct)) parts.instruct_ids = *ids;
  parts.templated = true;
  return parts;
}

} // namespace qwen3_tts::pipeline
