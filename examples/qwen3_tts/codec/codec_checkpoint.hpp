// The codec decoder from a checkpoint folder: speech_tokenizer/config.json and its weights, read
// through the checkpoint reader (qwen3tts_checkpoint). The one place where the codec meets that reader.
#pragma once

#include <string>

#include "codec_decoder.hpp"

namespace qwen3_tts {

// `model_dir` is a Qwen3-TTS 12 Hz checkpoint folder (the one holding speech_tokenizer/).
codec_decoder load_codec_decoder(const std::string& model_dir);

} // namespace qwen3_tts
