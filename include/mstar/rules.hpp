// Every rule the validator applies, each with its one sentence. A sentence names what was checked,
// what was found and the way out. The sentences are macros because static_assert takes only a
// string literal: the compile-time path (model.hpp) and the load-time path (config.hpp) print the
// very same text, and the load-time path adds the names and the line of the offending entry.
#pragma once

#include <cstdint>
#include <string_view>

// Structure.
#define MSTAR_SENTENCE_DUPLICATE_RESOURCE                                                                    \
  "two resources share one key: each resource key must be unique in a model. Way out: rename one of them "   \
  "or delete the duplicate."
#define MSTAR_SENTENCE_DUPLICATE_NODE                                                                        \
  "two nodes share one name: node names must be unique in a model. Way out: rename one of them."
#define MSTAR_SENTENCE_DUPLICATE_GROUP                                                                       \
  "two groups share one name: group names must be unique in a model. Way out: rename one of them."
#define MSTAR_SENTENCE_DUPLICATE_WORKER                                                                      \
  "two workers share one name: worker names must be unique in a model. Way out: rename one of them."
#define MSTAR_SENTENCE_DUPLICATE_ENTRY                                                                       \
  "a list names one entry twice (a resource in a node's resources, a node in a group, a group in a "        \
  "worker, or a key in a resource's depends_on): each entry is listed once. Way out: delete the repeated "  \
  "entry."
#define MSTAR_SENTENCE_UNKNOWN_RESOURCE                                                                      \
  "a node declares a resource key that no resource defines. Way out: define the resource under resources, "  \
  "or correct the key in the node's resources list."
#define MSTAR_SENTENCE_UNKNOWN_NODE                                                                          \
  "a group names a node that no node defines. Way out: define the node under nodes, or correct its name in " \
  "the group."
#define MSTAR_SENTENCE_UNKNOWN_GROUP                                                                         \
  "a worker names a group that no group defines. Way out: define the group, or correct its name in the "     \
  "worker."
#define MSTAR_SENTENCE_NODE_UNPLACED                                                                         \
  "a node belongs to no group, so no worker would run it. Way out: add it to a group, or delete it."
#define MSTAR_SENTENCE_NODE_PLACED_TWICE                                                                     \
  "a node belongs to more than one group: each node runs in exactly one group. Way out: keep it in one "     \
  "group."
#define MSTAR_SENTENCE_GROUP_PLACED_TWICE                                                                    \
  "a group is placed on no worker or on more than one: each group runs on exactly one worker. Way out: "     \
  "place it on one worker."
#define MSTAR_SENTENCE_BAD_GEOMETRY                                                                          \
  "a recurrent pool needs a state shape with no zero dimension, at least one layer and at least two slots "  \
  "(slot 0 is the padding sink). Way out: set shape, layers and slots to the model's real sizes."
#define MSTAR_SENTENCE_SNAPSHOTS_NOT_POOL                                                                    \
  "only a recurrent pool can keep snapshots keyed on a KV cache. Way out: drop kv_keyed_snapshots from "     \
  "this resource."
#define MSTAR_SENTENCE_BAD_PARALLEL                                                                          \
  "a worker needs tp and sp of at least 1. Way out: set tp: 1 and sp: 1 for a single-GPU worker."

// Resource dependencies.
#define MSTAR_SENTENCE_UNKNOWN_DEPENDENCY                                                                    \
  "a resource depends on a key that no resource defines, so the runner cannot order it. Way out: define "    \
  "that resource, or correct the key in depends_on."
#define MSTAR_SENTENCE_SELF_DEPENDENCY                                                                       \
  "a resource depends on itself, so the runner cannot order it. Way out: remove its own key from its "       \
  "depends_on."
#define MSTAR_SENTENCE_DEPENDENCY_CYCLE                                                                      \
  "resource dependencies form a cycle, so the runner has no order to visit them in. Way out: break the "     \
  "cycle by removing one depends_on entry on it."
#define MSTAR_SENTENCE_PREPLAN_DEPENDENCY                                                                    \
  "a resource that pre-plans depends on a resource that does not pre-plan, so its staged plan could read "   \
  "state that is not staged. Way out: set preplan: false on the dependent resource, or let the dependency "  \
  "pre-plan."
#define MSTAR_SENTENCE_ATTENTION_POSITIONS                                                                   \
  "attention metadata reads the committed positions of its rows, so an attention resource must depend on a " \
  "positions resource. Way out: add the positions resource's key to the attention resource's depends_on "    \
  "(and define a resource of kind positions if the model has none)."

// Side-lane admission: the refusal list. A node may take a side lane only if every resource it
// declares is a recurrent pool that no other node declares and that keeps no KV-keyed snapshots.
#define MSTAR_SENTENCE_LANE_KV_CACHE                                                                         \
  "side lane refused: the node declares a KV cache, and a side lane may hold only recurrent pools of its "   \
  "own. Way out: drop side_stream from the node's group to run it on the chain."
#define MSTAR_SENTENCE_LANE_ATTENTION                                                                        \
  "side lane refused: the node declares attention metadata, and a side lane may hold only recurrent pools "  \
  "of its own. Way out: drop side_stream from the node's group to run it on the chain."
