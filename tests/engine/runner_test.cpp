// The step runner's staged pre-plan (invariant 1): one stage at most; only the staged step promotes
// it; any other chain step drops it on admit (clearing every resource that pre-plans) and resets the
// record on plan; a side step never touches it, whether it admits, plans, refuses or raises, and by
// construction cannot: the stage's mutators do not accept a side step (checked at compile time).
#include <doctest/doctest.h>

#include "engine/engine_test_model.hpp"
#include "qwen3_tts/model.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace engine_test;

namespace {

// ---- compile time: stage ownership ----
template <class Stage, class Step>
concept can_promote = requires(Stage& s, const Step& st, const mstar::step_view& v, mstar::host_stream h) {
  s.promote(st, v, h);
};
template <class Stage, class Step>
concept can_drop = requires(Stage& s, const Step& st) {
  s.drop(st);
};
template <class Stage, class Step>
concept can_reset = requires(Stage& s, const Step& st) {
  s.reset(st);
};
template <class Stage, class Step>
concept can_begin = requires(Stage& s, const Step& st) {
  s.begin(st);
};
template <class Stage, class Step>
concept can_abandon = requires(Stage& s, const Step& st) {
  s.abandon(st);
};
template <class Runner, class Step>
concept can_pre_plan = requires(Runner& r, const Step& st, mstar::host_stream h) {
  r.pre_plan(st, h);
};
template <class M, class N>
concept chain_step_exists = requires {
  typename mstar::chain_step<M, N>;
};
template <class M, class N>
concept side_step_exists = requires {
  typename mstar::side_step<M, N>;
};

using Stage = mstar::staged_preplan<Model, mstar::host_backend>;
using Runner = mstar::step_runner<Model, mstar::host_backend>;

// A chain step reaches every stage mutator (so the negatives below are not vacuous) ...
static_assert(can_promote<Stage, DecodeStep> && can_drop<Stage, DecodeStep> && can_reset<Stage, DecodeStep> &&
              can_begin<Stage, DecodeStep> && can_abandon<Stage, DecodeStep> && can_pre_plan<Runner, DecodeStep>);
// ... a side step reaches none of them.
static_assert(!can_promote<Stage, CodecStep>);
static_assert(!can_drop<Stage, CodecStep>);
static_assert(!can_reset<Stage, CodecStep>);
static_assert(!can_begin<Stage, CodecStep>);
static_assert(!can_abandon<Stage, CodecStep>);
static_assert(!can_pre_plan<Runner, CodecStep>);
// A node's step type follows its lane: no chain step of a side node, no side step of a chain node.
static_assert(chain_step_exists<Model, Decode> && !chain_step_exists<Model, Codec>);
static_assert(side_step_exists<Model, Codec> && !side_step_exists<Model, Decode>);
static_assert(std::is_same_v<mstar::step_for<Model, Codec>, CodecStep>);
static_assert(std::is_same_v<mstar::step_for<Model, Decode>, DecodeStep>);
// The same for the Qwen3-TTS model.
using QStage = mstar::staged_preplan<qwen3_tts::Model, mstar::host_backend>;
using QCodec = mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>;
using QDecode = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerDecode>;
static_assert(can_promote<QStage, QDecode> && !can_promote<QStage, QCodec> && !can_drop<QStage, QCodec>);
static_assert(!chain_step_exists<qwen3_tts::Model, qwen3_tts::CodecChunk>);
// Side keys never pre-plan, so no resource of a side step is ever part of a stage.
static_assert(!Runner::resources_type::preplans(Runner::resources_type::index_of("codec_state")));
static_assert(Runner::resources_type::preplans(Runner::resources_type::index_of("kv_cache")));

struct fixture {
  mstar::host_backend backend;
  Engine engine{backend, small_options()};
  mstar::host_stream chain = backend.create_stream();
  mstar::host_stream lane = backend.create_stream();
  Runner& runner = engine.runner();
  fixture() { engine.set_side_stream<Codec>(lane); }
  mstar::request_ref add(mstar::request_id id) { return *engine.add_request(id); }
  template <class Step>
  mstar::step_outcome run(const Step& step, mstar::host_stream s) {
    return engine.run(step, s, [](const auto&) {});
  }
  std::uint64_t clears(std::string_view key) {
    for (const auto& st : engine.stats())
      if (st.key == key) return st.clears;
    return ~0ull;
  }
};

} // namespace

