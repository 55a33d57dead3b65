// The YAML loader behind config.hpp: checks the raw text (size, encoding, nesting) before yaml-cpp
// sees it, walks the parsed document against the schema of docs/config.md, builds a model_desc and
// hands it to the one validator. Every failure becomes a config_error with a position; nothing
// throws out of here.
#include "mstar/model/config.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include <sys/stat.h>

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

namespace mstar {

namespace {

using YAML::Node;

// Sizes are judged by the validator (descriptor.hpp's limits, the value rules of rules.def), so that a
// YAML file and a C++ model are refused for the same sizes with the same sentences; the loader
// refuses only a number that does not fit the descriptor. Names and the example section are the
// loader's own.
constexpr std::size_t max_example_entries = 64;
constexpr std::size_t max_example_values = 64;

// ---------------------------------------------------------------------------------------------
// Messages.

std::string prefix_of(std::string_view file, config_mark at) {
  if (!at.known()) return std::string(file);
  return fmt::format("{}:{}:{}", file, at.line, at.column);
}

config_error make_error(std::string_view file, config_mark at, std::string_view id, std::string_view text) {
  config_error e;
  e.file = std::string(file);
  e.line = at.known() ? at.line : 0;
  e.column = at.known() ? at.column : 0;
  e.rule_id = std::string(id);
  e.message = fmt::format("{}: error [{}]: {}", prefix_of(file, at), id, text);
  return e;
}

std::string line_note(config_mark at) { return at.known() ? fmt::format(" (line {})", at.line) : std::string(); }
std::string first_note(config_mark at) { return at.known() ? fmt::format(" (first on line {})", at.line) : std::string(); }

// A value quoted for a message: shortened, and with anything unprintable escaped (the text was
// checked to be UTF-8 already, but a message should stay one line).
std::string quote_value(std::string_view s) {
  std::string out = "'";
  std::size_t n = 0;
  for (char c : s) {
    if (++n > 48) {
      out += "...";
      break;
    }
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  out += "'";
  return out;
}

std::string join(std::span<const std::string_view> items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i];
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  if (a.size() > 64 || b.size() > 64) return 99;
  std::array<std::size_t, 66> prev{}, cur{};
  for (std::size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    prev = cur;
  }
  return prev[b.size()];
}

// " Did you mean 'x'?" when one candidate is close to what was written.
template <class Range>
std::string suggestion(std::string_view written, const Range& candidates) {
  std::string_view best;
  std::size_t best_d = 3;
  for (std::string_view c : candidates) {
    const auto d = edit_distance(written, c);
    if (d < best_d && d < std::max<std::size_t>(c.size(), 2)) {
      best_d = d;
      best = c;
    }
  }
  // Names other frameworks use for the same fields, too far in spelling for the edit distance.
  static constexpr std::pair<std::string_view, std::string_view> aliases[] = {
      {"block_size", "block_tokens"}, {"page_size", "block_tokens"}, {"tokens_per_block", "block_tokens"},
      {"num_blocks", "blocks"},       {"num_layers", "layers"},      {"num_slots", "slots"},
      {"state_shape", "shape"},       {"dims", "shape"},             {"dependencies", "depends_on"},
      {"type", "kind"},               {"side_lane", "side_stream"},  {"walk", "walks"}};
  if (best.empty())
    for (const auto& [alias, field] : aliases)
      if (written == alias && std::find(std::begin(candidates), std::end(candidates), field) != std::end(candidates))
        best = field;
  return best.empty() ? std::string() : fmt::format(" Did you mean '{}'?", best);
}

constexpr std::array<std::string_view, 5> dtype_names{"f32", "f16", "bf16", "i32", "u8"};

// " Did you mean 'f16'?" for a dtype written another framework's way (fp16, float16, F32, BF16).
std::string dtype_suggestion(std::string_view written) {
  std::string lower(written.substr(0, 16));
  for (auto& c : lower)
    c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  static constexpr std::pair<std::string_view, std::string_view> aliases[] = {
      {"fp32", "f32"},     {"float32", "f32"},  {"float", "f32"},  {"fp16", "f16"},   {"float16", "f16"},
      {"half", "f16"},     {"bfloat16", "bf16"}, {"bfp16", "bf16"}, {"int32", "i32"},  {"uint8", "u8"}};
  for (const auto& [alias, name] : aliases)
    if (lower == alias) return fmt::format(" Did you mean '{}'?", name);
  if (lower != written) // F32, BF16: the right name in the wrong case
    for (std::string_view name : dtype_names)
      if (lower == name) return fmt::format(" Did you mean '{}'?", name);
  return suggestion(written, dtype_names);
}

// What a YAML node holds, in words, for "found ..." in messages.
std::string found(const Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  if (n.Tag() == "!") return "the quoted string " + quote_value(n.Scalar());
  return quote_value(n.Scalar());
}

// ---------------------------------------------------------------------------------------------
// The raw text, before the parser: size, encoding and nesting.

// Checks that the text is UTF-8 without NUL bytes or control characters (tab, CR and LF aside):
// YAML's printable set. Returns the 1-based position of the first offence and what it is.
std::optional<std::pair<config_mark, std::string>> check_encoding(std::string_view text) {
  int line = 1, column = 1;
  std::size_t i = 0;
  if (text.starts_with("\xEF\xBB\xBF")) i = 3; // a UTF-8 byte order mark
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    const config_mark at{line, column};
    if (c == '\n') {
      ++line;
      column = 1;
      ++i;
      continue;
    }
    if (c < 0x80) {
      if (c == 0) return std::pair{at, std::string("a NUL byte")};
      if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
        return std::pair{at, fmt::format("the control character 0x{:02x}", c)};
      ++i;
      ++column;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07;
    else
      return std::pair{at, fmt::format("the byte 0x{:02x}, which does not start a UTF-8 character", c)};
    if (i + len > text.size()) return std::pair{at, std::string("a UTF-8 character cut off by the end of the file")};
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return std::pair{at, std::string("an invalid UTF-8 sequence")};
      cp = (cp << 6) | (cc & 0x3F);
    }
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return std::pair{at, std::string("an invalid UTF-8 sequence")};
    if ((cp >= 0x80 && cp <= 0x9F) || cp == 0xFFFE || cp == 0xFFFF)
      return std::pair{at, fmt::format("the non-printable character U+{:04X}", cp)};
    i += len;
    ++column;
  }
  return std::nullopt;
}

// A cheap upper estimate of how deep the text nests, so that a hostile file is refused before
// yaml-cpp (which recurses per level) parses it: indentation levels, compact "- " / "? " entries
// at the start of a line, and open flow brackets outside quotes, comments and block scalars.
// An honest config nests four levels; the limit leaves room for any sane layout.
std::optional<config_mark> check_nesting(std::string_view text) {
  std::vector<std::size_t> indents;
  int flow = 0;
  bool in_single = false, in_double = false;
  std::ptrdiff_t block_scalar_parent = -1; // indentation of the line that opened a | or > scalar
  int line_no = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

    std::size_t pos = 0;
    std::size_t base = indents.size();
    if (!in_single && !in_double && flow == 0) {
      std::size_t indent = 0;
      while (indent < line.size() && line[indent] == ' ')
        ++indent;
      const auto first = line.find_first_not_of(" \t");
      const bool blank = first == std::string_view::npos || line[first] == '#';
      if (block_scalar_parent >= 0) {
        if (blank || static_cast<std::ptrdiff_t>(indent) > block_scalar_parent) {
          if (end >= text.size()) break;
          continue;
        }
        block_scalar_parent = -1;
      }
      if (blank) {
        if (end >= text.size()) break;
        continue;
      }
      while (!indents.empty() && indents.back() >= indent)
        indents.pop_back();
      indents.push_back(indent);
      base = indents.size();
      pos = indent;
      // Compact nesting: "- - x", "- key: x", "? x".
      while (pos + 1 <= line.size() && (line[pos] == '-' || line[pos] == '?') &&
             (pos + 1 == line.size() || line[pos + 1] == ' ' || line[pos + 1] == '\t')) {
        ++base;
        ++pos;
        while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t'))
          ++pos;
      }
    }
    if (static_cast<int>(base) > max_config_depth) return config_mark{line_no, static_cast<int>(pos) + 1};
    std::size_t last_token = std::string_view::npos; // start of the last plain token outside flow
    for (; pos < line.size(); ++pos) {
      const char c = line[pos];
      if (in_double) {
        if (c == '\\')
          ++pos;
        else if (c == '"')
          in_double = false;
        continue;
      }
      if (in_single) {
        if (c == '\'') {
          if (pos + 1 < line.size() && line[pos + 1] == '\'')
            ++pos;
          else
            in_single = false;
        }
        continue;
      }
      const bool token_start = pos == 0 || std::strchr(" \t[{,:", line[pos - 1]) != nullptr;
      if (token_start && c == '"') {
        in_double = true;
        continue;
      }
      if (token_start && c == '\'') {
        in_single = true;
        continue;
      }
      if (c == '#' && (pos == 0 || line[pos - 1] == ' ' || line[pos - 1] == '\t')) break;
      if (c == '[' || c == '{') {
        ++flow;
        if (static_cast<int>(base) + flow > max_config_depth) return config_mark{line_no, static_cast<int>(pos) + 1};
      } else if (c == ']' || c == '}') {
        flow = std::max(0, flow - 1);
      }
      if (token_start && c != ' ' && c != '\t') last_token = pos;
    }
    // A block scalar (| or >, with optional indicators) as the line's last token: its content lines
    // are text, not structure.
    if (!in_single && !in_double && flow == 0 && last_token != std::string_view::npos &&
        (line[last_token] == '|' || line[last_token] == '>')) {
      std::size_t k = last_token + 1;
      while (k < line.size() && (line[k] == '-' || line[k] == '+' || (line[k] >= '1' && line[k] <= '9')))
        ++k;
      while (k < line.size() && (line[k] == ' ' || line[k] == '\t'))
        ++k;
      if (k == line.size() || line[k] == '#')
        block_scalar_parent = indents.empty() ? 0 : static_cast<std::ptrdiff_t>(indents.back());
    }
    if (end >= text.size()) break;
  }
  return std::nullopt;
}

