// expect-rule: lane_chain_dependency
// expect-node: CodecChunk "codec_chunk"
// expect-resource: CodecState "codec_state"
// The codec's pool depends on the Talker's KV cache, which the codec does not declare: its plan
// would read the chain's state beside the chain.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, /*layers=*/8, /*slots=*/257,
                                         mstar::depends_on<"kv_cache">>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
