// expect-rule: lane_parallel
// expect-node: qwen3_tts::CodecChunk "codec_chunk"
// expect-worker: Gpu0 "gpu0"
// The colocated model on a tensor-parallel worker (tp 2): a side lane runs on one GPU.
#include "qwen3_tts/model.hpp"

// clang-format off
using Gpu0  = mstar::worker<"gpu0", mstar::tp<2>, qwen3_tts::Talker, qwen3_tts::Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