TEST_CASE("Runner.the staged step promotes the stage, and its plan equals a plan made afresh") {
  fixture f, twin;
  auto a = f.add(1), b = f.add(2);
  auto ta = twin.add(1), tb = twin.add(2);
  mstar::row pre[] = {{a, 5}, {b, 3}}, tpre[] = {{ta, 5}, {tb, 3}};
  REQUIRE(f.run(PrefillStep{pre}, f.chain));
  REQUIRE(twin.run(PrefillStep{tpre}, twin.chain));
  mstar::row dec[] = {{a, 1}, {b, 1}}, tdec[] = {{ta, 1}, {tb, 1}};
  for (int step = 0; step < 6; ++step) {
    // The plan thread stages the next step after the last commit.
    const auto staged = f.runner.pre_plan(DecodeStep{dec, 4}, f.chain);
    REQUIRE(staged);
    CHECK(f.runner.stage().staged());
    CHECK(f.runner.stage().node() == DecodeStep::node);
    CHECK(f.runner.stage().bucket() == 4);
    CHECK(f.runner.stage().rows().size() == 2);
    CHECK(f.runner.stage().segment_of(Runner::resources_type::index_of("kv_cache")).staged);
    CHECK_FALSE(f.runner.stage().segment_of(Runner::resources_type::index_of("codec_state")).staged);
    const auto out = f.run(DecodeStep{dec, 4}, f.chain);
    REQUIRE(out);
    CHECK(out.promoted);
    CHECK_FALSE(f.runner.stage().staged());
    REQUIRE(twin.run(DecodeStep{tdec, 4}, twin.chain));
    auto eq = [](auto x, auto y) { return std::equal(x.begin(), x.end(), y.begin(), y.end()); };
    CHECK(eq(f.engine.resource<Kv>().current_plan().host_page_indices,
             twin.engine.resource<Kv>().current_plan().host_page_indices));
    CHECK(eq(f.engine.resource<Kv>().current_plan().host_last_page_len,
             twin.engine.resource<Kv>().current_plan().host_last_page_len));
    CHECK(eq(f.engine.resource<Positions>().current_plan().host_positions,
             twin.engine.resource<Positions>().current_plan().host_positions));
    CHECK(eq(f.engine.resource<Attention>().current_plan().host_kv_lens,
             twin.engine.resource<Attention>().current_plan().host_kv_lens));
    CHECK(eq(f.engine.resource<Sampler>().current_plan().host_rows,
             twin.engine.resource<Sampler>().current_plan().host_rows));
  }
  CHECK(f.runner.stage().promotions() == 6);
  CHECK(f.runner.stage().drops() == 0);
  f.backend.synchronize(f.chain);
  twin.backend.synchronize(twin.chain);
}

TEST_CASE("Runner.there is one stage at most: a second pre-plan is refused while one is held") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a}};
  REQUIRE(f.runner.pre_plan(DecodeStep{rows}, f.chain));
  const auto second = f.runner.pre_plan(DecodeStep{rows}, f.chain);
  REQUIRE(second.refused());
  CHECK(second.message().find("one stage at most") != std::string::npos);
  CHECK(f.runner.stage().stages() == 1);
  f.backend.synchronize(f.chain);
}

TEST_CASE("Runner.any other chain step drops the stage on admit, clearing every resource that pre-plans") {
  fixture f;
  auto a = f.add(1), b = f.add(2);
  mstar::row staged[] = {{a}}, other[] = {{a}, {b}};
  SUBCASE("other rows") {
    REQUIRE(f.runner.pre_plan(DecodeStep{staged}, f.chain));
    REQUIRE(f.runner.admit(DecodeStep{other}));
  }
  SUBCASE("the same rows in another bucket") {
    REQUIRE(f.runner.pre_plan(DecodeStep{staged, 2}, f.chain));
    REQUIRE(f.runner.admit(DecodeStep{staged, 4}));
  }
  SUBCASE("the same rows on another node") {
    REQUIRE(f.runner.pre_plan(DecodeStep{staged}, f.chain));
    REQUIRE(f.runner.admit(PrefillStep{staged}));
  }
  CHECK_FALSE(f.runner.stage().staged());
  CHECK(f.runner.stage().drops() == 1);
  for (const auto& st : f.engine.stats()) {
    CHECK_FALSE(st.staged);
    CHECK(st.clears == (st.key == "codec_state" ? 0u : 1u)); // side keys are never staged, so never cleared
  }
  f.backend.synchronize(f.chain);
}

TEST_CASE("Runner.a chain step that did not promote resets the record when it plans") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a}};
  REQUIRE(f.run(DecodeStep{rows}, f.chain));
  CHECK(f.runner.stage().resets() == 1);
  REQUIRE(f.runner.pre_plan(DecodeStep{rows}, f.chain));
  const auto promoted = f.run(DecodeStep{rows}, f.chain);
  CHECK(promoted.promoted);
  CHECK(f.runner.stage().resets() == 1); // a promote is not a reset
  f.backend.synchronize(f.chain);
}

