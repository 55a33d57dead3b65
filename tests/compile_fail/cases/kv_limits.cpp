// expect-rule: kv_limits
// expect-resource: KvCache "kv_cache"
// 65,537 tokens per KV block: one over the limit, a typo rather than a model.
#include "qwen3_tts/model.hpp"

// clang-format off
using KvCache       = mstar::kv_cache<"kv_cache", mstar::blocks<8192>, mstar::block_tokens<65537>>;
using TalkerDecode  = mstar::node<"talker_decode", mstar::declares<KvCache>, mstar::walk::chain>;
using Talker        = mstar::group<"Talker", TalkerDecode>;
using Gpu0          = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model         = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
