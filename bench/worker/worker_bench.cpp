// The worker's host cost on the Qwen3-TTS model (host backend), the same requests run three times in
// one process: staging with prediction (the default: the next decode step is staged from the step
// just launched), staging of ready rows only (no prediction), and no staging (every chain step plans
// inline on the GPU thread). Per arm: the share of decode steps whose plan was a promoted stage, the
// stages dropped, the GPU thread's host time per pass at up to 128 rows (one chain step: forming it,
// admit, promote or plan, forward launch, commit, and forming and handing over the next one), and the
// plan-thread to GPU-thread handoff of the staged step (p50/p99: from the plan thread's push of
// "staged" to the GPU thread's pop). Baselines measured in the same run: a bare SPSC ring ping-pong
// between two threads (the floor of any handoff), and the same 128-row decode step run inline by
// engine::run on one thread (admit + plan + forward + commit, no worker).
//
//   mstar_worker_bench [--requests 128] [--frames 400] [--device-us 200] [--lane on|off] [--pin M,G,P]
//
// --pin M,G,P (CPU numbers, e.g. 2,3,4; repeats allowed, e.g. 0,1,1 on 2 cores) adds a fourth arm, the
// default one with the main, GPU and plan threads pinned to those CPUs, and a bare-ring baseline with
// its two threads pinned to G and P, so one run prints the handoff unpinned and pinned.
//
// The "device" is the host backend: each decode step's forward enqueues a spin of --device-us on the
// chain stream, so the plan thread has a step's time to stage the next one, as on a GPU. Steps hold
// at most 128 rows, so 128 requests decode as one group (every live request in every step: nothing
// is ready while a step runs, and only a prediction can be staged); 256 decode as two cohorts of
// 128, where the other cohort's rows are ready while one cohort's step runs.
#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/worker.hpp>

#include "../common/tts_shape_flow.hpp"
#include "qwen3_tts/model.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Model = qwen3_tts::Model;
using bench_flow = mstar_bench::tts_shape_flow;
constexpr std::uint32_t prompt_tokens = bench_flow::prompt_tokens;

using Worker = mstar::threaded_worker<Model, mstar::host_backend, bench_flow>;

void spin_for(std::chrono::nanoseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

mstar::engine_options options(std::uint32_t requests) {
  mstar::engine_options o;
  o.max_batch = 128;
  o.max_tokens = 4096;
  o.max_requests = requests;
  o.max_labels = 1;
  return o;
}

double us(std::uint64_t ns) { return double(ns) / 1000.0; }

struct arm {
  const char* name;
  bool preplan, predict;
  mstar::thread_affinity pin{};
  mstar::handoff_wait stage_wait = mstar::handoff_wait::automatic;
  bool no_watch = false; // worker_options::stage_watch 0: the whole loop between looks at the plan ring
  bool fixed_watch = false; // worker_options::watch_expected false: looks of stage_watch, a pass between
  bool spun = false;
  double wall_s = 0;
  std::uint64_t chain_steps = 0, decode_steps = 0, promoted = 0, staged = 0, predicted = 0, drops = 0;
  mstar::metrics::summary sum{};
  mstar::metrics::distribution find(const char* thread, const char* node, const char* phase) const {
    for (const auto& r : sum.per_thread)
      if (r.thread == thread && r.node == node && r.phase == phase) return r.time;
    return {};
  }
};

void run_arm(arm& a, std::uint32_t requests, std::uint32_t frames, std::chrono::microseconds device, bool lane_on) {
  mstar::host_backend backend(mstar::host_backend_options{.check_ordering = false});
  mstar::engine<Model, mstar::host_backend> engine(backend, options(requests));
  bench_flow flow;
  mstar::worker_options wo;
  wo.lane = lane_on ? mstar::lane_mode::on : mstar::lane_mode::off;
  wo.preplan = a.preplan;
  wo.predict_next = a.predict;
  wo.gpu_backoff = mstar::detail::backoff_policy{}; // spin then yield, never sleep: a busy worker
  wo.plan_backoff = mstar::detail::backoff_policy{};
  wo.affinity = a.pin;
  wo.stage_wait = a.stage_wait;
  if (a.no_watch) wo.stage_watch = std::chrono::nanoseconds(0);
  if (a.fixed_watch) wo.watch_expected = false;
  std::atomic<std::uint64_t> decode_steps{0};
  Worker w(engine, flow, wo);
  a.spun = w.spins_for_stage();
  w.forward<qwen3_tts::TalkerPrefill>([&](const auto& ctx) { backend.enqueue(ctx.stream, [] {}); });
  w.forward<qwen3_tts::TalkerDecode>([&](const auto& ctx) {
    decode_steps.fetch_add(1, std::memory_order_relaxed);
    backend.enqueue(ctx.stream, [device] { spin_for(device); });
  });
  w.forward<qwen3_tts::CodecChunk>([&](const auto& ctx) { backend.enqueue(ctx.stream, [] {}); });
  w.start();
  const auto t0 = mstar::metrics::now_ns();
  for (std::uint32_t i = 0; i < requests; ++i)
    w.submit(i, frames);
  w.wait_idle();
  a.wall_s = double(mstar::metrics::now_ns() - t0) / 1e9;
  w.stop();
  a.sum = w.summary();
  const auto& c = w.counters();
  a.chain_steps = c.chain_steps.load();
  a.decode_steps = decode_steps.load();
  a.promoted = c.promoted.load();
  a.staged = c.staged.load();
  a.predicted = c.speculative_stages.load();
  a.drops = c.stage_drops.load();
}

} // namespace

