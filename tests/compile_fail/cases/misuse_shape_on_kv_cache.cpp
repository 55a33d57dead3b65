// clang-format off
// expect: mstar::shape is the state shape of a recurrent pool, given as its third template argument: no resource takes it as an option (a YAML file refuses 'shape' on any other kind alike). Way out: drop it, or describe the resource as mstar::recurrent_pool<Key, Dtype, mstar::shape<...>, Layers, Slots>.
// expect-text: mstar::shape<16, 1024> | mstar::shape<16U, 1024U>
// A KV cache given a recurrent pool's state shape.
#include "qwen3_tts/model.hpp"

using KvCache       = mstar::kv_cache<"kv_cache", mstar::blocks<8192>, mstar::block_tokens<16>, mstar::shape<16, 1024>>;
using TalkerDecode  = mstar::node<"talker_decode", mstar::declares<KvCache, qwen3_tts::Attention, qwen3_tts::Positions,
                                                                   qwen3_tts::Sampler>, mstar::walk::chain>;
using Talker        = mstar::group<"Talker", TalkerDecode>;
using Gpu0          = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model         = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
