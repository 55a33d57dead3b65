// Plain descriptors of a model: resources, nodes, groups, workers. Both entry points produce these
// (the C++ policies in model.hpp at compile time, the YAML loader in config.hpp at load time), and
// the one validator in validate.hpp judges them. Names are string_views: into the policy types'
// static storage, or into the loaded config's own storage.
#pragma once

#include <cstdint>
#include <string_view>

#include "mstar/model/dtype.hpp"
#include "mstar/model/static_vector.hpp"

namespace mstar {

// Capacities of one model description. A YAML file that exceeds one is refused with the limit named.
inline constexpr std::size_t max_resources = 16;
inline constexpr std::size_t max_nodes = 16;
inline constexpr std::size_t max_groups = 16;
inline constexpr std::size_t max_workers = 8;
inline constexpr std::size_t max_dependencies = 8;
inline constexpr std::size_t max_node_resources = 8;
inline constexpr std::size_t max_group_nodes = 8;
inline constexpr std::size_t max_worker_groups = 8;
inline constexpr std::size_t max_state_rank = 4;

// Limits on sizes, checked by the validator (rules kv_limits, pool_limits, pool_bytes,
// worker_limits). Beyond them a value is a typo, not a model: the largest real models have a few
// thousand layers, tens of thousands of slots and KV blocks.
inline constexpr std::uint32_t max_state_dim = 1u << 24;
inline constexpr std::uint32_t max_layers = 4096;
inline constexpr std::uint32_t max_slots = 1u << 20;
inline constexpr std::uint32_t max_blocks = 1u << 24;
inline constexpr std::uint32_t max_block_tokens = 1u << 16;
inline constexpr std::uint32_t max_parallel = 1024;
inline constexpr std::uint32_t max_streams = 64;
inline constexpr double max_pool_bytes = 1099511627776.0; // 1 TiB: no GPU holds more

// A name (of a model, resource, node, group or worker): 1 to 64 characters among letters, digits,
// '_', '.' and '-', so that it reads the same in a message, a trace and a file name. The C++ policies
// refuse other names at compile time (their sentence: MSTAR_NAME_SENTENCE), the YAML loader at load.
inline constexpr std::size_t max_name_length = 64;
constexpr bool is_valid_name(std::string_view s) {
  if (s.empty() || s.size() > max_name_length) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
          c == '-'))
      return false;
  return true;
}
#define MSTAR_NAME_SENTENCE                                                                                            \
  "mstar: a name (of a model, resource, node, group or worker) has 1 to 64 characters among letters, digits, '_', " \
  "'.' and '-', as in YAML. Way out: rename it."

enum class resource_kind : std::uint8_t { kv_cache, attention, positions, sampler, recurrent_pool };

constexpr std::string_view name_of(resource_kind k) {
  switch (k) {
  case resource_kind::kv_cache: return "kv_cache";
  case resource_kind::attention: return "attention";
  case resource_kind::positions: return "positions";
  case resource_kind::sampler: return "sampler";
  case resource_kind::recurrent_pool: return "recurrent_pool";
  }
  return "?";
}

using key_list = static_vector<std::string_view, max_dependencies>;

struct resource_desc {
  std::string_view key;
  resource_kind kind = resource_kind::kv_cache;
  bool preplans = true;            // the plan thread may pre-admit and pre-plan it for the next chain step
  bool kv_keyed_snapshots = false; // recurrent pools: snapshots keyed on a KV cache (prefix caching)
  key_list depends_on;

  // Geometry. Recurrent pools: state element type, per-slot state shape, layers, slots (slot 0 is
  // the padding sink). KV caches: blocks and tokens per block.
  dtype element = dtype::f32;
  static_vector<std::uint32_t, max_state_rank> state_shape;
  std::uint32_t layers = 0;
  std::uint32_t slots = 0;
  std::uint32_t blocks = 0;
  std::uint32_t block_tokens = 0;

  constexpr std::size_t state_elements() const {
    std::size_t n = 1;
    for (auto d : state_shape) n *= d;
    return state_shape.empty() ? 0 : n;
  }
  constexpr std::size_t state_bytes() const { return state_elements() * size_of(element); }

  friend constexpr bool operator==(const resource_desc&, const resource_desc&) = default;
};

// Walk flags of a node (see docs/config.md).
struct walk_flags {
  bool chain = false;       // steps on the chain (the GPU thread's main sequence)
  bool resident = false;    // keeps state resident across steps
  bool combined = false;    // fused with other nodes in one step
  bool spans = false;       // per-step extras that read across rows
  bool stop_checks = false; // per-step stop checks that read across rows

  friend constexpr bool operator==(const walk_flags&, const walk_flags&) = default;
};

struct node_desc {
  std::string_view name;
  static_vector<std::string_view, max_node_resources> resources;
  walk_flags walks;

  friend constexpr bool operator==(const node_desc&, const node_desc&) = default;
};

struct group_desc {
  std::string_view name;
  bool side_stream = false;
  static_vector<std::string_view, max_group_nodes> nodes;

  friend constexpr bool operator==(const group_desc&, const group_desc&) = default;
};

struct worker_desc {
  std::string_view name;
  std::uint32_t tp = 1;
  std::uint32_t sp = 1;
  std::uint32_t streams = 1; // streams available for side lanes (besides the chain's own)
  static_vector<std::string_view, max_worker_groups> groups;

  friend constexpr bool operator==(const worker_desc&, const worker_desc&) = default;
};

struct model_desc {
  std::string_view name;
  static_vector<resource_desc, max_resources> resources;
  static_vector<node_desc, max_nodes> nodes;
  static_vector<group_desc, max_groups> groups;
  static_vector<worker_desc, max_workers> workers;

  friend constexpr bool operator==(const model_desc&, const model_desc&) = default;
};

namespace detail {
template <class V, class Less>
constexpr void insertion_sort(V& v, Less less) {
  for (std::size_t i = 1; i < v.size(); ++i)
    for (std::size_t j = i; j > 0 && less(v[j], v[j - 1]); --j) {
      auto t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
}
} // namespace detail

// The same model whatever the order it was written in: resources, nodes, groups and workers sorted
// by name, and every name list inside them sorted too. Two descriptions describe the same model
// when their canonical forms are equal.
constexpr model_desc canonical(model_desc m) {
  auto by_name = [](const auto& a, const auto& b) { return a.name < b.name; };
  auto sv_less = [](std::string_view a, std::string_view b) { return a < b; };
  for (auto& r : m.resources) detail::insertion_sort(r.depends_on, sv_less);
  detail::insertion_sort(m.resources, [](const auto& a, const auto& b) { return a.key < b.key; });
  for (auto& n : m.nodes) detail::insertion_sort(n.resources, sv_less);
  detail::insertion_sort(m.nodes, by_name);
  for (auto& g : m.groups) detail::insertion_sort(g.nodes, sv_less);
  detail::insertion_sort(m.groups, by_name);
  for (auto& w : m.workers) detail::insertion_sort(w.groups, sv_less);
  detail::insertion_sort(m.workers, by_name);
  return m;
}

} // namespace mstar
