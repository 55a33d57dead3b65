// The worker's soak on the host backend: thousands of requests through the three threads, with pools
// small enough that rows park (4 codec slots, 8 live requests, so a backlog forms too), run twice:
// once with no cancellations, once cancelling requests at random moments (before admission, parked,
// during chain and side steps, during and after teardown). At the end of each run every pool is full
// again, the ordering checker saw nothing, and every request that was not cancelled produced bytes
// identical to the run without cancellations (and to the single-threaded reference). Per lane mode one
// of the two runs uses the flow with the continues() hook and the other the flow without it, so the
// staged prediction of the next decode step misses both on cancels and on requests that finish.
// The run with cancellations gives the prefill node a min_batch (3 rows, up to 20 ms), so rows also
// wait in the ready queue for a batch when cancels reach them, and the bytes still equal the run
// without. Then the same pair once more (lane on) over a KV cache of 12 blocks, too small for the live
// requests, so prefills park at readiness on the KV cache (requests sized to the blocks their prefill
// takes, prompt + frames = 8k tokens, so decode rows never need a block and nothing can stall): at
// the end no KV reservation is left and no KV admit was refused. In the runs with cancellations the
// flow's end hook throws for every seventh request (after taking the result): each is counted once,
// and nothing else changes (issue 20: one throwing end hook stopped the worker and left pools held).
//
//   mstar_worker_soak [--requests N] [--seed S] [--lane off|on|auto|all]
//
// Exit status 0 when every check held, 1 otherwise (each failure printed). Built three times by
// tests/worker/meson.build: plain, under ThreadSanitizer, and under AddressSanitizer + UBSan.
#include "worker/tts_flow.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>

using namespace worker_test;

