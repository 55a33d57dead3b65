// A Qwen3-TTS (12 Hz) checkpoint folder in the official Hugging Face layout, opened and checked.
//
//   <folder>/config.json                      the model (talker_config, code_predictor_config, token ids)
//   <folder>/model.safetensors                or model.safetensors.index.json + shards (the Talker; bf16)
//   <folder>/vocab.json, merges.txt, tokenizer_config.json   the text tokenizer
//   <folder>/speech_tokenizer/config.json     the 12 Hz codec (model_type qwen3_tts_tokenizer_12hz)
//   <folder>/speech_tokenizer/model.safetensors  (or an index + shards; often float32)
//
// The folder path is the only input: nothing is fetched. The configs are kept as parsed JSON; the Talker and
// the codec each read their own typed config from them.
#pragma once

#include "qwen3_tts/checkpoint/weight_store.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace qwen3_tts {

struct checkpoint_folder {
  std::filesystem::path root;
  nlohmann::json config;       // <root>/config.json
  nlohmann::json codec_config; // <root>/speech_tokenizer/config.json
  weight_store weights;        // the Talker (and code predictor): names start "talker."
  weight_store codec_weights;  // the speech tokenizer: names start "decoder." / "encoder."
  std::filesystem::path vocab_file;            // <root>/vocab.json
  std::filesystem::path merges_file;           // <root>/merges.txt
  std::filesystem::path tokenizer_config_file; // <root>/tokenizer_config.json
};

// Opens and checks the folder: every file above present, both configs JSON objects of the expected
// model_type, every weight file valid. Throws checkpoint_error naming the file at fault.
checkpoint_folder open_checkpoint(const std::filesystem::path& folder);

} // namespace qwen3_tts
