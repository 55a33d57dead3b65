// mstar-validate: validates model configs (configs/*.yaml) with the same rules and sentences as the
// compile-time path, and prints for each node its lane and side-lane keys, or each refusal.
//
//   mstar-validate configs/*.yaml          human output
//   mstar-validate --json configs/*.yaml   one JSON document for scripts
//
// Exit status: 0 when every file is valid, 1 when one is not (or cannot be read), 2 on usage errors.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <mstar/detail/json.hpp>
#include <mstar/model/config.hpp>

namespace {

using mstar::detail::json_quoted; // the JSON string escaper the trace writer uses too

// A file name is whatever the shell passed, possibly not UTF-8, and messages carry it. The JSON
// escaper would turn a stray byte into U+FFFD; here valid sequences are kept and any other byte (and
// control bytes) is shown as \xNN, so the user can tell which file was meant.
std::string utf8_safe(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len != 0 && i + len <= s.size() && !(len == 1 && (c < 0x20 || c == 0x7f));
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 2) ok = c >= 0xC2;
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0); // overlong, surrogate
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90) && c <= 0xF4;
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

struct node_row {
  std::string_view name, group, worker;
  mstar::lane lane;
  std::vector<std::string_view> keys;
};

std::vector<node_row> rows_of(const mstar::loaded_model& m) {
  std::vector<node_row> rows;
  for (const auto& l : m.verdict.lanes) {
    const auto& node = m.desc.nodes[l.node];
    node_row row{node.name, {}, {}, l.lane, {l.side_keys.begin(), l.side_keys.end()}};
    for (const auto& g : m.desc.groups)
      if (g.nodes.contains(node.name)) row.group = g.name;
    for (const auto& w : m.desc.workers)
      if (w.groups.contains(row.group)) row.worker = w.name;
    rows.push_back(row);
  }
  return rows;
}

std::string_view lane_name(mstar::lane l) { return l == mstar::lane::side ? "side" : "chain"; }

void print_human(const std::string& file, const mstar::load_result& r) {
  if (!r.ok()) {
    fmt::print("{}: refused ({} error{})\n", file, r.errors().size(), r.errors().size() == 1 ? "" : "s");
    for (const auto& e : r.errors())
      fmt::print("{}\n", e.message);
    return;
  }
  const auto& m = r.model();
  fmt::print("{}: valid (model {})\n", file, m.desc.name);
  const auto rows = rows_of(m);
  std::size_t width = 0;
  for (const auto& row : rows)
    width = std::max(width, row.name.size());
  for (const auto& row : rows) {
    if (row.lane == mstar::lane::side)
      fmt::print("  {:<{}}  side   keys [{}]\n", row.name, width, fmt::join(row.keys, ", "));
    else
      fmt::print("  {:<{}}  chain\n", row.name, width);
  }
}

std::string json_of(const std::string& file, const mstar::load_result& r) {
  std::string out = fmt::format("{{\"file\": {}, \"valid\": {}", json_quoted(utf8_safe(file)), r.ok());
  if (r.ok()) {
    const auto& m = r.model();
    out += fmt::format(", \"model\": {}, \"nodes\": [", json_quoted(m.desc.name));
    const auto rows = rows_of(m);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& row = rows[i];
      std::vector<std::string> keys;
      for (auto k : row.keys)
        keys.push_back(json_quoted(k));
      out += fmt::format("{}{{\"name\": {}, \"group\": {}, \"worker\": {}, \"lane\": \"{}\", \"side_keys\": [{}]}}",
                         i ? ", " : "", json_quoted(row.name), json_quoted(row.group), json_quoted(row.worker),
                         lane_name(row.lane), fmt::join(keys, ", "));
    }
    out += "], \"errors\": []}";
  } else {
    out += ", \"nodes\": [], \"errors\": [";
    for (std::size_t i = 0; i < r.errors().size(); ++i) {
      const auto& e = r.errors()[i];
      out += fmt::format("{}{{\"line\": {}, \"column\": {}, \"rule\": {}, \"message\": {}}}", i ? ", " : "", e.line,
                         e.column, json_quoted(e.rule_id), json_quoted(utf8_safe(e.message)));
    }
    out += "]}";
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Validates mstar model configs (YAML) with the rules of include/mstar/model/rules.hpp, and prints each "
               "node's lane and side-lane keys, or each refusal.\nExit status: 0 all valid, 1 a file is not, 2 usage "
               "error.",
               "mstar-validate"};
  std::vector<std::string> files;
  bool json = false;
  app.add_flag("--json", json, "print one JSON document for scripts");
  app.add_option("files", files, "config files (YAML) to validate")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  bool all_valid = true;
  std::vector<std::string> docs;
  for (const auto& file : files) {
    const auto r = mstar::load_model(file);
    all_valid = all_valid && r.ok();
    if (json)
      docs.push_back(json_of(file, r));
    else
      print_human(file, r);
  }
  if (json) fmt::print("{{\"valid\": {}, \"files\": [\n  {}\n]}}\n", all_valid, fmt::join(docs, ",\n  "));
  std::fflush(stdout);
  return all_valid ? 0 : 1;
}