// Records where each document starts, and builds nothing.
struct document_counter final : YAML::EventHandler {
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// ---------------------------------------------------------------------------------------------
// The schema walk.

config_mark mark_of(const Node& n) {
  if (!n.IsDefined()) return {};
  const auto m = n.Mark();
  if (m.line < 0 || m.column < 0) return {};
  return {m.line + 1, m.column + 1};
}

struct field {
  std::string key;
  config_mark at; // the key's position
  Node value;
};
using fields = std::vector<field>;

const field* find(const fields& fs, std::string_view key) {
  for (const auto& f : fs)
    if (f.key == key) return &f;
  return nullptr;
}

constexpr std::array<std::string_view, 6> top_keys{"model", "resources", "nodes", "groups", "workers", "example"};
constexpr std::array<std::string_view, 4> common_resource_keys{"kind", "depends_on", "preplan", "kv_keyed_snapshots"};
constexpr std::array<std::string_view, 6> kv_cache_keys{"kind",   "depends_on",  "preplan", "kv_keyed_snapshots",
                                                        "blocks", "block_tokens"};
constexpr std::array<std::string_view, 8> pool_keys{"kind",  "depends_on", "preplan", "kv_keyed_snapshots",
                                                    "dtype", "shape",      "layers",  "slots"};
constexpr std::array<std::string_view, 10> any_resource_keys{"kind",   "depends_on",  "preplan", "kv_keyed_snapshots",
                                                             "dtype",  "shape",       "layers",  "slots",
                                                             "blocks", "block_tokens"};
constexpr std::array<std::string_view, 4> node_keys{"resources", "walks", "spans", "stop_checks"};
constexpr std::array<std::string_view, 2> group_keys{"side_stream", "nodes"};
constexpr std::array<std::string_view, 3> inline_group_keys{"name", "side_stream", "nodes"};
constexpr std::array<std::string_view, 5> worker_keys{"name", "tp", "sp", "streams", "groups"};
constexpr std::array<std::string_view, 5> kind_names{"kv_cache", "attention", "positions", "sampler", "recurrent_pool"};
constexpr std::array<std::string_view, 3> walk_names{"chain", "resident", "combined"};

class loader {
public:
  explicit loader(std::string_view file) : file_(file), strings_(std::make_shared<std::deque<std::string>>()) {
    model_.file = std::string(file);
  }

  load_result run(std::string_view text) {
    if (text.size() > max_config_bytes) {
      fail({}, load_rule::too_large,
           fmt::format("the config is {} bytes, over the limit of {} bytes (1 MiB); a model description is a few "
                       "KiB. Way out: pass the model's config file, not a data file.",
                       text.size(), max_config_bytes));
      return finish();
    }
    if (auto bad = check_encoding(text)) {
      fail(bad->first, load_rule::not_text,
           fmt::format("the config must be UTF-8 text, and it holds {}. Way out: pass a YAML text file, saved as "
                       "UTF-8.",
                       bad->second));
      return finish();
    }
    if (auto deep = check_nesting(text)) {
      fail(*deep, load_rule::too_deep,
           fmt::format("the config nests deeper than {} levels (a model description needs 4). Way out: flatten it; "
                       "see docs/config.md for the schema.",
                       max_config_depth));
      return finish();
    }
    Node root;
    try {
      // Count the documents first, with a parser that builds nothing: yaml-cpp 0.7's LoadAll loops
      // forever on a stray ',' (jbeder/yaml-cpp#1040: a document that consumes no token is reported
      // again and again), so a document that starts where the last one started is a syntax error.
      std::istringstream in{std::string(text)};
      YAML::Parser parser(in);
      document_counter counter;
      while (counter.starts.size() < 3 && parser.HandleNextDocument(counter)) {
        const auto n = counter.starts.size();
        if (n >= 2 && counter.starts[n - 1].pos == counter.starts[n - 2].pos) {
          fail(mark_from(counter.starts[n - 1]), load_rule::syntax,
               "the text is not valid YAML: the parser cannot read the token at this position (a stray ',' or "
               "similar). Way out: fix the YAML syntax at this position.");
          return finish();
        }
      }
      if (counter.starts.size() > 1) {
        fail(mark_from(counter.starts[1]), load_rule::empty,
             "the config holds more than one YAML document, and a model description is one. Way out: keep one "
             "document (no second '---').");
        return finish();
      }
      if (!counter.starts.empty()) root = YAML::Load(std::string(text));
    } catch (const YAML::DeepRecursion& e) {
      fail(mark_from(e.mark), load_rule::too_deep,
           "the config nests too deeply for the YAML parser. Way out: flatten it; see docs/config.md.");
      return finish();
    } catch (const YAML::ParserException& e) {
      // A tab in a line's indentation is the usual cause, and the parser's message does not say so.
      int tab_line = 0, line = 1;
      bool leading = true;
      for (const char c : text) {
        if (c == '\n') {
          ++line;
          leading = true;
        } else if (leading && c == '\t') {
          tab_line = line;
          break;
        } else if (c != ' ') {
          leading = false;
        }
      }
      const std::string tab_note =
          tab_line == 0 ? std::string()
                        : fmt::format(" Line {} indents with a tab, which YAML does not allow: indent with spaces.",
                                      tab_line);
      fail(mark_from(e.mark), load_rule::syntax,
           fmt::format("the text is not valid YAML: {}. Way out: fix the YAML syntax at this position.{}", e.msg,
                       tab_note));
      return finish();
    } catch (const std::exception& e) {
      fail({}, load_rule::internal, fmt::format("the YAML parser failed: {}.", e.what()));
      return finish();
    }
    if (!root.IsDefined() || root.IsNull()) {
      fail({}, load_rule::empty,
           "the config is empty: it describes no model. Way out: write model, resources, nodes and workers (the "
           "schema: docs/config.md).");
      return finish();
    }
    try {
      walk_top(root);
    } catch (const std::exception& e) {
      fail({}, load_rule::internal, fmt::format("reading the YAML document failed: {}.", e.what()));
    }
    // Errors that only left a key out (unknown or repeated keys) leave a model the rules can judge: its
    // findings are listed too, so one typo does not hide them. Any other error left the model partial,
    // and judging it would report faults of the loader's making.
    if (!errors_.empty() && !judgeable_) return finish();

    model_.verdict = validate(model_.desc);
    model_.storage = strings_;
    if (!model_.verdict.ok() || !errors_.empty()) {
      for (const auto& f : model_.verdict.findings)
        add(error_of(model_, f));
      if (model_.verdict.truncated)
        fail({}, load_rule::too_many_errors,
             fmt::format("the model breaks more than {} rules; the first ones are listed. Way out: fix them and "
                         "validate again.",
                         max_findings));
      return finish();
    }
    return load_result(std::move(model_));
  }

  // The errors, capped; never a model.
  load_result finish() {
    if (overflow_)
      errors_.push_back(make_error(file_, {}, id_of(load_rule::too_many_errors),
                                   fmt::format("more than {} errors; the first ones are listed. Way out: fix them "
                                               "and validate again.",
                                               max_config_errors)));
    return load_result(std::move(errors_));
  }

  void fail(config_mark at, load_rule r, std::string_view text) {
    if (r != load_rule::unknown_key && r != load_rule::duplicate_key) judgeable_ = false;
    add(make_error(file_, at, id_of(r), text));
  }

private:
  static config_mark mark_from(const YAML::Mark& m) {
    if (m.line < 0 || m.column < 0) return {};
    return {m.line + 1, m.column + 1};
  }

  void add(config_error e) {
    if (errors_.size() >= max_config_errors) {
      overflow_ = true;
      return;
    }
    errors_.push_back(std::move(e));
  }

  std::string_view intern(std::string s) { return strings_->emplace_back(std::move(s)); }

