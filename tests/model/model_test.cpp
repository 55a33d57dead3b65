// Tests of the compile-time model description and the one constexpr validator: the accepted shapes
// compile and get the lanes and side-lane keys they ask for; each refusal reason fires alone and
// names its node and resource, through mstar::describe (which builds the descriptor without the
// model's static_asserts) and through run-time validate() calls on hand-built descriptors; the
// dependency order puts dependencies first; canonical() makes equality independent of order.
// The compile-fail side of the same rules lives in tests/compile_fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "qwen3_tts/model.hpp"

namespace {

using mstar::rule;

// The report of a model description judged without firing its static_asserts.
template <class M>
constexpr mstar::report judge = mstar::validate(mstar::describe<M>);

constexpr std::string_view node_name(const mstar::model_desc& m, const mstar::finding& f) {
  return f.node == mstar::no_index ? std::string_view{} : m.nodes[f.node].name;
}
constexpr std::string_view resource_key(const mstar::model_desc& m, const mstar::finding& f) {
  return f.resource == mstar::no_index ? std::string_view{} : m.resources[f.resource].key;
}
constexpr std::string_view group_name(const mstar::model_desc& m, const mstar::finding& f) {
  return f.group == mstar::no_index ? std::string_view{} : m.groups[f.group].name;
}
constexpr std::string_view worker_name(const mstar::model_desc& m, const mstar::finding& f) {
  return f.worker == mstar::no_index ? std::string_view{} : m.workers[f.worker].name;
}

// True when the report holds findings and every one of them is rule r: the change that was made
// broke that rule and no other.
constexpr bool only(const mstar::report& v, rule r) {
  if (v.findings.empty()) return false;
  for (const auto& f : v.findings)
    if (f.rule != r) return false;
  return true;
}

template <class M>
constexpr const mstar::node_lane& lane_named(std::string_view node) {
  return judge<M>.lanes[mstar::detail::named_index(mstar::describe<M>.nodes, node)];
}

std::vector<std::string_view> keys_of(const mstar::node_lane& l) { return {l.side_keys.begin(), l.side_keys.end()}; }

// ---------------------------------------------------------------------------------------------
// Accepted shapes. Each is a model description plus what it should produce: the codec's lane and
// the side-lane keys its lane owns.

namespace q = qwen3_tts;

// clang-format off
using CodecCache   = mstar::recurrent_pool<"codec_cache", float, mstar::shape<512>, /*layers=*/2, /*slots=*/65>;
using TwoPoolChunk = mstar::node<"codec_chunk", mstar::declares<q::CodecState, CodecCache>>;
using TwoPools     = mstar::model<"two_pools", mstar::worker<"gpu0", q::Talker,
                                  mstar::group<"Codec", mstar::side_stream, TwoPoolChunk>>>;
using BareChunk    = mstar::node<"codec_chunk">;
using NoResources  = mstar::model<"no_resources", mstar::worker<"gpu0", q::Talker,
                                  mstar::group<"Codec", mstar::side_stream, BareChunk>>>;
using ChainCodec   = mstar::group<"Codec", q::CodecChunk>;
using NoSideLane   = mstar::model<"no_side_lane", mstar::worker<"gpu0", q::Talker, ChainCodec>>;
using Split        = mstar::model<"qwen3_tts_split", mstar::worker<"gpu0", q::Talker>, mstar::worker<"gpu1", ChainCodec>>;
// clang-format on

struct qwen3_tts_shape {
  using model = q::Model;
  static constexpr auto codec_lane = mstar::lane::side;
  static std::vector<std::string_view> side_keys() { return {"codec_state"}; }
};
struct two_pools_shape {
  using model = TwoPools;
  static constexpr auto codec_lane = mstar::lane::side;
  static std::vector<std::string_view> side_keys() { return {"codec_state", "codec_cache"}; }
};
struct no_resources_shape {
  using model = NoResources;
  static constexpr auto codec_lane = mstar::lane::side;
  static std::vector<std::string_view> side_keys() { return {}; }
};
struct no_side_lane_shape {
  using model = NoSideLane;
  static constexpr auto codec_lane = mstar::lane::chain;
  static std::vector<std::string_view> side_keys() { return {}; }
};
struct split_shape {
  using model = Split;
  static constexpr auto codec_lane = mstar::lane::chain;
  static std::vector<std::string_view> side_keys() { return {}; }
};

// Instantiating each accepted model runs the static_asserts of model.hpp: these compile only if
// the validator accepts them.
static_assert(q::Model::verdict.ok());
static_assert(TwoPools::verdict.ok());
static_assert(NoResources::verdict.ok());
static_assert(NoSideLane::verdict.ok());
static_assert(Split::verdict.ok());

static_assert(q::Model::is_side_node<q::CodecChunk>);
static_assert(!q::Model::is_side_node<q::TalkerPrefill> && !q::Model::is_side_node<q::TalkerDecode>);
static_assert(q::Model::is_side_resource<q::CodecState>);
static_assert(!q::Model::is_side_resource<q::KvCache> && !q::Model::is_side_resource<q::Sampler>);
static_assert(TwoPools::is_side_resource<CodecCache> && TwoPools::is_side_resource<q::CodecState>);
static_assert(NoResources::is_side_node<BareChunk>);
static_assert(!NoSideLane::is_side_node<q::CodecChunk> && !NoSideLane::is_side_resource<q::CodecState>);
static_assert(!Split::is_side_node<q::CodecChunk>);

TEST_CASE_TEMPLATE(
    "an accepted model description compiles, and its verdict is the same at compile time and at run time", S,
    qwen3_tts_shape, two_pools_shape, no_resources_shape, no_side_lane_shape, split_shape) {
  using M = typename S::model;
  static_assert(M::verdict.ok());
  static_assert(M::descriptor == mstar::describe<M>, "describe must build the descriptor the model validates");

  mstar::model_desc copy = M::descriptor; // a run-time value: validate() runs as ordinary code
  const mstar::report r = mstar::validate(copy);
  CHECK(r.ok());
  CHECK_FALSE(r.truncated);
  CHECK(r.findings.size() == 0);
  CHECK(r.lanes == M::verdict.lanes);
  CHECK(r.order == M::verdict.order);
  REQUIRE(r.lanes.size() == copy.nodes.size());
  CHECK(r.order.size() == copy.resources.size());
}

TEST_CASE_TEMPLATE("the codec takes the lane its shape asks for, owning exactly its own pools as side-lane keys", S,
                   qwen3_tts_shape, two_pools_shape, no_resources_shape, no_side_lane_shape, split_shape) {
  using M = typename S::model;
  const auto& codec = M::verdict.lanes[mstar::detail::named_index(M::descriptor.nodes, "codec_chunk")];
  CHECK(codec.lane == S::codec_lane);
  CHECK(keys_of(codec) == S::side_keys());
  // The chain's nodes never take a lane or own a key, whatever the codec does.
  for (auto name : {std::string_view{"talker_prefill"}, std::string_view{"talker_decode"}}) {
    CAPTURE(name);
    const auto i = mstar::detail::named_index(M::descriptor.nodes, name);
    REQUIRE(i != mstar::no_index);
    CHECK(M::verdict.lanes[i].lane == mstar::lane::chain);
    CHECK(M::verdict.lanes[i].side_keys.empty());
  }
  const auto side_keys = S::side_keys();
  for (const auto& res : M::descriptor.resources) {
    CAPTURE(res.key);
    const bool expected_side = std::ranges::find(side_keys, res.key) != side_keys.end();
    CHECK(M::is_side_key(res.key) == expected_side);
  }
}

TEST_CASE("the Qwen3-TTS model puts codec_chunk on the side lane with side-lane keys [codec_state]") {
  constexpr auto& lane = q::Model::lane_of<q::CodecChunk>();
  static_assert(lane.lane == mstar::lane::side);
  static_assert(lane.side_keys.size() == 1 && lane.side_keys[0] == "codec_state");
  CHECK(keys_of(lane) == std::vector<std::string_view>{"codec_state"});
  CHECK(q::Model::lane_of<q::TalkerDecode>().lane == mstar::lane::chain);
}

// ---------------------------------------------------------------------------------------------
// Refusals through describe<M>: each C++ description below is the Qwen3-TTS model with one thing
// changed, and breaks exactly one rule. (Naming them as model types does not instantiate them, so
// their static_asserts never fire; tests/compile_fail checks that they would.)

// clang-format off
template <class CodecNode, class... WorkerOptions>
using colocated = mstar::model<"m", mstar::worker<"gpu0", WorkerOptions..., q::Talker,
                               mstar::group<"Codec", mstar::side_stream, CodecNode>>>;
template <class... Resources>
using codec_declaring = mstar::node<"codec_chunk", mstar::declares<q::CodecState, Resources...>>;
template <mstar::walk Walks>
using codec_walking = mstar::node<"codec_chunk", mstar::declares<q::CodecState>, Walks>;
using KeyedState    = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 257,
                                            mstar::kv_keyed_snapshots>;
using SharingDecode = mstar::node<"talker_decode", mstar::declares<q::KvCache, q::CodecState>, mstar::walk::chain>;
using FlushState    = mstar::recurrent_pool<"flush_state", mstar::bf16, mstar::shape<1024>, 1, 257>;
using CodecFlush    = mstar::node<"codec_flush", mstar::declares<FlushState>>;
// clang-format on

template <class M, rule R>
struct refusal {
  using model = M;
  static constexpr rule expected = R;
};

// One refusal per reason of the brief's list, with the node and the resource it must name.
struct kv_on_lane : refusal<colocated<codec_declaring<q::KvCache>>, rule::lane_kv_cache> {
  static constexpr std::string_view node = "codec_chunk", resource = "kv_cache";
};
struct attention_on_lane : refusal<colocated<codec_declaring<q::Attention>>, rule::lane_attention> {
  static constexpr std::string_view node = "codec_chunk", resource = "attention";
};
struct positions_on_lane : refusal<colocated<codec_declaring<q::Positions>>, rule::lane_positions> {
  static constexpr std::string_view node = "codec_chunk", resource = "positions";
};
struct sampler_on_lane : refusal<colocated<codec_declaring<q::Sampler>>, rule::lane_sampler> {
  static constexpr std::string_view node = "codec_chunk", resource = "sampler";
};
struct shared_pool_on_lane
    : refusal<mstar::model<"m", mstar::worker<"gpu0", mstar::group<"Talker", SharingDecode>, q::Codec>>,
              rule::lane_shared_pool> {
  static constexpr std::string_view node = "codec_chunk", resource = "codec_state";
};
struct kv_keyed_pool_on_lane
    : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<KeyedState>>>, rule::lane_kv_keyed_pool> {
  static constexpr std::string_view node = "codec_chunk", resource = "codec_state";
};
struct resident_on_lane : refusal<colocated<codec_walking<mstar::walk::resident>>, rule::lane_resident_walks> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct tp_on_lane : refusal<colocated<q::CodecChunk, mstar::tp<2>>, rule::lane_parallel> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct sp_on_lane : refusal<colocated<q::CodecChunk, mstar::sp<4>>, rule::lane_parallel> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct alone_on_worker : refusal<mstar::model<"m", mstar::worker<"gpu0", q::Talker>, mstar::worker<"gpu1", q::Codec>>,
                                 rule::lane_alone_on_worker> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct no_streams : refusal<colocated<q::CodecChunk, mstar::streams<0>>, rule::lane_no_streams> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct chain_walks_on_lane : refusal<colocated<codec_walking<mstar::walk::chain>>, rule::lane_chain_walks> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct combined_on_lane : refusal<colocated<codec_walking<mstar::walk::combined>>, rule::lane_combined_walks> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct spans_on_lane : refusal<colocated<codec_walking<mstar::walk::spans>>, rule::lane_spans_or_stop_checks> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct stop_checks_on_lane
    : refusal<colocated<codec_walking<mstar::walk::stop_checks>>, rule::lane_spans_or_stop_checks> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct second_side_node
    : refusal<mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                              mstar::group<"Codec", mstar::side_stream, q::CodecChunk, CodecFlush>>>,
              rule::lane_second_side_node> {
  static constexpr std::string_view node = "codec_flush", resource = "";
};
struct second_side_group
    : refusal<mstar::model<"m", mstar::worker<"gpu0", q::Talker, q::Codec,
                                              mstar::group<"Flush", mstar::side_stream, CodecFlush>>>,
              rule::lane_second_side_node> {
  static constexpr std::string_view node = "codec_flush", resource = "";
};

// The structural and dependency rules that a C++ description can break.
// clang-format off
using CodecStateF32 = mstar::recurrent_pool<"codec_state", float, mstar::shape<16, 1024>, 8, 257>;
using OneSlot       = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 1>;
using ZeroDim       = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 0>, 8, 257>;
using NoLayers      = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 0, 257>;
using KeyedKv       = mstar::kv_cache<"kv_cache", mstar::blocks<64>, mstar::block_tokens<16>, mstar::kv_keyed_snapshots>;
using TypoAttention = mstar::attention<"attention", mstar::depends_on<"kv_cache", "position">>;
using SelfPositions = mstar::positions<"positions", mstar::depends_on<"positions">>;
using CycleKv       = mstar::kv_cache<"kv_cache", mstar::blocks<64>, mstar::block_tokens<16>, mstar::depends_on<"attention">>;
using CycleAttn     = mstar::attention<"attention", mstar::depends_on<"kv_cache">>;
using LatePositions = mstar::positions<"positions", mstar::no_preplan>;
using BlindAttention = mstar::attention<"attention", mstar::depends_on<"kv_cache">>;
using NoBlocks      = mstar::kv_cache<"kv_cache", mstar::block_tokens<16>>;
using HugeBlocks    = mstar::kv_cache<"kv_cache", mstar::blocks<(1u << 24) + 1>, mstar::block_tokens<16>>;
using DeepState     = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 5000, 257>;
using HugeState     = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<1u << 24, 1u << 24>, 8, 257>;
using ChainState    = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 257,
                                            mstar::depends_on<"kv_cache">>;
template <class... Resources>
using talker_declaring = mstar::group<"Talker", mstar::node<"talker_decode", mstar::declares<Resources...>, mstar::walk::chain>>;
template <class TalkerGroup>
using with_talker = mstar::model<"m", mstar::worker<"gpu0", TalkerGroup, q::Codec>>;
// clang-format on

struct duplicate_resource : refusal<colocated<codec_declaring<CodecStateF32>>, rule::duplicate_resource> {
  static constexpr std::string_view node = "", resource = "codec_state";
};
struct duplicate_node
    : refusal<
          mstar::model<"m", mstar::worker<"gpu0", mstar::group<"Talker", q::TalkerDecode, mstar::node<"talker_decode">>,
                                          q::Codec>>,
          rule::duplicate_node> {
  static constexpr std::string_view node = "talker_decode", resource = "";
};
struct duplicate_group
    : refusal<mstar::model<"m",
                           mstar::worker<"gpu0", q::Talker, mstar::group<"Talker", mstar::side_stream, q::CodecChunk>>>,
              rule::duplicate_group> {
  static constexpr std::string_view node = "", resource = "";
};
struct duplicate_worker
    : refusal<mstar::model<"m", mstar::worker<"gpu0", q::Talker>, mstar::worker<"gpu0", ChainCodec>>,
              rule::duplicate_worker> {
  static constexpr std::string_view node = "", resource = "";
};
// A list that names one entry twice: a node in its group, a resource in declares<>, a group in its
// worker, a key in depends_on<>. The model's lists of types merge repeats; the validator sees them.
using TwiceDependingAttention = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions", "kv_cache">>;
struct node_twice_in_group
    : refusal<mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                              mstar::group<"Codec", mstar::side_stream, q::CodecChunk, q::CodecChunk>>>,
              rule::duplicate_entry> {
  static constexpr std::string_view node = "codec_chunk", resource = "";
};
struct resource_twice_in_node : refusal<colocated<codec_declaring<q::CodecState>>, rule::duplicate_entry> {
  static constexpr std::string_view node = "codec_chunk", resource = "codec_state";
};
struct group_twice_in_worker
    : refusal<mstar::model<"m", mstar::worker<"gpu0", q::Talker, q::Codec, q::Codec>>, rule::duplicate_entry> {
  static constexpr std::string_view node = "", resource = "";
};
struct dependency_twice
    : refusal<with_talker<talker_declaring<q::KvCache, TwiceDependingAttention, q::Positions>>, rule::duplicate_entry> {
  static constexpr std::string_view node = "", resource = "attention";
};
struct one_slot : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<OneSlot>>>, rule::bad_geometry> {
  static constexpr std::string_view node = "", resource = "codec_state";
};
struct zero_dimension : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<ZeroDim>>>, rule::bad_geometry> {
  static constexpr std::string_view node = "", resource = "codec_state";
};
struct no_layers : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<NoLayers>>>, rule::bad_geometry> {
  static constexpr std::string_view node = "", resource = "codec_state";
};
struct snapshots_on_kv : refusal<with_talker<talker_declaring<KeyedKv>>, rule::snapshots_not_pool> {
  static constexpr std::string_view node = "", resource = "kv_cache";
};
struct zero_tp : refusal<colocated<q::CodecChunk, mstar::tp<0>>, rule::bad_parallel> {
  static constexpr std::string_view node = "", resource = "";
};
struct no_blocks : refusal<with_talker<talker_declaring<NoBlocks>>, rule::kv_geometry> {
  static constexpr std::string_view node = "", resource = "kv_cache";
};
struct huge_kv : refusal<with_talker<talker_declaring<HugeBlocks>>, rule::kv_limits> {
  static constexpr std::string_view node = "", resource = "kv_cache";
};
struct deep_state : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<DeepState>>>, rule::pool_limits> {
  static constexpr std::string_view node = "", resource = "codec_state";
};
struct huge_state : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<HugeState>>>, rule::pool_bytes> {
  static constexpr std::string_view node = "", resource = "codec_state";
};
struct many_streams : refusal<colocated<q::CodecChunk, mstar::streams<65>>, rule::worker_limits> {
  static constexpr std::string_view node = "", resource = "";
};
struct chain_dependency_on_lane
    : refusal<colocated<mstar::node<"codec_chunk", mstar::declares<ChainState>>>, rule::lane_chain_dependency> {
  static constexpr std::string_view node = "codec_chunk", resource = "codec_state";
};
struct unknown_dependency
    : refusal<with_talker<talker_declaring<q::KvCache, TypoAttention, q::Positions>>, rule::unknown_dependency> {
  static constexpr std::string_view node = "", resource = "attention";
};
struct self_dependency : refusal<with_talker<talker_declaring<q::KvCache, SelfPositions>>, rule::self_dependency> {
  static constexpr std::string_view node = "", resource = "positions";
};
struct dependency_cycle : refusal<with_talker<talker_declaring<CycleKv, CycleAttn>>, rule::dependency_cycle> {
  static constexpr std::string_view node = "", resource = "kv_cache";
};
struct preplan_dependency
    : refusal<with_talker<talker_declaring<q::KvCache, q::Attention, LatePositions>>, rule::preplan_dependency> {
  static constexpr std::string_view node = "", resource = "attention";
};
struct attention_positions
    : refusal<with_talker<talker_declaring<q::KvCache, BlindAttention, q::Positions>>, rule::attention_positions> {
  static constexpr std::string_view node = "", resource = "attention";
};

#define MSTAR_REFUSALS                                                                                                 \
  kv_on_lane, attention_on_lane, positions_on_lane, sampler_on_lane, shared_pool_on_lane, kv_keyed_pool_on_lane,       \
      resident_on_lane, tp_on_lane, sp_on_lane, alone_on_worker, no_streams, chain_walks_on_lane, combined_on_lane,    \
      spans_on_lane, stop_checks_on_lane, second_side_node, second_side_group, duplicate_resource, duplicate_node,     \
      duplicate_group, duplicate_worker, node_twice_in_group, resource_twice_in_node, group_twice_in_worker,           \
      dependency_twice, one_slot, zero_dimension, no_layers, snapshots_on_kv, zero_tp, unknown_dependency,             \
      self_dependency, dependency_cycle, preplan_dependency, attention_positions, no_blocks, huge_kv, deep_state,     \
      huge_state, many_streams, chain_dependency_on_lane

// Compile-time proof, per refusal, that the one change breaks exactly its rule.
template <class... R>
constexpr bool all_refused_for_their_rule_only() {
  return (only(judge<typename R::model>, R::expected) && ...);
}
static_assert(all_refused_for_their_rule_only<MSTAR_REFUSALS>(),
              "a refusal model does not break exactly its one rule: build with the static_assert commented out "
              "and the test case below names which");
// And the model each was derived from breaks none of those rules.
static_assert(!judge<q::Model>.has(rule::lane_kv_cache) && !judge<q::Model>.has(rule::lane_parallel) &&
              !judge<q::Model>.has(rule::dependency_cycle) && !judge<q::Model>.has(rule::duplicate_resource));
static_assert(!judge<Split>.has(rule::lane_alone_on_worker), "a split model without side_stream is accepted");

TEST_CASE_TEMPLATE("a refused C++ description breaks exactly its one rule and names the node and resource at fault", R,
                   MSTAR_REFUSALS) {
  using M = typename R::model;
  constexpr auto& desc = mstar::describe<M>;
  constexpr auto& verdict = judge<M>;
  CAPTURE(mstar::id_of(R::expected));
  REQUIRE_FALSE(verdict.ok());
  REQUIRE(verdict.findings.size() >= 1);
  for (const auto& f : verdict.findings)
    CHECK(mstar::id_of(f.rule) == mstar::id_of(R::expected));
  const auto& first = verdict.findings[0];
  CHECK(node_name(desc, first) == R::node);
  CHECK(resource_key(desc, first) == R::resource);
  if (mstar::is_side_lane_rule(R::expected)) {
    // A side-lane refusal also names the group and worker the node sits in, and leaves the node on
    // the chain with no side-lane keys.
    CHECK_FALSE(group_name(desc, first).empty());
    CHECK_FALSE(worker_name(desc, first).empty());
    const auto& lane = verdict.lanes[first.node];
    CHECK(lane.lane == mstar::lane::chain);
    CHECK(lane.side_keys.empty());
  }

  // The run-time call gives the same report as the compile-time one.
  mstar::model_desc copy = desc;
  const mstar::report r = mstar::validate(copy);
  CHECK(r.findings == verdict.findings);
  CHECK(r.lanes == verdict.lanes);
}

TEST_CASE("a split model refuses side_stream on the codec group, and a second side lane refuses only the second node") {
  constexpr auto& split = judge<alone_on_worker::model>;
  static_assert(split.findings.size() == 1);
  constexpr auto& two = judge<second_side_node::model>;
  // codec_chunk keeps its lane and keys; codec_flush is the one refused.
  static_assert(two.findings.size() == 1);
  CHECK(lane_named<second_side_node::model>("codec_chunk").lane == mstar::lane::side);
  CHECK(keys_of(lane_named<second_side_node::model>("codec_chunk")) == std::vector<std::string_view>{"codec_state"});
  CHECK(lane_named<second_side_node::model>("codec_flush").lane == mstar::lane::chain);
  // The finding names the node that holds the lane.
  CHECK(two.findings[0].other ==
        mstar::detail::named_index(mstar::describe<second_side_node::model>.nodes, "codec_chunk"));
}

// A side node refused for its own reasons holds no lane, so the next side node on the worker takes
// it rather than being refused as a second one.
// clang-format off
using KvCodec        = mstar::node<"codec_kv", mstar::declares<q::KvCache>>;
using RefusedFirst   = mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                    mstar::group<"Codec", mstar::side_stream, KvCodec, q::CodecChunk>>>;
using RefusedSecond  = mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                    mstar::group<"Codec", mstar::side_stream, q::CodecChunk, KvCodec>>>;
using RefusedGroup   = mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                    mstar::group<"Kv", mstar::side_stream, KvCodec>, q::Codec>>;
// clang-format on
struct refused_node_first {
  using model = RefusedFirst;
};
struct refused_node_second {
  using model = RefusedSecond;
};
struct refused_group_first {
  using model = RefusedGroup;
};

TEST_CASE_TEMPLATE("a side node refused for its own reason does not make the next side node a second one", S,
                   refused_node_first, refused_node_second, refused_group_first) {
  using M = typename S::model;
  constexpr auto& v = judge<M>;
  constexpr auto& desc = mstar::describe<M>;
  // Exactly one finding: codec_kv's KV cache. No second-side-node refusal on either node.
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].rule == rule::lane_kv_cache);
  CHECK(node_name(desc, v.findings[0]) == "codec_kv");
  CHECK_FALSE(v.has(rule::lane_second_side_node));
  // codec_chunk, the one node that passes every check, holds the worker's side lane.
  CHECK(lane_named<M>("codec_chunk").lane == mstar::lane::side);
  CHECK(keys_of(lane_named<M>("codec_chunk")) == std::vector<std::string_view>{"codec_state"});
  CHECK(lane_named<M>("codec_kv").lane == mstar::lane::chain);
}

