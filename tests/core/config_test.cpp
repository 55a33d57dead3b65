// The YAML entry point: every rule of rules.hpp reached from YAML with its exact sentence, the
// accepted side-lane shapes, the configs in configs/, and the C++ policy model and
// configs/qwen3tts.yaml describing the same model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <mstar/model/compare.hpp>
#include <mstar/model/config.hpp>

#include "qwen3_tts/model.hpp"

namespace {

const std::string source_root = MSTAR_SOURCE_ROOT;

// The Qwen3-TTS shape in a few lines; each case below edits it by one substitution.
const std::string base_yaml = R"(model: m
resources:
  kv_cache: {kind: kv_cache, blocks: 64, block_tokens: 16}
  positions: {kind: positions}
  attention: {kind: attention, depends_on: [kv_cache, positions]}
  sampler: {kind: sampler}
  codec_state: {kind: recurrent_pool, dtype: bf16, shape: [16, 1024], layers: 8, slots: 9}
nodes:
  talker_prefill: {resources: [kv_cache, attention, positions, sampler], walks: [chain]}
  talker_decode: {resources: [kv_cache, attention, positions, sampler], walks: [chain], stop_checks: true}
  codec_chunk: {resources: [codec_state]}
workers:
  - name: gpu0
    tp: 1
    sp: 1
    streams: 1
    groups:
      - {name: Talker, nodes: [talker_prefill, talker_decode]}
      - {name: Codec, side_stream: true, nodes: [codec_chunk]}
)";

// Replaces the one occurrence of `from`; fails the test when it is missing, so that a stale case
// cannot pass by testing the unedited text.
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "the case's anchor text is missing: " << from);
  REQUIRE_MESSAGE(text.find(from, at + 1) == std::string::npos, "the case's anchor text is ambiguous: " << from);
  text.replace(at, from.size(), to);
  return text;
}

