// Qwen3-TTS's text tokenizer: the byte-level BPE of Qwen2, loaded from a checkpoint folder's official
// files (vocab.json, merges.txt, tokenizer_config.json), encoding text to the ids the reference
// (qwen_tts 0.1.1 with transformers 4.57.3, whose processor holds a Qwen2TokenizerFast) gives, and the
// prompt layouts its wrapper builds around the text and the instruction.
//
//   auto tok = qwen3_tts::text_tokenizer::from_folder("Qwen3-TTS-12Hz-1.7B-CustomVoice");
//   auto ids = qwen3_tts::assistant_text_ids(tok, "Hello, world.");   // <|im_start|>assistant\n...
//
// Encoding, in the reference's order: added tokens (<|im_start|>, <tts_pad>, ...) are cut out of the
// raw text first; each stretch between them is NFC-normalised, split by the pre-tokenisation regex
// (pretokenize.hpp; which of the two is decided as the reference's loader decides, see
// official_loader_regex), spelled in bytes, and merged by BPE in merge-rank order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pretokenize.hpp"

namespace qwen3_tts {

using token_id = std::int32_t;

// A token of tokenizer_config.json's added_tokens_decoder: matched in the raw text before anything else.
struct added_token {
  std::string content;
  token_id id = 0;
  bool special = false;
};

class text_tokenizer {
public:
  // Loads `dir`/vocab.json, merges.txt and tokenizer_config.json. The regex is the one the reference's
  // loader ends up with for this folder unless `regex` names one. Throws std::runtime_error naming the
  // file (and line, for merges.txt) and what is wrong.
  static text_tokenizer from_folder(const std::filesystem::path& dir, std::optional<split_regex> regex = {});

  std::vector<token_id> encode(std::string_view text) const;
  // Appends to `out`; throws when `text` is not valid UTF-8, naming the byte offset.
  void encode(std::string_view text, std::vector<token_id>& out) const;

  split_regex regex() const noexcept { return regex_; }
  // Entries of vocab.json (the added tokens not counted): what transformers calls vocab_size.
  std::size_t vocab_size() const noexcept { return vocab_size_; }
  const std::vector<added_token>& added_tokens() const noexcept { return added_; }
  // The id of an added token by its text (e.g. "<tts_pad>"); throws when the folder has none such.
  token_id added_id(std::string_view content) const;

private:
  struct merge {
    std::int32_t rank;
    token_id result;
  };
  static std::uint64_t pair_key(token_id a, token_id b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void encode_segment(std::string_view raw, std::vector<token_id>& out) const;
  void encode_piece(std::string_view bytes, std::vector<token_id>& out) const;

  std::unordered_map<std::uint64_t, merge> merges_;
  token_id byte_token_[256] = {};
  std::vector<added_token> added_;  // longest content first: leftmost-longest matching
  bool added_first_byte_[256] = {};  // bytes an added token starts with: the scan skips the rest
  std::size_t vocab_size_ = 0;
  split_regex regex_ = split_regex::qwen2;
};

// The regex transformers 4.57.3 leaves in a Qwen2 tokenizer loaded the way qwen_tts loads it
// (AutoProcessor.from_pretrained(folder, fix_mistral_regex=True)) from a local folder:
// mistral_fix when the vocabulary has over 100,000 entries and the folder's config.json exists and its
// transformers_version is absent, or above 4.57.2 and below 5.0.0, or at most 4.57.2 with a model_type
// that is absent or a Mistral one; qwen2 otherwise. (A hub id, not a folder, keeps qwen2.)
split_regex official_loader_regex(const std::filesystem::path& dir, std::size_t vocab_size);

// The texts qwen_tts's wrapper tokenizes (Qwen3TTSModel._build_*_text), encoded as one string each so
// that the text's first and last characters meet the template's newlines as the reference's do.
// "<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n": the input_ids of every mode.
std::vector<token_id> assistant_text_ids(const text_tokenizer& tok, std::string_view text);
// "<|im_start|>assistant\n{ref_text}<|im_end|>\n": the voice-clone reference transcript.
std::vector<token_id> ref_text_ids(const text_tokenizer& tok, std::string_view ref_text);
// "<|im_start|>user\n{instruct}<|im_end|>\n", or nothing for an empty instruction (as the wrapper).
std::optional<std::vector<token_id>> instruct_ids(const text_tokenizer& tok, std::string_view instruct);

}  // namespace qwen3_tts
