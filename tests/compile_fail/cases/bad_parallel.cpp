// expect-rule: bad_parallel
// expect-worker: Gpu0 "gpu0"
// tp<0>: a worker runs on at least one GPU.
#include "qwen3_tts/model.hpp"

// clang-format off
using Gpu0  = mstar::worker<"gpu0", mstar::tp<0>, qwen3_tts::Talker, qwen3_tts::Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