TEST_CASE(
    "a refused side node beside two admissible ones: the first admissible holds the lane, the second is refused") {
  using M =
      mstar::model<"m", mstar::worker<"gpu0", q::Talker,
                                      mstar::group<"Codec", mstar::side_stream, KvCodec, q::CodecChunk, CodecFlush>>>;
  constexpr auto& v = judge<M>;
  constexpr auto& desc = mstar::describe<M>;
  REQUIRE(v.findings.size() == 2);
  CHECK(v.findings[0].rule == rule::lane_kv_cache);
  CHECK(node_name(desc, v.findings[0]) == "codec_kv");
  CHECK(v.findings[1].rule == rule::lane_second_side_node);
  CHECK(node_name(desc, v.findings[1]) == "codec_flush");
  CHECK(v.findings[1].other == mstar::detail::named_index(desc.nodes, "codec_chunk"));
  CHECK(lane_named<M>("codec_chunk").lane == mstar::lane::side);
  CHECK(lane_named<M>("codec_flush").lane == mstar::lane::chain);
}

// ---------------------------------------------------------------------------------------------
// Dependency order and canonical equality.

TEST_CASE("node_index numbers the nodes in the model's node order: workers, their groups, their nodes") {
  static_assert(q::Model::node_index<q::TalkerPrefill> == 0);
  static_assert(q::Model::node_index<q::TalkerDecode> == 1);
  static_assert(q::Model::node_index<q::CodecChunk> == 2);
  for (const auto* name : {"talker_prefill", "talker_decode", "codec_chunk"})
    CHECK(q::Model::descriptor.nodes[mstar::detail::named_index(q::Model::descriptor.nodes, name)].name == name);
  CHECK(q::Model::descriptor.nodes[q::Model::node_index<q::CodecChunk>].name == "codec_chunk");
}

