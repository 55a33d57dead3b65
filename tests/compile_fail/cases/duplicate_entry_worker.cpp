// expect-rule: duplicate_entry
// expect-group: qwen3_tts::Codec "Codec"
// expect-worker: Gpu0 "gpu0"
// The Codec group listed twice on its worker.
#include "qwen3_tts/model.hpp"

// clang-format off
using Gpu0  = mstar::worker<"gpu0", qwen3_tts::Talker, qwen3_tts::Codec, qwen3_tts::Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
