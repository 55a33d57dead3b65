// clang-format off
// expect: mstar::blocks and mstar::block_tokens size a KV cache only: attention, positions, a sampler and a recurrent pool hold no KV blocks (a YAML file refuses 'blocks' on them alike). Way out: drop the option from this resource.
// expect-text: mstar::blocks<64> | mstar::blocks<64U>
// A sampler given a KV cache's size.
#include "qwen3_tts/model.hpp"

using Sampler       = mstar::sampler<"sampler", mstar::blocks<64>>;
using TalkerDecode  = mstar::node<"talker_decode", mstar::declares<qwen3_tts::KvCache, qwen3_tts::Attention,
                                                                   qwen3_tts::Positions, Sampler>, mstar::walk::chain>;
using Talker        = mstar::group<"Talker", TalkerDecode>;
using Gpu0          = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model         = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