TEST_CASE("resources come in dependency order: every resource after the resources it depends on") {
  // Declared in the reverse of dependency order, so a validator that kept declaration order fails.
  using A = mstar::sampler<"a", mstar::depends_on<"b">>;
  using B = mstar::positions<"b", mstar::depends_on<"c", "d">>;
  using C = mstar::kv_cache<"c", mstar::blocks<64>, mstar::block_tokens<16>, mstar::depends_on<"d">>;
  using D = mstar::attention<"d", mstar::depends_on<"e">>;
  using E = mstar::positions<"e">;
  using M =
      mstar::model<"m", mstar::worker<"gpu0", mstar::group<"G", mstar::node<"n", mstar::declares<A, B, C, D, E>>>>>;
  static_assert(M::verdict.ok());
  std::vector<std::string_view> order;
  for (auto i : M::verdict.order)
    order.push_back(M::descriptor.resources[i].key);
  CHECK(order == std::vector<std::string_view>{"e", "d", "c", "b", "a"});

  // The same property for the Qwen3-TTS model, whose attention depends on kv_cache and positions.
  const auto& desc = q::Model::descriptor;
  REQUIRE(q::Model::verdict.order.size() == desc.resources.size());
  std::set<std::string_view> seen;
  for (auto i : q::Model::verdict.order) {
    for (auto dep : desc.resources[i].depends_on) {
      CAPTURE(desc.resources[i].key);
      CAPTURE(dep);
      CHECK(seen.count(dep) == 1);
    }
    CHECK(seen.insert(desc.resources[i].key).second); // each resource once
  }
}