  // The keys of a YAML map, each a plain scalar, allowed, and written once. Unknown and repeated
  // keys are reported and left out. nullopt when the node is not a map.
  std::optional<fields> fields_of(const Node& n, config_mark at, std::string_view what,
                                  std::span<const std::string_view> allowed, std::string_view allowed_in) {
    if (!n.IsMap()) {
      fail(n.IsDefined() && !n.IsNull() ? mark_of(n) : at, load_rule::wrong_type,
           fmt::format("{} must be a map of keys ({}), found {}. Way out: write it as 'key: value' lines.", what,
                       join(allowed), found(n)));
      return std::nullopt;
    }
    fields out;
    std::unordered_map<std::string, config_mark> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const Node key = it->first;
      const auto kat = mark_of(key);
      if (!key.IsScalar()) {
        fail(kat, load_rule::wrong_type,
             fmt::format("a key in {} must be a plain name, found {}. Way out: use one of: {}.", what, found(key),
                         join(allowed)));
        continue;
      }
      const std::string& k = key.Scalar();
      if (k == "<<" && plain_scalar(key)) {
        fail(kat, load_rule::unknown_key,
             fmt::format("a merge key ('<<') in {}: the loader does not support YAML merge keys (nor does YAML 1.2). "
                         "Way out: write the keys out in {}; anchors and aliases of whole values (&a / *a) work.",
                         what, what));
        continue;
      }
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        fail(kat, load_rule::unknown_key,
             fmt::format("unknown key {} in {}. Allowed keys{}: {}.{} Way out: correct or remove the key.",
                         quote_value(k), what, allowed_in, join(allowed), suggestion(k, allowed)));
        continue;
      }
      if (auto [pos, fresh] = seen.emplace(k, kat); !fresh) {
        fail(kat, load_rule::duplicate_key,
             fmt::format("the key {} is written twice in {} {}. Way out: keep one of them.", quote_value(k),
                         what, first_note(pos->second)));
        continue;
      }
      out.push_back({k, kat, it->second});
    }
    return out;
  }

  void missing(config_mark at, std::string_view what, std::string_view key, std::string_view hint) {
    fail(at, load_rule::missing_field, fmt::format("{} has no '{}'. Way out: add {}.", what, key, hint));
  }

  // A plain scalar that is not quoted, or nothing.
  static bool plain_scalar(const Node& n) {
    return n.IsScalar() && (n.Tag() == "?" || n.Tag().starts_with("tag:yaml.org,2002:"));
  }

  std::optional<std::string_view> name_of(const Node& n, config_mark at, std::string_view what) {
    if (!n.IsScalar()) {
      fail(n.IsDefined() && !n.IsNull() ? mark_of(n) : at, load_rule::wrong_type,
           fmt::format("{} must be a name, found {}. Way out: write a name such as codec_chunk.", what, found(n)));
      return std::nullopt;
    }
    const std::string& s = n.Scalar();
    if (!is_valid_name(s)) {
      fail(mark_of(n), load_rule::bad_name,
           fmt::format("{} is {}: a name has 1 to {} characters among letters, digits, '_', '.' and '-'. Way out: "
                       "rename it.",
                       what, s.empty() ? std::string("empty") : quote_value(s), max_name_length));
      return std::nullopt;
    }
    return intern(s);
  }

  std::optional<bool> bool_of(const field& f, std::string_view what) {
    const Node& n = f.value;
    if (plain_scalar(n)) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
    }
    fail(n.IsDefined() && !n.IsNull() ? mark_of(n) : f.at, load_rule::wrong_type,
         fmt::format("'{}' of {} must be true or false, found {}. Way out: write {}: true or {}: false.", f.key, what,
                     found(n), f.key, f.key));
    return std::nullopt;
  }

  // A whole number that fits the descriptor. Negative values and values past 32 bits are bad
  // values; anything that is not a whole number is the wrong type. `least` and `max` are the range
  // the model accepts (the validator refuses values outside it, with its rule); they only shape the
  // messages.
  std::optional<std::uint32_t> count_of(const Node& n, config_mark at, std::string_view label, std::uint32_t max,
                                        std::string_view meaning, std::uint32_t least = 0) {
    const auto where = n.IsDefined() && !n.IsNull() ? mark_of(n) : at;
    if (plain_scalar(n)) {
      std::string_view s = n.Scalar();
      bool negative = false;
      if (s.starts_with('+'))
        s.remove_prefix(1);
      else if (s.starts_with('-'))
        negative = true, s.remove_prefix(1);
      const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits) {
        std::uint64_t v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        const bool huge = ec == std::errc::result_out_of_range || p != s.data() + s.size() ||
                          v > std::numeric_limits<std::uint32_t>::max();
        if (negative && !(v == 0 && ec == std::errc{})) {
          fail(where, load_rule::bad_value,
               fmt::format("{} is {}, and it cannot be negative ({}). Way out: write a number from {} to {}.", label,
                           quote_value(n.Scalar()), meaning, least, max));
          return std::nullopt;
        }
        if (huge) {
          fail(where, load_rule::bad_value,
               fmt::format("{} is {}, over the limit of {} ({}). Way out: write the model's real size.", label,
                           quote_value(n.Scalar()), max, meaning));
          return std::nullopt;
        }
        return static_cast<std::uint32_t>(v);
      }
    }
    const bool quoted = n.IsScalar() && !plain_scalar(n);
    fail(where, load_rule::wrong_type,
         fmt::format("{} must be a whole number from {} to {} ({}), found {}. Way out: {}.", label, least, max, meaning,
                     found(n),
                     quoted ? "write the number without quotes"
                            : "write it in decimal digits only (no sign other than '+', no point, exponent, hex or "
                              "words)"));
    return std::nullopt;
  }

  std::optional<std::uint32_t> count_of(const field& f, std::string_view what, std::uint32_t max,
                                        std::string_view meaning, std::uint32_t least = 0) {
    return count_of(f.value, f.at, fmt::format("'{}' of {}", f.key, what), max, meaning, least);
  }

  // A YAML list with at most `capacity` entries (a descriptor capacity, named in the message).
  std::optional<std::vector<Node>> list_of(const field& f, std::string_view what, std::size_t capacity,
                                           std::string_view capacity_name, std::string_view example) {
    const Node& n = f.value;
    if (!n.IsSequence()) {
      fail(
          n.IsDefined() && !n.IsNull() ? mark_of(n) : f.at, load_rule::wrong_type,
          fmt::format("'{}' of {} must be a list, found {}. Way out: write it as {}.", f.key, what, found(n), example));
      return std::nullopt;
    }
    if (n.size() > capacity) {
      fail(mark_of(n), load_rule::capacity,
           fmt::format("'{}' of {} has {} entries, over the limit of {} (mstar::{} in descriptor.hpp). Way out: "
                       "shorten the list.",
                       f.key, what, n.size(), capacity, capacity_name));
      return std::nullopt;
    }
    std::vector<Node> out;
    for (const auto& item : n)
      out.push_back(item);
    return out;
  }

  // A list of names and their positions, as written: a name written twice is kept twice, so that
  // the validator's duplicate_entry rule refuses it with the same sentence as the C++ path.
  template <std::size_t N>
  bool names_of(const field& f, std::string_view what, std::string_view item_what, std::string_view capacity_name,
                static_vector<std::string_view, N>& names, std::vector<config_mark>& marks) {
    auto items = list_of(f, what, N, capacity_name, fmt::format("[{}, ...]", item_what));
    if (!items) return false;
    bool ok = true;
    for (const auto& item : *items) {
      auto name = name_of(item, f.at, fmt::format("an entry of '{}' in {}", f.key, what));
      if (!name) {
        ok = false;
        continue;
      }
      names.push_back(*name);
      marks.push_back(mark_of(item));
    }
    return ok;
  }

  void walk_top(const Node& root) {
    auto top = fields_of(root, {}, "the config", top_keys, " at the top level");
    if (!top) return;
    model_.marks.model = {};
    if (const auto* f = find(*top, "model")) {
      model_.marks.model = f->at;
      if (auto name = name_of(f->value, f->at, "the model's name")) model_.desc.name = *name;
    } else {
      missing(mark_of(root), "the config", "model", "model: <name> at the top");
    }
    if (const auto* f = find(*top, "resources"))
      walk_resources(*f);
    else
      missing(mark_of(root), "the config", "resources", "a resources: map (resources: {} when there are none)");
    if (const auto* f = find(*top, "nodes"))
      walk_nodes(*f);
    else
      missing(mark_of(root), "the config", "nodes", "a nodes: map");
    if (const auto* f = find(*top, "groups")) walk_groups(*f);
    if (const auto* f = find(*top, "workers"))
      walk_workers(*f);
    else
      missing(mark_of(root), "the config", "workers", "a workers: list");
    if (const auto* f = find(*top, "example")) walk_example(*f);
  }

  // A map of named entries (resources, nodes, groups): every entry in order, duplicates included,
  // since a name defined twice is the validator's duplicate rule, with its own sentence.
  template <class Each>
  void walk_named_map(const field& f, std::size_t capacity, std::string_view capacity_name, Each each) {
    const Node& n = f.value;
    if (n.IsNull() && f.key == "groups") return; // an empty groups: section
    if (!n.IsMap()) {
      fail(n.IsDefined() && !n.IsNull() ? mark_of(n) : f.at, load_rule::wrong_type,
           fmt::format("'{}' must be a map from each name to its entry, found {}. Way out: write it as in "
                       "docs/config.md's schema.",
                       f.key, found(n)));
      return;
    }
    if (n.size() > capacity) {
      fail(f.at, load_rule::capacity,
           fmt::format("'{}' has {} entries, over the limit of {} (mstar::{} in descriptor.hpp). Way out: describe "
                       "fewer, or raise the limit and rebuild.",
                       f.key, n.size(), capacity, capacity_name));
      return;
    }
    std::size_t index = 0;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const auto at = mark_of(it->first);
      auto name = name_of(it->first, at, fmt::format("an entry name under '{}'", f.key));
      ++index;
      // A bad name is reported; the entry is still read under a stand-in, so its own faults are
      // reported too (the model is not judged: name_of's error made it partial).
      if (!name) name = intern(it->first.IsScalar() ? it->first.Scalar() : fmt::format("entry #{}", index));
      each(*name, at, it->second);
    }
  }

  void walk_resources(const field& f) {
    walk_named_map(f, max_resources, "max_resources", [&](std::string_view key, config_mark at, const Node& v) {
      const std::string what = fmt::format("resource '{}'", key);
      resource_desc d{};
      resource_marks m{};
      d.key = key;
      m.entry = at;
      // The kind decides which keys are allowed, so read it first.
      std::optional<resource_kind> kind;
      if (v.IsMap())
        for (auto it = v.begin(); it != v.end(); ++it)
          if (it->first.IsScalar() && it->first.Scalar() == "kind" && it->second.IsScalar()) {
            for (std::size_t k = 0; k < kind_names.size(); ++k)
              if (it->second.Scalar() == kind_names[k]) kind = static_cast<resource_kind>(k);
          }
      std::span<const std::string_view> allowed = any_resource_keys;
      std::string allowed_in;
      if (kind == resource_kind::recurrent_pool)
        allowed = pool_keys;
      else if (kind == resource_kind::kv_cache)
        allowed = kv_cache_keys;
      else if (kind)
        allowed = common_resource_keys;
      if (kind) allowed_in = fmt::format(" in a {} resource", mstar::name_of(*kind));
      auto fs = fields_of(v, at, what, allowed, allowed_in);
      if (!fs) return;

      if (const auto* k = find(*fs, "kind")) {
        m.kind = k->at;
        if (!kind)
          fail(mark_of(k->value).known() ? mark_of(k->value) : k->at, load_rule::bad_value,
               fmt::format("'kind' of {} is {}, and it must be one of: {}.{} Way out: write one of them.", what,
                           found(k->value), join(kind_names),
                           suggestion(k->value.IsScalar() ? k->value.Scalar() : "", kind_names)));
      } else {
        missing(at, what, "kind", fmt::format("kind: one of {}", join(kind_names)));
      }
      if (kind) d.kind = *kind;
      if (const auto* p = find(*fs, "preplan")) {
        m.preplan = p->at;
        if (auto b = bool_of(*p, what)) d.preplans = *b;
      }
      if (const auto* p = find(*fs, "kv_keyed_snapshots")) {
        m.kv_keyed_snapshots = p->at;
        if (auto b = bool_of(*p, what)) d.kv_keyed_snapshots = *b;
      }
      if (const auto* p = find(*fs, "depends_on"))
        names_of(*p, what, "resource key", "max_dependencies", d.depends_on, m.depends_on);

      if (kind == resource_kind::kv_cache) {
        if (const auto* p = find(*fs, "blocks")) {
          m.blocks = p->at;
          if (auto n = count_of(*p, what, max_blocks, "KV cache blocks", 1)) d.blocks = *n;
        } else {
          missing(at, what, "blocks", "blocks: <number of KV blocks>");
        }
        if (const auto* p = find(*fs, "block_tokens")) {
          m.block_tokens = p->at;
          if (auto n = count_of(*p, what, max_block_tokens, "tokens per KV block", 1)) d.block_tokens = *n;
        } else {
          missing(at, what, "block_tokens", "block_tokens: <tokens per block>");
        }
      }
      if (kind == resource_kind::recurrent_pool) walk_pool_geometry(*fs, what, at, d, m);

      model_.desc.resources.push_back(d);
      model_.marks.resources.push_back(std::move(m));
    });
  }

  void walk_pool_geometry(const fields& fs, const std::string& what, config_mark at, resource_desc& d,
                          resource_marks& m) {
    if (const auto* p = find(fs, "dtype")) {
      bool known = false;
      if (plain_scalar(p->value) || p->value.IsScalar())
        for (std::size_t k = 0; k < dtype_names.size(); ++k)
          if (p->value.Scalar() == dtype_names[k]) d.element = static_cast<dtype>(k), known = true;
      if (!known)
        fail(mark_of(p->value).known() ? mark_of(p->value) : p->at, load_rule::bad_value,
             fmt::format("'dtype' of {} is {}, and it must be one of: {}.{} Way out: write the state's element type.",
                         what, found(p->value), join(dtype_names),
                         dtype_suggestion(p->value.IsScalar() ? p->value.Scalar() : std::string())));
    } else {
      missing(at, what, "dtype", "dtype: bf16 (or f32, f16)");
    }
    if (const auto* p = find(fs, "shape")) {
      m.shape = p->at;
      if (auto dims = list_of(*p, what, max_state_rank, "max_state_rank", "[16, 1024]"))
        for (const auto& dim : *dims)
          if (auto n = count_of(dim, p->at, fmt::format("a dimension of 'shape' of {}", what), max_state_dim,
                                "elements along one dimension of the per-slot state", 1))
            d.state_shape.push_back(*n);
    } else {
      missing(at, what, "shape", "shape: [dims...] (the per-slot state's shape)");
    }
    if (const auto* p = find(fs, "layers")) {
      m.layers = p->at;
      if (auto n = count_of(*p, what, max_layers, "layers of state per slot", 1)) d.layers = *n;
    } else {
      missing(at, what, "layers", "layers: <layers of state per slot>");
    }
    if (const auto* p = find(fs, "slots")) {
      m.slots = p->at;
      if (auto n = count_of(*p, what, max_slots, "slots, slot 0 being the padding sink", 2)) d.slots = *n;
    } else {
      missing(at, what, "slots", "slots: <concurrent requests + 1> (slot 0 is the padding sink)");
    }
  }

  void walk_nodes(const field& f) {
    walk_named_map(f, max_nodes, "max_nodes", [&](std::string_view name, config_mark at, const Node& v) {
      const std::string what = fmt::format("node '{}'", name);
      node_desc d{};
      node_marks m{};
      d.name = name;
      m.entry = at;
      m.chain = m.resident = m.combined = m.spans = m.stop_checks = at;
      if (v.IsNull()) { // a node with no resources and no walks: "codec: {}" or "codec:"
        model_.desc.nodes.push_back(d);
        model_.marks.nodes.push_back(std::move(m));
        return;
      }
      auto fs = fields_of(v, at, what, node_keys, " in a node");
      if (!fs) return;
      if (const auto* p = find(*fs, "resources"))
        names_of(*p, what, "resource key", "max_node_resources", d.resources, m.resources);
      if (const auto* p = find(*fs, "walks")) {
        if (auto items = list_of(*p, what, walk_names.size() * 2, "walk kinds", "[chain]")) {
          std::array<bool, walk_names.size()> seen{};
          for (const auto& item : *items) {
            std::size_t k = walk_names.size();
            if (item.IsScalar())
              for (std::size_t i = 0; i < walk_names.size(); ++i)
                if (item.Scalar() == walk_names[i]) k = i;
            if (k == walk_names.size()) {
              const std::string written = item.IsScalar() ? item.Scalar() : std::string();
              fail(mark_of(item).known() ? mark_of(item) : p->at, load_rule::bad_value,
                   fmt::format("an entry of 'walks' of {} is {}, and walks are: {} (spans and stop_checks are flags "
                               "of their own).{} Way out: write one of them.",
                               what, found(item), join(walk_names), suggestion(written, walk_names)));
              continue;
            }
            if (seen[k]) {
              fail(mark_of(item), load_rule::duplicate_walk,
                   fmt::format("'walks' of {} lists '{}' twice. Way out: keep one.", what, walk_names[k]));
              continue;
            }
            seen[k] = true;
            (k == 0 ? d.walks.chain : k == 1 ? d.walks.resident : d.walks.combined) = true;
            (k == 0 ? m.chain : k == 1 ? m.resident : m.combined) = mark_of(item);
          }
        }
      }
      if (const auto* p = find(*fs, "spans")) {
        m.spans = p->at;
        if (auto b = bool_of(*p, what)) d.walks.spans = *b;
      }
      if (const auto* p = find(*fs, "stop_checks")) {
        m.stop_checks = p->at;
        if (auto b = bool_of(*p, what)) d.walks.stop_checks = *b;
      }
      model_.desc.nodes.push_back(d);
      model_.marks.nodes.push_back(std::move(m));
    });
  }

  // One group's fields (top-level or inline); added to the descriptor. False when it could not be.
  bool add_group(std::string_view name, config_mark at, const fields& fs, std::string_view what) {
    group_desc d{};
    group_marks m{};
    d.name = name;
    m.entry = at;
    m.side_stream = at;
    if (const auto* p = find(fs, "side_stream")) {
      m.side_stream = p->at;
      if (auto b = bool_of(*p, what)) d.side_stream = *b;
    }
    if (const auto* p = find(fs, "nodes"))
      names_of(*p, what, "node name", "max_group_nodes", d.nodes, m.nodes);
    else
      missing(at, what, "nodes", "nodes: [node names]");
    if (!model_.desc.groups.push_back(d)) {
      fail(at, load_rule::capacity,
           fmt::format("{} is one group too many: a model holds at most {} groups (mstar::max_groups in "
                       "descriptor.hpp). Way out: merge groups.",
                       what, max_groups));
      return false;
    }
    model_.marks.groups.push_back(std::move(m));
    return true;
  }

  void walk_groups(const field& f) {
    walk_named_map(f, max_groups, "max_groups", [&](std::string_view name, config_mark at, const Node& v) {
      const std::string what = fmt::format("group '{}'", name);
      if (auto fs = fields_of(v, at, what, group_keys, " in a group under groups:")) add_group(name, at, *fs, what);
    });
  }

  void walk_workers(const field& f) {
    const Node& n = f.value;
    if (!n.IsSequence()) {
      fail(n.IsDefined() && !n.IsNull() ? mark_of(n) : f.at, load_rule::wrong_type,
           fmt::format("'workers' must be a list of workers ('- name: gpu0' entries), found {}. Way out: write it as in "
                       "docs/config.md's schema.",
                       found(n)));
      return;
    }
    if (n.size() == 0) {
      fail(f.at, load_rule::missing_field,
           "'workers' is empty, and a model needs at least one worker. Way out: add a worker with its groups.");
      return;
    }
    if (n.size() > max_workers) {
      fail(f.at, load_rule::capacity,
           fmt::format("'workers' has {} entries, over the limit of {} (mstar::max_workers in descriptor.hpp). Way "
                       "out: describe fewer workers.",
                       n.size(), max_workers));
      return;
    }
    std::size_t index = 0;
    for (const auto& w : n) {
      ++index;
      const auto at = mark_of(w);
      // Messages about the worker's keys name it by its name when it has a usable one, by its place otherwise.
      std::string label = fmt::format("worker #{}", index);
      if (w.IsMap())
        for (auto it = w.begin(); it != w.end(); ++it)
          if (it->first.IsScalar() && it->first.Scalar() == "name" && plain_scalar(it->second) &&
              !it->second.Scalar().empty() && it->second.Scalar().size() <= max_name_length)
            label = fmt::format("worker '{}' (#{})", it->second.Scalar(), index);
      auto fs = fields_of(w, f.at, label, worker_keys, " in a worker");
      if (!fs) continue;
      worker_desc d{};
      worker_marks m{};
      m.entry = at;
      const auto* pname = find(*fs, "name");
      if (!pname) {
        missing(at, label, "name", "name: <worker name>");
        continue;
      }
      auto name = name_of(pname->value, pname->at, fmt::format("the name of worker #{}", index));
      if (!name) continue;
      d.name = *name;
      const std::string what = fmt::format("worker '{}'", *name);
      m.tp = m.sp = m.streams = at;
      if (const auto* p = find(*fs, "tp")) {
        m.tp = p->at;
        if (auto v = count_of(*p, what, max_parallel, "tensor-parallel degree", 1)) d.tp = *v;
      }
      if (const auto* p = find(*fs, "sp")) {
        m.sp = p->at;
        if (auto v = count_of(*p, what, max_parallel, "sequence-parallel degree", 1)) d.sp = *v;
      }
      if (const auto* p = find(*fs, "streams")) {
        m.streams = p->at;
        if (auto v = count_of(*p, what, max_streams, "streams for side lanes")) d.streams = *v;
      }
      if (const auto* p = find(*fs, "groups"))
        walk_worker_groups(*p, what, d, m);
      else
        missing(at, what, "groups", "groups: [ {name: ..., nodes: [...]} ] or groups: [names]");
      model_.desc.workers.push_back(d);
      model_.marks.workers.push_back(std::move(m));
    }
  }

  // A worker's groups: each entry is a group defined in place ({name, side_stream, nodes}) or the
  // name of a group under the top-level groups: map.
  void walk_worker_groups(const field& f, const std::string& what, worker_desc& d, worker_marks& m) {
    auto items = list_of(f, what, max_worker_groups, "max_worker_groups", "[ {name: Talker, nodes: [...]} ]");
    if (!items) return;
    for (const auto& item : *items) {
      const auto at = mark_of(item);
      std::optional<std::string_view> name;
      if (item.IsMap()) {
        auto fs = fields_of(item, at, fmt::format("a group of {}", what), inline_group_keys, " in a group");
        if (!fs) continue;
        const auto* pname = find(*fs, "name");
        if (!pname) {
          missing(at, fmt::format("a group of {}", what), "name", "name: <group name>");
          continue;
        }
        name = name_of(pname->value, pname->at, fmt::format("the name of a group of {}", what));
        if (!name) continue;
        const std::string gwhat = fmt::format("group '{}'", *name);
        if (!add_group(*name, at, *fs, gwhat)) continue;
      } else {
        name = name_of(item, f.at, fmt::format("an entry of 'groups' of {}", what));
        if (!name) continue;
      }
      // A name listed twice stays twice: the validator refuses it (duplicate_entry, or
      // duplicate_group when two groups are defined in place under one name).
      d.groups.push_back(*name);
      m.groups.push_back(at);
    }
  }

  void walk_example(const field& f) {
    const Node& n = f.value;
    if (n.IsNull()) return;
    if (!n.IsMap()) {
      fail(mark_of(n).known() ? mark_of(n) : f.at, load_rule::wrong_type,
           fmt::format("'example' must be a map of sizes (key: number or key: [numbers]), found {}. Way out: write "
                       "'key: value' lines.",
                       found(n)));
      return;
    }
    if (n.size() > max_example_entries) {
      fail(f.at, load_rule::capacity,
           fmt::format("'example' has {} entries, over the limit of {}. Way out: keep the example's sizes only.",
                       n.size(), max_example_entries));
      return;
    }
    std::unordered_map<std::string, config_mark> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const auto at = mark_of(it->first);
      auto key = name_of(it->first, at, "a key of 'example'");
      if (!key) continue;
      if (auto [pos, fresh] = seen.emplace(std::string(*key), at); !fresh) {
        fail(at, load_rule::duplicate_key,
             fmt::format("the key '{}' is written twice in 'example' {}. Way out: keep one of them.", *key,
                         first_note(pos->second)));
        continue;
      }
      example_entry e{std::string(*key), {}, false, at};
      const Node v = it->second; // a copy: it->second lives in a temporary proxy
      const auto wrong = [&] {
        fail(mark_of(v).known() ? mark_of(v) : at, load_rule::wrong_type,
             fmt::format("'{}' of 'example' must be a value or a flat list of values (at most {}), found {}. Way out: "
                         "flatten it.",
                         *key, max_example_values, found(v)));
      };
      if (v.IsScalar()) {
        e.values.push_back(v.Scalar());
      } else if (v.IsSequence() && v.size() <= max_example_values) {
        e.is_list = true;
        bool ok = true;
        for (const auto& item : v) {
          if (!item.IsScalar())
            ok = false;
          else
            e.values.push_back(item.Scalar());
        }
        if (!ok) {
          wrong();
          continue;
        }
      } else {
        wrong();
        continue;
      }
      model_.example.push_back(std::move(e));
    }
  }

  std::string file_;
  std::vector<config_error> errors_;
  bool overflow_ = false;
  bool judgeable_ = true; // every loader error so far only left a key out
  loaded_model model_;
  std::shared_ptr<std::deque<std::string>> strings_;
};

