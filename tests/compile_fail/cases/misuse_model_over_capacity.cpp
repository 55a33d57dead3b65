// clang-format off
// expect: mstar::model: a model holds at most 16 resources, 16 nodes, 16 groups and 8 workers (mstar::max_resources, max_nodes, max_groups and max_workers in descriptor.hpp), as a YAML model does. Way out: describe fewer, or raise the limits and rebuild.
// Seventeen resources over three nodes: the descriptor holds sixteen.
#include "qwen3_tts/model.hpp"

template <mstar::fixed_string Key>
using S = mstar::sampler<Key>;
using A     = mstar::node<"a", mstar::declares<S<"s0">, S<"s1">, S<"s2">, S<"s3">, S<"s4">, S<"s5">, S<"s6">, S<"s7">>>;
using B     = mstar::node<"b", mstar::declares<S<"s8">, S<"s9">, S<"s10">, S<"s11">, S<"s12">, S<"s13">, S<"s14">,
                                               S<"s15">>>;
using C     = mstar::node<"c", mstar::declares<S<"s16">>>;
using Model = mstar::model<"wide", mstar::worker<"gpu0", mstar::group<"G", A, B, C>>>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
