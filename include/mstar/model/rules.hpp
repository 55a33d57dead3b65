// Every rule the validator applies, each with its one sentence. The rules are the rows of one
// table, rules.def; this header expands it into the rule enum, the ids, the sentences and the kinds.
// The sentences are string literals in that table because static_assert takes only a literal: the
// compile-time path (model.hpp) and the load-time path (config.hpp) print the very same text, and
// the load-time path adds the names and the line of the offending entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

namespace mstar {

// What a rule judges. Side-lane rules refuse only the side lane: the model runs without side_stream.
enum class rule_kind : std::uint8_t { structure, value, dependency, lane };

enum class rule : std::uint8_t {
#define MSTAR_RULE(kind, id, sentence) id,
#include "mstar/model/rules.def"
#undef MSTAR_RULE
};

namespace detail {
struct rule_row {
  rule_kind kind;
  std::string_view id;
  std::string_view sentence;
};
inline constexpr rule_row rule_table[] = {
#define MSTAR_RULE(kind, id, sentence) rule_row{rule_kind::kind, #id, sentence},
#include "mstar/model/rules.def"
#undef MSTAR_RULE
};
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
