// The Qwen3-TTS-shaped example under the threaded worker, on the host backend: every request's audio
// is byte-identical with the lane off, on and automatic and with both codec batching modes, and
// equal to the single-threaded run_flow's for the same requests; cancelling some requests mid-stream
// leaves the others' audio unchanged, and every pool and output buffer is back at the end.
#include <doctest/doctest.h>

#include <mstar/backend/host.hpp>

#include "qwen3_tts/flow.hpp"
#include "qwen3_tts/loadgen.hpp"

#include <algorithm>
#include <set>
#include <string>

namespace {

struct host_rig {
  mstar::host_backend backend;
  qwen3_tts::talker<mstar::host_backend> talker{backend, qwen3_tts::talker_config::host_small()};
  qwen3_tts::codec<mstar::host_backend> codec{backend, qwen3_tts::codec_config::host_small()};
};

mstar::engine_options engine_options() {
  mstar::engine_options o;
  o.max_batch = 16;
  o.max_tokens = 1024;
  o.max_requests = 24;
  o.max_labels = 1;
  o.sampler_seed = 11;
  return o;
}

qwen3_tts::forward_options forward_options(std::uint32_t widest) {
  qwen3_tts::forward_options f;
  f.max_batch = 16;
  f.max_window = widest;
  f.buffers = 2 * mstar::worker_options{}.step_records + 2;
  f.decode_buckets = {4, 8, 16}; // padding on the host too: it must not reach the audio
  return f;
}

qwen3_tts::load_options load(double cancel_rate = 0.0) {
  qwen3_tts::load_options o;
  o.requests = 20;
  o.warmup = 4;
  o.concurrency = 8;
  o.frames_min = 3;
  o.frames_max = 24;
  o.prompt_min = 2;
  o.prompt_max = 12;
  o.seed = 5;
  o.cancel_rate = cancel_rate;
  o.flow.ramp = {2, 4, 8};
  return o;
}

// The same requests through the single-threaded flow.hpp driver (every step synchronized).
std::map<mstar::request_id, qwen3_tts::audio_digest> single_threaded(host_rig& r,
                                                                   const std::vector<qwen3_tts::planned_request>& plan) {
  std::vector<qwen3_tts::request_spec> specs;
  for (const auto& p : plan)
    specs.push_back({p.id, p.in.prompt_tokens, p.in.frames});
  mstar::engine<qwen3_tts::Model, mstar::host_backend> engine(r.backend, engine_options());
  const auto chain = r.backend.create_stream();
  const auto lane = r.backend.create_stream(mstar::stream_priority::high);
  qwen3_tts::flow_options o;
  o.concurrency = 5;
  o.ramp = {1, 3}; // another window cut: the audio of a request does not depend on it
  auto result = qwen3_tts::run_flow(engine, r.talker, r.codec, chain, lane, specs, o);
  r.backend.synchronize(chain);
  r.backend.synchronize(lane);
  return result.digests;
}

void check_clean(const qwen3_tts::arm_result& a, const host_rig& r) {
  CHECK_MESSAGE(a.pools_full, a.pools_why);
  CHECK(a.buffers_free);
  CHECK(a.failed == 0);
  CHECK(a.failed_steps == 0);
  CHECK(r.backend.checker().violation_count() == 0);
}

} // namespace

