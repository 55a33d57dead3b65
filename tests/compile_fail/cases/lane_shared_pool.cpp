// expect-rule: lane_shared_pool
// expect-node: qwen3_tts::CodecChunk "codec_chunk"
// expect-resource: qwen3_tts::CodecState "codec_state"
// The Talker's decode also reads the codec's state: the pool is no longer the codec's alone.
#include "qwen3_tts/model.hpp"

// clang-format off
using TalkerDecode = mstar::node<"talker_decode", mstar::declares<qwen3_tts::KvCache, qwen3_tts::CodecState>,
                                 mstar::walk::chain>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Gpu0         = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model        = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
