// expect-rule: duplicate_worker
// expect-worker: Gpu0Codec "gpu0"
// A split model whose second worker kept the first one's name.
#include "qwen3_tts/model.hpp"

// clang-format off
using Codec     = mstar::group<"Codec", qwen3_tts::CodecChunk>;
using Gpu0      = mstar::worker<"gpu0", qwen3_tts::Talker>;
using Gpu0Codec = mstar::worker<"gpu0", Codec>;
using Model     = mstar::model<"qwen3_tts_split", Gpu0, Gpu0Codec>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
