// What differs between two model descriptions, in words: a YAML file against the compiled model it is
// meant to describe (canonical(a) == canonical(b) says whether they agree; this says where not).
//
//   const auto loaded = mstar::load_model("configs/qwen3tts.yaml");
//   for (const auto& d : mstar::differences(loaded.model().desc, Model::descriptor, "the file", "the model"))
//     std::puts(d.c_str());   // e.g. "resource 'kv_cache': blocks 4 in the file, 8192 in the model"
//
// Entries are matched by name (resources by key), so declaration order never counts as a difference;
// lists of names (a node's resources, a group's nodes, depends_on...) are compared as sets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mstar/model/descriptor.hpp"

namespace mstar {

namespace detail {

template <class List>
std::string name_set(const List& names) {
  std::vector<std::string_view> v(names.begin(), names.end());
  std::sort(v.begin(), v.end());
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i)
    out.append(i ? ", " : "").append(v[i]);
  return out + "]";
}

inline std::string walks_text(const walk_flags& w) {
  std::string out;
  for (auto [on, name] : {std::pair{w.chain, "chain"}, {w.resident, "resident"}, {w.combined, "combined"},
                          {w.spans, "spans"}, {w.stop_checks, "stop_checks"}})
    if (on) out.append(out.empty() ? "" : "|").append(name); // not "" + string: g++ 12's -Wrestrict misfires
  return out.empty() ? "none" : out;
}

inline std::string shape_text(const resource_desc& r) {
  std::string out = "[";
  for (std::size_t i = 0; i < r.state_shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(r.state_shape[i]);
  return out + "]";
}

} // namespace detail

// One sentence per difference, in the order: model name, resources, nodes, groups, workers. Empty when
// the two describe the same model.
inline std::vector<std::string> differences(const model_desc& a, const model_desc& b, std::string_view a_name = "a",
                                            std::string_view b_name = "b") {
  std::vector<std::string> out;
  const std::string in_a = " in " + std::string(a_name), in_b = " in " + std::string(b_name);
  const auto differ = [&](std::string what, const std::string& x, const std::string& y) {
    if (x != y) out.push_back(what + " " + x + in_a + ", " + y + in_b);
  };
  const auto flag = [](bool v) { return std::string(v ? "true" : "false"); };
  if (a.name != b.name) differ("model name", std::string(a.name), std::string(b.name));

  // Entries of one list matched by name: f(x, y) for the common ones, and the missing ones named.
  const auto match = [&](const auto& xs, const auto& ys, std::string_view kind, auto name_of_entry, auto&& f) {
    for (const auto& x : xs) {
      const auto y = std::find_if(ys.begin(), ys.end(), [&](const auto& e) { return name_of_entry(e) == name_of_entry(x); });
      if (y == ys.end())
        out.push_back(std::string(kind) + " '" + std::string(name_of_entry(x)) + "' only" + in_a);
      else
        f(x, *y, std::string(kind) + " '" + std::string(name_of_entry(x)) + "'");
    }
    for (const auto& y : ys)
      if (std::none_of(xs.begin(), xs.end(), [&](const auto& e) { return name_of_entry(e) == name_of_entry(y); }))
        out.push_back(std::string(kind) + " '" + std::string(name_of_entry(y)) + "' only" + in_b);
  };

  match(a.resources, b.resources, "resource", [](const resource_desc& r) { return r.key; },
        [&](const resource_desc& x, const resource_desc& y, const std::string& at) {
          differ(at + ": kind", std::string(name_of(x.kind)), std::string(name_of(y.kind)));
          differ(at + ": preplan", flag(x.preplans), flag(y.preplans));
          differ(at + ": kv_keyed_snapshots", flag(x.kv_keyed_snapshots), flag(y.kv_keyed_snapshots));
          differ(at + ": depends_on", detail::name_set(x.depends_on), detail::name_set(y.depends_on));
          if (x.kind == resource_kind::recurrent_pool || y.kind == resource_kind::recurrent_pool) {
            differ(at + ": dtype", std::string(name_of(x.element)), std::string(name_of(y.element)));
            differ(at + ": shape", detail::shape_text(x), detail::shape_text(y));
            differ(at + ": layers", std::to_string(x.layers), std::to_string(y.layers));
            differ(at + ": slots", std::to_string(x.slots), std::to_string(y.slots));
          }
          if (x.kind == resource_kind::kv_cache || y.kind == resource_kind::kv_cache) {
            differ(at + ": blocks", std::to_string(x.blocks), std::to_string(y.blocks));
            differ(at + ": block_tokens", std::to_string(x.block_tokens), std::to_string(y.block_tokens));
          }
        });
  match(a.nodes, b.nodes, "node", [](const node_desc& n) { return n.name; },
        [&](const node_desc& x, const node_desc& y, const std::string& at) {
          differ(at + ": resources", detail::name_set(x.resources), detail::name_set(y.resources));
          differ(at + ": walks", detail::walks_text(x.walks), detail::walks_text(y.walks));
        });
  match(a.groups, b.groups, "group", [](const group_desc& g) { return g.name; },
        [&](const group_desc& x, const group_desc& y, const std::string& at) {
          differ(at + ": side_stream", flag(x.side_stream), flag(y.side_stream));
          differ(at + ": nodes", detail::name_set(x.nodes), detail::name_set(y.nodes));
        });
  match(a.workers, b.workers, "worker", [](const worker_desc& w) { return w.name; },
        [&](const worker_desc& x, const worker_desc& y, const std::string& at) {
          differ(at + ": tp", std::to_string(x.tp), std::to_string(y.tp));
          differ(at + ": sp", std::to_string(x.sp), std::to_string(y.sp));
          differ(at + ": streams", std::to_string(x.streams), std::to_string(y.streams));
          differ(at + ": groups", detail::name_set(x.groups), detail::name_set(y.groups));
        });
  return out;
}

} // namespace mstar
