// The one validator: a constexpr function over plain descriptors (descriptor.hpp). model.hpp runs it
// inside static_asserts; config.hpp runs it on descriptors loaded from YAML. Same rules, same
// sentences (rules.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mstar/model/descriptor.hpp"
#include "mstar/model/rules.hpp"
#include "mstar/model/static_vector.hpp"

namespace mstar {

inline constexpr std::uint8_t no_index = 0xff;
inline constexpr std::size_t max_findings = 64;

// One broken rule, with the indices (into the descriptor's lists) of what it is about. resource,
// node, group and worker index model_desc's lists; no_index where the rule has none.
//
// `other` is a second index whose meaning depends on the rule (no_index for every rule not listed):
//   duplicate_resource, duplicate_node,    the earlier entry of the same name, in model_desc's
//   duplicate_group, duplicate_worker      resources, nodes, groups or workers
//   duplicate_entry                        the repeated entry's position in the list that repeats it
//                                          (see check_structure for which list)
//   unknown_resource, unknown_node,        the unknown name's position in the node's resources,
//   unknown_group                          the group's nodes or the worker's groups
//   unknown_dependency                     the unknown key's position in the resource's depends_on
//   preplan_dependency                     the dependency that does not pre-plan, in model_desc's resources
//   lane_second_side_node                  the node that holds the worker's side lane, in model_desc's nodes
//   lane_chain_dependency                  the dependency the node does not declare, in model_desc's resources
// The YAML path uses it to point at the exact list entry and to name both sides in its fix.
struct finding {
  mstar::rule rule{};
  std::uint8_t resource = no_index; // the resource at fault, where there is one
  std::uint8_t node = no_index;
  std::uint8_t group = no_index;
  std::uint8_t worker = no_index;
  std::uint8_t other = no_index; // see above

  friend constexpr bool operator==(const finding&, const finding&) = default;
};

enum class lane : std::uint8_t { chain, side };

// Where a node runs and, on a side lane, the keys the lane owns (its side-lane keys).
struct node_lane {
  std::uint8_t node = no_index;
  mstar::lane lane = lane::chain;
  static_vector<std::string_view, max_node_resources> side_keys;

  friend constexpr bool operator==(const node_lane&, const node_lane&) = default;
};

struct report {
  static_vector<finding, max_findings> findings;
  bool truncated = false; // more findings than max_findings: the first ones are kept
  // Per node, in the descriptor's node order; filled only when the structure is sound.
  static_vector<node_lane, max_nodes> lanes;
  // Resource indices in dependency order (dependencies first); complete only without findings.
  static_vector<std::uint8_t, max_resources> order;

  constexpr bool ok() const { return findings.empty() && !truncated; }
  constexpr bool has(mstar::rule r) const {
    for (const auto& f : findings)
      if (f.rule == r) return true;
    return false;
  }
  constexpr void add(finding f) {
    if (!findings.push_back(f)) truncated = true;
  }
};

namespace detail {

template <class V, class Name>
constexpr std::uint8_t index_of(const V& list, Name name) {
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i] == name) return static_cast<std::uint8_t>(i);
  return no_index;
}
constexpr std::uint8_t resource_index(const model_desc& m, std::string_view key) {
  for (std::size_t i = 0; i < m.resources.size(); ++i)
    if (m.resources[i].key == key) return static_cast<std::uint8_t>(i);
  return no_index;
}
template <class V>
constexpr std::uint8_t named_index(const V& list, std::string_view name) {
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].name == name) return static_cast<std::uint8_t>(i);
  return no_index;
}
constexpr auto u8(std::size_t i) { return static_cast<std::uint8_t>(i); }
// How many nodes, groups or workers carry this name; how many resources carry this key.
template <class V>
constexpr std::size_t count_named(const V& list, std::string_view name) {
  std::size_t n = 0;
  for (const auto& e : list)
    n += e.name == name ? 1 : 0;
  return n;
}
constexpr std::size_t count_keyed(const model_desc& m, std::string_view key) {
  std::size_t n = 0;
  for (const auto& e : m.resources)
    n += e.key == key ? 1 : 0;
  return n;
}

// The bytes a recurrent pool holds, in double: four dimensions of up to 2^32 overflow any integer.
constexpr double pool_bytes(const resource_desc& res) {
  double bytes = static_cast<double>(size_of(res.element)) * res.layers * res.slots;
  for (auto d : res.state_shape)
    bytes *= d;
  return res.state_shape.empty() ? 0.0 : bytes;
}