int main(int argc, char** argv) {
  std::uint32_t requests = 128, frames = 400, device_us = 200;
  std::string lane = "on";
  std::optional<mstar::thread_affinity> pin;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "mstar_worker_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--requests")
      requests = std::stoul(v);
    else if (a == "--frames")
      frames = std::stoul(v);
    else if (a == "--device-us")
      device_us = std::stoul(v);
    else if (a == "--lane")
      lane = v;
    else if (a == "--pin") {
      int cpu[3];
      char tail = 0;
      if (std::sscanf(v.c_str(), "%d,%d,%d%c", &cpu[0], &cpu[1], &cpu[2], &tail) != 3 || cpu[0] < 0 || cpu[1] < 0 ||
          cpu[2] < 0) {
        std::fprintf(stderr,
                     "mstar_worker_bench: --pin %s; give three CPU numbers main,gpu,plan (e.g. --pin 2,3,4, or "
                     "--pin 0,1,1 on 2 cores); allowed here: %s\n",
                     v.c_str(), mstar::detail::format_cpus(mstar::detail::allowed_cpus()).c_str());
        return 2;
      }
      pin = mstar::thread_affinity{cpu[0], cpu[1], cpu[2]};
    } else {
      std::fprintf(stderr,
                   "mstar_worker_bench: unknown argument %s (--requests, --frames, --device-us, --lane, --pin)\n",
                   a.c_str());
      return 2;
    }
  }
  if (requests == 0 || requests > 1024) {
    std::fprintf(stderr, "mstar_worker_bench: --requests %u; use 1 to 1024 (128: one group of 128 rows)\n", requests);
    return 2;
  }
  // Every request lives its whole length at once: its KV blocks must fit beside the others', or the
  // requests stall (the worker then fails some to go on) and the figures mean nothing.
  // One request may hold at most engine_options::blocks_per_request blocks.
  for (const auto& r : Model::descriptor.resources) {
    if (r.kind != mstar::resource_kind::kv_cache) continue;
    const std::uint64_t per_request = (std::uint64_t{prompt_tokens} + frames + r.block_tokens - 1) / r.block_tokens;
    const std::uint64_t per_request_max =
        std::min<std::uint64_t>(r.blocks / requests, options(requests).blocks_per_request(r.blocks));
    if (per_request > per_request_max) {
      const std::uint64_t tokens = per_request_max * r.block_tokens;
      std::fprintf(stderr,
                   "mstar_worker_bench: --requests %u x --frames %u needs %llu KV blocks of %u tokens per request at "
                   "once; the model's %.*s (%u blocks) gives each %llu; use --frames %llu or fewer, or fewer "
                   "requests\n",
                   requests, frames, static_cast<unsigned long long>(per_request), r.block_tokens,
                   static_cast<int>(r.key.size()), r.key.data(), r.blocks,
                   static_cast<unsigned long long>(per_request_max),
                   static_cast<unsigned long long>(tokens > prompt_tokens ? tokens - prompt_tokens : 0));
      return 2;
    }
  }

  // ---- the worker, three ways ----
  const auto device = std::chrono::microseconds(device_us);
  std::vector<arm> arms = {{"staged, predicted (default)", true, true},
                           {"staged, ready rows only", true, false},
                           {"not staged (inline plan)", false, false}};
  if (pin) {
    arms.push_back({"staged, predicted, pinned", true, true, *pin});
    arms.push_back({"  same, backing off (yield)", true, true, *pin, mstar::handoff_wait::back_off});
    arms.push_back({"  same, stage_watch 0", true, true, *pin, mstar::handoff_wait::automatic, true});
    arms.push_back({"  same, fixed looks", true, true, *pin, mstar::handoff_wait::automatic, false, true});
    // Refused here, with the worker's own sentence, before any arm runs.
    try {
      mstar::worker_options probe;
      probe.affinity = *pin;
      probe.check(Model::descriptor.nodes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mstar_worker_bench: --pin: %s\n", e.what());
      return 2;
    }
  }
  for (auto& a : arms)
    run_arm(a, requests, frames, device, lane != "off");
  // ---- baseline 1: a bare SPSC ring ping-pong, the floor of a handoff (unpinned; pinned with --pin) ----
  auto ring_pingpong = [](mstar::metrics::histogram& ring_h, int here_cpu, int other_cpu) {
    if (here_cpu >= 0) mstar::detail::pin_this_thread(here_cpu);
    mstar::detail::spsc_ring<std::int64_t> there(64), back(64);
    std::atomic<bool> stop{false};
    std::thread other([&] {
      if (other_cpu >= 0) mstar::detail::pin_this_thread(other_cpu);
      std::int64_t t;
      while (there.pop_wait(t, [&] { return stop.load(std::memory_order_relaxed); })) {
        ring_h.record(mstar::metrics::now_ns() - t);
        back.push_wait(0);
      }
    });
    for (int i = 0; i < 20000; ++i) {
      there.push_wait(mstar::metrics::now_ns());
      std::int64_t ack;
      back.pop_wait(ack);
    }
    stop.store(true);
    other.join();
  };
  mstar::metrics::histogram ring_h, ring_pinned_h;
  std::thread([&] { ring_pingpong(ring_h, -1, -1); }).join();
  if (pin) std::thread([&] { ring_pingpong(ring_pinned_h, pin->plan, pin->gpu); }).join();

  // ---- baseline 2: the same 128-row decode step inline on one thread (engine::run) ----
  mstar::metrics::histogram inline_h;
  {
    mstar::host_backend b2(mstar::host_backend_options{.check_ordering = false});
    mstar::engine<Model, mstar::host_backend> e2(b2, options(128));
    auto chain = b2.create_stream();
    std::vector<mstar::row> rows;
    for (std::uint32_t i = 0; i < 128; ++i)
      rows.push_back({*e2.add_request(i), 1});
    for (int k = 0; k < 2000; ++k) {
      const auto t = mstar::metrics::now_ns();
      auto out = e2.run(mstar::chain_step<Model, qwen3_tts::TalkerDecode>{rows}, chain,
                        [&](const auto& ctx) { b2.enqueue(ctx.stream, [] {}); });
      inline_h.record(mstar::metrics::now_ns() - t);
      if (!out) {
        std::fprintf(stderr, "baseline step failed: %s\n", out.message().c_str());
        return 1;
      }
      if (k % 64 == 63) b2.synchronize(chain);
      if (k % 256 == 255) { // keep the KV cache from filling: start the requests over (untimed)
        b2.synchronize(chain);
        for (auto& r : rows) {
          const auto id = e2.requests().id_of(r.request);
          e2.remove_request(r.request, chain);
          r.request = *e2.add_request(id);
        }
      }
    }
    b2.synchronize(chain);
  }

  std::printf("mstar_worker_bench: %u requests x %u frames, decode step %u us of host-backend 'device' time, lane %s\n",
              requests, frames, device_us, lane.c_str());
  std::printf("  %-28s %7s %9s %8s %8s %7s %21s %21s %21s\n", "arm", "run s", "decode st", "promoted", "predictd",
              "dropped", "pass p50 / p99 us", "handoff p50 / p99 us", "GPU admit/plan/promote");
  for (const auto& a : arms) {
    const auto pass = a.find("GPU", "talker_decode", "pass"), handoff = a.find("GPU", "talker_decode", "handoff");
    const auto admit = a.find("GPU", "talker_decode", "admit"), plan = a.find("GPU", "talker_decode", "plan"),
               promote = a.find("GPU", "talker_decode", "promote");
    std::printf("  %-28s %7.2f %9llu %7.1f%% %8llu %7llu %10.2f / %8.2f %10.2f / %8.2f %6.2f/%6.2f/%6.2f\n", a.name, a.wall_s,
                (unsigned long long)a.decode_steps,
                a.decode_steps ? 100.0 * double(promote.count) / double(a.decode_steps) : 0.0,
                (unsigned long long)a.predicted, (unsigned long long)a.drops, us(pass.p50), us(pass.p99), us(handoff.p50),
                us(handoff.p99), us(admit.p50), us(plan.p50), us(promote.p50));
  }
  if (pin) {
    const auto un = arms[0].find("GPU", "talker_decode", "handoff"), pd = arms[3].find("GPU", "talker_decode", "handoff"),
               bo = arms[4].find("GPU", "talker_decode", "handoff"), nw = arms[5].find("GPU", "talker_decode", "handoff"),
               fx = arms[6].find("GPU", "talker_decode", "handoff");
    std::printf("  handoff p50 / p99 us: unpinned (%s) %.2f / %.2f; pinned main,gpu,plan = %d,%d,%d (%s) %.2f / %.2f; "
                "pinned, backing off %.2f / %.2f; pinned, stage_watch 0 %.2f / %.2f; pinned, fixed looks %.2f / %.2f; "
                "bare ring pinned gpu,plan %.2f / %.2f\n",
                arms[0].spun ? "spin" : "back off", us(un.p50), us(un.p99), pin->main, pin->gpu, pin->plan,
                arms[3].spun ? "spin" : "back off", us(pd.p50), us(pd.p99), us(bo.p50), us(bo.p99), us(nw.p50),
                us(nw.p99), us(fx.p50), us(fx.p99), us(ring_pinned_h.percentile(50)), us(ring_pinned_h.percentile(99)));
  }
  // The handoffs the GPU thread was free for (its last piece of work had ended before the push): the
  // handoff itself; the others also waited for a side step's launch or a landing's commit to finish.
  std::printf("  handoff, GPU thread free at the push, p50 / p99 us (share of handoffs):");
  for (const auto& a : arms) {
    const auto all = a.find("GPU", "talker_decode", "handoff"), idle = a.find("GPU", "talker_decode", "handoff_idle");
    if (all.count == 0) continue;
    std::printf(" %s %.2f / %.2f (%.0f%%);", a.name + std::strspn(a.name, " "), us(idle.p50), us(idle.p99),
                100.0 * double(idle.count) / double(all.count));
  }
  std::printf("\n");
  const auto on_pass = arms[0].find("GPU", "talker_decode", "pass").p50;
  const auto off_pass = arms[2].find("GPU", "talker_decode", "pass").p50;
  std::printf("  pass p50, staged and predicted / not staged: %.2fx\n",
              double(on_pass) / double(std::max<std::uint64_t>(off_pass, 1)));
  const auto handoff = arms[0].find("GPU", "talker_decode", "handoff");
  std::printf("  baseline, bare SPSC ring one-way:    p50 %8.2f us  p99 %8.2f us  -> handoff/ring p50 %.2fx p99 %.2fx\n",
              us(ring_h.percentile(50)), us(ring_h.percentile(99)),
              double(handoff.p50) / double(std::max<std::uint64_t>(ring_h.percentile(50), 1)),
              double(handoff.p99) / double(std::max<std::uint64_t>(ring_h.percentile(99), 1)));
  std::printf("  baseline, inline engine::run 128 rows: p50 %6.2f us  p99 %8.2f us  -> pass/inline p50: predicted "
              "%.2fx, not staged %.2fx\n",
              us(inline_h.percentile(50)), us(inline_h.percentile(99)),
              double(on_pass) / double(std::max<std::uint64_t>(inline_h.percentile(50), 1)),
              double(off_pass) / double(std::max<std::uint64_t>(inline_h.percentile(50), 1)));
  const auto preplan = arms[0].find("plan", "talker_decode", "plan");
  const auto stage = arms[0].find("GPU", "talker_decode", "stage");
  std::printf("  predicted arm: GPU thread forming and handing over the next step p50 %.2f us (in the pass); plan "
              "thread pre-plan p50 %.2f us\n",
              us(stage.p50), us(preplan.p50));
  if (arms[0].sum.gpu_busy_fraction >= 0)
    std::printf("  device busy: %.1f%% predicted, %.1f%% not staged\n", arms[0].sum.gpu_busy_fraction * 100.0,
                arms[2].sum.gpu_busy_fraction * 100.0);
  return 0;
}
