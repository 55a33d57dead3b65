// The CUDA Talker's dimensions at the published Qwen3-TTS 12 Hz sizes, for benchmarks that run it with random
// weights (qwen3tts_talker_bench, qwen3tts_beside_bench): 0.6B (28 layers, hidden 1024, MLP 3072, 16/8 heads of
// 128) or 1.7B (hidden 2048, MLP 6144 by two quotes of config.json and 8192 by one, hence the argument); the code
// predictor 5 layers of hidden 1024, MLP 3072, 2048 codes; codec vocabulary 3072; text 151936 x 2048.
#pragma once

#include "talker_cuda.hpp"

namespace qwen3_tts {

inline talker_cuda_dims released_talker_dims(bool big, int mlp_1p7b = 6144) {
  talker_cuda_dims d;
  d.talker = {28, big ? 2048 : 1024, big ? mlp_1p7b : 3072, 16, 8, 128, 1e-6f, 1e6f};
  d.predictor = {5, 1024, 3072, 16, 8, 128, 1e-6f, 1e6f};
  d.codec_vocab = 3072;
  d.predictor_vocab = 2048;
  d.code_groups = 16;
  d.text_vocab = 151936;
  d.text_hidden = 2048;
  d.eos_id = 2150;
  return d;
}

} // namespace qwen3_tts