// Sizes and options: what a resource or worker holds, judged alone. A resource breaks at most one
// of its kind's size rules: the lower bounds first, then the limits, then the pool's bytes.
constexpr void check_values(const model_desc& m, report& r) {
  for (std::size_t i = 0; i < m.resources.size(); ++i) {
    const auto& res = m.resources[i];
    if (res.kind == resource_kind::recurrent_pool) {
      bool zero_dim = res.state_shape.empty(), huge_dim = false;
      for (auto d : res.state_shape) {
        zero_dim = zero_dim || d == 0;
        huge_dim = huge_dim || d > max_state_dim;
      }
      if (zero_dim || res.layers == 0 || res.slots < 2)
        r.add({.rule = rule::bad_geometry, .resource = u8(i)});
      else if (huge_dim || res.layers > max_layers || res.slots > max_slots)
        r.add({.rule = rule::pool_limits, .resource = u8(i)});
      else if (pool_bytes(res) > max_pool_bytes)
        r.add({.rule = rule::pool_bytes, .resource = u8(i)});
    } else if (res.kv_keyed_snapshots) {
      r.add({.rule = rule::snapshots_not_pool, .resource = u8(i)});
    }
    if (res.kind == resource_kind::kv_cache) {
      if (res.blocks == 0 || res.block_tokens == 0)
        r.add({.rule = rule::kv_geometry, .resource = u8(i)});
      else if (res.blocks > max_blocks || res.block_tokens > max_block_tokens)
        r.add({.rule = rule::kv_limits, .resource = u8(i)});
    }
  }
  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    const auto& wk = m.workers[w];
    if (wk.tp == 0 || wk.sp == 0)
      r.add({.rule = rule::bad_parallel, .worker = u8(w)});
    else if (wk.tp > max_parallel || wk.sp > max_parallel || wk.streams > max_streams)
      r.add({.rule = rule::worker_limits, .worker = u8(w)});
  }
}

