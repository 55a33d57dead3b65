// The load-time entry point: a model description read from a YAML file (configs/*.yaml, schema in
// docs/config.md), turned into the same plain descriptor (descriptor.hpp) that the C++ policies
// produce, and judged by the same validator (validate.hpp) with the same sentences (rules.hpp).
//
//   auto loaded = mstar::load_model("configs/qwen3tts.yaml");
//   if (!loaded.ok()) {
//     for (const auto& e : loaded.errors()) std::cerr << e.message << '\n';
//     return 1;
//   }
//   const mstar::model_desc& desc = loaded.model().desc;   // verdict.lanes: each node's lane
//
// Every error names the file, the line and column where there is one, the rule and the fix. A load
// either gives a model that the validator accepted or errors, never a partly built model. The
// loader is hardened against hostile input (size, encoding and nesting are checked before the YAML
// parser sees the text) and never throws. yaml-cpp stays out of this header.
#pragma once

#include <cstddef>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "mstar/model/descriptor.hpp"
#include "mstar/model/rules.hpp"
#include "mstar/model/validate.hpp"

namespace mstar {

// Limits checked before the text reaches the YAML parser. An honest config is a few KiB and nests
// four levels deep.
inline constexpr std::size_t max_config_bytes = std::size_t{1} << 20;
inline constexpr int max_config_depth = 32;
// Errors listed per file, loader errors and rule findings together (the validator finds up to
// max_findings, 64); past it the list ends with a too_many_errors note.
inline constexpr std::size_t max_config_errors = 64;

// The loader's own rules: what can be wrong with a file before the validator sees a model. The
// validator's rules (rules.hpp) keep their own ids; a config_error carries either kind of id.
enum class load_rule : std::uint8_t {
  file,            // missing, a directory, not a regular file, unreadable
  too_large,       // over max_config_bytes
  not_text,        // NUL bytes, control characters, invalid UTF-8
  too_deep,        // nesting over max_config_depth
  syntax,          // the YAML parser refused the text
  empty,           // no document, or more than one
  wrong_type,      // a map where a list belongs, a string where a number belongs...
  unknown_key,     // a key the schema does not have (the message lists the allowed ones)
  missing_field,   // a required key is absent
  duplicate_key,   // a key written twice in one map
  duplicate_walk,  // a walk written twice in a node's walks (a name written twice in any other list
                   // reaches the validator, whose duplicate_entry rule refuses it)
  bad_value,       // a negative or absurd number, an unknown kind, dtype or walk
  bad_name,        // a name that is empty, too long or has characters outside [A-Za-z0-9_.-]
  capacity,        // more entries than a model description holds (descriptor.hpp's max_*)
  too_many_errors, // the first max_config_errors errors are kept
  internal,        // an unexpected failure inside the parser; reported, never thrown
};

constexpr std::string_view id_of(load_rule r) {
  switch (r) {
  case load_rule::file: return "file";
  case load_rule::too_large: return "too_large";
  case load_rule::not_text: return "not_text";
  case load_rule::too_deep: return "too_deep";
  case load_rule::syntax: return "syntax";
  case load_rule::empty: return "empty";
  case load_rule::wrong_type: return "wrong_type";
  case load_rule::unknown_key: return "unknown_key";
  case load_rule::missing_field: return "missing_field";
  case load_rule::duplicate_key: return "duplicate_key";
  case load_rule::duplicate_walk: return "duplicate_walk";
  case load_rule::bad_value: return "bad_value";
  case load_rule::bad_name: return "bad_name";
  case load_rule::capacity: return "capacity";
  case load_rule::too_many_errors: return "too_many_errors";
  case load_rule::internal: return "internal";
  }
  return "?";
}

// A position in the config file, 1-based; line 0 means "no position" (a field that was not written
// falls back to its entry's position).
struct config_mark {
  int line = 0;
  int column = 0;
  constexpr bool known() const { return line > 0; }
  friend constexpr bool operator==(const config_mark&, const config_mark&) = default;
};

// Where each entry of the descriptor was written, by index into model_desc's lists.
struct resource_marks {
  config_mark entry; // the resource's key under resources:
  config_mark kind, preplan, kv_keyed_snapshots, shape, layers, slots, blocks, block_tokens;
  std::vector<config_mark> depends_on; // one per depends_on entry
};
struct node_marks {
  config_mark entry;
  config_mark chain, resident, combined, spans, stop_checks; // the walk entries and flags
  std::vector<config_mark> resources;                        // one per resources entry
};
struct group_marks {
  config_mark entry;
  config_mark side_stream;
  std::vector<config_mark> nodes;
};
struct worker_marks {
  config_mark entry;
  config_mark tp, sp, streams;
  std::vector<config_mark> groups;
};
struct config_marks {
  config_mark model;
  std::vector<resource_marks> resources;
  std::vector<node_marks> nodes;
  std::vector<group_marks> groups;
  std::vector<worker_marks> workers;
};

// One entry of the optional example: section (sizes for the example model; the validator ignores
// them): a scalar or a flat list of scalars, kept as written.
struct example_entry {
  std::string key;
  std::vector<std::string> values;
  bool is_list = false;
  config_mark at;
};

struct loaded_model {
  std::string file; // the name errors and messages use
  model_desc desc;  // its string_views point into storage
  report verdict;   // validate(desc); ok() for every model a load returns
  config_marks marks;
  std::vector<example_entry> example;
  // Owns the strings desc's views point into; shared and immutable, so copies and moves of a
  // loaded_model never invalidate a view.
  std::shared_ptr<const std::deque<std::string>> storage;

  const example_entry* find_example(std::string_view key) const;
  // The example entry as numbers; nullopt when it is absent or a value is not a number.
  std::optional<double> example_number(std::string_view key) const;
  std::optional<std::vector<double>> example_numbers(std::string_view key) const;
};

struct config_error {
  std::string file;
  int line = 0;        // 1-based; 0 when the error has no position (a missing file, a size limit)
  int column = 0;      // 1-based; 0 when there is none
  std::string rule_id; // id_of(load_rule) or id_of(rule)
  std::string message; // the full text: "<file>:<line>:<col>: error [<rule id>]: <what, where, fix>"
};

// Either a validated model or the errors that refused it, never both.
class load_result {
public:
  explicit load_result(loaded_model m) : v_(std::move(m)) {}
  explicit load_result(std::vector<config_error> e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  // Preconditions: ok() for model(), !ok() for errors() (an empty list otherwise).
  const loaded_model& model() const& { return std::get<0>(v_); }
  loaded_model&& model() && { return std::get<0>(std::move(v_)); }
  const std::vector<config_error>& errors() const {
    static const std::vector<config_error> none;
    return ok() ? none : std::get<1>(v_);
  }

private:
  std::variant<loaded_model, std::vector<config_error>> v_;
};

// Reads and validates a config file. Never throws.
load_result load_model(const std::filesystem::path& path);
// The same over text in memory; `name` stands for the file in messages. Never throws.
load_result parse_model(std::string_view text, std::string_view name = "<text>");

// A validator finding as a config error: the position of the entry at fault, the names of the node,
// group, worker and resource involved, the rule's sentence exactly as rules.hpp (and so the
// compile-time path) writes it, and a concrete fix naming the entries and their lines:
//   configs/x.yaml:31:7: error [lane_kv_cache]: node 'codec_chunk' in group 'Codec' on worker 'gpu0',
//   resource 'kv_cache': side lane refused: ... Fix: drop side_stream from group 'Codec' (line 31) ...
config_error error_of(const loaded_model& m, const finding& f);

} // namespace mstar