// The Qwen3-TTS model written in another order: groups, nodes, declared resources and dependencies.
// clang-format off
using AttentionR     = mstar::attention<"attention", mstar::depends_on<"positions", "kv_cache">>;
using TalkerPrefillR = mstar::node<"talker_prefill", mstar::declares<q::Sampler, q::Positions, q::KvCache, AttentionR>,
                                   mstar::walk::chain>;
using TalkerDecodeR  = mstar::node<"talker_decode", mstar::declares<AttentionR, q::Sampler, q::KvCache, q::Positions>,
                                   mstar::walk::stop_checks | mstar::walk::chain>;
using TalkerR        = mstar::group<"Talker", TalkerDecodeR, TalkerPrefillR>;
using Gpu0R          = mstar::worker<"gpu0", q::Codec, mstar::streams<1>, TalkerR, mstar::sp<1>>;
using ModelR         = mstar::model<"qwen3_tts", Gpu0R>;
using SmallState     = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 129>;
using ModelSmall     = mstar::model<"qwen3_tts", mstar::worker<"gpu0", q::Talker,
                                    mstar::group<"Codec", mstar::side_stream, mstar::node<"codec_chunk", mstar::declares<SmallState>>>>>;
// clang-format on

TEST_CASE("canonical forms are equal whatever order a model is written in, and differ when the model differs") {
  static_assert(ModelR::verdict.ok());
  static_assert(!(ModelR::descriptor == q::Model::descriptor), "the orders differ, so the raw descriptors differ");
  static_assert(mstar::canonical(ModelR::descriptor) == mstar::canonical(q::Model::descriptor),
                "canonical() must not depend on the order of groups, nodes, declared resources or dependencies");
  static_assert(!(mstar::canonical(ModelSmall::descriptor) == mstar::canonical(q::Model::descriptor)),
                "canonical() must keep a real difference (257 vs 129 slots)");

  // At run time too, and canonical() is idempotent.
  mstar::model_desc a = ModelR::descriptor;
  mstar::model_desc b = q::Model::descriptor;
  CHECK_FALSE(a == b);
  CHECK(mstar::canonical(a) == mstar::canonical(b));
  CHECK(mstar::canonical(mstar::canonical(a)) == mstar::canonical(a));
  b.workers[0].streams = 2;
  CHECK_FALSE(mstar::canonical(a) == mstar::canonical(b));

  // Reordering changes no verdict: the codec is on the side lane with the same keys either way.
  CHECK(ModelR::lane_of<q::CodecChunk>().lane == mstar::lane::side);
  CHECK(ModelR::lane_of<q::CodecChunk>().side_keys == q::Model::lane_of<q::CodecChunk>().side_keys);
}