// ---------------------------------------------------------------------------------------------
// Findings as errors.

struct finding_text {
  config_mark at;
  std::string names;
  std::string fix;
};

template <class V>
config_mark mark_at(const V& v, std::size_t i) {
  return i < v.size() ? v[i] : config_mark{};
}

class finding_writer {
public:
  finding_writer(const loaded_model& m, const finding& f) : m_(m), d_(m.desc), f_(f) {}

  config_error write() const {
    const auto t = text();
    std::string body =
        t.names.empty() ? std::string(sentence(f_.rule)) : fmt::format("{}: {}", t.names, sentence(f_.rule));
    if (!t.fix.empty()) body += " Fix: " + t.fix;
    return make_error(m_.file, t.at, id_of(f_.rule), body);
  }

private:
  bool has_res(std::uint8_t i) const { return i != no_index && i < d_.resources.size(); }
  bool has_node(std::uint8_t i) const { return i != no_index && i < d_.nodes.size(); }
  bool has_group(std::uint8_t i) const { return i != no_index && i < d_.groups.size(); }
  bool has_worker(std::uint8_t i) const { return i != no_index && i < d_.workers.size(); }

  const resource_marks* rmarks(std::size_t i) const {
    return i < m_.marks.resources.size() ? &m_.marks.resources[i] : nullptr;
  }
  const node_marks* nmarks(std::size_t i) const { return i < m_.marks.nodes.size() ? &m_.marks.nodes[i] : nullptr; }
  const group_marks* gmarks(std::size_t i) const { return i < m_.marks.groups.size() ? &m_.marks.groups[i] : nullptr; }
  const worker_marks* wmarks(std::size_t i) const {
    return i < m_.marks.workers.size() ? &m_.marks.workers[i] : nullptr;
  }
  config_mark rentry(std::size_t i) const { return rmarks(i) ? rmarks(i)->entry : config_mark{}; }
  config_mark nentry(std::size_t i) const { return nmarks(i) ? nmarks(i)->entry : config_mark{}; }
  config_mark gentry(std::size_t i) const { return gmarks(i) ? gmarks(i)->entry : config_mark{}; }
  config_mark wentry(std::size_t i) const { return wmarks(i) ? wmarks(i)->entry : config_mark{}; }

