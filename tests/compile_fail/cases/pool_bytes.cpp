// expect-rule: pool_bytes
// expect-resource: CodecState "codec_state"
// Every size within its limit, and 2^24 x 2^24 bf16 elements x 8 layers x 257 slots in all: far over 1 TiB.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16777216, 16777216>, /*layers=*/8, /*slots=*/257>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