// ---------------------------------------------------------------------------------------------
// Run-time validate() on hand-built descriptors: the Qwen3-TTS descriptor with one thing broken,
// for every rule, including those a C++ description cannot break (they come from YAML).
// Indices into the base descriptor: resources kv_cache 0, attention 1, positions 2, sampler 3,
// codec_state 4; nodes talker_prefill 0, talker_decode 1, codec_chunk 2; groups Talker 0, Codec 1.

mstar::model_desc base() {
  mstar::model_desc m = mstar::describe<q::Model>;
  REQUIRE(m.resources.size() == 5);
  REQUIRE(m.resources[4].key == "codec_state");
  REQUIRE(m.nodes[2].name == "codec_chunk");
  REQUIRE(m.groups[1].name == "Codec");
  return m;
}

struct broken {
  const char* what;
  rule expected;
  std::function<void(mstar::model_desc&)> change;
  std::string_view node, resource, group, worker;
};

mstar::node_desc flush_node() {
  mstar::node_desc n;
  n.name = "codec_flush";
  n.resources.push_back("flush_state");
  return n;
}
mstar::resource_desc flush_state() {
  mstar::resource_desc r = mstar::describe<q::Model>.resources[4];
  r.key = "flush_state";
  return r;
}

std::vector<broken> broken_models() {
  using M = mstar::model_desc&;
  return {
      {"a second codec_state in f32", rule::duplicate_resource,
       [](M m) {
         auto r = m.resources[4];
         r.element = mstar::dtype::f32;
         m.resources.push_back(r);
       },
       "", "codec_state", "", ""},
      {"a second unplaced node named codec_chunk", rule::duplicate_node,
       [](M m) { m.nodes.push_back(mstar::node_desc{.name = "codec_chunk", .resources = {}, .walks = {}}); },
       "codec_chunk", "", "", ""},
      {"a second empty group named Codec", rule::duplicate_group,
       [](M m) { m.groups.push_back(mstar::group_desc{.name = "Codec", .side_stream = false, .nodes = {}}); }, "", "",
       "Codec", ""},
      {"a second worker named gpu0", rule::duplicate_worker,
       [](M m) { m.workers.push_back(mstar::worker_desc{.name = "gpu0", .groups = {}}); }, "", "", "", "gpu0"},
      {"codec_chunk lists codec_state twice", rule::duplicate_entry,
       [](M m) { m.nodes[2].resources.push_back("codec_state"); }, "codec_chunk", "codec_state", "", ""},
      {"the Codec group lists codec_chunk twice", rule::duplicate_entry,
       [](M m) { m.groups[1].nodes.push_back("codec_chunk"); }, "codec_chunk", "", "Codec", ""},
      {"gpu0 lists the Codec group twice", rule::duplicate_entry, [](M m) { m.workers[0].groups.push_back("Codec"); },
       "", "", "Codec", "gpu0"},
      {"attention depends on kv_cache twice", rule::duplicate_entry,
       [](M m) { m.resources[1].depends_on.push_back("kv_cache"); }, "", "attention", "", ""},
      {"codec_chunk declares a key no resource defines", rule::unknown_resource,
       [](M m) { m.nodes[2].resources.push_back("codec_cache"); }, "codec_chunk", "", "", ""},
      {"the Codec group names a node that does not exist", rule::unknown_node,
       [](M m) { m.groups[1].nodes.push_back("codec_flush"); }, "", "", "Codec", ""},
      {"gpu0 names a group that does not exist", rule::unknown_group,
       [](M m) { m.workers[0].groups.push_back("Vocoder"); }, "", "", "", "gpu0"},
      {"codec_chunk taken out of every group", rule::node_unplaced, [](M m) { m.groups[1].nodes.clear(); },
       "codec_chunk", "", "", ""},
      {"codec_chunk in the Talker group as well", rule::node_placed_twice,
       [](M m) { m.groups[0].nodes.push_back("codec_chunk"); }, "codec_chunk", "", "Codec", ""},
      {"the Codec group on no worker", rule::group_placement, [](M m) { m.workers[0].groups = {"Talker"}; }, "", "",
       "Codec", ""},
      {"the Codec group on two workers", rule::group_placement,
       [](M m) { m.workers.push_back(mstar::worker_desc{.name = "gpu1", .groups = {"Codec"}}); }, "", "", "Codec", ""},
      {"codec_state with one slot", rule::bad_geometry, [](M m) { m.resources[4].slots = 1; }, "", "codec_state", "",
       ""},
      {"codec_state with no state shape", rule::bad_geometry, [](M m) { m.resources[4].state_shape.clear(); }, "",
       "codec_state", "", ""},
      {"kv_cache with KV-keyed snapshots", rule::snapshots_not_pool,
       [](M m) { m.resources[0].kv_keyed_snapshots = true; }, "", "kv_cache", "", ""},
      {"gpu0 with sp 0", rule::bad_parallel, [](M m) { m.workers[0].sp = 0; }, "", "", "", "gpu0"},
      {"kv_cache with no blocks", rule::kv_geometry, [](M m) { m.resources[0].blocks = 0; }, "", "kv_cache", "", ""},
      {"kv_cache with no tokens per block", rule::kv_geometry, [](M m) { m.resources[0].block_tokens = 0; }, "",
       "kv_cache", "", ""},
      {"kv_cache with 65537 tokens per block", rule::kv_limits, [](M m) { m.resources[0].block_tokens = 65537; }, "",
       "kv_cache", "", ""},
      {"codec_state with 2^20 + 1 slots", rule::pool_limits, [](M m) { m.resources[4].slots = (1u << 20) + 1; }, "",
       "codec_state", "", ""},
      {"codec_state with a dimension of 2^24 + 1", rule::pool_limits,
       [](M m) { m.resources[4].state_shape[0] = (1u << 24) + 1; }, "", "codec_state", "", ""},
      {"codec_state of 2^24 x 2^24 elements", rule::pool_bytes,
       [](M m) { m.resources[4].state_shape = {1u << 24, 1u << 24}; }, "", "codec_state", "", ""},
      {"gpu0 with tp 1025", rule::worker_limits, [](M m) { m.workers[0].tp = 1025; }, "", "", "", "gpu0"},
      {"gpu0 with 65 streams", rule::worker_limits, [](M m) { m.workers[0].streams = 65; }, "", "", "", "gpu0"},
      {"codec_state depends on the KV cache, which codec_chunk does not declare", rule::lane_chain_dependency,
       [](M m) { m.resources[4].depends_on.push_back("kv_cache"); }, "codec_chunk", "codec_state", "Codec", "gpu0"},
      {"attention depends on a misspelt key", rule::unknown_dependency,
       [](M m) { m.resources[1].depends_on.push_back("position"); }, "", "attention", "", ""},
      {"positions depend on themselves", rule::self_dependency,
       [](M m) { m.resources[2].depends_on.push_back("positions"); }, "", "positions", "", ""},
      {"kv_cache depends on attention, which depends on kv_cache", rule::dependency_cycle,
       [](M m) { m.resources[0].depends_on.push_back("attention"); }, "", "kv_cache", "", ""},
      {"positions do not pre-plan, under attention that does", rule::preplan_dependency,
       [](M m) { m.resources[2].preplans = false; }, "", "attention", "", ""},
      {"attention depends on the KV cache only", rule::attention_positions,
       [](M m) {
         m.resources[1].depends_on.clear();
         m.resources[1].depends_on.push_back("kv_cache");
       },
       "", "attention", "", ""},
      {"codec_chunk declares the KV cache", rule::lane_kv_cache,
       [](M m) { m.nodes[2].resources.push_back("kv_cache"); }, "codec_chunk", "kv_cache", "Codec", "gpu0"},
      {"codec_chunk declares attention", rule::lane_attention, [](M m) { m.nodes[2].resources.push_back("attention"); },
       "codec_chunk", "attention", "Codec", "gpu0"},
      {"codec_chunk declares positions", rule::lane_positions, [](M m) { m.nodes[2].resources.push_back("positions"); },
       "codec_chunk", "positions", "Codec", "gpu0"},
      {"codec_chunk declares the sampler", rule::lane_sampler, [](M m) { m.nodes[2].resources.push_back("sampler"); },
       "codec_chunk", "sampler", "Codec", "gpu0"},
      {"talker_decode declares codec_state too", rule::lane_shared_pool,
       [](M m) { m.nodes[1].resources.push_back("codec_state"); }, "codec_chunk", "codec_state", "Codec", "gpu0"},
      {"codec_state keeps KV-keyed snapshots", rule::lane_kv_keyed_pool,
       [](M m) { m.resources[4].kv_keyed_snapshots = true; }, "codec_chunk", "codec_state", "Codec", "gpu0"},
      {"codec_chunk has resident walks", rule::lane_resident_walks, [](M m) { m.nodes[2].walks.resident = true; },
       "codec_chunk", "", "Codec", "gpu0"},
      {"gpu0 runs tp 2", rule::lane_parallel, [](M m) { m.workers[0].tp = 2; }, "codec_chunk", "", "Codec", "gpu0"},
      {"gpu0 runs sp 2", rule::lane_parallel, [](M m) { m.workers[0].sp = 2; }, "codec_chunk", "", "Codec", "gpu0"},
      {"the Codec group alone on gpu1", rule::lane_alone_on_worker,
       [](M m) {
         m.workers[0].groups = {"Talker"};
         m.workers.push_back(mstar::worker_desc{.name = "gpu1", .groups = {"Codec"}});
       },
       "codec_chunk", "", "Codec", "gpu1"},
      {"gpu0 with streams 0", rule::lane_no_streams, [](M m) { m.workers[0].streams = 0; }, "codec_chunk", "", "Codec",
       "gpu0"},
      {"codec_chunk has chain walks", rule::lane_chain_walks, [](M m) { m.nodes[2].walks.chain = true; }, "codec_chunk",
       "", "Codec", "gpu0"},
      {"codec_chunk has combined walks", rule::lane_combined_walks, [](M m) { m.nodes[2].walks.combined = true; },
       "codec_chunk", "", "Codec", "gpu0"},
      {"codec_chunk has spans", rule::lane_spans_or_stop_checks, [](M m) { m.nodes[2].walks.spans = true; },
       "codec_chunk", "", "Codec", "gpu0"},
      {"codec_chunk has stop checks", rule::lane_spans_or_stop_checks, [](M m) { m.nodes[2].walks.stop_checks = true; },
       "codec_chunk", "", "Codec", "gpu0"},
      {"a second side node in the Codec group", rule::lane_second_side_node,
       [](M m) {
         m.resources.push_back(flush_state());
         m.nodes.push_back(flush_node());
         m.groups[1].nodes.push_back("codec_flush");
       },
       "codec_flush", "", "Codec", "gpu0"},
      {"a second side group on gpu0", rule::lane_second_side_node,
       [](M m) {
         m.resources.push_back(flush_state());
         m.nodes.push_back(flush_node());
         m.groups.push_back(mstar::group_desc{.name = "Flush", .side_stream = true, .nodes = {"codec_flush"}});
         m.workers[0].groups.push_back("Flush");
       },
       "codec_flush", "", "Flush", "gpu0"},
  };
}

