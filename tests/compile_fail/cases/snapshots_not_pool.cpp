// expect-rule: snapshots_not_pool
// expect-resource: KvCache "kv_cache"
// KV-keyed snapshots asked of the KV cache itself: only a recurrent pool keeps snapshots.
#include "qwen3_tts/model.hpp"

// clang-format off
using KvCache      = mstar::kv_cache<"kv_cache", mstar::blocks<8192>, mstar::block_tokens<16>, mstar::kv_keyed_snapshots>;
using TalkerDecode = mstar::node<"talker_decode", mstar::declares<KvCache>, mstar::walk::chain>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Gpu0         = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model        = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
