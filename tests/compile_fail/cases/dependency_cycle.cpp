// expect-rule: dependency_cycle
// expect-resource: KvCache "kv_cache" | Attention "attention"
// The KV cache depends on attention metadata, which depends on the KV cache.
#include "qwen3_tts/model.hpp"

// clang-format off
using KvCache      = mstar::kv_cache<"kv_cache", mstar::blocks<64>, mstar::block_tokens<16>, mstar::depends_on<"attention">>;
using Attention    = mstar::attention<"attention", mstar::depends_on<"kv_cache">>;
using TalkerDecode = mstar::node<"talker_decode", mstar::declares<KvCache, Attention>, mstar::walk::chain>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Gpu0         = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model        = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