TEST_CASE("validate() at run time refuses each broken descriptor for exactly its rule and names what is at fault") {
  std::set<rule> covered;
  for (const auto& b : broken_models()) {
    CAPTURE(b.what);
    CAPTURE(mstar::id_of(b.expected));
    mstar::model_desc m = base();
    b.change(m);
    const mstar::report r = mstar::validate(m);
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.truncated);
    REQUIRE(r.findings.size() >= 1);
    for (const auto& f : r.findings)
      CHECK(mstar::id_of(f.rule) == mstar::id_of(b.expected));
    const auto& f = r.findings[0];
    CHECK(node_name(m, f) == b.node);
    CHECK(resource_key(m, f) == b.resource);
    CHECK(group_name(m, f) == b.group);
    CHECK(worker_name(m, f) == b.worker);
    covered.insert(b.expected);
  }
  // Every rule of rules.hpp has a broken descriptor above.
  for (std::size_t i = 0; i < mstar::rule_count; ++i) {
    CAPTURE(mstar::id_of(static_cast<rule>(i)));
    CHECK(covered.count(static_cast<rule>(i)) == 1);
  }
}

TEST_CASE("every rule has its own id and its own sentence, and the sentence gives a way out") {
  std::set<std::string_view> ids, sentences;
  for (std::size_t i = 0; i < mstar::rule_count; ++i) {
    const auto r = static_cast<rule>(i);
    CAPTURE(mstar::id_of(r));
    CHECK(ids.insert(mstar::id_of(r)).second);
    CHECK(sentences.insert(mstar::sentence(r)).second);
    CHECK(mstar::sentence(r).find("Way out:") != std::string_view::npos);
    CHECK(mstar::id_of(r) != "?");
    // Side-lane sentences say so, so a reader knows the model is fine without side_stream.
    CHECK((mstar::sentence(r).starts_with("side lane refused:")) == mstar::is_side_lane_rule(r));
  }
}