namespace {

int failures = 0;
void fail(const std::string& what) {
  ++failures;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

bool flow_done(tts_flow& f, std::size_t id) {
  std::lock_guard g(f.lock);
  return f.results.count(id) != 0;
}

struct run_result {
  std::map<mstar::request_id, result> results;
  std::vector<bool> cancelled;
};

// The flow with an end hook that throws for every seventh request, once it has taken the result.
template <class Flow>
struct throwing_end : Flow {
  static bool throws(mstar::request_id id) { return id % 7 == 3; }
  void end(typename Flow::request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    Flow::end(s, id, how, why);
    if (throws(id)) throw std::runtime_error("the soak's end hook throws for request " + std::to_string(id));
  }
};

using SmallKv = tts_model<12>;
constexpr bool big_kv = true, small_kv = false;

template <class Flow, bool BigKv = big_kv, class M = std::conditional_t<BigKv, tts_model<512>, SmallKv>>
run_result run(const std::vector<tts_input>& in, mstar::lane_mode lane, bool cancel, std::uint64_t seed) {
  mstar::host_backend backend;
  mstar::engine<typename M::type, mstar::host_backend> engine(backend, options(/*max_requests=*/8));
  Flow flow;
  mstar::worker_options o;
  o.lane = lane;
  o.nodes.resize(3);
  o.nodes[codec_node].batch = (seed & 1) ? mstar::batching::per_key : mstar::batching::every_key;
  if (cancel) { // the run with cancellations also batches prefills across time: cancels land on waiting rows
    o.nodes[prefill_node].min_batch = 3;
    // The node waits only while its rows come at most max_wait apart on average (detail::batch_window). Requests
    // come ~1.3 ms apart in the plain soak and 10x further apart under TSan on a loaded 2-core CI machine, where
    // 1 ms saw no wait at all: 20 ms keeps thousands of waits a run even then (the chain never idles for them).
    o.nodes[prefill_node].max_wait = std::chrono::milliseconds(20);
  }
  o.trace_events = 1 << 12;
  run_result out;
  out.cancelled.assign(in.size(), false);
  {
    mstar::threaded_worker<typename M::type, mstar::host_backend, Flow> w(engine, flow, o);
    install_forwards<M>(w, backend);
    w.start();
    // A monitor reads the figures and the trace while the worker runs and while it stops, as the
    // worker allows from any thread at any time (ThreadSanitizer checks that it races with nothing).
    std::atomic<bool> monitor_stop{false};
    std::thread monitor([&] {
      while (!monitor_stop.load()) {
        const auto sum = w.summary();
        if (sum.gpu_busy_fraction > 1.0) fail("a live summary's GPU busy fraction is above 1");
        (void)mstar::trace::to_json(w.trace_session());
        std::this_thread::sleep_for(std::chrono::milliseconds(20)); // a report costs ~1 ms: leave the cores
      }
    });
    std::mt19937_64 rng(seed);
    const auto t0 = std::chrono::steady_clock::now();
    // Keep about `window` requests submitted and not ended: a little more than the engine holds (8),
    // so a short backlog forms, and cancels land on requests in every state.
    constexpr std::size_t window = 12;
    for (std::size_t i = 0; i < in.size(); ++i) {
      w.submit(i, in[i]);
      if (cancel && rng() % 3 == 0) {
        if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        // Mostly a recent request (in the backlog, parked, mid-step); sometimes an older one (maybe
        // ending or ended).
        const auto span = rng() % 8 == 0 ? std::min<std::size_t>(i + 1, 40) : std::min<std::size_t>(i + 1, window);
        const auto victim = i - rng() % span;
        w.cancel(victim);
        out.cancelled[victim] = true;
      }
      while (i >= window && !flow_done(flow, i - window))
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    w.wait_idle();
    w.stop();
    monitor_stop = true;
    monitor.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& c = w.counters();
    std::printf(
        "%slane %-4s %-9s %-9s %zu requests in %.2f s: %llu chain steps (%llu staged, %llu of them predicted, %llu "
        "promoted, %llu dropped), %llu side steps (%llu on the lane), %llu parked, %llu refusals, %llu batch waits; "
        "cancels: %llu "
        "backlog, %llu parked, %llu side, %llu chain, %llu idle, %llu ended\n",
        BigKv ? "" : "small KV: ", std::string(mstar::name_of(lane)).c_str(), cancel ? "cancels" : "no-cancel",
        mstar::predicts_continuation<Flow> ? "hook" : "no-hook", in.size(), s, (unsigned long long)c.chain_steps.load(),
        (unsigned long long)c.staged.load(), (unsigned long long)c.speculative_stages.load(),
        (unsigned long long)c.promoted.load(), (unsigned long long)c.stage_drops.load(),
        (unsigned long long)c.side_steps.load(), (unsigned long long)c.side_steps_on_lane.load(),
        (unsigned long long)c.parked.load(), (unsigned long long)c.refusals.load(),
        (unsigned long long)c.batch_waits.load(), (unsigned long long)c.cancel_backlog.load(),
        (unsigned long long)c.cancel_parked.load(), (unsigned long long)c.cancel_side.load(),
        (unsigned long long)c.cancel_chain.load(), (unsigned long long)c.cancel_idle.load(),
        (unsigned long long)c.cancel_ended.load());
    if (c.teardown_errors.load() != 0) fail("teardown errors: " + std::to_string(c.teardown_errors.load()));
    const std::uint64_t throwing = cancel ? (in.size() + 3) / 7 : 0; // ids 3, 10, 17, ... below in.size()
    if (c.end_hook_errors.load() != throwing || w.request_metrics().failed() != throwing)
      fail(std::to_string(throwing) + " end hooks threw; the worker counted " + std::to_string(c.end_hook_errors.load()) +
           " and the request metrics " + std::to_string(w.request_metrics().failed()) + " failed requests");
    if (!cancel && c.parked.load() == 0) fail("no row parked: the pools are too large to exercise parking");
    if (c.speculative_stages.load() == 0) fail("no decode step was staged from a prediction");
    // Over the small KV cache few rows are ready at once (most park on the KV cache), so whether the prefill node
    // ever waits there depends on timing (a TSan run on 2 cores saw none): the large-KV runs carry the coverage.
    if (cancel && BigKv && c.batch_waits.load() == 0)
      fail("the prefill node never waited for its min_batch: the run no longer covers rows waiting for a batch");
    if (!cancel && c.batch_waits.load() != 0) fail("a node waited for a batch in a run without min_batch");
    if (c.promoted.load() + c.stage_drops.load() != c.staged.load())
      fail("every published stage is promoted or dropped: " + std::to_string(c.staged.load()) + " staged, " +
           std::to_string(c.promoted.load()) + " promoted, " + std::to_string(c.stage_drops.load()) + " dropped");
    if constexpr (!BigKv) {
      const auto& kv = engine.template resource<typename M::Kv>();
      // The KV cache's own refusal count includes the plan thread's pre-admits of mispredicted stages
      // (without the continues() hook a request's last decode row is predicted to continue and would
      // need a block): those cost a stage, never a step. A step's admit is never refused.
      std::printf("  small KV: %llu readiness refusals (rows parked on the KV cache), %llu KV refusals (stages)\n",
                  (unsigned long long)kv.reserve_refusals(), (unsigned long long)kv.stats().refusals);
      if (!cancel && kv.reserve_refusals() == 0) fail("small KV: no row parked on the KV cache");
      if (c.refusals.load() != 0)
        fail("small KV: " + std::to_string(c.refusals.load()) +
             " step admits were refused (rows should park at readiness instead)");
      if (kv.reserved_blocks() != 0)
        fail("small KV: " + std::to_string(kv.reserved_blocks()) + " blocks still reserved after the run");
    }
  }
  std::string why;
  if (!pools_full(engine, &why)) fail("a pool is not full after the run: " + why);
  if (backend.checker().violation_count() != 0)
    fail("the ordering checker reported " + std::to_string(backend.checker().violation_count()) + " violations");
  std::lock_guard g(flow.lock);
  out.results = std::move(flow.results);
  return out;
}

} // namespace

int main(int argc, char** argv) {
  std::size_t requests = 3000;
  std::uint64_t seed = 1;
  std::string lane = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mstar_worker_soak: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--requests")
      requests = std::stoul(next());
    else if (a == "--seed")
      seed = std::stoull(next());
    else if (a == "--lane")
      lane = next();
    else {
      std::fprintf(stderr, "mstar_worker_soak: unknown argument %s; use --requests N, --seed S, --lane off|on|auto|all\n",
                   a.c_str());
      return 2;
    }
  }
  std::vector<mstar::lane_mode> modes;
  if (lane == "off" || lane == "all") modes.push_back(mstar::lane_mode::off);
  if (lane == "on" || lane == "all") modes.push_back(mstar::lane_mode::on);
  if (lane == "auto" || lane == "all") modes.push_back(mstar::lane_mode::automatic);
  if (modes.empty()) {
    std::fprintf(stderr, "mstar_worker_soak: --lane %s; use off, on, auto or all\n", lane.c_str());
    return 2;
  }
  std::mt19937_64 rng(seed);
  std::vector<tts_input> in_all(requests);
  for (auto& r : in_all)
    r = {rng(), 4 + static_cast<std::uint32_t>(rng() % 20), 1 + static_cast<std::uint32_t>(rng() % 24)};

  // The small-KV pair's requests: 1 to 3 blocks of 8 tokens each, whole lives included.
  std::vector<tts_input> block_sized(std::max<std::size_t>(requests / 3, 1));
  for (auto& r : block_sized) {
    const auto k = 1 + static_cast<std::uint32_t>(rng() % 3), frames = 1 + static_cast<std::uint32_t>(rng() % 7);
    r = {rng(), 8 * k - frames, frames};
  }
  if (lane == "on" || lane == "all") modes.push_back(mstar::lane_mode::on); // the small-KV pair, last

  for (std::size_t m = 0; m < modes.size(); ++m) {
    const auto mode = modes[m];
    const bool kv_pair = m + 1 == modes.size() && (lane == "on" || lane == "all");
    const auto& in = kv_pair ? block_sized : in_all;
    const bool hook_when_noisy = (static_cast<std::size_t>(mode) % 2) == 1;
    const auto clean = kv_pair           ? run<tts_flow, small_kv>(in, mode, false, seed)
                       : hook_when_noisy ? run<tts_flow>(in, mode, false, seed)
                                         : run<tts_flow_predicting>(in, mode, false, seed);
    const auto noisy = kv_pair           ? run<throwing_end<tts_flow_predicting>, small_kv>(in, mode, true, seed + 1)
                       : hook_when_noisy ? run<throwing_end<tts_flow_predicting>>(in, mode, true, seed + 1)
                                         : run<throwing_end<tts_flow>>(in, mode, true, seed + 1);
    std::size_t compared = 0, cancelled = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const auto& a = clean.results.at(i);
      const auto& b = noisy.results.at(i);
      if (a.how != mstar::request_end::completed || a.audio != reference_audio(in[i]))
        fail("request " + std::to_string(i) + " did not complete with the reference's bytes in the run without cancels");
      if (noisy.cancelled[i]) {
        ++cancelled;
        if (b.how == mstar::request_end::failed) fail("request " + std::to_string(i) + " failed (it was cancelled)");
      } else if (b.how != mstar::request_end::completed) {
        fail("request " + std::to_string(i) + " was not cancelled but did not complete");
      }
      if (b.how == mstar::request_end::completed) {
        ++compared;
        if (b.audio != a.audio) fail("request " + std::to_string(i) + ": bytes differ from the run without cancels");
      }
    }
    std::printf("%slane %-4s %zu requests completed with identical bytes, %zu cancelled\n", kv_pair ? "small KV: " : "",
                std::string(mstar::name_of(mode)).c_str(), compared, cancelled);
  }
  if (failures != 0) {
    std::fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  std::puts("soak: every check held");
  return 0;
}
