// expect-rule: duplicate_node
// expect-node: TalkerDecodeFast "talker_decode"
// A second decode variant under the name of the first: the engine routes steps by node name.
#include "qwen3_tts/model.hpp"

// clang-format off
using TalkerDecodeFast = mstar::node<"talker_decode", mstar::declares<qwen3_tts::KvCache>, mstar::walk::chain>;
using Talker           = mstar::group<"Talker", qwen3_tts::TalkerPrefill, qwen3_tts::TalkerDecode, TalkerDecodeFast>;
using Gpu0             = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model            = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