TEST_CASE(
    "validate() reports every broken rule at once, in the refusal list's order, and keeps the node on the chain") {
  mstar::model_desc m = base();
  m.workers[0].tp = 2;
  m.nodes[2].walks.chain = true;
  m.nodes[2].walks.spans = true;
  for (auto key : {"kv_cache", "attention", "positions", "sampler"})
    m.nodes[2].resources.push_back(key);
  const mstar::report r = mstar::validate(m);
  std::vector<std::string_view> got;
  for (const auto& f : r.findings)
    got.push_back(mstar::id_of(f.rule));
  CHECK(got == std::vector<std::string_view>{"lane_parallel", "lane_chain_walks", "lane_spans_or_stop_checks",
                                             "lane_kv_cache", "lane_attention", "lane_positions", "lane_sampler"});
  for (const auto& f : r.findings)
    CHECK(node_name(m, f) == "codec_chunk");
  REQUIRE(r.lanes.size() == 3);
  CHECK(r.lanes[2].lane == mstar::lane::chain);
  CHECK(r.lanes[2].side_keys.empty());
  CHECK(r.order.size() == m.resources.size()); // the dependency order is still sound
}

TEST_CASE("structural findings come together and stop validation before the dependency and lane rules") {
  mstar::model_desc m = base();
  m.resources[4].slots = 0;                        // bad_geometry
  m.nodes[2].resources.push_back("codec_cache");   // unknown_resource
  m.workers[0].groups.push_back("Vocoder");        // unknown_group
  m.resources[1].depends_on.push_back("position"); // unknown_dependency: not reached
  m.nodes[2].resources.push_back("kv_cache");      // lane_kv_cache: not reached
  const mstar::report r = mstar::validate(m);
  CHECK(r.has(rule::bad_geometry));
  CHECK(r.has(rule::unknown_resource));
  CHECK(r.has(rule::unknown_group));
  CHECK(r.findings.size() == 3);
  CHECK_FALSE(r.has(rule::unknown_dependency));
  CHECK_FALSE(r.has(rule::lane_kv_cache));
  CHECK(r.lanes.empty());
  CHECK(r.order.empty());
}