TEST_CASE("Qwen3TtsWorker.audio is byte-identical across lane off, on, auto and both codec batchings, and equals "
          "the single-threaded flow's") {
  host_rig r;
  const auto lo = load();
  const auto plan = qwen3_tts::plan_requests(lo);
  const auto reference = single_threaded(r, plan);
  REQUIRE(reference.size() == plan.size());

  std::set<std::uint64_t> codec_rows_per_step; // the arms do batch the codec differently
  for (bool per_width : {true, false})
    for (auto lane : {mstar::lane_mode::off, mstar::lane_mode::on, mstar::lane_mode::automatic}) {
      INFO("lane " << mstar::name_of(lane) << ", codec " << (per_width ? "per-width" : "all"));
      auto o = lo;
      o.lane = lane;
      o.flow.codec_per_width = per_width;
      mstar::worker_options wo;
      wo.lane_policy.min_samples = 2; // auto: both arms are taken within this short run
      const auto a = qwen3_tts::run_arm(r.backend, r.talker, r.codec, engine_options(),
                                        forward_options(8), o, nullptr, wo);
      check_clean(a, r);
      CHECK(a.completed == lo.requests);
      REQUIRE(a.digests.size() == plan.size());
      const auto diff = qwen3_tts::compare_runs(reference, a.digests);
      std::string why;
      for (const auto& d : diff)
        why += d + "\n";
      CHECK_MESSAGE(diff.empty(), why);
      CHECK(a.codec_steps > 0);
      codec_rows_per_step.insert(a.codec_rows * 1000 / a.codec_steps);
      if (lane == mstar::lane_mode::off) CHECK(a.side_steps_on_lane == 0);
      if (lane == mstar::lane_mode::on) CHECK(a.side_steps_on_lane == a.side_steps);
      if (lane == mstar::lane_mode::automatic) {
        CHECK(a.lane_on > 0);
        CHECK(a.lane_chain > 0);
      }
      // Latencies were measured on the measured requests only.
      CHECK(a.first_audio.count == lo.requests);
      CHECK(a.audio_per_s > 0.0);
    }
  CHECK(codec_rows_per_step.size() > 1);
}

TEST_CASE("Qwen3TtsWorker.cancelling requests mid-stream leaves the other requests' audio unchanged and every pool "
          "full") {
  host_rig r;
  const auto plain = load();
  const auto reference = single_threaded(r, qwen3_tts::plan_requests(plain));
  for (auto lane : {mstar::lane_mode::on, mstar::lane_mode::off}) {
    INFO("lane " << mstar::name_of(lane));
    auto o = load(0.4);
    o.lane = lane;
    const auto plan = qwen3_tts::plan_requests(o);
    std::size_t planned_cancels = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      // The cancellation plan changes nothing else of the request mix.
      CHECK(plan[i].in.frames == qwen3_tts::plan_requests(plain)[i].in.frames);
      planned_cancels += plan[i].cancel;
    }
    REQUIRE(planned_cancels >= 4);
    const auto a =
        qwen3_tts::run_arm(r.backend, r.talker, r.codec, engine_options(), forward_options(8), o);
    check_clean(a, r);
    CHECK(a.cancelled > 0);
    std::size_t kept = 0;
    for (const auto& p : plan) {
      const auto it = a.digests.find(p.id);
      if (!p.cancel) {
        INFO("request " << p.id);
        REQUIRE(it != a.digests.end());
        ++kept;
      }
      // A completed request (one planned for cancellation may finish before its cancel lands) has
      // the reference's bytes.
      if (it != a.digests.end()) CHECK(it->second == reference.at(p.id));
    }
    CHECK(kept == plan.size() - planned_cancels);
    // A cancelled request ended cancelled, with fewer chunks than it would have had.
    for (const auto& [id, res] : a.results)
      if (res.how == mstar::request_end::cancelled && res.frames > 0)
        CHECK(res.digest.samples < std::uint64_t(res.frames) * 1920);
  }
}

TEST_CASE("Qwen3TtsLoad.the whole-run audio is every chunk the measured requests got, cancelled ones' included, as the "
          "steady figure counts it") {
  host_rig r;
  auto o = load(0.4);
  o.lane = mstar::lane_mode::on;
  const auto a = qwen3_tts::run_arm(r.backend, r.talker, r.codec, engine_options(), forward_options(8), o);
  check_clean(a, r);
  std::uint64_t frames = 0, cancelled_frames = 0;
  for (const auto& [id, res] : a.results) {
    const auto& p = *std::find_if(a.plan.begin(), a.plan.end(), [&](const auto& q) { return q.id == id; });
    if (p.warmup) continue;
    for (const auto& ch : res.chunk_log) {
      frames += ch.frames;
      if (res.how == mstar::request_end::cancelled) cancelled_frames += ch.frames;
    }
  }
  REQUIRE(cancelled_frames > 0); // some cancelled request got audio before its cancel
  CHECK(a.audio_s == doctest::Approx(double(frames) / qwen3_tts::frames_per_second));
  CHECK(a.audio_per_s == doctest::Approx(a.audio_s / a.wall_s));
}

