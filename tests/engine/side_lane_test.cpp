// The seed's test list, on the Qwen3-TTS model (and the small model where a pool must fill): a side
// step on a real pool through declare/admit/plan/forward/commit; teardown on the lane's stream
// (invariant 3); the stage left in place; raises and refusals failing only their own rows; a full
// pool; nothing leaking after any mix of finishes, cancels and failures (invariant 6); a teardown
// from another thread while side steps run on the same lane stream.
#include <doctest/doctest.h>

#include "engine/engine_test_model.hpp"
#include "qwen3_tts/model.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace engine_test;

namespace {

using QEngine = mstar::engine<qwen3_tts::Model, mstar::host_backend>;
using QCodecStep = mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>;
using QDecodeStep = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerDecode>;

struct gate {
  std::atomic<bool> open{false};
  void wait() const {
    while (!open.load())
      std::this_thread::yield();
  }
};

template <class E>
bool slot_is_zero(E& engine, std::int32_t slot) {
  auto& pool = engine.template resource<qwen3_tts::CodecState>();
  for (std::uint32_t l = 0; l < pool.layers(); ++l)
    for (std::size_t e = 0; e < pool.state_elements(); ++e)
      if (pool.state(l, slot)[e].bits != 0) return false;
  return true;
}

mstar::engine_options qwen_options() {
  mstar::engine_options o;
  o.max_batch = 64;
  o.max_tokens = 512;
  o.max_requests = 300;
  o.max_labels = 1;
  return o;
}

} // namespace

