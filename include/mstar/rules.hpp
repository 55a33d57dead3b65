// Every rule the validator applies, each with its one sentence, in one table: MSTAR_RULES below is
// the single source of the rule enum, its ids, its sentences, its kind, the compile-time path's
// static_asserts (model.hpp) and the load-time path's message writers (src/config.cpp). A sentence
// names what was checked, what was found and the way out. The table is an X-macro because
// static_assert takes only a string literal: each row expands into a static_assert with its literal,
// so the compile-time path and the load-time path print the very same text (the load-time path adds
// the names and the line of the offending entry).
//
// A row is X(kind, id, sentence). Adding a rule: add its row, its check in validate.hpp, its message
// writer in src/config.cpp (the build fails without it), a compile-fail case (tests/compile_fail), a
// YAML case (tests/core/config_test.cpp), a broken descriptor (tests/model/model_test.cpp) and its
// entry in docs/config.md; the coverage tests fail until each is there.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

// clang-format off
#define MSTAR_RULES(X)                                                                                                \
  /* Structure: names, references, placement. */                                                                      \
  X(structure, duplicate_resource,                                                                                    \
    "two resources share one key: each resource key must be unique in a model. Way out: rename one of them or "       \
    "delete the duplicate.")                                                                                          \
  X(structure, duplicate_node,                                                                                        \
    "two nodes share one name: node names must be unique in a model. Way out: rename one of them.")                   \
  X(structure, duplicate_group,                                                                                       \
    "two groups share one name: group names must be unique in a model. Way out: rename one of them.")                 \
  X(structure, duplicate_worker,                                                                                      \
    "two workers share one name: worker names must be unique in a model. Way out: rename one of them.")               \
  X(structure, duplicate_entry,                                                                                       \
    "a list names one entry twice (a resource in a node's resources, a node in a group, a group in a worker, or a "   \
    "key in a resource's depends_on): each entry is listed once. Way out: delete the repeated entry.")                \
  X(structure, unknown_resource,                                                                                      \
    "a node declares a resource key that no resource defines. Way out: define the resource under resources, or "      \
    "correct the key in the node's resources list.")                                                                  \
  X(structure, unknown_node,                                                                                          \
    "a group names a node that no node defines. Way out: define the node under nodes, or correct its name in the "    \
    "group.")                                                                                                         \
  X(structure, unknown_group,                                                                                         \
    "a worker names a group that no group defines. Way out: define the group, or correct its name in the worker.")    \
  X(structure, node_unplaced,                                                                                         \
    "a node belongs to no group, so no worker would run it. Way out: add it to a group, or delete it.")               \
  X(structure, node_placed_twice,                                                                                     \
    "a node belongs to more than one group: each node runs in exactly one group. Way out: keep it in one group.")     \
  X(structure, group_placement,                                                                                       \
    "a group is placed on no worker or on more than one: each group runs on exactly one worker. Way out: place it "   \
    "on one worker.")                                                                                                 \
  /* Values: sizes and options of resources and workers. */                                                           \
  X(value, bad_geometry,                                                                                              \
    "a recurrent pool needs a state shape with no zero dimension, at least one layer and at least two slots (slot 0"  \
    " is the padding sink). Way out: set shape, layers and slots to the model's real sizes.")                         \
  X(value, snapshots_not_pool,                                                                                        \
    "only a recurrent pool can keep snapshots keyed on a KV cache. Way out: drop kv_keyed_snapshots from this "       \
    "resource.")                                                                                                      \
  X(value, bad_parallel,                                                                                              \
    "a worker needs tp and sp of at least 1. Way out: set tp: 1 and sp: 1 for a single-GPU worker.")                  \
  X(value, kv_geometry,                                                                                               \
    "a KV cache needs at least one block and at least one token per block. Way out: set blocks and block_tokens to "  \
    "the cache's sizes (block_tokens 16 is usual).")                                                                  \
  X(value, kv_limits,                                                                                                 \
    "a KV cache holds at most 16777216 blocks of at most 65536 tokens each; larger sizes are a typo, not a model. "   \
    "Way out: write the cache's real sizes.")                                                                         \
  X(value, pool_limits,                                                                                               \
    "a recurrent pool's state has at most 16777216 elements along a dimension, 4096 layers and 1048576 slots; "       \
    "larger sizes are a typo, not a model. Way out: write the model's real sizes.")                                   \
  X(value, pool_bytes,                                                                                                \
    "a recurrent pool would hold more than 1 TiB (shape x layers x slots x element size), which no GPU holds. Way "   \
    "out: write the model's real sizes.")                                                                             \
  X(value, worker_limits,                                                                                             \
    "a worker runs tp and sp of at most 1024 and at most 64 streams; larger numbers are a typo, not a machine. Way "  \
    "out: write the worker's real tp, sp and streams.")                                                               \
  /* Resource dependencies. */                                                                                        \
  X(dependency, unknown_dependency,                                                                                   \
    "a resource depends on a key that no resource defines, so the runner cannot order it. Way out: define that "      \
    "resource, or correct the key in depends_on.")                                                                    \
  X(dependency, self_dependency,                                                                                      \
    "a resource depends on itself, so the runner cannot order it. Way out: remove its own key from its depends_on.")  \
  X(dependency, dependency_cycle,                                                                                     \
    "resource dependencies form a cycle, so the runner has no order to visit them in. Way out: break the cycle by "   \
    "removing one depends_on entry on it.")                                                                           \
  X(dependency, preplan_dependency,                                                                                   \
    "a resource that pre-plans depends on a resource that does not pre-plan, so its staged plan could read state "    \
    "that is not staged. Way out: set preplan: false on the dependent resource, or let the dependency pre-plan.")     \
  X(dependency, attention_positions,                                                                                  \
    "attention metadata reads the committed positions of its rows, so an attention resource must depend on a "        \
    "positions resource. Way out: add the positions resource's key to the attention resource's depends_on (and "      \
    "define a resource of kind positions if the model has none).")                                                    \
  /* Side-lane admission: the refusal list. */                                                                        \
  X(lane, lane_kv_cache,                                                                                              \
    "side lane refused: the node declares a KV cache, and a side lane may hold only recurrent pools of its own. Way"  \
    " out: drop side_stream from the node's group to run it on the chain.")                                           \
  X(lane, lane_attention,                                                                                             \
    "side lane refused: the node declares attention metadata, and a side lane may hold only recurrent pools of its "  \
    "own. Way out: drop side_stream from the node's group to run it on the chain.")                                   \
  X(lane, lane_positions,                                                                                             \
    "side lane refused: the node declares positions, and a side lane may hold only recurrent pools of its own. Way "  \
    "out: drop side_stream from the node's group to run it on the chain.")                                            \
  X(lane, lane_sampler,                                                                                               \
    "side lane refused: the node declares a sampler, and a side lane may hold only recurrent pools of its own. Way "  \
    "out: drop side_stream from the node's group to run it on the chain.")                                            \
  X(lane, lane_shared_pool,                                                                                           \
    "side lane refused: the node declares a recurrent pool that another node also declares, and a side lane may "     \
    "hold only pools that its node alone declares. Way out: give the node a pool of its own, or drop side_stream "    \
    "from its group to run it on the chain.")                                                                         \
  X(lane, lane_kv_keyed_pool,                                                                                         \
    "side lane refused: the node declares a recurrent pool whose snapshots are keyed on a KV cache, which the chain"  \
    " owns. Way out: drop kv_keyed_snapshots from the pool, or drop side_stream from the node's group to run it on "  \
    "the chain.")                                                                                                     \
  X(lane, lane_chain_dependency,                                                                                      \
    "side lane refused: the node declares a recurrent pool that depends on a resource the node does not declare, "    \
    "and a side lane plans its pools beside the chain without reading the chain's state. Way out: drop that key "     \
    "from the pool's depends_on, or drop side_stream from the node's group to run it on the chain.")                  \
  X(lane, lane_resident_walks,                                                                                        \
    "side lane refused: the node has resident walks, which keep state across chain steps. Way out: drop side_stream"  \
    " from the node's group to run it on the chain.")                                                                 \
  X(lane, lane_parallel,                                                                                              \
    "side lane refused: the node's worker runs tensor or sequence parallel (tp or sp above 1), and a side lane runs"  \
    " on one GPU. Way out: drop side_stream from the node's group, or set tp: 1 and sp: 1.")                          \
  X(lane, lane_alone_on_worker,                                                                                       \
    "side lane refused: the node is alone on its worker (a split config), so there is no chain to run beside. Way "   \
    "out: drop side_stream from the node's group, or place the group on a worker with a chain group.")                \
  X(lane, lane_no_streams,                                                                                            \
    "side lane refused: the node's worker has no streams for a side lane (streams: 0). Way out: set streams to 1 or"  \
    " more on the worker, or drop side_stream from the node's group.")                                                \
  X(lane, lane_chain_walks,                                                                                           \
    "side lane refused: the node has chain walks, so its steps belong on the chain. Way out: drop chain from the "    \
    "node's walks, or drop side_stream from its group.")                                                              \
  X(lane, lane_combined_walks,                                                                                        \
    "side lane refused: the node has combined walks, fused with chain nodes in one step. Way out: drop combined "     \
    "from the node's walks, or drop side_stream from its group.")                                                     \
  X(lane, lane_spans_or_stop_checks,                                                                                  \
    "side lane refused: the node has spans or stop checks, which read across the chain's rows. Way out: drop spans "  \
    "and stop_checks from the node, or drop side_stream from its group.")                                             \
  X(lane, lane_second_side_node,                                                                                      \
    "side lane refused: another node on the same worker already takes the side lane, and a worker has one. Way out:"  \
    " drop side_stream from this node's group, or move it to another worker.")
