// expect-rule: pool_limits
// expect-resource: CodecState "codec_state"
// 5,000 layers of state per slot: over the limit of 4,096.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, /*layers=*/5000, /*slots=*/257>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
