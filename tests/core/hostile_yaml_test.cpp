// Malformed and hostile YAML: each gives a clear error (the rule id and the words that say what is
// wrong) and no model; nothing crashes, hangs or throws.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <mstar/model/config.hpp>

namespace {

namespace fs = std::filesystem;
const std::string source_root = MSTAR_SOURCE_ROOT;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::string& qwen3tts_text() {
  static const std::string text = read_file(source_root + "/configs/qwen3tts.yaml");
  return text;
}

std::string all_messages(const mstar::load_result& r) {
  std::string s;
  for (const auto& e : r.errors())
    s += e.message + "\n";
  return s;
}

// Every error of a failed load is well formed: it names the file and carries a rule id and text.
void check_errors_are_clear(const mstar::load_result& r, const std::string& name) {
  REQUIRE_FALSE(r.ok());
  REQUIRE_FALSE(r.errors().empty());
  CHECK(r.errors().size() <= mstar::max_config_errors + 1);
  for (const auto& e : r.errors()) {
    CHECK(e.message.starts_with(name));
    CHECK(e.message.find("error [" + e.rule_id + "]: ") != std::string::npos);
    CHECK(e.message.size() > name.size() + e.rule_id.size() + 20);
    CHECK(e.message.find('\n') == std::string::npos);
  }
}

// Loads the text and expects the first error to carry `rule` and mention `words`.
mstar::config_error expect_error(const std::string& text, std::string_view rule, const std::string& words) {
  const auto r = mstar::parse_model(text, "hostile.yaml");
  check_errors_are_clear(r, "hostile.yaml");
  REQUIRE_FALSE(r.errors().empty());
  const auto& e = r.errors()[0];
  CHECK_MESSAGE(e.rule_id == rule, all_messages(r));
  CHECK_MESSAGE(e.message.find(words) != std::string::npos, e.message);
  return e;
}

std::string edit(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "the case's anchor text is missing: " << from);
  text.replace(at, from.size(), to);
  return text;
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("mstar-hostile-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path write(const std::string& name, const std::string& content) const {
    const auto p = path / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

} // namespace

TEST_CASE("HostileYaml.every_prefix_of_a_config_loads_or_fails_cleanly") {
  const auto& text = qwen3tts_text();
  int refused = 0;
  for (std::size_t n = 0; n < text.size(); ++n) {
    const auto r = mstar::parse_model(std::string_view(text).substr(0, n), "cut.yaml");
    if (!r.ok()) {
      ++refused;
      check_errors_are_clear(r, "cut.yaml");
    }
  }
  // Every prefix that stops before the workers section misses a required field.
  CHECK(refused >= static_cast<int>(text.find("groups:")));
}

TEST_CASE("HostileYaml.a_config_cut_before_its_workers_names_the_missing_field") {
  const auto& text = qwen3tts_text();
  const auto e = expect_error(text.substr(0, text.find("workers:")), "missing_field", "has no 'workers'");
  CHECK(e.message.find("Way out: add a workers: list") != std::string::npos);
}

TEST_CASE("HostileYaml.a_tab_in_the_indentation_is_named_as_the_cause_of_the_syntax_error") {
  const auto& text = qwen3tts_text();
  const auto e = expect_error(edit(text, "    block_tokens: 16", "\tblock_tokens: 16"), "syntax", "not valid YAML");
  CHECK(e.message.find("indents with a tab") != std::string::npos);
  // A syntax error without a tab says nothing about tabs.
  const auto cut = text.find("[kv_cache, positions]") + 10;
  const auto plain = expect_error(text.substr(0, cut), "syntax", "not valid YAML");
  CHECK(plain.message.find("tab") == std::string::npos);
}

TEST_CASE("HostileYaml.other_frameworks_names_for_a_field_suggest_mstars") {
  const auto& t = qwen3tts_text();
  expect_error(edit(t, "block_tokens: 16", "block_size: 16"), "unknown_key", "Did you mean 'block_tokens'?");
  expect_error(edit(t, "layers: 8", "num_layers: 8"), "unknown_key", "Did you mean 'layers'?");
  // An alias is offered only where its field is allowed: a pool has no block_tokens.
  const auto e = expect_error(edit(t, "layers: 8", "layers: 8\n    block_size: 4"), "unknown_key", "");
  CHECK(e.message.find("Did you mean") == std::string::npos);
}

TEST_CASE("HostileYaml.a_config_cut_inside_a_flow_list_is_a_syntax_error_with_a_position") {
  const auto& text = qwen3tts_text();
  const auto cut = text.find("[kv_cache, positions]") + 10;
  const auto e = expect_error(text.substr(0, cut), "syntax", "not valid YAML");
  CHECK(e.line > 0);
}

TEST_CASE("HostileYaml.wrong_types_are_named_with_what_was_found") {
  const auto& t = qwen3tts_text();
  expect_error(edit(t, "slots: 257", "slots: [257]"), "wrong_type",
               "'slots' of resource 'codec_state' must be a whole "
               "number");
  expect_error(edit(t, "layers: 8", "layers: \"8\""), "wrong_type", "found the quoted string '8'");
  expect_error(edit(t, "blocks: 8192", "blocks: 81.92"), "wrong_type", "found '81.92'");
  expect_error(edit(t, "tp: 1", "tp: one"), "wrong_type", "'tp' of worker 'gpu0' must be a whole number");
  expect_error(edit(t, "side_stream: true", "side_stream: yes"), "wrong_type", "must be true or false, found 'yes'");
  expect_error(edit(t, "stop_checks: true", "stop_checks:"), "wrong_type", "must be true or false, found nothing");
  expect_error(edit(t, "resources: [codec_state]", "resources: codec_state"), "wrong_type",
               "'resources' of node 'codec_chunk' must be a list, found 'codec_state'");
  expect_error("model: m\nresources: [a, b]\nnodes: {}\nworkers: []\n", "wrong_type", "'resources' must be a map");
  expect_error("- just\n- a list\n", "wrong_type", "the config must be a map");
  expect_error("just a sentence\n", "wrong_type", "the config must be a map");
  expect_error(edit(t, "model: qwen3_tts", "model: [a, b]"), "wrong_type", "the model's name must be a name");
}

TEST_CASE("HostileYaml.negative_and_absurd_numbers_are_bad_values") {
  const auto& t = qwen3tts_text();
  expect_error(edit(t, "slots: 257", "slots: -3"), "bad_value", "cannot be negative");
  expect_error(edit(t, "slots: 257", "slots: 99999999999999999999999"), "bad_value", "over the limit");
  // A number that fits the descriptor reaches the validator, whose value rules refuse it with their
  // sentences, as they refuse the same sizes in a C++ model.
  expect_error(edit(t, "layers: 8", "layers: 5000"), "pool_limits", "(layers 5000, over 4096)");
  expect_error(edit(t, "shape: [16, 1024]", "shape: [16777216, 16777216]"), "pool_bytes", "more than 1 TiB");
  expect_error(edit(t, "blocks: 8192", "blocks: 0"), "kv_geometry", "at least one block");
  expect_error(edit(t, "layers: 8", "layers: 4294967296"), "bad_value", "over the limit of 4096");
  expect_error(edit(t, "kind: recurrent_pool", "kind: recurrent_pol"), "bad_value", "Did you mean 'recurrent_pool'?");
  expect_error(edit(t, "dtype: bf16", "dtype: bf17"), "bad_value", "must be one of: f32, f16, bf16");
  expect_error(edit(t, "walks: [chain]\n  talker_decode", "walks: [chian]\n  talker_decode"), "bad_value",
               "Did you mean 'chain'?");
}

TEST_CASE("HostileYaml.unknown_keys_list_the_allowed_keys") {
  const auto& t = qwen3tts_text();
  auto e = expect_error(edit(t, "dtype: bf16", "dtyp: bf16"), "unknown_key",
                        "Allowed keys in a recurrent_pool resource: kind, depends_on, preplan, kv_keyed_snapshots, "
                        "dtype, shape, layers, slots.");
  CHECK(e.message.find("Did you mean 'dtype'?") != std::string::npos);
  CHECK(e.line > 0);
  expect_error(edit(t, "model: qwen3_tts", "model: qwen3_tts\nmodle: x"), "unknown_key",
               "at the top level: model, resources, nodes, groups, workers, example");
  expect_error(edit(t, "    tp: 1", "    tp: 1\n    gpus: 2"), "unknown_key",
               "in a worker: name, tp, sp, streams, "
               "groups");
  // A geometry key that belongs to another kind is unknown for this one.
  expect_error(edit(t, "block_tokens: 16", "block_tokens: 16\n    slots: 4"), "unknown_key",
               "in a kv_cache resource: kind, depends_on, preplan, kv_keyed_snapshots, blocks, block_tokens");
}

TEST_CASE("HostileYaml.duplicate_names_and_keys_are_refused") {
  const auto& t = qwen3tts_text();
  expect_error(edit(t, "    kind: kv_cache\n", "    kind: kv_cache\n    kind: kv_cache\n"), "duplicate_key",
               "the key 'kind' is written twice in resource 'kv_cache'");
  // yaml-cpp keeps both entries of a repeated map key; the loader passes both to the validator.
  expect_error(edit(t, "  sampler:", "  positions:\n    kind: positions\n  sampler:"), "duplicate_resource",
               std::string(mstar::sentence(mstar::rule::duplicate_resource)));
  // A name written twice in a list reaches the validator, which refuses it with its sentence.
  expect_error(edit(t, "nodes: [codec_chunk]", "nodes: [codec_chunk, codec_chunk]"), "duplicate_entry",
               "group 'Codec' lists node 'codec_chunk' twice in its nodes: " +
                   std::string(mstar::sentence(mstar::rule::duplicate_entry)));
  expect_error(edit(t, "walks: [chain]\n  talker_decode", "walks: [chain, chain]\n  talker_decode"), "duplicate_walk",
               "lists 'chain' twice");
  expect_error(edit(t, "model: qwen3_tts", "model: qwen3_tts\nmodel: again"), "duplicate_key",
               "the key 'model' is written twice");
}

TEST_CASE("HostileYaml.names_outside_the_name_alphabet_are_refused") {
  const auto& t = qwen3tts_text();
  expect_error(edit(t, "  codec_chunk:", "  \"codec chunk\":"), "bad_name", "'codec chunk'");
  expect_error(edit(t, "- name: gpu0", "- name: \"\""), "bad_name", "is empty");
  expect_error(edit(t, "- name: gpu0", "- name: " + std::string(100, 'g')), "bad_name", "1 to 64 characters");
}

TEST_CASE("HostileYaml.capacities_of_the_descriptor_are_enforced_with_the_limit_named") {
  std::string many = "model: m\nresources:\n";
  for (int i = 0; i < 17; ++i)
    many += "  r" + std::to_string(i) + ": {kind: sampler}\n";
  many += "nodes: {}\nworkers: [{name: w, groups: []}]\n";
  expect_error(many, "capacity", "over the limit of 16 (mstar::max_resources in descriptor.hpp)");
  const auto& t = qwen3tts_text();
  expect_error(edit(t, "resources: [codec_state]", "resources: [a, b, c, d, e, f, g, h, i]"), "capacity",
               "mstar::max_node_resources");
  expect_error(edit(t, "shape: [16, 1024]", "shape: [1, 2, 3, 4, 5]"), "capacity", "mstar::max_state_rank");
}

TEST_CASE("HostileYaml.deep_nesting_is_refused_before_the_parser_recurses") {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  expect_error(std::string(100000, '['), "too_deep", "nests deeper than 32 levels");
  expect_error(std::string(100000, '{'), "too_deep", "nests deeper than 32 levels");
  expect_error("a: " + std::string(100000, '[') + std::string(100000, ']'), "too_deep", "nests deeper");
  expect_error(std::string("\t").append(100000, '['), "too_deep", "nests deeper");
  expect_error(std::string("a:\n \t").append(100000, '{'), "too_deep", "nests deeper");
  std::string dashes;
  for (int i = 0; i < 50000; ++i)
    dashes += "- ";
  expect_error(dashes + "x\n", "too_deep", "nests deeper");
  std::string indented;
  for (int i = 0; i < 400; ++i)
    indented += std::string(static_cast<std::size_t>(i), ' ') + "k:\n";
  expect_error(indented, "too_deep", "nests deeper");
  // 40 levels of nesting inside quotes and comments is text, not structure.
  const auto ok = mstar::parse_model(qwen3tts_text() + "# " + std::string(40, '[') + "\n", "c.yaml");
  CHECK_MESSAGE(ok.ok(), all_messages(ok));
  const auto quoted =
      edit(qwen3tts_text(), "model: qwen3_tts", "model: qwen3_tts\nexample2: '" + std::string(40, '[') + "'");
  expect_error(quoted, "unknown_key", "'example2'");
  CHECK(clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("HostileYaml.a_10_MB_file_is_refused_by_size_before_parsing") {
  const std::string big(10 * 1024 * 1024, 'a');
  expect_error(big, "too_large", "over the limit of 1048576 bytes");
  temp_dir dir;
  const auto path = dir.write("big.yaml", "model: m\n" + std::string(10 * 1024 * 1024, '#'));
  const auto r = mstar::load_model(path);
  check_errors_are_clear(r, path.string());
  CHECK(r.errors()[0].rule_id == "too_large");
  CHECK(r.errors()[0].line == 0);
}

TEST_CASE("HostileYaml.random_binary_garbage_is_refused_without_a_crash") {
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int> byte(0, 255), length(1, 4096);
  const std::set<std::string> expected{"not_text", "syntax", "wrong_type", "empty", "too_deep"};
  for (int i = 0; i < 300; ++i) {
    std::string garbage(static_cast<std::size_t>(length(rng)), '\0');
    for (auto& c : garbage)
      c = static_cast<char>(byte(rng));
    const auto r = mstar::parse_model(garbage, "garbage.bin");
    check_errors_are_clear(r, "garbage.bin");
    CHECK_MESSAGE(expected.count(r.errors()[0].rule_id) == 1, r.errors()[0].message);
  }
}

TEST_CASE("HostileYaml.random_printable_garbage_and_mutated_configs_never_crash") {
  std::mt19937 rng(7);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \n\t:-[]{},#&*!|>'\"%@`?";
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1), length(1, 2048);
  for (int i = 0; i < 300; ++i) {
    std::string text(length(rng), ' ');
    for (auto& c : text)
      c = alphabet[pick(rng)];
    const auto r = mstar::parse_model(text, "printable.yaml");
    if (!r.ok()) check_errors_are_clear(r, "printable.yaml");
  }
  const auto& config = qwen3tts_text();
  std::uniform_int_distribution<std::size_t> where(0, config.size() - 1), edits(1, 8);
  int refused = 0;
  for (int i = 0; i < 500; ++i) {
    std::string text = config;
    for (std::size_t k = edits(rng); k > 0; --k)
      text[where(rng)] = alphabet[pick(rng)];
    const auto r = mstar::parse_model(text, "mutated.yaml");
    if (!r.ok()) {
      ++refused;
      check_errors_are_clear(r, "mutated.yaml");
    }
  }
  CHECK(refused > 0);
}

TEST_CASE("HostileYaml.crlf_line_endings_load_like_lf") {
  std::string crlf;
  for (char c : qwen3tts_text()) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  const auto r = mstar::parse_model(crlf, "crlf.yaml");
  REQUIRE_MESSAGE(r.ok(), all_messages(r));
  const auto lf = mstar::parse_model(qwen3tts_text(), "lf.yaml");
  REQUIRE(lf.ok());
  CHECK(mstar::canonical(r.model().desc) == mstar::canonical(lf.model().desc));
}

TEST_CASE("HostileYaml.empty_files_and_several_documents_are_refused") {
  expect_error("", "empty", "the config is empty");
  expect_error("\n\n   \n", "empty", "the config is empty");
  expect_error("# only a comment\n", "empty", "the config is empty");
  expect_error("---\n", "empty", "the config is empty");
  expect_error(qwen3tts_text() + "---\n" + qwen3tts_text(), "empty", "holds more than one YAML document");
}

TEST_CASE("HostileYaml.a_stray_comma_is_a_syntax_error_not_an_endless_loop") {
  // yaml-cpp 0.7's LoadAll loops forever, allocating, on these (jbeder/yaml-cpp#1040).
  for (const char* text : {",", ", a", "a: 1\n,\n", ",,,,"}) {
    CAPTURE(text);
    const auto e = expect_error(text, "syntax", "not valid YAML");
    CHECK(e.line > 0);
  }
}

TEST_CASE("HostileYaml.nul_bytes_control_characters_and_invalid_utf8_are_not_text") {
  auto e = expect_error(std::string("model: a\0b\n", 11), "not_text", "a NUL byte");
  CHECK(e.line == 1);
  CHECK(e.column == 9);
  e = expect_error("model: m\nx: \x01\n", "not_text", "the control character 0x01");
  CHECK(e.line == 2);
  expect_error("model: caf\xff\n", "not_text", "the byte 0xff");
  expect_error("model: \xC0\xAF\n", "not_text", "invalid UTF-8");
  expect_error("model: \xED\xA0\x80\n", "not_text", "invalid UTF-8"); // a surrogate
  expect_error("model: \xE2\x82", "not_text", "cut off by the end of the file");
  expect_error(std::string("\xFF\xFEm\0o\0", 6), "not_text", "UTF-8"); // UTF-16
  // Valid UTF-8 beyond ASCII, and a byte order mark, are fine.
  const auto r =
      mstar::parse_model("\xEF\xBB\xBF" + edit(qwen3tts_text(), "model: qwen3_tts", "model: qwen3_tts # caf\xC3\xA9"));
  CHECK_MESSAGE(r.ok(), all_messages(r));
}

TEST_CASE("HostileYaml.aliases_cannot_blow_up_the_walk") {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c)
    bomb += std::string(1, c) + ": &" + c + " [*" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) +
            ", *" + static_cast<char>(c - 1) + ", *" + static_cast<char>(c - 1) + "]\n";
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  expect_error(bomb, "unknown_key", "unknown key 'a'");
  const auto nodes = edit(qwen3tts_text(), "resources: [codec_state]", "resources: *j");
  expect_error(nodes + "\nbomb: " + bomb.substr(3), "syntax", "");
  CHECK(clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("HostileYaml.paths_that_are_not_config_files_are_refused") {
  temp_dir dir;
  auto r = mstar::load_model(dir.path);
  check_errors_are_clear(r, dir.path.string());
  CHECK(r.errors()[0].rule_id == "file");
  CHECK(r.errors()[0].message.find("is a directory") != std::string::npos);

  r = mstar::load_model(dir.path / "missing.yaml");
  check_errors_are_clear(r, (dir.path / "missing.yaml").string());
  CHECK(r.errors()[0].message.find("No such file") != std::string::npos);

  if (fs::exists("/dev/null")) {
    r = mstar::load_model("/dev/null");
    check_errors_are_clear(r, "/dev/null");
    CHECK(r.errors()[0].message.find("not a regular file") != std::string::npos);
  }

  const auto empty = dir.write("empty.yaml", "");
  r = mstar::load_model(empty);
  check_errors_are_clear(r, empty.string());
  CHECK(r.errors()[0].rule_id == "empty");

  const auto good = dir.write("good.yaml", qwen3tts_text());
  CHECK(mstar::load_model(good).ok());
}

TEST_CASE("HostileYaml.many_errors_are_capped_with_a_note") {
  std::string text = "model: m\nresources: {}\nnodes:\n  n: {walks: [";
  for (int i = 0; i < 6; ++i)
    text.append("x").append(std::to_string(i)).append(", ");
  text += "chain]}\nworkers: [{name: w, groups: [{name: g, nodes: [n]}]}]\n";
  for (int i = 0; i < 2 * int(mstar::max_config_errors); ++i)
    text += "bogus" + std::to_string(i) + ": 1\n";
  const auto r = mstar::parse_model(text, "many.yaml");
  check_errors_are_clear(r, "many.yaml");
  CHECK(r.errors().size() == mstar::max_config_errors + 1);
  CHECK(r.errors().back().rule_id == "too_many_errors");
}