  // The default names: node in group on worker, resource.
  std::string names() const {
    std::string s;
    if (has_node(f_.node)) s = fmt::format("node '{}'", d_.nodes[f_.node].name);
    if (has_group(f_.group)) s += fmt::format("{}group '{}'", s.empty() ? "" : " in ", d_.groups[f_.group].name);
    if (has_worker(f_.worker)) s += fmt::format("{}worker '{}'", s.empty() ? "" : " on ", d_.workers[f_.worker].name);
    if (has_res(f_.resource)) s += fmt::format("{}resource '{}'", s.empty() ? "" : ", ", d_.resources[f_.resource].key);
    return s;
  }

  // The position of `key` in node n's resources list, or the node's entry.
  config_mark node_resource_mark(std::size_t n, std::string_view key) const {
    const auto i = detail::index_of(d_.nodes[n].resources, key);
    return nmarks(n) && i != no_index ? mark_at(nmarks(n)->resources, i) : nentry(n);
  }

  template <class List>
  std::size_t first_named(const List& list, std::size_t upto, std::string_view name) const {
    for (std::size_t j = 0; j < upto; ++j)
      if (list[j].name == name) return j;
    return upto;
  }

  // The message writers, one per rule, dispatched through rules.def's table: a rule without a
  // writer does not build. Side-lane rules share side_lane, whose fixes differ by rule.
  finding_text text() const {
    finding_text t{{}, names(), {}};
    using writer = void (finding_writer::*)(finding_text&) const;
#define MSTAR_WRITER_structure(id) &finding_writer::id
#define MSTAR_WRITER_value(id) &finding_writer::id
#define MSTAR_WRITER_dependency(id) &finding_writer::id
#define MSTAR_WRITER_lane(id) &finding_writer::side_lane
    static constexpr writer writers[] = {
#define MSTAR_RULE(kind, id, sentence) MSTAR_WRITER_##kind(id),
#include "mstar/model/rules.def"
#undef MSTAR_RULE
    };
#undef MSTAR_WRITER_structure
#undef MSTAR_WRITER_value
#undef MSTAR_WRITER_dependency
#undef MSTAR_WRITER_lane
    static_assert(std::size(writers) == rule_count);
    const auto i = static_cast<std::size_t>(f_.rule);
    if (i < rule_count) (this->*writers[i])(t);
    return t;
  }

