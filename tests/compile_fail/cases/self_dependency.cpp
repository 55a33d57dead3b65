// expect-rule: self_dependency
// expect-resource: Positions "positions"
// Positions that depend on themselves: no order can put them after themselves.
#include "qwen3_tts/model.hpp"

// clang-format off
using Positions    = mstar::positions<"positions", mstar::depends_on<"positions">>;
using TalkerDecode = mstar::node<"talker_decode", mstar::declares<qwen3_tts::KvCache, Positions>, mstar::walk::chain>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Gpu0         = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model        = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