constexpr void check_structure(const model_desc& m, report& r) {
  for (std::size_t i = 0; i < m.resources.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (m.resources[i].key == m.resources[j].key)
        r.add({.rule = rule::duplicate_resource, .resource = u8(i), .other = u8(j)});
  for (std::size_t i = 0; i < m.nodes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (m.nodes[i].name == m.nodes[j].name) r.add({.rule = rule::duplicate_node, .node = u8(i), .other = u8(j)});
  for (std::size_t i = 0; i < m.groups.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (m.groups[i].name == m.groups[j].name) r.add({.rule = rule::duplicate_group, .group = u8(i), .other = u8(j)});
  for (std::size_t i = 0; i < m.workers.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (m.workers[i].name == m.workers[j].name)
        r.add({.rule = rule::duplicate_worker, .worker = u8(i), .other = u8(j)});

  // Lists that name an entry twice. The finding names the list's owner and, where it is defined,
  // the repeated entry; `other` is the repeat's position in the list:
  //   a node's resources:      node = the node, resource = the repeated resource
  //   a group's nodes:         group = the group, node = the repeated node
  //   a worker's groups:       worker = the worker, group = the repeated group
  //   a resource's depends_on: resource = the resource (node, group and worker unset)
  // An entry whose name two definitions share is left to duplicate_resource, duplicate_node or
  // duplicate_group: a C++ description that names two types of one name lists that name twice.
  for (std::size_t n = 0; n < m.nodes.size(); ++n) {
    const auto& list = m.nodes[n].resources;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (index_of(list, list[i]) != i && count_keyed(m, list[i]) < 2)
        r.add({.rule = rule::duplicate_entry, .resource = resource_index(m, list[i]), .node = u8(n), .other = u8(i)});
  }
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    const auto& list = m.groups[g].nodes;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (index_of(list, list[i]) != i && count_named(m.nodes, list[i]) < 2)
        r.add({.rule = rule::duplicate_entry, .node = named_index(m.nodes, list[i]), .group = u8(g), .other = u8(i)});
  }
  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    const auto& list = m.workers[w].groups;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (index_of(list, list[i]) != i && count_named(m.groups, list[i]) < 2)
        r.add(
            {.rule = rule::duplicate_entry, .group = named_index(m.groups, list[i]), .worker = u8(w), .other = u8(i)});
  }
  for (std::size_t res = 0; res < m.resources.size(); ++res) {
    const auto& list = m.resources[res].depends_on;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (index_of(list, list[i]) != i) r.add({.rule = rule::duplicate_entry, .resource = u8(res), .other = u8(i)});
  }


  for (std::size_t n = 0; n < m.nodes.size(); ++n)
    for (auto key : m.nodes[n].resources)
      if (resource_index(m, key) == no_index)
        r.add({.rule = rule::unknown_resource, .node = u8(n), .other = index_of(m.nodes[n].resources, key)});

  // Placement: each node in exactly one group, each group on exactly one worker.
  for (std::size_t g = 0; g < m.groups.size(); ++g)
    for (auto name : m.groups[g].nodes)
      if (named_index(m.nodes, name) == no_index)
        r.add({.rule = rule::unknown_node, .group = u8(g), .other = index_of(m.groups[g].nodes, name)});
  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    const auto& wk = m.workers[w];
    for (auto name : wk.groups)
      if (named_index(m.groups, name) == no_index)
        r.add({.rule = rule::unknown_group, .worker = u8(w), .other = index_of(wk.groups, name)});
  }
  for (std::size_t n = 0; n < m.nodes.size(); ++n) {
    int placed = 0;
    std::uint8_t second = no_index;
    for (std::size_t g = 0; g < m.groups.size(); ++g)
      if (m.groups[g].nodes.contains(m.nodes[n].name) && ++placed == 2) second = u8(g);
    if (placed == 0) r.add({.rule = rule::node_unplaced, .node = u8(n)});
    if (placed > 1) r.add({.rule = rule::node_placed_twice, .node = u8(n), .group = second});
  }
  for (std::size_t g = 0; g < m.groups.size(); ++g) {
    int placed = 0;
    for (const auto& wk : m.workers)
      placed += wk.groups.contains(m.groups[g].name) ? 1 : 0;
    if (placed != 1) r.add({.rule = rule::group_placement, .group = u8(g)});
  }
}

// Dependency order: unknown keys, self-dependencies and cycles are refused; a resource that
// pre-plans may depend only on resources that pre-plan. Fills r.order (dependencies first). Once the
// order stands, every attention resource must depend on a positions resource (the engine binds the
// attention plan to the committed positions it reads).
constexpr void check_dependencies(const model_desc& m, report& r) {
  const std::size_t n = m.resources.size();
  bool sound = true;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& res = m.resources[i];
    for (std::size_t d = 0; d < res.depends_on.size(); ++d) {
      const auto key = res.depends_on[d];
      const auto j = resource_index(m, key);
      if (key == res.key) {
        r.add({.rule = rule::self_dependency, .resource = u8(i)});
        sound = false;
      } else if (j == no_index) {
        r.add({.rule = rule::unknown_dependency, .resource = u8(i), .other = u8(d)});
        sound = false;
      } else if (res.preplans && !m.resources[j].preplans) {
        r.add({.rule = rule::preplan_dependency, .resource = u8(i), .other = j});
      }
    }
  }
  if (!sound) return;
  // Kahn's algorithm; what is left unordered lies on or behind a cycle.
  std::array<bool, max_resources> done{};
  for (std::size_t round = 0; round < n; ++round) {
    bool progressed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      bool ready = true;
      for (auto key : m.resources[i].depends_on)
        ready = ready && done[resource_index(m, key)];
      if (ready) {
        done[i] = true;
        r.order.push_back(u8(i));
        progressed = true;
      }
    }
    if (!progressed) break;
  }
  if (r.order.size() == n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (m.resources[i].kind != resource_kind::attention) continue;
      bool reads_positions = false;
      for (auto key : m.resources[i].depends_on)
        reads_positions = reads_positions || m.resources[resource_index(m, key)].kind == resource_kind::positions;
      if (!reads_positions) r.add({.rule = rule::attention_positions, .resource = u8(i)});
    }
    return;
  }
  // Report one resource that lies on a cycle: walk dependencies among the unordered ones until a
  // resource repeats.
  std::size_t at = 0;
  while (done[at])
    ++at;
  std::array<bool, max_resources> seen{};
  while (!seen[at]) {
    seen[at] = true;
    for (auto key : m.resources[at].depends_on) {
      const auto j = resource_index(m, key);
      if (!done[j]) {
        at = j;
        break;
      }
    }
  }
  r.add({.rule = rule::dependency_cycle, .resource = u8(at)});
}

