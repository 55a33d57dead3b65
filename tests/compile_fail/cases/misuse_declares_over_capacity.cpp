// clang-format off
// expect: mstar::declares: a node declares at most 8 resources (mstar::max_node_resources in descriptor.hpp), as a node's resources list in YAML. Way out: declare fewer, or raise the limit and rebuild.
// A node that declares nine resources: the descriptor holds eight, and the ninth must not be dropped silently.
#include "qwen3_tts/model.hpp"

template <mstar::fixed_string Key>
using S = mstar::sampler<Key>;
using Wide  = mstar::node<"wide", mstar::declares<S<"s0">, S<"s1">, S<"s2">, S<"s3">, S<"s4">, S<"s5">, S<"s6">,
                                                  S<"s7">, S<"s8">>>;
using Model = mstar::model<"wide", mstar::worker<"gpu0", mstar::group<"G", Wide>>>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
