// clang-format off
// expect: mstar::declares takes resource policies only (kv_cache, attention, positions, sampler, recurrent_pool): pass the resource's type, not its key or an instance.
// expect-text: mstar::declares<int> | Resources=<int>
// A node that declares a plain type instead of a resource policy.
#include "qwen3_tts/model.hpp"

using CodecChunk = mstar::node<"codec_chunk", mstar::declares<int>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