int line_of(const std::string& text, const std::string& needle) {
  const auto at = text.find(needle);
  REQUIRE(at != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

std::string all_messages(const mstar::load_result& r) {
  std::string s;
  for (const auto& e : r.errors())
    s += e.message + "\n";
  return s;
}

const mstar::config_error* error_with(const mstar::load_result& r, mstar::rule rule) {
  for (const auto& e : r.errors())
    if (e.rule_id == mstar::id_of(rule)) return &e;
  return nullptr;
}

const mstar::node_lane& lane_of(const mstar::loaded_model& m, std::string_view node) {
  const auto i = mstar::detail::named_index(m.desc.nodes, node);
  REQUIRE(i != mstar::no_index);
  return m.verdict.lanes[i];
}

std::string fmt_line_col(const mstar::config_error* e) {
  return e->file + ":" + std::to_string(e->line) + ":" + std::to_string(e->column) + ": ";
}

std::vector<std::string> keys_of(const mstar::node_lane& l) { return {l.side_keys.begin(), l.side_keys.end()}; }

struct rule_case {
  mstar::rule rule;
  std::string from, to;
  bool only = false; // the rule is the one error the text produces
};

const std::string codec_group = "      - {name: Codec, side_stream: true, nodes: [codec_chunk]}\n";
const std::string talker_group = "      - {name: Talker, nodes: [talker_prefill, talker_decode]}\n";
const std::string codec_node = "  codec_chunk: {resources: [codec_state]}\n";

std::vector<rule_case> rule_cases() {
  using mstar::rule;
  return {
      {rule::duplicate_resource, "  sampler: {kind: sampler}\n",
       "  sampler: {kind: sampler}\n  positions: {kind: positions}\n", true},
      {rule::duplicate_node, codec_node, codec_node + "  codec_chunk: {resources: []}\n", true},
      {rule::duplicate_group, codec_group, codec_group + "      - {name: Codec, nodes: []}\n"},
      {rule::duplicate_worker, codec_group, codec_group + "  - {name: gpu0, groups: [{name: Extra, nodes: []}]}\n",
       true},
      {rule::duplicate_entry, "nodes: [codec_chunk]}", "nodes: [codec_chunk, codec_chunk]}", true},
      {rule::duplicate_entry, "[codec_state]}", "[codec_state, codec_state]}", true},
      {rule::duplicate_entry, codec_group, codec_group + "      - Codec\n", true},
      {rule::duplicate_entry, "[kv_cache, positions]", "[kv_cache, positions, kv_cache]", true},
      {rule::unknown_resource, "[codec_state]}", "[codec_stat]}", true},
      {rule::unknown_node, "nodes: [codec_chunk]}", "nodes: [codec_chunk, codec_chonk]}", true},
      {rule::unknown_group, codec_group, codec_group + "      - Vocoder\n", true},
      {rule::node_unplaced, codec_node, codec_node + "  spare: {}\n", true},
      {rule::node_placed_twice, "nodes: [talker_prefill, talker_decode]}",
       "nodes: [talker_prefill, talker_decode, "
       "codec_chunk]}",
       true},
      {rule::group_placement, "workers:\n", "groups:\n  Spare: {nodes: []}\nworkers:\n", true},
      {rule::bad_geometry, "slots: 9", "slots: 1", true},
      {rule::snapshots_not_pool, "{kind: kv_cache,", "{kind: kv_cache, kv_keyed_snapshots: true,", true},
      {rule::bad_parallel, "    tp: 1\n", "    tp: 0\n", true},
      {rule::kv_geometry, "blocks: 64", "blocks: 0", true},
      {rule::kv_geometry, "block_tokens: 16", "block_tokens: 0", true},
      {rule::kv_limits, "block_tokens: 16", "block_tokens: 65537", true},
      {rule::pool_limits, "layers: 8", "layers: 5000", true},
      {rule::pool_bytes, "shape: [16, 1024]", "shape: [16777216, 16777216]", true},
      {rule::worker_limits, "    tp: 1\n", "    tp: 1025\n", true},
      {rule::worker_limits, "    streams: 1\n", "    streams: 65\n", true},
      {rule::unknown_dependency, "[kv_cache, positions]", "[kv_cache, position]", true},
      {rule::self_dependency, "[kv_cache, positions]", "[kv_cache, positions, attention]", true},
      {rule::dependency_cycle, "{kind: kv_cache,", "{kind: kv_cache, depends_on: [attention],", true},
      {rule::preplan_dependency, "{kind: positions}", "{kind: positions, preplan: false}", true},
      {rule::attention_positions, "[kv_cache, positions]", "[kv_cache]", true},
      {rule::lane_kv_cache, "[codec_state]}", "[codec_state, kv_cache]}", true},
      {rule::lane_attention, "[codec_state]}", "[codec_state, attention]}", true},
      {rule::lane_positions, "[codec_state]}", "[codec_state, positions]}", true},
      {rule::lane_sampler, "[codec_state]}", "[codec_state, sampler]}", true},
      {rule::lane_shared_pool, "sampler], walks: [chain], stop_checks",
       "sampler, codec_state], walks: [chain], "
       "stop_checks",
       true},
      {rule::lane_kv_keyed_pool, "{kind: recurrent_pool,", "{kind: recurrent_pool, kv_keyed_snapshots: true,", true},
      {rule::lane_chain_dependency, "slots: 9}", "slots: 9, depends_on: [kv_cache]}", true},
      {rule::lane_resident_walks, "[codec_state]}", "[codec_state], walks: [resident]}", true},
      {rule::lane_parallel, "    tp: 1\n", "    tp: 2\n", true},
      {rule::lane_alone_on_worker, talker_group, "", false},
      {rule::lane_no_streams, "    streams: 1\n", "    streams: 0\n", true},
      {rule::lane_chain_walks, "[codec_state]}", "[codec_state], walks: [chain]}", true},
      {rule::lane_combined_walks, "[codec_state]}", "[codec_state], walks: [combined]}", true},
      {rule::lane_spans_or_stop_checks, "[codec_state]}", "[codec_state], spans: true}", true},
      {rule::lane_spans_or_stop_checks, "[codec_state]}", "[codec_state], stop_checks: true}", true},
      {rule::lane_second_side_node, codec_group,
       codec_group + "      - {name: CodecB, side_stream: true, nodes: [codec_b]}\n", false},
  };
}

// Some cases need more than one substitution.
std::string text_of(const rule_case& c) {
  auto text = edit(base_yaml, c.from, c.to);
  if (c.rule == mstar::rule::lane_alone_on_worker)
    text += "  - {name: gpu1, groups: [{name: Talker, nodes: [talker_prefill, talker_decode]}]}\n";
  if (c.rule == mstar::rule::lane_second_side_node) {
    text = edit(text, codec_node, codec_node + "  codec_b: {resources: [codec_b_state]}\n");
    text = edit(text, "nodes:\n",
                "  codec_b_state: {kind: recurrent_pool, dtype: f32, shape: [4], layers: 1, slots: 2}\nnodes:\n");
  }
  return text;
}

} // namespace

TEST_CASE("Config.base_text_loads_with_the_codec_on_the_side_lane") {
  const auto r = mstar::parse_model(base_yaml, "base.yaml");
  REQUIRE_MESSAGE(r.ok(), all_messages(r));
  CHECK(lane_of(r.model(), "codec_chunk").lane == mstar::lane::side);
  CHECK(keys_of(lane_of(r.model(), "codec_chunk")) == std::vector<std::string>{"codec_state"});
  CHECK(lane_of(r.model(), "talker_decode").lane == mstar::lane::chain);
  CHECK(r.errors().empty());
}

TEST_CASE("Config.every_rule_has_a_yaml_case_that_produces_its_exact_sentence") {
  std::vector<bool> covered(mstar::rule_count, false);
  for (const auto& c : rule_cases()) {
    const auto id = std::string(mstar::id_of(c.rule));
    CAPTURE(id);
    const auto r = mstar::parse_model(text_of(c), "case.yaml");
    REQUIRE_FALSE(r.ok());
    const auto* e = error_with(r, c.rule);
    REQUIRE_MESSAGE(e != nullptr, all_messages(r));
    CHECK(e->message.find(std::string(mstar::sentence(c.rule))) != std::string::npos);
    CHECK(e->message.find("error [" + id + "]: ") != std::string::npos);
    CHECK(e->message.starts_with("case.yaml:"));
    CHECK(e->file == "case.yaml");
    CHECK(e->line > 0);
    CHECK(e->column > 0);
    CHECK(e->message.starts_with(fmt_line_col(e)));
    if (c.only) CHECK_MESSAGE(r.errors().size() == 1, all_messages(r));
    covered[static_cast<std::size_t>(c.rule)] = true;
  }
  for (std::size_t i = 0; i < mstar::rule_count; ++i) {
    CAPTURE(mstar::id_of(static_cast<mstar::rule>(i)));
    CHECK_MESSAGE(covered[i], "add a YAML case for this rule to rule_cases()");
  }
}

TEST_CASE("Config.a_side_lane_refusal_points_at_the_declaration_and_names_the_group_to_fix") {
  const auto text = edit(base_yaml, "[codec_state]}", "[codec_state, kv_cache]}");
  const auto r = mstar::parse_model(text, "x.yaml");
  REQUIRE(r.errors().size() == 1);
  const auto& e = r.errors()[0];
  const int node_line = line_of(text, "  codec_chunk:");
  const int side_line = line_of(text, "side_stream: true");
  // The position is the kv_cache entry in codec_chunk's resources list.
  CHECK(e.line == node_line);
  CHECK(e.column == static_cast<int>(text.substr(text.find("  codec_chunk:")).find("kv_cache")) + 1);
  const std::string expected = fmt_line_col(&e) +
                               "error [lane_kv_cache]: node 'codec_chunk' in group 'Codec' on worker 'gpu0', "
                               "resource 'kv_cache': " +
                               std::string(mstar::sentence(mstar::rule::lane_kv_cache)) +
                               " Fix: drop side_stream from group 'Codec' (line " + std::to_string(side_line) +
                               ") to run node 'codec_chunk' on the chain.";
  CHECK(e.message == expected);
}

TEST_CASE("Config.a_repeated_list_entry_points_at_the_repeat_and_names_both_lines") {
  const auto text = edit(base_yaml, "nodes: [codec_chunk]}", "nodes: [codec_chunk,\n          codec_chunk]}");
  const auto r = mstar::parse_model(text, "x.yaml");
  REQUIRE(r.errors().size() == 1);
  const auto& e = r.errors()[0];
  // The first codec_chunk follows "nodes: [" on its line; the second starts the next line at column 11.
  const auto first_at = text.find("nodes: [codec_chunk,") + std::string("nodes: [").size();
  const int first_line = line_of(text, "nodes: [codec_chunk,");
  const int first_column = static_cast<int>(first_at - text.rfind('\n', first_at));
  const int second_line = first_line + 1;
  CHECK(e.line == second_line);
  CHECK(e.column == 11);
  const std::string expected = fmt_line_col(&e) + "error [duplicate_entry]: group 'Codec' lists node 'codec_chunk' " +
                               "twice in its nodes: " + std::string(mstar::sentence(mstar::rule::duplicate_entry)) +
                               " Fix: delete the second 'codec_chunk' (line " + std::to_string(second_line) +
                               ", column 11) from the nodes of group 'Codec', and keep the first (line " +
                               std::to_string(first_line) + ", column " + std::to_string(first_column) + ").";
  CHECK(e.message == expected);
}

TEST_CASE("Config.a_repeated_list_entry_is_refused_alike_by_the_cpp_and_the_yaml_paths") {
  // The same model twice, codec_chunk listed twice in its group: the C++ description (judged
  // without its static_asserts) and the YAML text get the same one finding.
  using Twice = mstar::model<
      "m", mstar::worker<"gpu0", qwen3_tts::Talker,
                         mstar::group<"Codec", mstar::side_stream, qwen3_tts::CodecChunk, qwen3_tts::CodecChunk>>>;
  constexpr auto verdict = mstar::validate(mstar::describe<Twice>);
  static_assert(verdict.findings.size() == 1 && verdict.findings[0].rule == mstar::rule::duplicate_entry);
  const auto r = mstar::parse_model(edit(base_yaml, "nodes: [codec_chunk]}", "nodes: [codec_chunk, codec_chunk]}"));
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].rule_id == mstar::id_of(verdict.findings[0].rule));
  // And a walk written twice, which has no list in the descriptor, is the loader's own refusal.
  const auto w = mstar::parse_model(edit(base_yaml, "[codec_state]}", "[codec_state], walks: [chain, chain]}"));
  REQUIRE_FALSE(w.ok());
  CHECK(w.errors()[0].rule_id == "duplicate_walk");
}

