// expect-rule: bad_geometry
// expect-resource: CodecState "codec_state"
// One slot only: slot 0 is the padding sink, so no request could ever hold state.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, /*layers=*/8, /*slots=*/1>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