#define MSTAR_SENTENCE_LANE_POSITIONS                                                                        \
  "side lane refused: the node declares positions, and a side lane may hold only recurrent pools of its "    \
  "own. Way out: drop side_stream from the node's group to run it on the chain."
#define MSTAR_SENTENCE_LANE_SAMPLER                                                                          \
  "side lane refused: the node declares a sampler, and a side lane may hold only recurrent pools of its "    \
  "own. Way out: drop side_stream from the node's group to run it on the chain."
#define MSTAR_SENTENCE_LANE_SHARED_POOL                                                                      \
  "side lane refused: the node declares a recurrent pool that another node also declares, and a side lane "  \
  "may hold only pools that its node alone declares. Way out: give the node a pool of its own, or drop "     \
  "side_stream from its group to run it on the chain."
#define MSTAR_SENTENCE_LANE_KV_KEYED_POOL                                                                    \
  "side lane refused: the node declares a recurrent pool whose snapshots are keyed on a KV cache, which "    \
  "the chain owns. Way out: drop kv_keyed_snapshots from the pool, or drop side_stream from the node's "     \
  "group to run it on the chain."
#define MSTAR_SENTENCE_LANE_RESIDENT_WALKS                                                                   \
  "side lane refused: the node has resident walks, which keep state across chain steps. Way out: drop "      \
  "side_stream from the node's group to run it on the chain."
#define MSTAR_SENTENCE_LANE_PARALLEL                                                                         \
  "side lane refused: the node's worker runs tensor or sequence parallel (tp or sp above 1), and a side "    \
  "lane runs on one GPU. Way out: drop side_stream from the node's group, or set tp: 1 and sp: 1."
#define MSTAR_SENTENCE_LANE_ALONE_ON_WORKER                                                                  \
  "side lane refused: the node is alone on its worker (a split config), so there is no chain to run "       \
  "beside. Way out: drop side_stream from the node's group, or place the group on a worker with a chain "    \
  "group."
#define MSTAR_SENTENCE_LANE_NO_STREAMS                                                                       \
  "side lane refused: the node's worker has no streams for a side lane (streams: 0). Way out: set streams "  \
  "to 1 or more on the worker, or drop side_stream from the node's group."
#define MSTAR_SENTENCE_LANE_CHAIN_WALKS                                                                      \
  "side lane refused: the node has chain walks, so its steps belong on the chain. Way out: drop chain from " \
  "the node's walks, or drop side_stream from its group."
#define MSTAR_SENTENCE_LANE_COMBINED_WALKS                                                                   \
  "side lane refused: the node has combined walks, fused with chain nodes in one step. Way out: drop "       \
  "combined from the node's walks, or drop side_stream from its group."
#define MSTAR_SENTENCE_LANE_SPANS_OR_STOP_CHECKS                                                             \
  "side lane refused: the node has spans or stop checks, which read across the chain's rows. Way out: drop " \
  "spans and stop_checks from the node, or drop side_stream from its group."
#define MSTAR_SENTENCE_LANE_SECOND_SIDE_NODE                                                                 \
  "side lane refused: another node on the same worker already takes the side lane, and a worker has one. "   \
  "Way out: drop side_stream from this node's group, or move it to another worker."