namespace value_models {
namespace q = qwen3_tts;
// clang-format off
template <class Kv>
using with_kv = mstar::model<"m", mstar::worker<"gpu0", mstar::group<"Talker",
                                  mstar::node<"talker_decode", mstar::declares<Kv>, mstar::walk::chain>>, q::Codec>>;
template <class Pool>
using with_pool = mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                    mstar::group<"Codec", mstar::side_stream, mstar::node<"codec_chunk", mstar::declares<Pool>>>>>;
using ZeroBlocks = with_kv<mstar::kv_cache<"kv_cache", mstar::blocks<0>, mstar::block_tokens<16>>>;
using WideBlocks = with_kv<mstar::kv_cache<"kv_cache", mstar::blocks<64>, mstar::block_tokens<65537>>>;
using DeepPool   = with_pool<mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 5000, 9>>;
using HugePool   = with_pool<mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16777216, 16777216>, 8, 9>>;
using ChainPool  = with_pool<mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 9,
                                                   mstar::depends_on<"kv_cache">>>;
using ManyStreams = mstar::model<"m", mstar::worker<"gpu0", mstar::streams<65>, q::Talker, q::Codec>>;
// clang-format on
template <class M>
mstar::report judge() {
  return mstar::validate(mstar::describe<M>);
}
} // namespace value_models

