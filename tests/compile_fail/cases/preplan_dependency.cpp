// expect-rule: preplan_dependency
// expect-resource: Attention "attention"
// Positions that may not be pre-planned, under attention metadata that is: the staged attention
// plan would read positions that were never staged.
#include "qwen3_tts/model.hpp"

// clang-format off
using Positions    = mstar::positions<"positions", mstar::no_preplan>;
using Attention    = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;
using TalkerDecode = mstar::node<"talker_decode", mstar::declares<qwen3_tts::KvCache, Attention, Positions>,
                                 mstar::walk::chain>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Gpu0         = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model        = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
