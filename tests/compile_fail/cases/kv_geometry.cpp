// expect-rule: kv_geometry
// expect-resource: KvCache "kv_cache"
// A KV cache with no mstar::blocks<N>: it would hold no token.
#include "qwen3_tts/model.hpp"

// clang-format off
using KvCache       = mstar::kv_cache<"kv_cache", mstar::block_tokens<16>>;
using TalkerDecode  = mstar::node<"talker_decode", mstar::declares<KvCache>, mstar::walk::chain>;
using Talker        = mstar::group<"Talker", TalkerDecode>;
using Gpu0          = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model         = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