TEST_CASE("SideLane.a codec window takes a slot, plans it on the lane, commits, and the next window reads it") {
  mstar::host_backend backend;
  QEngine engine(backend, qwen_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream(mstar::stream_priority::high);
  engine.set_side_stream<qwen3_tts::CodecChunk>(lane);
  auto& pool = engine.resource<qwen3_tts::CodecState>();
  auto a = *engine.add_request(1), b = *engine.add_request(2);
  mstar::row rows[] = {{a}, {b}};
  std::uint32_t in[2] = {3, 5}, out[2] = {0, 0};
  auto forward = [&](const auto& ctx) {
    CHECK(ctx.stream == lane);
    codec_window<mstar::bf16>(backend, ctx.stream, ctx.template plan<qwen3_tts::CodecState>(), in, out);
  };
  REQUIRE(engine.run(QCodecStep{rows, 4}, lane, forward));
  const auto slot_a = pool.find(a, 0)->slot;
  CHECK(pool.free_count() == 254);
  backend.synchronize(lane);
  CHECK(out[0] == 3);
  CHECK(out[1] == 5);
  in[0] = 4;
  in[1] = 10;
  REQUIRE(engine.run(QCodecStep{rows, 4}, lane, forward));
  backend.synchronize(lane);
  CHECK(out[0] == 7); // window 2 read the state window 1 wrote
  CHECK(out[1] == 15);
  CHECK(slot_is_zero(engine, 0)); // padding rows went to the sink and never wrote it

  // The slot's last access is on the lane: an unordered access from the chain names the lane.
  CHECK(backend.checker().violation_count() == 0);

  // Teardown from the chain's side frees the slot at once, with its zero queued on the lane.
  gate g;
  backend.enqueue(lane, [&g] { g.wait(); });
  REQUIRE(engine.remove_request(a, chain));
  CHECK(pool.free_count() == 255);
  backend.synchronize(chain);
  CHECK_FALSE(slot_is_zero(engine, slot_a)); // the lane has not run the zero yet
  g.open.store(true);
  backend.synchronize(lane);
  CHECK(slot_is_zero(engine, slot_a));
  CHECK(backend.checker().violation_count() == 0);
  // (from a thread that has not synchronized on the lane, so it knows nothing of the lane's work)
  std::thread([&] { backend.note_access(chain, pool.region(), static_cast<std::uint32_t>(slot_a)); }).join();
  REQUIRE(backend.checker().violation_count() == 1);
  CHECK(backend.checker().violations()[0].last_stream == mstar::host_backend::index_of(lane));

  // The next user of the slot (LIFO) starts from zero state.
  auto c = *engine.add_request(3);
  mstar::row next[] = {{c}};
  in[0] = 6;
  REQUIRE(engine.run(QCodecStep{next}, lane, forward));
  CHECK(pool.find(c, 0)->slot == slot_a);
  backend.synchronize(lane);
  CHECK(out[0] == 6);
}

TEST_CASE("SideLane.a codec window leaves the chain's staged pre-plan in place and the next chain step promotes it") {
  mstar::host_backend backend;
  QEngine engine(backend, qwen_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream(mstar::stream_priority::high);
  engine.set_side_stream<qwen3_tts::CodecChunk>(lane);
  std::vector<mstar::row> talk, codec;
  for (int i = 0; i < 8; ++i)
    talk.push_back({*engine.add_request(i)});
  for (int i = 0; i < 8; ++i)
    codec.push_back({talk[i].request});
  std::vector<std::uint32_t> in(8, 1), out(8, 0);
  auto noop = [](const auto&) {};
  auto codec_fwd = [&](const auto& ctx) {
    codec_window<mstar::bf16>(backend, ctx.stream, ctx.template plan<qwen3_tts::CodecState>(), in.data(), out.data());
  };
  REQUIRE(engine.run(QDecodeStep{talk}, chain, noop));
  for (int n = 0; n < 20; ++n) {
    REQUIRE(engine.runner().pre_plan(QDecodeStep{talk, 8}, chain));
    const auto held = snapshot(engine);
    REQUIRE(engine.run(QCodecStep{codec}, lane, codec_fwd));
    CHECK(snapshot(engine) == held);
    const auto out_step = engine.run(QDecodeStep{talk, 8}, chain, noop);
    REQUIRE(out_step);
    CHECK(out_step.promoted);
  }
  CHECK(engine.runner().stage().promotions() == 20);
  CHECK(engine.runner().stage().drops() == 0);
  backend.synchronize(lane);
  CHECK(out[0] == 20);
  backend.synchronize(chain);
  CHECK(backend.checker().violation_count() == 0);
}

TEST_CASE("SideLane.a raise in a side step's admit or plan fails only its rows and leaves the stage") {
  using FEngine = mstar::engine<FaultyModel, mstar::host_backend>;
  using FCodec = mstar::side_step<FaultyModel, FaultyCodec>;
  using FDecode = mstar::chain_step<FaultyModel, Decode>;
  mstar::host_backend backend;
  FEngine engine(backend, small_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream();
  engine.set_side_stream<FaultyCodec>(lane);
  auto& pool = engine.resource<FaultyState>();
  auto a = *engine.add_request(1), b = *engine.add_request(2);
  mstar::row talk[] = {{a}}, codec[] = {{b}};
  auto noop = [](const auto&) {};
  REQUIRE(engine.run(FDecode{talk}, chain, noop));
  REQUIRE(engine.runner().pre_plan(FDecode{talk}, chain));
  const auto held = snapshot(engine);

  faulty_pool<mstar::host_backend>::raise_in_admit = true;
  auto out = engine.run(FCodec{codec}, lane, noop);
  faulty_pool<mstar::host_backend>::raise_in_admit = false;
  REQUIRE(out.failed());
  CHECK(out.resource == mstar::resource_set<FaultyModel, mstar::host_backend>::index_of("codec_state"));
  CHECK(out.message().find("injected raise in the codec pool's admit") != std::string::npos);
  CHECK(snapshot(engine) == held);
  CHECK(pool.free_count() == 3);

  faulty_pool<mstar::host_backend>::raise_in_plan = true;
  out = engine.run(FCodec{codec}, lane, noop);
  faulty_pool<mstar::host_backend>::raise_in_plan = false;
  REQUIRE(out.failed());
  CHECK(out.message().find("injected raise in the codec pool's plan") != std::string::npos);
  CHECK(snapshot(engine) == held);

  // The chain's rows were not failed: the staged step promotes; and the codec's request, once torn
  // down by the caller, gives back the slot its admit took.
  const auto chain_out = engine.run(FDecode{talk}, chain, noop);
  REQUIRE(chain_out);
  CHECK(chain_out.promoted);
  CHECK(pool.free_count() == 2);
  REQUIRE(engine.remove_request(b, chain)); // no teardown waits: the failures ended their steps
  CHECK(pool.free_count() == 3);
  backend.synchronize(chain);
  backend.synchronize(lane);
}

TEST_CASE("SideLane.a full codec pool refuses with a reason, and the refused row runs once a slot frees") {
  mstar::host_backend backend;
  QEngine engine(backend, qwen_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream();
  engine.set_side_stream<qwen3_tts::CodecChunk>(lane);
  auto& pool = engine.resource<qwen3_tts::CodecState>();
  std::vector<mstar::request_ref> live;
  auto noop = [](const auto&) {};
  for (int batch = 0; batch < 4; ++batch) {
    std::vector<mstar::row> rows;
    for (int i = 0; i < 64; ++i) {
      live.push_back(*engine.add_request(batch * 64 + i));
      rows.push_back({live.back()});
    }
    REQUIRE(engine.run(QCodecStep{rows}, lane, noop));
  }
  CHECK(pool.free_count() == 0);
  auto late = *engine.add_request(9999);
  mstar::row parked[] = {{late}};
  const auto refused = engine.run(QCodecStep{parked}, lane, noop);
  REQUIRE(refused.refused());
  CHECK(refused.message() ==
        "recurrent pool codec_state is full: 1 row(s) need a new slot and 0 of 256 slots are free; the rows wait at "
        "readiness until a slot frees (or give the pool more slots)");
  REQUIRE(engine.remove_request(live[17], chain));
  REQUIRE(engine.run(QCodecStep{parked}, lane, noop));
  CHECK(pool.find(late, 0).has_value());
  backend.synchronize(lane);
}

TEST_CASE("SideLane.after any mix of finishes, cancels and failures every pool is back to its full free count") {
  using FEngine = mstar::engine<FaultyModel, mstar::host_backend>;
  using FCodec = mstar::side_step<FaultyModel, FaultyCodec>;
  using FDecode = mstar::chain_step<FaultyModel, Decode>;
  using FPrefill = mstar::chain_step<FaultyModel, Prefill>;
  mstar::host_backend backend(mstar::host_backend_options{.queue_capacity = 256});
  FEngine engine(backend, small_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream();
  engine.set_side_stream<FaultyCodec>(lane);
  std::mt19937 rng(20261202);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<mstar::request_ref> live;
  std::vector<std::uint32_t> in(8, 1), out(8, 0);
  int finished = 0, cancelled = 0, failed = 0, refused = 0, promoted = 0;
  auto noop = [](const auto&) {};
  auto rows_of = [&](int max) {
    std::vector<mstar::row> rows;
    std::vector<mstar::request_ref> pool = live;
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int i = 0; i < std::min<int>(max, static_cast<int>(pool.size())); ++i)
      rows.push_back({pool[i], 1});
    return rows;
  };
  auto drop = [&](std::size_t i) {
    REQUIRE(engine.remove_request(live[i], pick(2) ? chain : lane));
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (int op = 0; op < 3000; ++op) {
    switch (pick(9)) {
    case 0:
    case 7: // a new request, prefilled on the chain
      if (auto r = engine.add_request(op)) {
        live.push_back(*r);
        mstar::row pre[] = {{*r, 1u + static_cast<std::uint32_t>(pick(6))}};
        const auto o = engine.run(FPrefill{pre}, chain, noop);
        refused += o.refused() ? 1 : 0;
      }
      break;
    case 1: { // a chain step, pre-planned half of the time, sometimes beside a staged other step
      auto rows = rows_of(4);
      if (rows.empty()) break;
      if (pick(2)) (void)engine.runner().pre_plan(FDecode{rows}, chain);
      if (pick(4) == 0) rows.pop_back();
      if (rows.empty()) break;
      const auto o = engine.run(FDecode{rows}, chain, noop);
      refused += o.refused() ? 1 : 0;
      promoted += o.promoted ? 1 : 0;
      break;
    }
    case 2:
    case 3: { // a codec window, maybe refused (3 slots), maybe raising
      auto rows = rows_of(3);
      if (rows.empty()) break;
      const int fault = pick(10);
      faulty_pool<mstar::host_backend>::raise_in_admit = fault == 0;
      faulty_pool<mstar::host_backend>::raise_in_plan = fault == 1;
      const auto o = engine.run(FCodec{rows}, lane, [&](const auto& ctx) {
        if (fault == 2) throw std::runtime_error("forward failed");
        codec_window<float>(backend, ctx.stream, ctx.template plan<FaultyState>(), in.data(), out.data());
      });
      faulty_pool<mstar::host_backend>::raise_in_admit = false;
      faulty_pool<mstar::host_backend>::raise_in_plan = false;
      refused += o.refused() ? 1 : 0;
      if (o.failed()) {
        ++failed;
        drop(std::find(live.begin(), live.end(), rows[0].request) - live.begin()); // a failed row is torn down
      }
      break;
    }
    case 4: // a finish
      if (!live.empty()) {
        drop(static_cast<std::size_t>(pick(static_cast<int>(live.size()))));
        ++finished;
      }
      break;
    case 5: { // a cancel between the plan thread's pre-plan and the staged step
      auto rows = rows_of(3);
      if (rows.empty()) break;
      (void)engine.runner().pre_plan(FDecode{rows}, chain);
      drop(std::find(live.begin(), live.end(), rows[0].request) - live.begin());
      ++cancelled;
      const auto o = engine.run(FDecode{rows}, chain, noop); // names a torn-down request: fails
      CHECK(o.failed());
      break;
    }
    case 6: { // a cancel right after a side step's admit: the teardown waits for it to settle
      auto rows = rows_of(2);
      if (rows.empty()) break;
      const auto a = engine.runner().admit(FCodec{rows});
      std::thread teardown([&, r = rows[0].request] { engine.remove_request(r, chain); });
      std::this_thread::yield();
      if (a) {
        auto p = engine.runner().plan(FCodec{rows}, lane);
        if (p) (void)engine.runner().commit(FCodec{rows});
      }
      teardown.join();
      live.erase(std::find(live.begin(), live.end(), rows[0].request));
      ++cancelled;
      break;
    }
    default: break;
    }
  }
  while (!live.empty())
    drop(live.size() - 1);
  backend.synchronize(chain);
  backend.synchronize(lane);
  for (const auto& st : engine.stats()) {
    INFO(std::string(st.key));
    CHECK(st.free == st.capacity);
    CHECK(st.requests == 0);
  }
  CHECK(engine.requests().live() == 0);
  CHECK(backend.checker().violation_count() == 0);
  // The mix really happened.
  INFO("finished ", finished, ", cancelled ", cancelled, ", failed ", failed, ", refused ", refused, ", promoted ",
       promoted);
  CHECK(finished > 50);
  CHECK(cancelled > 50);
  CHECK(failed > 10);
  CHECK(refused > 10);
  CHECK(promoted > 10);
}

TEST_CASE("SideLane.the leak check sees a request left behind (it is not vacuous)") {
  mstar::host_backend backend;
  Engine engine(backend, small_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream();
  engine.set_side_stream<Codec>(lane);
  auto a = *engine.add_request(1);
  mstar::row rows[] = {{a, 3}};
  auto noop = [](const auto&) {};
  REQUIRE(engine.run(PrefillStep{rows}, chain, noop));
  REQUIRE(engine.run(CodecStep{rows}, lane, noop));
  auto full = [&] {
    for (const auto& st : engine.stats())
      if (st.free != st.capacity || st.requests != 0) return false;
    return engine.requests().live() == 0;
  };
  CHECK_FALSE(full());
  REQUIRE(engine.remove_request(a, chain));
  CHECK(full());
  backend.synchronize(lane);
}

TEST_CASE("SideLane.a teardown from the main thread while the GPU thread runs side steps on the lane cannot crash") {
  // The seed's review bug: the main thread entered the lane's stream for a teardown while the GPU
  // thread held it for a side step. Here both threads use the lane stream at once, for thousands of
  // steps and teardowns.
  mstar::host_backend backend;
  Engine engine(backend, small_options());
  auto chain = backend.create_stream();
  auto lane = backend.create_stream();
  engine.set_side_stream<Codec>(lane);
  std::mutex m;
  std::vector<mstar::request_ref> live;
  std::atomic<bool> stop{false};
  std::atomic<int> steps{0}, teardowns{0};
  std::vector<std::uint32_t> in(8, 1), out(8, 0);
  std::thread gpu([&] {
    while (!stop.load()) {
      std::vector<mstar::row> rows;
      {
        std::lock_guard g(m);
        for (std::size_t i = 0; i < live.size() && rows.size() < 3; ++i)
          rows.push_back({live[i]});
      }
      if (rows.empty()) {
        std::this_thread::yield();
        continue;
      }
      (void)engine.run(CodecStep{rows}, lane, [&](const auto& ctx) {
        codec_window<float>(backend, ctx.stream, ctx.template plan<State>(), in.data(), out.data());
      });
      steps.fetch_add(1);
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; (teardowns.load() < 1500 || steps.load() < 1500) && std::chrono::steady_clock::now() < deadline;
       ++i) {
    mstar::request_ref r{};
    {
      std::lock_guard g(m);
      if (auto added = engine.add_request(i)) live.push_back(*added);
      if (live.size() < 3) continue;
      r = live[static_cast<std::size_t>(i) % live.size()];
      live.erase(std::find(live.begin(), live.end(), r));
    }
    engine.remove_request(r, chain); // the codec's slot is zeroed on the lane, while the GPU thread uses it
    teardowns.fetch_add(1);
    std::this_thread::yield();
  }
  stop.store(true);
  gpu.join();
  {
    std::lock_guard g(m);
    for (auto r : live)
      engine.remove_request(r, chain);
  }
  backend.synchronize(lane);
  backend.synchronize(chain);
  CHECK(teardowns.load() >= 1500);
  CHECK(steps.load() >= 1500);
  CHECK(engine.resource<State>().free_count() == 3);
  CHECK(engine.requests().live() == 0);
  CHECK(backend.checker().violation_count() == 0);
}
