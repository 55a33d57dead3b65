// The pre-tokenisation step of Qwen's text tokenizer: the Split regex that cuts normalised text into the
// pieces BPE then runs over, one at a time. Hand-written matchers over Unicode categories (utf8proc)
// that reproduce, match for match, what Oniguruma (Hugging Face tokenizers' regex engine) finds with
// each of the two patterns below; pretokenize.cpp spells out how each alternative backtracks.
//
//   std::vector<qwen3_tts::piece> pieces;
//   qwen3_tts::pretokenize("don't stop", qwen3_tts::split_regex::qwen2, pieces);  // "don" "'t" " stop"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace qwen3_tts {

// Which pattern the Split pre-tokenizer uses.
enum class split_regex : std::uint8_t {
  // Qwen2's own (tokenization_qwen2.py, and the Qwen2 converter):
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,
  // What transformers 4.57.3 puts in its place when a tokenizer is loaded with fix_mistral_regex=True
  // (as qwen_tts's loader does) from a local folder whose config.json it takes for an affected one:
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
  //   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
  //   |\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // It has no contraction alternative, splits camelCase at the capital, and keeps combining marks
  // inside words.
  mistral_fix,
};

const char* regex_name(split_regex r) noexcept;

// A piece as a byte range of the text given to pretokenize.
struct piece {
  std::uint32_t offset;
  std::uint32_t length;
};

// Appends the pieces of `text` (valid UTF-8; the caller has checked it) to `out`: every match of the
// pattern and every stretch between matches (tokenizers' "isolated" behaviour), in order, covering
// the text exactly.
void pretokenize(std::string_view text, split_regex regex, std::vector<piece>& out);

}  // namespace qwen3_tts
