// expect-rule: duplicate_resource
// expect-resource: CodecStateF32 "codec_state"
// The codec declares its state twice under one key, once in bf16 and once in f32: two resources,
// one key, so no step could tell which pool a "codec_state" segment lives in.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecStateF32 = mstar::recurrent_pool<"codec_state", float, mstar::shape<16, 1024>, 8, 257>;
using CodecChunk    = mstar::node<"codec_chunk", mstar::declares<qwen3_tts::CodecState, CodecStateF32>>;
using Codec         = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0          = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model         = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