  void duplicate_resource(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto key = d_.resources[r].key;
    std::size_t j = has_res(f_.other) ? f_.other : r;
    for (std::size_t k = 0; k < r && j == r; ++k)
      if (d_.resources[k].key == key) j = k;
    t.at = rentry(r);
    t.fix = fmt::format("rename or delete one of the two resources '{}' (lines {} and {}).", key, rentry(j).line,
                        t.at.line);
  }

  void duplicate_node(finding_text& t) const {
    const auto n = f_.node;
    if (!has_node(n)) return;
    const auto name = d_.nodes[n].name;
    const std::size_t j = has_node(f_.other) ? f_.other : first_named(d_.nodes, n, name);
    t.at = nentry(n);
    t.fix = fmt::format("rename one of the two nodes '{}' (lines {} and {}).", name, nentry(j).line, t.at.line);
  }

  void duplicate_group(finding_text& t) const {
    const auto g = f_.group;
    if (!has_group(g)) return;
    const auto name = d_.groups[g].name;
    t.names = fmt::format("group '{}'", name);
    t.at = gentry(g);
    t.fix = fmt::format("rename one of the two groups '{}' (lines {} and {}).", name,
                        gentry(first_named(d_.groups, g, name)).line, t.at.line);
  }

  void duplicate_worker(finding_text& t) const {
    const auto w = f_.worker;
    if (!has_worker(w)) return;
    const auto name = d_.workers[w].name;
    t.at = wentry(w);
    t.fix = fmt::format("rename one of the two workers '{}' (lines {} and {}).", name,
                        wentry(first_named(d_.workers, w, name)).line, t.at.line);
  }

  void unknown_resource(finding_text& t) const {
    const auto n = f_.node;
    if (!has_node(n) || f_.other >= d_.nodes[n].resources.size()) return;
    const auto key = d_.nodes[n].resources[f_.other];
    std::vector<std::string_view> keys;
    for (const auto& res : d_.resources)
      keys.push_back(res.key);
    t.names = fmt::format("node '{}', resource key '{}'", d_.nodes[n].name, key);
    t.at = nmarks(n) ? mark_at(nmarks(n)->resources, f_.other) : nentry(n);
    t.fix = fmt::format("define '{}' under resources, or correct it in the resources of node '{}'.{}", key,
                        d_.nodes[n].name, suggestion(key, keys));
  }

  void unknown_node(finding_text& t) const {
    const auto g = f_.group;
    if (!has_group(g) || f_.other >= d_.groups[g].nodes.size()) return;
    const auto name = d_.groups[g].nodes[f_.other];
    std::vector<std::string_view> names;
    for (const auto& node : d_.nodes)
      names.push_back(node.name);
    t.names = fmt::format("group '{}', node name '{}'", d_.groups[g].name, name);
    t.at = gmarks(g) ? mark_at(gmarks(g)->nodes, f_.other) : gentry(g);
    t.fix = fmt::format("define node '{}' under nodes, or correct it in the nodes of group '{}'.{}", name,
                        d_.groups[g].name, suggestion(name, names));
  }

  void unknown_group(finding_text& t) const {
    const auto w = f_.worker;
    if (!has_worker(w) || f_.other >= d_.workers[w].groups.size()) return;
    const auto name = d_.workers[w].groups[f_.other];
    std::vector<std::string_view> names;
    for (const auto& grp : d_.groups)
      names.push_back(grp.name);
    t.names = fmt::format("worker '{}', group name '{}'", d_.workers[w].name, name);
    t.at = wmarks(w) ? mark_at(wmarks(w)->groups, f_.other) : wentry(w);
    t.fix = fmt::format("define group '{}' under groups (or in place: {{name: {}, nodes: [...]}}), or correct "
                        "it in the groups of worker '{}'.{}",
                        name, name, d_.workers[w].name, suggestion(name, names));
  }

  void node_unplaced(finding_text& t) const {
    const auto n = f_.node;
    if (!has_node(n)) return;
    t.at = nentry(n);
    t.fix = fmt::format("add '{}' to the nodes of a group, or delete node '{}'{}.", d_.nodes[n].name,
                        d_.nodes[n].name, line_note(t.at));
  }

  void node_placed_twice(finding_text& t) const {
    const auto n = f_.node;
    const auto g = f_.group;
    if (!has_node(n)) return;
    const auto name = d_.nodes[n].name;
    std::size_t first = d_.groups.size();
    for (std::size_t k = 0; k < d_.groups.size() && first == d_.groups.size(); ++k)
      if (k != g && d_.groups[k].nodes.contains(name)) first = k;
    const std::size_t second = has_group(g) ? g : first;
    if (first == d_.groups.size() || second >= d_.groups.size()) return;
    auto entry_of = [&](std::size_t k) {
      const auto i = detail::index_of(d_.groups[k].nodes, name);
      return gmarks(k) && i != no_index ? mark_at(gmarks(k)->nodes, i) : gentry(k);
    };
    t.names = fmt::format("node '{}' in groups '{}' and '{}'", name, d_.groups[first].name, d_.groups[second].name);
    t.at = entry_of(second);
    t.fix =
        fmt::format("remove '{}' from the nodes of group '{}'{} or of group '{}'{}.", name, d_.groups[second].name,
                    line_note(entry_of(second)), d_.groups[first].name, line_note(entry_of(first)));
  }

  void group_placement(finding_text& t) const {
    const auto g = f_.group;
    if (!has_group(g)) return;
    const auto name = d_.groups[g].name;
    std::vector<std::string> on;
    config_mark second{};
    for (std::size_t k = 0; k < d_.workers.size(); ++k) {
      const auto i = detail::index_of(d_.workers[k].groups, name);
      if (i == no_index) continue;
      on.push_back(fmt::format("'{}'", d_.workers[k].name));
      if (on.size() == 2 && wmarks(k)) second = mark_at(wmarks(k)->groups, i);
    }
    t.names = on.empty() ? fmt::format("group '{}' (on no worker)", name)
                         : fmt::format("group '{}' (on workers {})", name, fmt::join(on, " and "));
    t.at = second.known() ? second : gentry(g);
    t.fix = on.empty() ? fmt::format("list '{}' in the groups of one worker, or delete group '{}'{}.", name, name,
                                     line_note(gentry(g)))
                       : fmt::format("keep '{}' in the groups of one worker only.", name);
  }

  void bad_geometry(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    const auto* rm = rmarks(r);
    bool zero_dim = res.state_shape.empty();
    for (auto dim : res.state_shape)
      zero_dim = zero_dim || dim == 0;
    std::vector<std::uint32_t> dims(res.state_shape.begin(), res.state_shape.end());
    t.names = fmt::format("resource '{}' (shape [{}], layers {}, slots {})", res.key, fmt::join(dims, ", "),
                          res.layers, res.slots);
    t.at = !rm ? config_mark{} : zero_dim ? rm->shape : res.layers == 0 ? rm->layers : rm->slots;
    if (!t.at.known()) t.at = rentry(r);
    t.fix = fmt::format("set {} of resource '{}'{} to the model's real size{}.",
                        zero_dim          ? "shape"
                        : res.layers == 0 ? "layers"
                                          : "slots",
                        res.key, line_note(t.at), !zero_dim && res.layers != 0 ? " (concurrent requests + 1)" : "");
  }

  void snapshots_not_pool(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    t.names = fmt::format("resource '{}' (a {})", d_.resources[r].key, name_of(d_.resources[r].kind));
    t.at = rmarks(r) && rmarks(r)->kv_keyed_snapshots.known() ? rmarks(r)->kv_keyed_snapshots : rentry(r);
    t.fix = fmt::format("delete kv_keyed_snapshots from resource '{}'{}.", d_.resources[r].key, line_note(t.at));
  }

  void bad_parallel(finding_text& t) const {
    const auto w = f_.worker;
    if (!has_worker(w)) return;
    const auto& wk = d_.workers[w];
    t.names = fmt::format("worker '{}' (tp {}, sp {})", wk.name, wk.tp, wk.sp);
    t.at = wmarks(w) ? (wk.tp == 0 ? wmarks(w)->tp : wmarks(w)->sp) : config_mark{};
    t.fix = fmt::format("set {}: 1 on worker '{}'{}.", wk.tp == 0 ? "tp" : "sp", wk.name, line_note(t.at));
  }

  // The first of a resource's or worker's fields that is over its limit, with its mark; `what` names it.
  struct over {
    std::string_view what;
    std::uint64_t value = 0, limit = 0;
    config_mark at;
  };