namespace mstar {

enum class rule : std::uint8_t {
  duplicate_resource,
  duplicate_node,
  duplicate_group,
  duplicate_worker,
  duplicate_entry,
  unknown_resource,
  unknown_node,
  unknown_group,
  node_unplaced,
  node_placed_twice,
  group_placement,
  bad_geometry,
  snapshots_not_pool,
  bad_parallel,
  unknown_dependency,
  self_dependency,
  dependency_cycle,
  preplan_dependency,
  attention_positions,
  lane_kv_cache,
  lane_attention,
  lane_positions,
  lane_sampler,
  lane_shared_pool,
  lane_kv_keyed_pool,
  lane_resident_walks,
  lane_parallel,
  lane_alone_on_worker,
  lane_no_streams,
  lane_chain_walks,
  lane_combined_walks,
  lane_spans_or_stop_checks,
  lane_second_side_node,
};

inline constexpr std::size_t rule_count = static_cast<std::size_t>(rule::lane_second_side_node) + 1;

constexpr bool is_side_lane_rule(rule r) { return r >= rule::lane_kv_cache; }

// A short stable identifier, used by --json output and docs/config.md.
constexpr std::string_view id_of(rule r) {
  switch (r) {
  case rule::duplicate_resource: return "duplicate_resource";
  case rule::duplicate_node: return "duplicate_node";
  case rule::duplicate_group: return "duplicate_group";
  case rule::duplicate_worker: return "duplicate_worker";
  case rule::duplicate_entry: return "duplicate_entry";
  case rule::unknown_resource: return "unknown_resource";
  case rule::unknown_node: return "unknown_node";
  case rule::unknown_group: return "unknown_group";
  case rule::node_unplaced: return "node_unplaced";
  case rule::node_placed_twice: return "node_placed_twice";
  case rule::group_placement: return "group_placement";
  case rule::bad_geometry: return "bad_geometry";
  case rule::snapshots_not_pool: return "snapshots_not_pool";
  case rule::bad_parallel: return "bad_parallel";
  case rule::unknown_dependency: return "unknown_dependency";
  case rule::self_dependency: return "self_dependency";
  case rule::dependency_cycle: return "dependency_cycle";
  case rule::preplan_dependency: return "preplan_dependency";
  case rule::attention_positions: return "attention_positions";
  case rule::lane_kv_cache: return "lane_kv_cache";
  case rule::lane_attention: return "lane_attention";
  case rule::lane_positions: return "lane_positions";
  case rule::lane_sampler: return "lane_sampler";
  case rule::lane_shared_pool: return "lane_shared_pool";
  case rule::lane_kv_keyed_pool: return "lane_kv_keyed_pool";
  case rule::lane_resident_walks: return "lane_resident_walks";
  case rule::lane_parallel: return "lane_parallel";
  case rule::lane_alone_on_worker: return "lane_alone_on_worker";
  case rule::lane_no_streams: return "lane_no_streams";
  case rule::lane_chain_walks: return "lane_chain_walks";
  case rule::lane_combined_walks: return "lane_combined_walks";
  case rule::lane_spans_or_stop_checks: return "lane_spans_or_stop_checks";
  case rule::lane_second_side_node: return "lane_second_side_node";
  }
  return "?";
}

constexpr std::string_view sentence(rule r) {
  switch (r) {
  case rule::duplicate_resource: return MSTAR_SENTENCE_DUPLICATE_RESOURCE;
  case rule::duplicate_node: return MSTAR_SENTENCE_DUPLICATE_NODE;
  case rule::duplicate_group: return MSTAR_SENTENCE_DUPLICATE_GROUP;
  case rule::duplicate_worker: return MSTAR_SENTENCE_DUPLICATE_WORKER;
  case rule::duplicate_entry: return MSTAR_SENTENCE_DUPLICATE_ENTRY;
  case rule::unknown_resource: return MSTAR_SENTENCE_UNKNOWN_RESOURCE;
  case rule::unknown_node: return MSTAR_SENTENCE_UNKNOWN_NODE;
  case rule::unknown_group: return MSTAR_SENTENCE_UNKNOWN_GROUP;
  case rule::node_unplaced: return MSTAR_SENTENCE_NODE_UNPLACED;
  case rule::node_placed_twice: return MSTAR_SENTENCE_NODE_PLACED_TWICE;
  case rule::group_placement: return MSTAR_SENTENCE_GROUP_PLACED_TWICE;
  case rule::bad_geometry: return MSTAR_SENTENCE_BAD_GEOMETRY;
  case rule::snapshots_not_pool: return MSTAR_SENTENCE_SNAPSHOTS_NOT_POOL;
  case rule::bad_parallel: return MSTAR_SENTENCE_BAD_PARALLEL;
  case rule::unknown_dependency: return MSTAR_SENTENCE_UNKNOWN_DEPENDENCY;
  case rule::self_dependency: return MSTAR_SENTENCE_SELF_DEPENDENCY;
  case rule::dependency_cycle: return MSTAR_SENTENCE_DEPENDENCY_CYCLE;
  case rule::preplan_dependency: return MSTAR_SENTENCE_PREPLAN_DEPENDENCY;
  case rule::attention_positions: return MSTAR_SENTENCE_ATTENTION_POSITIONS;
  case rule::lane_kv_cache: return MSTAR_SENTENCE_LANE_KV_CACHE;
  case rule::lane_attention: return MSTAR_SENTENCE_LANE_ATTENTION;
  case rule::lane_positions: return MSTAR_SENTENCE_LANE_POSITIONS;
  case rule::lane_sampler: return MSTAR_SENTENCE_LANE_SAMPLER;
  case rule::lane_shared_pool: return MSTAR_SENTENCE_LANE_SHARED_POOL;
  case rule::lane_kv_keyed_pool: return MSTAR_SENTENCE_LANE_KV_KEYED_POOL;
  case rule::lane_resident_walks: return MSTAR_SENTENCE_LANE_RESIDENT_WALKS;
  case rule::lane_parallel: return MSTAR_SENTENCE_LANE_PARALLEL;
  case rule::lane_alone_on_worker: return MSTAR_SENTENCE_LANE_ALONE_ON_WORKER;
  case rule::lane_no_streams: return MSTAR_SENTENCE_LANE_NO_STREAMS;
  case rule::lane_chain_walks: return MSTAR_SENTENCE_LANE_CHAIN_WALKS;
  case rule::lane_combined_walks: return MSTAR_SENTENCE_LANE_COMBINED_WALKS;
  case rule::lane_spans_or_stop_checks: return MSTAR_SENTENCE_LANE_SPANS_OR_STOP_CHECKS;
  case rule::lane_second_side_node: return MSTAR_SENTENCE_LANE_SECOND_SIDE_NODE;
  }
  return "?";
}

} // namespace mstar