TEST_CASE("Config.every_value_rule_refuses_a_cpp_model_and_the_same_yaml_alike") {
  // Each C++ description (judged without its static_asserts; tests/compile_fail checks that they
  // fire) and its YAML twin break one value rule, found on the same resource or worker.
  struct twin {
    mstar::report (*cpp)();
    std::string from, to;
    std::string names; // what both name
  };
  using namespace value_models;
  const std::vector<twin> twins{
      {judge<ZeroBlocks>, "blocks: 64", "blocks: 0", "resource 'kv_cache'"},
      {judge<WideBlocks>, "block_tokens: 16", "block_tokens: 65537", "resource 'kv_cache'"},
      {judge<DeepPool>, "layers: 8", "layers: 5000", "resource 'codec_state'"},
      {judge<HugePool>, "shape: [16, 1024]", "shape: [16777216, 16777216]", "resource 'codec_state'"},
      {judge<ManyStreams>, "    streams: 1\n", "    streams: 65\n", "worker 'gpu0'"},
      {judge<ChainPool>, "slots: 9}", "slots: 9, depends_on: [kv_cache]}", "resource 'codec_state'"},
  };
  for (const auto& t : twins) {
    const auto verdict = t.cpp();
    REQUIRE(verdict.findings.size() == 1);
    const auto rule = verdict.findings[0].rule;
    CAPTURE(mstar::id_of(rule));
    CHECK((mstar::kind_of(rule) == mstar::rule_kind::value || rule == mstar::rule::lane_chain_dependency));
    const auto r = mstar::parse_model(edit(base_yaml, t.from, t.to), "twin.yaml");
    REQUIRE_MESSAGE(r.errors().size() == 1, all_messages(r));
    CHECK(r.errors()[0].rule_id == mstar::id_of(rule));
    CHECK(r.errors()[0].message.find(std::string(mstar::sentence(rule))) != std::string::npos);
    CHECK(r.errors()[0].message.find(t.names) != std::string::npos);
  }
}

