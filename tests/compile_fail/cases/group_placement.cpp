// expect-rule: group_placement
// expect-group: qwen3_tts::Codec "Codec"
// The Codec group placed on two workers. (A C++ description lists a group twice when it is placed
// twice, and its nodes with it, so the duplicate and node-placement rules fire with it; a group on
// no worker cannot be written in C++.)
#include "qwen3_tts/model.hpp"

// clang-format off
using Gpu0  = mstar::worker<"gpu0", qwen3_tts::Talker, qwen3_tts::Codec>;
using Gpu1  = mstar::worker<"gpu1", qwen3_tts::Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0, Gpu1>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