// Side-lane admission for every node of a side_stream group, in the refusal list's order: the
// worker (tp/sp, streams, alone), the node's walks, then each resource. A worker has one side
// lane: it goes to the first node (worker's group order, then group's node order) that passes every
// other check, and each later node that passes them is refused as a second side node. A node
// refused for its own reasons holds no lane, so it never makes a neighbour a second side node.
constexpr void check_side_lanes(const model_desc& m, report& r) {
  for (std::size_t n = 0; n < m.nodes.size(); ++n)
    r.lanes.push_back(node_lane{.node = u8(n), .lane = lane::chain, .side_keys = {}});

  for (std::size_t w = 0; w < m.workers.size(); ++w) {
    const auto& wk = m.workers[w];
    bool has_chain_node = false;
    for (auto gname : wk.groups) {
      const auto& grp = m.groups[named_index(m.groups, gname)];
      if (!grp.side_stream && !grp.nodes.empty()) has_chain_node = true;
    }
    std::uint8_t lane_holder = no_index; // the node that holds this worker's side lane
    for (auto gname : wk.groups) {
      const auto g = named_index(m.groups, gname);
      const auto& grp = m.groups[g];
      if (!grp.side_stream) continue;
      for (auto nname : grp.nodes) {
        const auto n = named_index(m.nodes, nname);
        const auto& node = m.nodes[n];
        bool refused = false;
        auto refuse = [&](rule why, std::uint8_t res = no_index, std::uint8_t other = no_index) {
          refused = true;
          r.add({.rule = why, .resource = res, .node = n, .group = g, .worker = u8(w), .other = other});
        };
        if (wk.tp > 1 || wk.sp > 1) refuse(rule::lane_parallel);
        if (wk.streams == 0) refuse(rule::lane_no_streams);
        if (!has_chain_node) refuse(rule::lane_alone_on_worker);
        if (node.walks.chain) refuse(rule::lane_chain_walks);
        if (node.walks.resident) refuse(rule::lane_resident_walks);
        if (node.walks.combined) refuse(rule::lane_combined_walks);
        if (node.walks.spans || node.walks.stop_checks) refuse(rule::lane_spans_or_stop_checks);
        for (auto key : node.resources) {
          const auto ri = resource_index(m, key);
          const auto& res = m.resources[ri];
          switch (res.kind) {
          case resource_kind::kv_cache: refuse(rule::lane_kv_cache, ri); break;
          case resource_kind::attention: refuse(rule::lane_attention, ri); break;
          case resource_kind::positions: refuse(rule::lane_positions, ri); break;
          case resource_kind::sampler: refuse(rule::lane_sampler, ri); break;
          case resource_kind::recurrent_pool: {
            bool shared = false;
            for (std::size_t o = 0; o < m.nodes.size(); ++o)
              shared = shared || (o != n && m.nodes[o].resources.contains(key));
            if (shared) refuse(rule::lane_shared_pool, ri);
            if (res.kv_keyed_snapshots) refuse(rule::lane_kv_keyed_pool, ri);
            // A side pool is planned beside the chain: reading a resource the node does not declare
            // would read the chain's state while the plan thread stages the next chain step.
            for (auto dep : res.depends_on)
              if (!node.resources.contains(dep) && resource_index(m, dep) != no_index) {
                refuse(rule::lane_chain_dependency, ri, resource_index(m, dep));
                break;
              }
            break;
          }
          }
        }
        if (refused) continue;
        if (lane_holder != no_index) {
          refuse(rule::lane_second_side_node, no_index, lane_holder);
          continue;
        }
        lane_holder = n;
        r.lanes[n].lane = lane::side;
        for (auto key : node.resources)
          r.lanes[n].side_keys.push_back(key);
      }
    }
  }
}

} // namespace detail

// Judges a model description: structure, sizes, dependency order, side-lane admission. The report lists
// every broken rule (up to max_findings), and for a sound model each node's lane and side-lane keys.
constexpr report validate(const model_desc& m) {
  report r;
  detail::check_structure(m, r);
  detail::check_values(m, r);
  if (!r.ok()) return r; // the later rules index by name and need a sound structure
  detail::check_dependencies(m, r);
  detail::check_side_lanes(m, r);
  return r;
}

} // namespace mstar