  void kv_geometry(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    const auto* rm = rmarks(r);
    const bool no_blocks = res.blocks == 0;
    t.names = fmt::format("resource '{}' (blocks {}, block_tokens {})", res.key, res.blocks, res.block_tokens);
    t.at = !rm ? config_mark{} : no_blocks ? rm->blocks : rm->block_tokens;
    if (!t.at.known()) t.at = rentry(r);
    t.fix = fmt::format("set {} of resource '{}'{} to the cache's size.", no_blocks ? "blocks" : "block_tokens", res.key,
                        line_note(t.at));
  }

  void kv_limits(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    const auto* rm = rmarks(r);
    const over o = res.blocks > max_blocks ? over{"blocks", res.blocks, max_blocks, rm ? rm->blocks : config_mark{}}
                                           : over{"block_tokens", res.block_tokens, max_block_tokens,
                                                  rm ? rm->block_tokens : config_mark{}};
    over_limit(t, o, res.key, "cache's");
  }

  void pool_limits(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    const auto* rm = rmarks(r);
    over o{"layers", res.layers, max_layers, rm ? rm->layers : config_mark{}};
    for (auto dim : res.state_shape)
      if (dim > max_state_dim) o = {"a dimension of shape", dim, max_state_dim, rm ? rm->shape : config_mark{}};
    if (res.slots > max_slots) o = {"slots", res.slots, max_slots, rm ? rm->slots : config_mark{}};
    if (res.layers > max_layers) o = {"layers", res.layers, max_layers, rm ? rm->layers : config_mark{}};
    over_limit(t, o, res.key, "model's");
  }

  void pool_bytes(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    std::vector<std::uint32_t> dims(res.state_shape.begin(), res.state_shape.end());
    t.names = fmt::format("resource '{}' (shape [{}], layers {}, slots {}, {}: {:.3g} bytes)", res.key,
                          fmt::join(dims, ", "), res.layers, res.slots, mstar::name_of(res.element),
                          detail::pool_bytes(res));
    t.at = rmarks(r) && rmarks(r)->shape.known() ? rmarks(r)->shape : rentry(r);
    t.fix = fmt::format("set shape, layers and slots of resource '{}'{} to the model's real sizes.", res.key,
                        line_note(t.at));
  }

  void worker_limits(finding_text& t) const {
    const auto w = f_.worker;
    if (!has_worker(w)) return;
    const auto& wk = d_.workers[w];
    const auto* wm = wmarks(w);
    const over o = wk.tp > max_parallel   ? over{"tp", wk.tp, max_parallel, wm ? wm->tp : config_mark{}}
                   : wk.sp > max_parallel ? over{"sp", wk.sp, max_parallel, wm ? wm->sp : config_mark{}}
                                          : over{"streams", wk.streams, max_streams, wm ? wm->streams : config_mark{}};
    t.names = fmt::format("worker '{}' ({} {}, over {})", wk.name, o.what, o.value, o.limit);
    t.at = o.at.known() ? o.at : wentry(w);
    t.fix = fmt::format("set {} of worker '{}'{} to the machine's real number.", o.what, wk.name, line_note(t.at));
  }

  void over_limit(finding_text& t, const over& o, std::string_view key, std::string_view whose) const {
    t.names = fmt::format("resource '{}' ({} {}, over {})", key, o.what, o.value, o.limit);
    t.at = o.at.known() ? o.at : rentry(f_.resource);
    t.fix = fmt::format("set {} of resource '{}'{} to the {} real size.", o.what, key, line_note(t.at), whose);
  }

