// expect-rule: attention_positions
// expect-resource: Attention "attention"
// Attention metadata that depends on the KV cache but not on the positions it reads: the engine
// could not bind it to the committed positions of its rows.
#include "qwen3_tts/model.hpp"

// clang-format off
using Attention    = mstar::attention<"attention", mstar::depends_on<"kv_cache">>;
using TalkerDecode = mstar::node<"talker_decode", mstar::declares<qwen3_tts::KvCache, Attention, qwen3_tts::Positions>,
                                 mstar::walk::chain>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Gpu0         = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model        = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