TEST_CASE("Config.a_side_node_refused_for_its_own_reason_leaves_the_lane_to_the_next_one") {
  // codec_kv (a KV cache: refused) comes before codec_chunk in the side group. Only codec_kv is
  // refused; codec_chunk is not a "second side node".
  const auto text = edit(edit(base_yaml, "nodes: [codec_chunk]}", "nodes: [codec_kv, codec_chunk]}"), codec_node,
                         codec_node + "  codec_kv: {resources: [kv_cache]}\n");
  const auto r = mstar::parse_model(text, "x.yaml");
  REQUIRE_FALSE(r.ok());
  REQUIRE_MESSAGE(r.errors().size() == 1, all_messages(r));
  CHECK(r.errors()[0].rule_id == "lane_kv_cache");
  CHECK(r.errors()[0].message.find("node 'codec_kv'") != std::string::npos);

  // With a third, admissible node after codec_chunk, that one is the second side node, and the fix
  // names codec_chunk as the node that holds the lane.
  auto three = edit(text, "nodes: [codec_kv, codec_chunk]}", "nodes: [codec_kv, codec_chunk, codec_b]}");
  three = edit(three, codec_node, codec_node + "  codec_b: {resources: [codec_b_state]}\n");
  three = edit(three, "nodes:\n",
               "  codec_b_state: {kind: recurrent_pool, dtype: f32, shape: [4], layers: 1, slots: 2}\nnodes:\n");
  const auto r3 = mstar::parse_model(three, "x.yaml");
  REQUIRE(r3.errors().size() == 2);
  const auto* second = error_with(r3, mstar::rule::lane_second_side_node);
  REQUIRE(second != nullptr);
  CHECK(second->message.find("node 'codec_b' in group 'Codec'") != std::string::npos);
  CHECK(second->message.find("node 'codec_chunk' holds the side lane of worker 'gpu0'") != std::string::npos);
}

TEST_CASE("Config.worker_refusals_point_at_the_worker_field_and_name_it_in_the_fix") {
  const auto text = edit(base_yaml, "    streams: 1\n", "    streams: 0\n");
  const auto r = mstar::parse_model(text, "x.yaml");
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].line == line_of(text, "streams: 0"));
  CHECK(r.errors()[0].message.find("Fix: set streams: 1 on worker 'gpu0' (line " +
                                   std::to_string(line_of(text, "streams: 0")) + ")") != std::string::npos);
}

TEST_CASE("Config.a_dependency_cycle_names_the_cycle_and_the_entries_to_cut") {
  const auto r =
      mstar::parse_model(edit(base_yaml, "{kind: kv_cache,", "{kind: kv_cache, depends_on: [attention],"), "x.yaml");
  const auto* e = error_with(r, mstar::rule::dependency_cycle);
  REQUIRE(e != nullptr);
  const bool names_cycle = e->message.find("kv_cache -> attention -> kv_cache") != std::string::npos ||
                           e->message.find("attention -> kv_cache -> attention") != std::string::npos;
  CHECK_MESSAGE(names_cycle, e->message);
  CHECK(e->message.find("'attention' from resource 'kv_cache'") != std::string::npos);
}

