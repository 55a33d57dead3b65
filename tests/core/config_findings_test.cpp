// What the YAML loader reports when a file has several faults, and how its messages read (issue 20,
// items 7 and 8): a fault must not hide the others, and each message must say only what is true.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <mstar/model/config.hpp>

namespace {

std::string qwen3tts_text() {
  std::ifstream in(std::string(MSTAR_SOURCE_ROOT) + "/configs/qwen3tts.yaml", std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The qwen3tts config with `from` replaced by `to` (which must be there once).
std::string edited(const std::string& from, const std::string& to) {
  auto text = qwen3tts_text();
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  return text.replace(at, from.size(), to);
}

std::vector<std::string> ids_of(const mstar::load_result& r) {
  std::vector<std::string> ids;
  for (const auto& e : r.errors())
    ids.push_back(e.rule_id);
  return ids;
}

bool has(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The one error's message of a config that has exactly one.
std::string only_message(const std::string& text) {
  const auto r = mstar::parse_model(text, "x.yaml");
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  return r.errors()[0].message;
}

const std::string codec_resources = "    resources: [codec_state]\n";

} // namespace

TEST_CASE("ConfigFindings.a bad entry name still reports the faults inside that entry") {
  const auto r = mstar::parse_model(
      edited("  positions:                     # per-row positions of the Talker\n    kind: positions\n",
             "  positions:\n    kind: positions\n  \"bad name\": {kind: kv_cache, blocks: -1, block_tokens: abc, colour: 1}\n"),
      "x.yaml");
  const auto ids = ids_of(r);
  CAPTURE(ids.size());
  CHECK(has(ids, "bad_name"));
  CHECK(has(ids, "bad_value"));   // blocks: -1
  CHECK(has(ids, "wrong_type"));  // block_tokens: abc
  CHECK(has(ids, "unknown_key")); // colour
}

TEST_CASE("ConfigFindings.an unknown key does not hide the rule findings of the file") {
  const auto r = mstar::parse_model(edited(codec_resources, "    resources: [codec_state, kv_cache]\n    colour: blue\n"),
                                    "x.yaml");
  const auto ids = ids_of(r);
  CHECK(has(ids, "unknown_key"));
  CHECK(has(ids, "lane_kv_cache")); // the KV cache in a side-lane node, a rule of the validator
  REQUIRE_FALSE(r.errors().empty());
  CHECK(r.errors().front().rule_id == "unknown_key"); // loader errors first
}

TEST_CASE("ConfigFindings.a loader error that leaves the model partial is not followed by rule findings") {
  // The codec node's resource list is a number: the node is read without it, so judging the model would
  // report a node with no resources, a fault the loader made.
  const auto r = mstar::parse_model(edited(codec_resources, "    resources: 7\n"), "x.yaml");
  CHECK(ids_of(r) == std::vector<std::string>{"wrong_type"});
}

TEST_CASE("ConfigFindings.up to 64 errors are listed, as docs/config.md says") {
  std::string extra;
  for (int i = 0; i < 40; ++i)
    extra += "bogus" + std::to_string(i) + ": 1\n";
  const auto r = mstar::parse_model(qwen3tts_text() + extra, "x.yaml");
  CHECK(r.errors().size() == 40); // each unknown key, no too_many_errors note
  CHECK(mstar::max_config_errors == mstar::max_findings);
}

TEST_CASE("ConfigFindings.NEL (U+0085) is refused like every C1 control") {
  const auto message = only_message(qwen3tts_text() + "# a comment with NEL \xC2\x85 inside\n");
  CHECK(message.find("error [not_text]") != std::string::npos);
  CHECK(message.find("U+0085") != std::string::npos);
  CHECK(message.find("\xC2\x85") == std::string::npos); // the raw character is not printed
}

TEST_CASE("ConfigFindings.'write a number without quotes' is said only of a quoted number") {
  const std::string blocks = "    blocks: 8192                 #";
  for (const std::string v : {"16.0", "yes", "0x10", "1e3", ".inf"}) {
    CAPTURE(v);
    const auto message = only_message(edited(blocks, "    blocks: " + v + " #"));
    CHECK(message.find("without quotes") == std::string::npos);
    CHECK(message.find("decimal digits") != std::string::npos);
  }
  CHECK(only_message(edited(blocks, "    blocks: \"16\" #")).find("without quotes") != std::string::npos);
}

TEST_CASE("ConfigFindings.a range in a message starts at the smallest value the model accepts") {
  CHECK(only_message(edited("    blocks: 8192 ", "    blocks: many ")).find("from 1 to") != std::string::npos);
  CHECK(only_message(edited("    slots: 257 ", "    slots: many ")).find("from 2 to") != std::string::npos);
}

TEST_CASE("ConfigFindings.messages name a worker by its name, and a repeated key with one pair of parentheses") {
  const auto unknown = only_message(edited("    tp: 1\n", "    tp: 1\n    colour: blue\n"));
  CHECK(unknown.find("worker 'gpu0'") != std::string::npos);
  const auto twice = only_message(edited("    tp: 1\n", "    tp: 1\n    tp: 1\n"));
  CHECK(twice.find("((") == std::string::npos);
  CHECK(twice.find("))") == std::string::npos);
  CHECK(twice.find("first on line") != std::string::npos);
}

TEST_CASE("ConfigFindings.another framework's dtype name gets a did-you-mean") {
  CHECK(only_message(edited("    dtype: bf16\n", "    dtype: fp16\n")).find("Did you mean 'f16'?") != std::string::npos);
  CHECK(only_message(edited("    dtype: bf16\n", "    dtype: F32\n")).find("Did you mean 'f32'?") != std::string::npos);
  CHECK(only_message(edited("    dtype: bf16\n", "    dtype: bfloat16\n")).find("Did you mean 'bf16'?") != std::string::npos);
}

TEST_CASE("ConfigFindings.a merge key is refused with a message that says merge keys are not supported") {
  const auto message = only_message(edited("    tp: 1\n", "    tp: 1\n    <<: {sp: 1}\n"));
  CHECK(message.find("error [unknown_key]") != std::string::npos);
  CHECK(message.find("merge key") != std::string::npos);
}

TEST_CASE("ConfigFindings.no message points to configs/qwen3tts.yaml, which is not installed") {
  CHECK(only_message("# nothing\n").find("configs/qwen3tts.yaml") == std::string::npos);
  const auto r = mstar::parse_model(edited("workers:\n", "workers: 3\nx_workers:\n"), "x.yaml");
  REQUIRE_FALSE(r.errors().empty());
  for (const auto& e : r.errors())
    CHECK(e.message.find("qwen3tts.yaml") == std::string::npos);
}
