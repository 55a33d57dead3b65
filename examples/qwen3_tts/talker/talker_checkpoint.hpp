// The Talker from a checkpoint folder in the official layout (config.json, model.safetensors or shards): the
// config parsed, every tensor required with its shape and converted to float32 through the checkpoint loader.
// Also the chat template's token ids, read from the folder's vocabulary until the text tokenizer is ported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "talker.hpp"

namespace qwen3_tts {

talker_host load_talker(const std::string& model_dir);

// config.json's Talker config alone (no weights read): what a command checks its options against before loading.
talker_config read_talker_config(const std::string& model_dir);

// "<|im_start|>assistant\n", "<|im_start|>user\n" and "<|im_end|>\n" as ids (im_start/im_end from config.json,
// "assistant", "user" and the byte-level newline "Ċ" from vocab.json).
struct chat_ids {
  std::vector<std::int32_t> assistant, user, end;
};
chat_ids read_chat_ids(const std::string& model_dir, const talker_config& config);

} // namespace qwen3_tts