TEST_CASE("Config.an_unknown_key_reference_suggests_the_closest_defined_key") {
  const auto r = mstar::parse_model(edit(base_yaml, "[codec_state]}", "[codec_stat]}"), "x.yaml");
  const auto* e = error_with(r, mstar::rule::unknown_resource);
  REQUIRE(e != nullptr);
  CHECK(e->message.find("Did you mean 'codec_state'?") != std::string::npos);
  CHECK(e->message.find("node 'codec_chunk', resource key 'codec_stat'") != std::string::npos);
}

TEST_CASE("Config.error_of_formats_a_finding_with_names_and_the_rules_sentence") {
  const auto r = mstar::parse_model(base_yaml, "base.yaml");
  REQUIRE(r.ok());
  const auto& m = r.model();
  const auto node = mstar::detail::named_index(m.desc.nodes, "codec_chunk");
  const auto group = mstar::detail::named_index(m.desc.groups, "Codec");
  const auto worker = mstar::detail::named_index(m.desc.workers, "gpu0");
  const mstar::finding f{.rule = mstar::rule::lane_no_streams, .node = node, .group = group, .worker = worker};
  const auto e = mstar::error_of(m, f);
  CHECK(e.rule_id == "lane_no_streams");
  CHECK(e.line == line_of(base_yaml, "    streams: 1"));
  CHECK(e.message.find("node 'codec_chunk' in group 'Codec' on worker 'gpu0': " +
                       std::string(mstar::sentence(mstar::rule::lane_no_streams))) != std::string::npos);
}

TEST_CASE("Config.accepted_side_lane_shapes_load_with_their_side_lane_keys") {
  SUBCASE("the codec node with a pool of its own") {
    const auto r = mstar::parse_model(base_yaml);
    REQUIRE(r.ok());
    CHECK(keys_of(lane_of(r.model(), "codec_chunk")) == std::vector<std::string>{"codec_state"});
  }
  SUBCASE("a node with two pools of its own") {
    auto text = edit(base_yaml, "[codec_state]}", "[codec_state, codec_extra]}");
    text = edit(text, "nodes:\n",
                "  codec_extra: {kind: recurrent_pool, dtype: f16, shape: [8, 64, 4], layers: 2, slots: 9}\nnodes:\n");
    const auto r = mstar::parse_model(text);
    REQUIRE_MESSAGE(r.ok(), all_messages(r));
    CHECK(lane_of(r.model(), "codec_chunk").lane == mstar::lane::side);
    CHECK(keys_of(lane_of(r.model(), "codec_chunk")) == std::vector<std::string>{"codec_state", "codec_extra"});
  }
  SUBCASE("a side node with no resources") {
    auto text = edit(base_yaml, "  codec_chunk: {resources: [codec_state]}\n", "  codec_chunk: {}\n");
    text =
        edit(text, "  codec_state: {kind: recurrent_pool, dtype: bf16, shape: [16, 1024], layers: 8, slots: 9}\n", "");
    const auto r = mstar::parse_model(text);
    REQUIRE_MESSAGE(r.ok(), all_messages(r));
    CHECK(lane_of(r.model(), "codec_chunk").lane == mstar::lane::side);
    CHECK(lane_of(r.model(), "codec_chunk").side_keys.empty());
  }
}

TEST_CASE("Config.groups_defined_at_the_top_level_and_in_place_describe_the_same_model") {
  auto text = edit(base_yaml, talker_group + codec_group, "      - Talker\n      - Codec\n");
  text = edit(text, "workers:\n",
              "groups:\n  Talker: {nodes: [talker_prefill, talker_decode]}\n"
              "  Codec: {side_stream: true, nodes: [codec_chunk]}\nworkers:\n");
  const auto top = mstar::parse_model(text);
  const auto in_place = mstar::parse_model(base_yaml);
  REQUIRE_MESSAGE(top.ok(), all_messages(top));
  REQUIRE(in_place.ok());
  CHECK(mstar::canonical(top.model().desc) == mstar::canonical(in_place.model().desc));
}

