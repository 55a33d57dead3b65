// clang-format off
// expect: mstar::group takes mstar::node types and the mstar::side_stream flag only.
// expect-text: mstar::recurrent_pool<mstar::fixed_string<12>{"codec_state"} | Members=<mstar::side_stream, qwen3_tts::CodecState>
// A group handed the codec's resource instead of the codec's node.
#include "qwen3_tts/model.hpp"

using Codec = mstar::group<"Codec", mstar::side_stream, qwen3_tts::CodecState>;
using Gpu0  = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