TEST_CASE(
    "Runner.a stale stage is not promoted: it is cleared everywhere, and the step is admitted and planned afresh") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a}};
  REQUIRE(f.run(DecodeStep{rows}, f.chain));
  REQUIRE(f.runner.pre_plan(DecodeStep{rows}, f.chain));
  f.engine.resource<Sampler>().set_seed(a, 99); // the main thread reseeds after the pre-plan
  const auto out = f.run(DecodeStep{rows}, f.chain);
  REQUIRE(out);
  CHECK_FALSE(out.promoted);
  CHECK(f.engine.resource<Sampler>().current_plan().host_rows[0].seed == 99);
  CHECK(f.runner.stage().drops() == 1);
  CHECK_FALSE(f.runner.stage().staged());
  for (const auto& st : f.engine.stats()) { // cleared on every resource that pre-plans, not only the stale one
    INFO(st.key);
    CHECK_FALSE(st.staged);
    CHECK(st.clears == (st.key == "codec_state" ? 0u : 1u));
  }
  f.backend.synchronize(f.chain);
}

TEST_CASE("Runner.a refused pre-plan leaves no stage and nothing staged on any resource") {
  fixture f;
  std::vector<mstar::request_ref> reqs;
  auto a = f.add(1), b = f.add(2), c = f.add(3);
  mstar::row fill[] = {{a, 60}};
  REQUIRE(f.run(PrefillStep{fill}, f.chain)); // 15 of 32 blocks
  mstar::row fill2[] = {{b, 60}};
  REQUIRE(f.run(PrefillStep{fill2}, f.chain)); // 30 of 32
  mstar::row rows[] = {{c, 12}};
  const auto out = f.runner.pre_plan(PrefillStep{rows}, f.chain);
  REQUIRE(out.refused());
  CHECK(out.resource == Runner::resources_type::index_of("kv_cache"));
  CHECK(f.runner.stage().current() == Stage::phase::empty);
  for (const auto& st : f.engine.stats())
    CHECK_FALSE(st.staged);
  f.backend.synchronize(f.chain);
}

TEST_CASE("Runner.a side step beside a held stage never touches it: admitted, refused, or raising") {
  fixture f;
  auto a = f.add(1), b = f.add(2), c = f.add(3), d = f.add(4);
  mstar::row chain_rows[] = {{a}};
  REQUIRE(f.run(DecodeStep{chain_rows}, f.chain));
  REQUIRE(f.runner.pre_plan(DecodeStep{chain_rows}, f.chain));
  const auto held = snapshot(f.engine);
  REQUIRE(held.phase == static_cast<int>(Stage::phase::staged));

  // admitted, planned and committed
  mstar::row codec_rows[] = {{b}, {c}};
  REQUIRE(f.run(CodecStep{codec_rows}, f.lane));
  CHECK(snapshot(f.engine) == held);
  // refused: three slots, three taken, a fourth request asks
  mstar::row third[] = {{d}};
  REQUIRE(f.run(CodecStep{third}, f.lane));
  auto e = f.add(5);
  mstar::row refused[] = {{e}};
  const auto r = f.run(CodecStep{refused}, f.lane);
  REQUIRE(r.refused());
  CHECK(snapshot(f.engine) == held);
  // raising in admit (a label beyond max_labels) ...
  mstar::row bad_label[] = {{b, 1, 9}};
  REQUIRE(f.runner.admit(CodecStep{bad_label}).failed());
  CHECK(snapshot(f.engine) == held);
  // ... and in plan (a row that holds no slot: the pool refuses to address the sink for it)
  auto fresh = f.add(6);
  mstar::row unadmitted[] = {{fresh}};
  const auto p = f.runner.plan(CodecStep{unadmitted}, f.lane);
  REQUIRE(p.failed());
  CHECK(p.message().find("holds no slot") != std::string::npos);
  CHECK(snapshot(f.engine) == held);

  // The chain's staged step still promotes.
  const auto out = f.run(DecodeStep{chain_rows}, f.chain);
  REQUIRE(out);
  CHECK(out.promoted);
  f.backend.synchronize(f.chain);
  f.backend.synchronize(f.lane);
}