TEST_CASE("Config.the_four_colocated_configs_put_codec_chunk_on_the_side_lane_with_codec_state") {
  for (const char* name : {"qwen3tts.yaml", "qwen3tts_1p7b.yaml", "qwen3tts_base.yaml", "qwen3tts_voicedesign.yaml"}) {
    CAPTURE(name);
    const auto r = mstar::load_model(source_root + "/configs/" + name);
    REQUIRE_MESSAGE(r.ok(), all_messages(r));
    const auto& m = r.model();
    CHECK(lane_of(m, "codec_chunk").lane == mstar::lane::side);
    CHECK(keys_of(lane_of(m, "codec_chunk")) == std::vector<std::string>{"codec_state"});
    CHECK(lane_of(m, "talker_prefill").lane == mstar::lane::chain);
    CHECK(lane_of(m, "talker_decode").lane == mstar::lane::chain);
    // Colocated: one worker holds both groups.
    REQUIRE(m.desc.workers.size() == 1);
    CHECK(m.desc.workers[0].groups.contains("Talker"));
    CHECK(m.desc.workers[0].groups.contains("Codec"));
    // The example section carries the Qwen3-TTS 12 Hz numbers.
    CHECK(m.example_number("frames_per_second") == 12.5);
    CHECK(m.example_number("codebooks") == 16.0);
    CHECK(m.example_number("sample_rate") == 24000.0);
    CHECK(m.example_number("samples_per_frame") == 1920.0);
    REQUIRE(m.example_numbers("codec_window_ramp").has_value());
    CHECK(m.example_numbers("codec_window_ramp")->size() >= 2);
  }
}

TEST_CASE("Config.the_split_config_runs_the_codec_on_the_chain") {
  const auto r = mstar::load_model(source_root + "/configs/qwen3tts_split.yaml");
  REQUIRE_MESSAGE(r.ok(), all_messages(r));
  CHECK(lane_of(r.model(), "codec_chunk").lane == mstar::lane::chain);
  CHECK(lane_of(r.model(), "codec_chunk").side_keys.empty());
  CHECK(r.model().desc.workers.size() == 2);
}

TEST_CASE("Config.the_split_config_with_side_stream_added_is_refused_as_alone_on_its_worker") {
  const auto path = source_root + "/configs/qwen3tts_split.yaml";
  const auto loaded = mstar::load_model(path);
  REQUIRE(loaded.ok());
  std::string text;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
      text.append(buf, n);
    std::fclose(f);
  }
  text = edit(text, "      - name: Codec\n", "      - name: Codec\n        side_stream: true\n");
  const auto r = mstar::parse_model(text, "qwen3tts_split.yaml");
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  const auto& e = r.errors()[0];
  CHECK(e.rule_id == "lane_alone_on_worker");
  CHECK(e.line == line_of(text, "        side_stream: true\n"));
  CHECK(e.message.find(std::string(mstar::sentence(mstar::rule::lane_alone_on_worker))) != std::string::npos);
  CHECK(e.message.find("node 'codec_chunk' in group 'Codec' on worker 'gpu1'") != std::string::npos);
}

TEST_CASE("Config.the_cpp_policy_model_and_configs_qwen3tts_yaml_describe_the_same_model") {
  const auto r = mstar::load_model(source_root + "/configs/qwen3tts.yaml");
  REQUIRE_MESSAGE(r.ok(), all_messages(r));
  constexpr auto from_cpp = mstar::canonical(mstar::describe<qwen3_tts::Model>);
  const auto from_yaml = mstar::canonical(r.model().desc);
  CHECK(from_cpp == from_yaml);
  // Piece by piece too, so that a drift says where it is.
  REQUIRE(from_cpp.resources.size() == from_yaml.resources.size());
  for (std::size_t i = 0; i < from_cpp.resources.size(); ++i) {
    CAPTURE(from_cpp.resources[i].key);
    CHECK(from_cpp.resources[i] == from_yaml.resources[i]);
  }
  REQUIRE(from_cpp.nodes.size() == from_yaml.nodes.size());
  for (std::size_t i = 0; i < from_cpp.nodes.size(); ++i)
    CHECK(from_cpp.nodes[i] == from_yaml.nodes[i]);
  CHECK(from_cpp.groups == from_yaml.groups);
  CHECK(from_cpp.workers == from_yaml.workers);
  // And both judge the same way: the same lanes from the same validator.
  CHECK(qwen3_tts::Model::is_side_node<qwen3_tts::CodecChunk>);
  CHECK(lane_of(r.model(), "codec_chunk").lane == mstar::lane::side);
}