// clang-format on

namespace mstar {

// What a rule judges. Side-lane rules refuse only the side lane: the model runs without side_stream.
enum class rule_kind : std::uint8_t { structure, value, dependency, lane };

#define MSTAR_RULE_ENUM(kind, id, sentence) id,
enum class rule : std::uint8_t { MSTAR_RULES(MSTAR_RULE_ENUM) };
#undef MSTAR_RULE_ENUM

namespace detail {
struct rule_row {
  rule_kind kind;
  std::string_view id;
  std::string_view sentence;
};
#define MSTAR_RULE_ROW(kind, id, sentence) rule_row{rule_kind::kind, #id, sentence},
inline constexpr rule_row rule_table[] = {MSTAR_RULES(MSTAR_RULE_ROW)};
#undef MSTAR_RULE_ROW
} // namespace detail

inline constexpr std::size_t rule_count = std::size(detail::rule_table);

constexpr rule_kind kind_of(rule r) { return detail::rule_table[static_cast<std::size_t>(r)].kind; }
constexpr bool is_side_lane_rule(rule r) { return kind_of(r) == rule_kind::lane; }

// A short stable identifier, used by --json output and docs/config.md.
constexpr std::string_view id_of(rule r) {
  const auto i = static_cast<std::size_t>(r);
  return i < rule_count ? detail::rule_table[i].id : "?";
}

constexpr std::string_view sentence(rule r) {
  const auto i = static_cast<std::size_t>(r);
  return i < rule_count ? detail::rule_table[i].sentence : "?";
}

} // namespace mstar