TEST_CASE("Runner.a side step run between the staged step's admit and its plan leaves the promote to that step") {
  fixture f;
  auto a = f.add(1), b = f.add(2);
  mstar::row chain_rows[] = {{a}};
  REQUIRE(f.run(DecodeStep{chain_rows}, f.chain));
  REQUIRE(f.runner.pre_plan(DecodeStep{chain_rows}, f.chain));
  REQUIRE(f.runner.admit(DecodeStep{chain_rows})); // the staged step is admitted ...
  mstar::row codec_rows[] = {{b}};
  REQUIRE(f.run(CodecStep{codec_rows}, f.lane)); // ... a codec window runs on the lane in between ...
  const auto p = f.runner.plan(DecodeStep{chain_rows}, f.chain);
  REQUIRE(p);
  CHECK(p.promoted); // ... and the staged step still promotes
  REQUIRE(f.runner.commit(DecodeStep{chain_rows}));
  CHECK(f.runner.stage().promotions() == 1);
  CHECK(f.runner.stage().drops() == 0);
  f.backend.synchronize(f.chain);
  f.backend.synchronize(f.lane);
}

TEST_CASE(
    "Runner.a chain step with the staged step's node, bucket and row count but other rows drops the stage on admit") {
  fixture f;
  auto a = f.add(1), b = f.add(2);
  mstar::row staged[] = {{a}}, other[] = {{b}};
  REQUIRE(f.runner.pre_plan(DecodeStep{staged}, f.chain));
  REQUIRE(f.runner.admit(DecodeStep{other}));
  CHECK_FALSE(f.runner.stage().staged()); // dropped on admit, not kept for a promote
  const auto p = f.runner.plan(DecodeStep{other}, f.chain);
  REQUIRE(p);
  CHECK_FALSE(p.promoted);
  REQUIRE(f.runner.commit(DecodeStep{other}));
  CHECK(f.runner.stage().promotions() == 0);
  CHECK(f.runner.stage().drops() == 1);
  for (const auto& st : f.engine.stats()) {
    INFO(st.key);
    CHECK(st.promotes == 0);
    CHECK(st.stale_promotes == 0); // a's staged plan was never tried for b's row
    CHECK(st.clears == (st.key == "codec_state" ? 0u : 1u));
  }
  f.backend.synchronize(f.chain);
}

TEST_CASE("Runner.the stage check catches a step that drops the stage (the check is not vacuous)") {
  fixture f;
  auto a = f.add(1), b = f.add(2);
  mstar::row rows[] = {{a}}, other[] = {{b}};
  REQUIRE(f.runner.pre_plan(DecodeStep{rows}, f.chain));
  const auto held = snapshot(f.engine);
  // A runner that let a side step act on the stage would have had to go through a chain step; doing
  // that by hand is exactly what the snapshot comparison catches.
  f.runner.stage().drop(DecodeStep{other});
  CHECK_FALSE(snapshot(f.engine) == held);
  f.backend.synchronize(f.chain);
}

TEST_CASE("Runner.the plan thread stages while the GPU thread runs side steps, and every chain step promotes") {
  fixture f;
  std::vector<mstar::row> chain_rows, codec_rows;
  // No new tokens: 300 steps would outgrow the tiny KV cache, and this test is about the stage.
  for (int i = 0; i < 4; ++i)
    chain_rows.push_back({f.add(100 + i), 0});
  for (int i = 0; i < 3; ++i)
    codec_rows.push_back({f.add(200 + i)});
  constexpr int steps = 300;
  std::atomic<int> committed{-1}, staged{-1};
  std::atomic<int> refused{0};
  std::thread plan_thread([&] {
    for (int n = 0; n < steps; ++n) {
      while (committed.load(std::memory_order_acquire) < n - 1)
        std::this_thread::yield();
      if (!f.runner.pre_plan(DecodeStep{chain_rows}, f.chain)) refused.fetch_add(1);
      staged.store(n, std::memory_order_release);
    }
  });
  int promoted = 0;
  for (int n = 0; n < steps; ++n) {
    // A side step runs between chain step n-1 and the staged step n, while the plan thread stages.
    const bool side_ok = static_cast<bool>(f.run(CodecStep{codec_rows}, f.lane));
    while (staged.load(std::memory_order_acquire) < n)
      std::this_thread::yield();
    const auto out = f.run(DecodeStep{chain_rows}, f.chain);
    promoted += out.promoted ? 1 : 0;
    committed.store(n, std::memory_order_release);
    if (!side_ok || !out) {
      FAIL_CHECK("step " << n << " failed: " << out.message());
      committed.store(steps, std::memory_order_release);
      break;
    }
  }
  plan_thread.join();
  CHECK(refused.load() == 0);
  CHECK(promoted == steps);
  CHECK(f.runner.stage().drops() == 0);
  CHECK(f.clears("codec_state") == 0);
  f.backend.synchronize(f.chain);
  f.backend.synchronize(f.lane);
  CHECK(f.backend.checker().violation_count() == 0);
}
