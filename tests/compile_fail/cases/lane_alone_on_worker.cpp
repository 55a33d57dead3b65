// expect-rule: lane_alone_on_worker
// expect-node: qwen3_tts::CodecChunk "codec_chunk"
// expect-worker: Gpu1 "gpu1"
// The split model (the codec alone on its own worker) with side_stream left on the Codec group.
#include "qwen3_tts/model.hpp"

// clang-format off
using Gpu0  = mstar::worker<"gpu0", qwen3_tts::Talker>;
using Gpu1  = mstar::worker<"gpu1", qwen3_tts::Codec>;
using Model = mstar::model<"qwen3_tts_split", Gpu0, Gpu1>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