TEST_CASE("Config.a_drift_between_the_cpp_model_and_the_yaml_is_seen_by_the_comparison") {
  // The comparison above could be vacuous if canonical() ignored geometry; one changed number
  // must make the descriptors differ.
  auto text = edit(base_yaml, "slots: 9", "slots: 10");
  const auto a = mstar::parse_model(base_yaml);
  const auto b = mstar::parse_model(text);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK_FALSE(mstar::canonical(a.model().desc) == mstar::canonical(b.model().desc));
  // differences() names the one change, and nothing for the same model written twice.
  CHECK(mstar::differences(a.model().desc, a.model().desc).empty());
  const auto d = mstar::differences(a.model().desc, b.model().desc, "base", "edited");
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "resource 'codec_state': slots 9 in base, 10 in edited");
}

TEST_CASE("Config.differences_names_every_kind_of_change_and_ignores_order") {
  const auto r = mstar::load_model(source_root + "/configs/qwen3tts.yaml");
  REQUIRE_MESSAGE(r.ok(), all_messages(r));
  CHECK(mstar::differences(r.model().desc, mstar::describe<qwen3_tts::Model>, "file", "model").empty());
  auto m = mstar::describe<qwen3_tts::Model>;
  std::reverse(m.nodes.begin(), m.nodes.end()); // order is not a difference
  m.resources[0].blocks += 1;
  m.nodes[0].walks.spans = !m.nodes[0].walks.spans;
  m.groups[1].side_stream = !m.groups[1].side_stream;
  m.workers[0].streams = 3;
  m.resources.push_back(m.resources[2]);
  m.resources.back().key = "extra";
  const auto d = mstar::differences(r.model().desc, m, "file", "model");
  std::string all;
  for (const auto& s : d)
    all += s + "\n";
  INFO(all);
  CHECK(d.size() == 5);
  CHECK(all.find("resource 'kv_cache': blocks") != std::string::npos);
  CHECK(all.find("resource 'extra' only in model") != std::string::npos);
  CHECK(all.find(": walks") != std::string::npos);
  CHECK(all.find(": side_stream") != std::string::npos);
  CHECK(all.find("worker 'gpu0': streams 1 in file, 3 in model") != std::string::npos);
}

TEST_CASE("Config.a_loaded_model_keeps_its_names_valid_after_copies_and_moves") {
  std::optional<mstar::loaded_model> kept;
  {
    auto r = mstar::parse_model(base_yaml, "base.yaml");
    REQUIRE(r.ok());
    mstar::loaded_model copy = r.model();
    kept.emplace(std::move(copy));
  } // the result and the copy are gone; kept owns (shares) the strings
  std::vector<mstar::loaded_model> many(8, *kept);
  kept.reset();
  const auto& m = many.back();
  CHECK(m.desc.name == "m");
  CHECK(m.desc.nodes[2].name == "codec_chunk");
  CHECK(m.desc.resources[4].key == "codec_state");
  CHECK(m.desc.groups[1].nodes[0] == "codec_chunk");
}

TEST_CASE("Config.a_failed_load_returns_errors_and_no_model") {
  const auto r = mstar::parse_model(edit(base_yaml, "slots: 9", "slots: 1"));
  CHECK_FALSE(r.ok());
  CHECK_FALSE(static_cast<bool>(r));
  CHECK_FALSE(r.errors().empty());
}

TEST_CASE("Config.docs_config_md_holds_every_rule_with_its_sentence_verbatim") {
  std::string doc;
  {
    std::FILE* f = std::fopen((source_root + "/docs/config.md").c_str(), "rb");
    REQUIRE(f != nullptr);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
      doc.append(buf, n);
    std::fclose(f);
  }
  for (std::size_t i = 0; i < mstar::rule_count; ++i) {
    const auto r = static_cast<mstar::rule>(i);
    CAPTURE(mstar::id_of(r));
    CHECK(doc.find(std::string("`").append(mstar::id_of(r)).append("`")) != std::string::npos);
    CHECK(doc.find(std::string(mstar::sentence(r))) != std::string::npos);
  }
  for (auto r = mstar::load_rule::file; r <= mstar::load_rule::internal;
       r = static_cast<mstar::load_rule>(static_cast<int>(r) + 1)) {
    CAPTURE(mstar::id_of(r));
    CHECK(doc.find(std::string("| `").append(mstar::id_of(r)).append("` |")) != std::string::npos);
  }
}
