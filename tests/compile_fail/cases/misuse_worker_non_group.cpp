// clang-format off
// expect: mstar::worker takes mstar::group types and the options mstar::tp<N>, mstar::sp<N>, mstar::streams<N> only.
// expect-text: Members=<qwen3_tts::Talker, qwen3_tts::CodecChunk> | mstar::node<mstar::fixed_string<12>{"codec_chunk"}
// A worker handed the codec's node directly, without a group around it.
#include "qwen3_tts/model.hpp"

using Gpu0  = mstar::worker<"gpu0", qwen3_tts::Talker, qwen3_tts::CodecChunk>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
