// expect-rule: lane_kv_keyed_pool
// expect-node: CodecChunk "codec_chunk"
// expect-resource: CodecState "codec_state"
// Prefix caching for the codec: its snapshots keyed on the Talker's KV cache, which the chain owns.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 257,
                                         mstar::kv_keyed_snapshots>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