  void unknown_dependency(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r) || f_.other >= d_.resources[r].depends_on.size()) return;
    const auto& res = d_.resources[r];
    const auto key = res.depends_on[f_.other];
    std::vector<std::string_view> keys;
    for (const auto& other : d_.resources)
      keys.push_back(other.key);
    t.names = fmt::format("resource '{}', dependency '{}'", res.key, key);
    t.at = rmarks(r) ? mark_at(rmarks(r)->depends_on, f_.other) : rentry(r);
    t.fix = fmt::format("define '{}' under resources, or correct it in the depends_on of resource '{}'.{}", key,
                        res.key, suggestion(key, keys));
  }

  void self_dependency(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    const auto i = detail::index_of(res.depends_on, res.key);
    t.at = rmarks(r) && i != no_index ? mark_at(rmarks(r)->depends_on, i) : rentry(r);
    t.fix = fmt::format("remove '{}' from the depends_on of resource '{}'{}.", res.key, res.key, line_note(t.at));
  }

  void dependency_cycle(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto cycle = cycle_through(r);
    std::vector<std::string_view> keys;
    std::vector<std::string> cuts;
    for (std::size_t k = 0; k < cycle.size(); ++k) {
      const auto from = cycle[k], to = cycle[(k + 1) % cycle.size()];
      keys.push_back(d_.resources[from].key);
      const auto i = detail::index_of(d_.resources[from].depends_on, d_.resources[to].key);
      const auto at = rmarks(from) && i != no_index ? mark_at(rmarks(from)->depends_on, i) : rentry(from);
      cuts.push_back(
          fmt::format("'{}' from resource '{}'{}", d_.resources[to].key, d_.resources[from].key, line_note(at)));
    }
    if (!keys.empty()) keys.push_back(keys.front());
    t.names = fmt::format("resource '{}' (cycle: {})", d_.resources[r].key, fmt::join(keys, " -> "));
    t.at = rentry(r);
    t.fix = fmt::format("remove one of these depends_on entries: {}.", fmt::join(cuts, ", "));
  }

  void preplan_dependency(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r) || !has_res(f_.other)) return;
    const auto& res = d_.resources[r];
    const auto& dep = d_.resources[f_.other];
    const auto i = detail::index_of(res.depends_on, dep.key);
    t.names = fmt::format("resource '{}' (pre-plans) depends on resource '{}' (preplan: false)", res.key, dep.key);
    t.at = rmarks(r) && i != no_index ? mark_at(rmarks(r)->depends_on, i) : rentry(r);
    const auto dep_at =
        rmarks(f_.other) && rmarks(f_.other)->preplan.known() ? rmarks(f_.other)->preplan : rentry(f_.other);
    t.fix = fmt::format("set preplan: false on resource '{}'{}, or delete preplan: false from resource '{}'{}.",
                        res.key, line_note(rentry(r)), dep.key, line_note(dep_at));
  }

  void attention_positions(finding_text& t) const {
    const auto r = f_.resource;
    if (!has_res(r)) return;
    const auto& res = d_.resources[r];
    std::vector<std::string_view> positions;
    for (const auto& other : d_.resources)
      if (other.kind == resource_kind::positions) positions.push_back(other.key);
    t.names = fmt::format("resource '{}' (attention), depends_on [{}]", res.key, fmt::join(res.depends_on, ", "));
    t.at = rmarks(r) && !rmarks(r)->depends_on.empty() ? mark_at(rmarks(r)->depends_on, 0) : rentry(r);
    t.fix = positions.empty()
                ? fmt::format("define a resource of kind positions and add its key to the depends_on of resource "
                              "'{}'{}.",
                              res.key, line_note(rentry(r)))
                : fmt::format("add '{}' to the depends_on of resource '{}'{}.", positions.front(), res.key,
                              line_note(t.at));
  }

  // A list that names an entry twice: which list it is follows from the finding's indices (see
  // check_structure in validate.hpp); the position is the repeat, and the fix names both lines.
  void duplicate_entry(finding_text& t) const {
    const std::size_t i = f_.other;
    std::string_view entry, entry_kind, list, owner_kind, owner;
    const std::vector<config_mark>* marks = nullptr;
    config_mark owner_at{};
    std::size_t first = i;
    auto first_of = [&](const auto& names) {
      if (i >= names.size()) return false;
      entry = names[i];
      first = detail::index_of(names, entry);
      return true;
    };
    if (has_worker(f_.worker)) {
      if (!first_of(d_.workers[f_.worker].groups)) return;
      entry_kind = "group", list = "groups", owner_kind = "worker", owner = d_.workers[f_.worker].name;
      marks = wmarks(f_.worker) ? &wmarks(f_.worker)->groups : nullptr;
      owner_at = wentry(f_.worker);
    } else if (has_group(f_.group)) {
      if (!first_of(d_.groups[f_.group].nodes)) return;
      entry_kind = "node", list = "nodes", owner_kind = "group", owner = d_.groups[f_.group].name;
      marks = gmarks(f_.group) ? &gmarks(f_.group)->nodes : nullptr;
      owner_at = gentry(f_.group);
    } else if (has_node(f_.node)) {
      if (!first_of(d_.nodes[f_.node].resources)) return;
      entry_kind = "resource", list = "resources", owner_kind = "node", owner = d_.nodes[f_.node].name;
      marks = nmarks(f_.node) ? &nmarks(f_.node)->resources : nullptr;
      owner_at = nentry(f_.node);
    } else if (has_res(f_.resource)) {
      if (!first_of(d_.resources[f_.resource].depends_on)) return;
      entry_kind = "dependency", list = "depends_on", owner_kind = "resource", owner = d_.resources[f_.resource].key;
      marks = rmarks(f_.resource) ? &rmarks(f_.resource)->depends_on : nullptr;
      owner_at = rentry(f_.resource);
    } else {
      return;
    }
    const auto second_at = marks ? mark_at(*marks, i) : config_mark{};
    const auto first_at = marks ? mark_at(*marks, first) : config_mark{};
    t.names = fmt::format("{} '{}' lists {} '{}' twice in its {}", owner_kind, owner, entry_kind, entry, list);
    t.at = second_at.known() ? second_at : owner_at;
    // Both entries are often on one line ([a, a]), so the note gives the column too.
    const auto at_note = [](config_mark at) {
      return at.known() ? fmt::format(" (line {}, column {})", at.line, at.column) : std::string();
    };
    t.fix = fmt::format("delete the second '{}'{} from the {} of {} '{}', and keep the first{}.", entry,
                        at_note(second_at), list, owner_kind, owner, at_note(first_at));
  }

  // One cycle through resource r, following depends_on among resources that lie on a cycle with r
  // (found by depth-first search; the graph has at most max_resources vertices).
  std::vector<std::size_t> cycle_through(std::size_t r) const {
    std::vector<std::size_t> path{r};
    std::vector<bool> visited(d_.resources.size(), false);
    const auto dfs = [&](auto&& self, std::size_t at) -> bool {
      for (auto key : d_.resources[at].depends_on) {
        const auto j = detail::resource_index(d_, key);
        if (j == no_index) continue;
        if (j == r) return true;
        if (visited[j]) continue;
        visited[j] = true;
        path.push_back(j);
        if (self(self, j)) return true;
        path.pop_back();
      }
      return false;
    };
    visited[r] = true;
    return dfs(dfs, r) ? path : std::vector<std::size_t>{r};
  }

  void side_lane(finding_text& t) const {
    if (!has_node(f_.node) || !has_group(f_.group) || !has_worker(f_.worker)) return;
    const auto n = f_.node, g = f_.group, w = f_.worker;
    const auto& node = d_.nodes[n];
    const auto& grp = d_.groups[g];
    const auto& wk = d_.workers[w];
    const auto side_at = gmarks(g) ? gmarks(g)->side_stream : config_mark{};
    const auto* nm = nmarks(n);
    const auto* wm = wmarks(w);
    const std::string drop = fmt::format("drop side_stream from group '{}'{} to run node '{}' on the chain", grp.name,
                                         line_note(side_at), node.name);
    const std::string res_key = has_res(f_.resource) ? std::string(d_.resources[f_.resource].key) : std::string();
    t.at = side_at;
    switch (f_.rule) {
    case rule::lane_kv_cache:
    case rule::lane_attention:
    case rule::lane_positions:
    case rule::lane_sampler:
      t.at = node_resource_mark(n, res_key);
      t.fix = drop + ".";
      break;
    case rule::lane_shared_pool: {
      t.at = node_resource_mark(n, res_key);
      std::vector<std::string> others;
      for (std::size_t o = 0; o < d_.nodes.size(); ++o)
        if (o != n && d_.nodes[o].resources.contains(std::string_view(res_key)))
          others.push_back(fmt::format("'{}'", d_.nodes[o].name));
      t.fix = fmt::format("give node '{}' a recurrent pool of its own in place of '{}' (also declared by node {}), "
                          "or {}.",
                          node.name, res_key, fmt::join(others, " and "), drop);
      break;
    }
    case rule::lane_kv_keyed_pool: {
      t.at = node_resource_mark(n, res_key);
      const auto* rm = rmarks(f_.resource);
      t.fix = fmt::format("delete kv_keyed_snapshots from resource '{}'{}, or {}.", res_key,
                          line_note(rm ? rm->kv_keyed_snapshots : config_mark{}), drop);
      break;
    }
    case rule::lane_chain_dependency: {
      t.at = node_resource_mark(n, res_key);
      const auto* rm = rmarks(f_.resource);
      const std::string dep = has_res(f_.other) ? std::string(d_.resources[f_.other].key) : std::string();
      const auto i = has_res(f_.resource) ? detail::index_of(d_.resources[f_.resource].depends_on, std::string_view(dep))
                                          : no_index;
      const auto dep_at = rm && i != no_index ? mark_at(rm->depends_on, i) : config_mark{};
      if (!dep.empty()) t.names += fmt::format(", depends on '{}'", dep);
      t.fix = fmt::format("delete '{}' from the depends_on of resource '{}'{}, or {}.", dep, res_key,
                          line_note(dep_at), drop);
      break;
    }
    case rule::lane_resident_walks:
      if (nm) t.at = nm->resident;
      t.fix = fmt::format("delete resident from the walks of node '{}'{}, or {}.", node.name, line_note(t.at), drop);
      break;
    case rule::lane_chain_walks:
      if (nm) t.at = nm->chain;
      t.fix = fmt::format("delete chain from the walks of node '{}'{}, or {}.", node.name, line_note(t.at), drop);
      break;
    case rule::lane_combined_walks:
      if (nm) t.at = nm->combined;
      t.fix = fmt::format("delete combined from the walks of node '{}'{}, or {}.", node.name, line_note(t.at), drop);
      break;
    case rule::lane_spans_or_stop_checks: {
      const bool spans = node.walks.spans;
      if (nm) t.at = spans ? nm->spans : nm->stop_checks;
      t.fix = fmt::format("set {}: false on node '{}'{}{}, or {}.", spans ? "spans" : "stop_checks", node.name,
                          line_note(t.at), spans && node.walks.stop_checks ? " (and stop_checks: false)" : "", drop);
      break;
    }
    case rule::lane_parallel: {
      if (wm) t.at = wk.tp > 1 ? wm->tp : wm->sp;
      t.names += fmt::format(" (tp {}, sp {})", wk.tp, wk.sp);
      t.fix = fmt::format("set tp: 1 and sp: 1 on worker '{}'{}, or {}.", wk.name, line_note(t.at), drop);
      break;
    }
    case rule::lane_no_streams:
      if (wm) t.at = wm->streams;
      t.fix = fmt::format("set streams: 1 on worker '{}'{}, or {}.", wk.name, line_note(t.at), drop);
      break;
    case rule::lane_alone_on_worker:
      t.fix = fmt::format("{}, or list group '{}' on a worker that runs a chain group.", drop, grp.name);
      break;
    case rule::lane_second_side_node: {
      // The node that holds the worker's side lane: the first side node that passed every other check.
      const std::string_view holder = has_node(f_.other) ? d_.nodes[f_.other].name : std::string_view{};
      t.fix = holder.empty() ? fmt::format("{}, or move group '{}' to another worker.", drop, grp.name)
                             : fmt::format("node '{}' holds the side lane of worker '{}'; {}, or move group '{}' to "
                                           "another worker.",
                                           holder, wk.name, drop, grp.name);
      break;
    }
    default: break;
    }
    if (!t.at.known()) t.at = side_at.known() ? side_at : nentry(n);
  }

  const loaded_model& m_;
  const model_desc& d_;
  const finding& f_;
};

} // namespace

config_error error_of(const loaded_model& m, const finding& f) { return finding_writer(m, f).write(); }

load_result parse_model(std::string_view text, std::string_view name) {
  try {
    return loader(name).run(text);
  } catch (const std::exception& e) {
    return load_result(std::vector<config_error>{make_error(
        name, {}, id_of(load_rule::internal), fmt::format("loading the config failed unexpectedly: {}.", e.what()))});
  } catch (...) {
    return load_result(std::vector<config_error>{
        make_error(name, {}, id_of(load_rule::internal), "loading the config failed unexpectedly.")});
  }
}

load_result load_model(const std::filesystem::path& path) {
  const std::string name = path.string();
  auto error = [&](load_rule r, std::string text) {
    return load_result(std::vector<config_error>{make_error(name, {}, id_of(r), text)});
  };
  try {
    // stat first: a directory, a FIFO or /dev/zero is refused before anything reads from it.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      return error(load_rule::file,
                   fmt::format("cannot open the config: {}. Way out: check the path.", std::strerror(errno)));
    if (S_ISDIR(st.st_mode))
      return error(load_rule::file,
                   "the path is a directory, not a config file. Way out: pass a .yaml file, e.g. configs/*.yaml.");
    if (!S_ISREG(st.st_mode))
      return error(load_rule::file, "the path is not a regular file (a device, FIFO or socket). Way out: pass a "
                                    ".yaml file.");
    if (static_cast<std::uint64_t>(st.st_size) > max_config_bytes)
      return error(load_rule::too_large,
                   fmt::format("the config is {} bytes, over the limit of {} bytes (1 MiB); a model description is a "
                               "few KiB. Way out: pass the model's config file, not a data file.",
                               st.st_size, max_config_bytes));
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return error(load_rule::file,
                   fmt::format("cannot open the config: {}. Way out: check its permissions.", std::strerror(errno)));
    // Read at most one byte over the limit: the file may have grown since stat.
    std::string text(max_config_bytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) return error(load_rule::file, "reading the config failed. Way out: check the file.");
    text.resize(static_cast<std::size_t>(in.gcount()));
    return parse_model(text, name);
  } catch (const std::exception& e) {
    return error(load_rule::internal, fmt::format("loading the config failed unexpectedly: {}.", e.what()));
  }
}

const example_entry* loaded_model::find_example(std::string_view key) const {
  for (const auto& e : example)
    if (e.key == key) return &e;
  return nullptr;
}

namespace {
std::optional<double> number_of(const std::string& s) {
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}
} // namespace

std::optional<double> loaded_model::example_number(std::string_view key) const {
  const auto* e = find_example(key);
  if (!e || e->is_list || e->values.size() != 1) return std::nullopt;
  return number_of(e->values[0]);
}

std::optional<std::vector<double>> loaded_model::example_numbers(std::string_view key) const {
  const auto* e = find_example(key);
  if (!e) return std::nullopt;
  std::vector<double> out;
  for (const auto& v : e->values) {
    auto n = number_of(v);
    if (!n) return std::nullopt;
    out.push_back(*n);
  }
  return out;
}

} // namespace mstar