TEST_CASE("a report that overflows keeps the first findings and says it was truncated") {
  // 16 resources under one key: 120 duplicate pairs, more than a report holds.
  mstar::model_desc m;
  m.name = "flood";
  mstar::resource_desc kv;
  kv.key = "kv_cache";
  kv.kind = mstar::resource_kind::kv_cache;
  for (std::size_t i = 0; i < mstar::max_resources; ++i)
    REQUIRE(m.resources.push_back(kv));
  const mstar::report r = mstar::validate(m);
  CHECK(r.truncated);
  CHECK_FALSE(r.ok());
  CHECK(r.findings.size() == mstar::max_findings);
  CHECK(r.findings[0] == mstar::finding{.rule = rule::duplicate_resource, .resource = 1, .other = 0});
  for (const auto& f : r.findings)
    CHECK(f.rule == rule::duplicate_resource);

  // A report with exactly as many findings as it holds is full but not truncated.
  mstar::report full;
  for (std::size_t i = 0; i < mstar::max_findings; ++i)
    full.add({.rule = rule::bad_geometry});
  CHECK_FALSE(full.truncated);
  full.add({.rule = rule::bad_parallel});
  CHECK(full.truncated);
  CHECK_FALSE(full.has(rule::bad_parallel));
}

} // namespace