TEST_CASE("Qwen3TtsLoad.the steady-state window runs from the last warmup end to the last submit and counts the audio "
          "that landed in it, whichever request it belongs to") {
  using qwen3_tts::tts_result;
  std::vector<qwen3_tts::planned_request> plan(4);
  std::map<mstar::request_id, std::size_t> index;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    plan[i].id = 10 + i;
    plan[i].warmup = i < 2;
    index[plan[i].id] = i;
  }
  // Times in ms. Warmup requests end at 300 and 500: the window begins at 500 (not at the first, 300).
  auto at = [](double ms) { return static_cast<mstar::metrics::nanos>(ms * 1e6); };
  std::map<mstar::request_id, tts_result> results;
  results[10].ended = at(300);
  results[10].chunk_log = {{at(100), 2}, {at(290), 4}};
  results[11].ended = at(500);
  results[11].chunk_log = {{at(450), 4}, {at(500), 8}}; // at the window's start: outside (begin, end]
  results[12].ended = at(1200);
  results[12].chunk_log = {{at(520), 2}, {at(900), 4}, {at(1100), 8}}; // the last after the window
  results[13].ended = at(1300);
  results[13].chunk_log = {{at(1000), 2}}; // the window ends at the last submit, 1000: inside
  const auto f = qwen3_tts::steady_window(results, plan, index, at(0), at(1000));
  CHECK(f.seconds == doctest::Approx(0.5));
  CHECK(f.audio_s == doctest::Approx((2 + 4 + 2) / qwen3_tts::frames_per_second));
  // Without warmup the window starts at the first submit.
  for (auto& p : plan)
    p.warmup = false;
  const auto g = qwen3_tts::steady_window(results, plan, index, at(50), at(1000));
  CHECK(g.seconds == doctest::Approx(0.95));
  CHECK(g.audio_s == doctest::Approx((2 + 4 + 4 + 8 + 2 + 4 + 2) / qwen3_tts::frames_per_second));
  // Every request submitted before the warmup ended: no window.
  plan[1].warmup = true;
  CHECK(qwen3_tts::steady_window(results, plan, index, at(0), at(400)).seconds == 0);
}

TEST_CASE("Qwen3TtsLoad.a run's steady-state window lies inside it and holds the run at full concurrency") {
  host_rig r;
  auto lo = load();
  lo.requests = 40;
  lo.warmup = 8;
  lo.lane = mstar::lane_mode::on;
  const auto a = qwen3_tts::run_arm(r.backend, r.talker, r.codec, engine_options(), forward_options(8), lo);
  check_clean(a, r);
  CHECK(a.steady_s > 0);
  CHECK(a.steady_s < a.wall_s);
  // Audio landed in the window, all of it from requests that ran: no more than the whole run's.
  double all = 0;
  for (const auto& [id, res] : a.results)
    for (const auto& ch : res.chunk_log)
      all += ch.frames / qwen3_tts::frames_per_second;
  CHECK(a.steady_audio_s > 0);
  CHECK(a.steady_audio_s < all);
  CHECK(a.steady_audio_per_s == doctest::Approx(a.steady_audio_s / a.steady_s));
  // Each request's chunk log adds up to its frames.
  for (const auto& [id, res] : a.results) {
    std::uint32_t frames = 0;
    for (const auto& ch : res.chunk_log)
      frames += ch.frames;
    if (res.how == mstar::request_end::completed) CHECK(frames == res.frames);
  }
}
