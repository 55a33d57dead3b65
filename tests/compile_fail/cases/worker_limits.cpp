// expect-rule: worker_limits
// expect-worker: Gpu0 "gpu0"
// streams<65>: over the limit of 64 streams for side lanes.
#include "qwen3_tts/model.hpp"

// clang-format off
using Gpu0  = mstar::worker<"gpu0", mstar::streams<65>, qwen3_tts::Talker, qwen3_tts::Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
