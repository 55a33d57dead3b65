// Heap allocations of the worker's threads in steady state, on the Qwen3-TTS model (host backend):
// a global operator new that counts per thread, a warm-up, then a steady phase of continuous
// batching (a new request submitted as soon as one ends, `--live` of them at once), the side lane
// (a codec window every 8 frames), the next decode step staged and predicted, and every 7th request
// cancelled at a varying moment. Prints the allocations of each thread per step and per request,
// and exits 1 when the GPU or the plan thread allocated at all in the steady phase: their per-step
// path is allocation-free, and this keeps it so (the meson tests worker_steady_allocs*).
//
//   mstar_worker_allocs [--warmup 300] [--requests 1500] [--live 48] [--max-batch 64] [--lane on|off|auto]
//                       [--prefill-min-batch N] [--per-key]
//
// --max-batch below --live makes cohorts (rows ready while a step runs: stages formed from ready
// rows, not predicted); --prefill-min-batch gives the prefill node a batch window (max_wait 200 us);
// --per-key batches the codec node per key (its window width).
//
// Its own executable, so that the replaced operator new stays out of mstar_tests. A thread is told
// apart by what runs on it: the flow's hooks on the main thread, the forwards on the GPU thread, the
// forwards' stream tasks on the host backend's stream threads, the submits on this one; the plan
// thread runs none of the user's code and is the one thread left. Counts, never times, decide the
// exit status. Every bound the worker's own containers reach is set at construction (step records,
// queues, rings), so the warm-up only has to run each path once (each node, the lane, a pre-plan, a
// cancel), not to reach a high-water mark.
#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/worker.hpp>

#include "../../bench/common/tts_shape_flow.hpp"
#include "qwen3_tts/model.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

// ---- allocation counting, per thread ----
// The counting operators are shared with the planner benchmark (bench/common: the measuring tools live
// with the benchmarks; this test is the one measuring tool outside them).
#include "../../bench/common/counting_new.hpp"
namespace {

enum class role : int { other, client, main, gpu, stream, count };
constexpr std::array<const char*, int(role::count)> role_names{"plan", "client", "main", "GPU", "streams"};

// One per thread that allocated or was given a role (never reused: a run has a handful of threads).
struct thread_count {
  std::atomic<std::uint64_t> allocs{0};
  std::atomic<role> is{role::other};
};
constexpr int max_threads = 64;
std::array<thread_count, max_threads> counts;
std::atomic<int> threads_seen{0};
thread_local int slot = -1;

thread_count& this_thread_count() noexcept {
  if (slot < 0) slot = std::min(threads_seen.fetch_add(1, std::memory_order_relaxed), max_threads - 1);
  return counts[static_cast<std::size_t>(slot)];
}
void this_thread_is(role r) noexcept { this_thread_count().is.store(r, std::memory_order_relaxed); }

// Set a breakpoint here to see where a thread allocates in the steady phase (the argument is its
// role; 3 is the GPU thread, 0 the plan thread):
//   gdb --args mstar_worker_allocs; break allocated_in_steady_phase; run; bt
std::atomic<bool> steady{false};
[[gnu::noinline]] void allocated_in_steady_phase(role r) noexcept { asm volatile("" ::"r"(r)); }

void count_one() noexcept {
  auto& c = this_thread_count();
  c.allocs.fetch_add(1, std::memory_order_relaxed);
  const auto r = c.is.load(std::memory_order_relaxed);
  if (steady.load(std::memory_order_relaxed)) allocated_in_steady_phase(r);
}

} // namespace

void mstar_bench::count_allocation() noexcept { count_one(); }

namespace {

using Model = qwen3_tts::Model;
// The benchmarks' flow (prefill of 16 tokens, `frames` decode steps, a codec window every 8 frames;
// nothing computed), whose hooks run on the main thread: start marks it.
struct steady_flow : mstar_bench::tts_shape_flow {
  void start(request_state& s, mstar::request_id id, std::uint32_t frames) {
    this_thread_is(role::main);
    tts_shape_flow::start(s, id, frames);
  }
};

using Worker = mstar::threaded_worker<Model, mstar::host_backend, steady_flow>;

struct snapshot {
  std::array<std::uint64_t, int(role::count)> allocs{};
  std::uint64_t chain_steps = 0, side_steps = 0, staged = 0, ended = 0;
};
// Read while every thread is alive (a slot outlives its thread anyway: counts is static).
snapshot take(const Worker& w, const steady_flow& flow) {
  snapshot s;
  const int n = std::min(threads_seen.load(std::memory_order_acquire), max_threads);
  for (int i = 0; i < n; ++i) {
    const auto& c = counts[static_cast<std::size_t>(i)];
    s.allocs[static_cast<std::size_t>(c.is.load(std::memory_order_relaxed))] +=
        c.allocs.load(std::memory_order_relaxed);
  }
  s.chain_steps = w.counters().chain_steps.load();
  s.side_steps = w.counters().side_steps.load();
  s.staged = w.counters().staged.load();
  s.ended = flow.ended.load(std::memory_order_acquire);
  return s;
}

std::uint32_t parse(const char* flag, const char* v) {
  char* end = nullptr;
  const unsigned long x = std::strtoul(v, &end, 10);
  if (end == v || *end != 0 || x == 0 || x > 1000000) {
    std::fprintf(stderr, "mstar_worker_allocs: %s %s; give a count from 1 to 1000000\n", flag, v);
    std::exit(2);
  }
  return static_cast<std::uint32_t>(x);
}

} // namespace

int main(int argc, char** argv) {
  this_thread_is(role::client);
  std::uint32_t warmup = 300, requests = 1500, live = 48, max_batch = 64, min_batch = 0;
  mstar::lane_mode lane = mstar::lane_mode::on;
  std::string lane_name = "on";
  bool per_key = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--per-key") {
      per_key = true;
      continue;
    }
    if (i + 1 < argc && a == "--lane") {
      const std::string v = argv[++i];
      if (v != "on" && v != "off" && v != "auto") {
        std::fprintf(stderr, "mstar_worker_allocs: --lane %s; use on, off or auto\n", v.c_str());
        return 2;
      }
      lane_name = v;
      lane = v == "on" ? mstar::lane_mode::on : v == "off" ? mstar::lane_mode::off : mstar::lane_mode::automatic;
      continue;
    }
    if (i + 1 >= argc ||
        (a != "--warmup" && a != "--requests" && a != "--live" && a != "--max-batch" && a != "--prefill-min-batch")) {
      std::fprintf(stderr,
                   "mstar_worker_allocs: %s; use --warmup N, --requests N, --live N, --max-batch N, "
                   "--prefill-min-batch N, --lane on|off|auto, --per-key\n",
                   a.c_str());
      return 2;
    }
    const auto v = parse(argv[i], argv[i + 1]);
    ++i;
    (a == "--warmup"      ? warmup
     : a == "--requests"  ? requests
     : a == "--live"      ? live
     : a == "--max-batch" ? max_batch
                          : min_batch) = v;
  }
  live = std::min(live, 128u);
  max_batch = std::min(max_batch, 128u);

  mstar::host_backend backend(mstar::host_backend_options{.check_ordering = false});
  mstar::engine_options eo;
  eo.max_batch = max_batch;
  eo.max_tokens = 4096;
  eo.max_requests = 128;
  eo.max_labels = 1;
  mstar::engine<Model, mstar::host_backend> engine(backend, eo);
  steady_flow flow;
  mstar::worker_options wo;
  wo.lane = lane;
  wo.nodes.resize(Model::descriptor.nodes.size());
  wo.nodes[steady_flow::nodes.prefill].min_batch = min_batch;
  wo.nodes[steady_flow::nodes.prefill].max_wait = std::chrono::microseconds(min_batch > 1 ? 200 : 0);
  if (per_key) wo.nodes[steady_flow::nodes.codec].batch = mstar::batching::per_key;
  Worker w(engine, flow, wo);
  auto task = [&backend](auto stream) { backend.enqueue(stream, [] { this_thread_is(role::stream); }); };
  w.forward<qwen3_tts::TalkerPrefill>([&](const auto& ctx) {
    this_thread_is(role::gpu);
    task(ctx.stream);
  });
  w.forward<qwen3_tts::TalkerDecode>([&](const auto& ctx) {
    this_thread_is(role::gpu);
    task(ctx.stream);
  });
  w.forward<qwen3_tts::CodecChunk>([&](const auto& ctx) {
    this_thread_is(role::gpu);
    task(ctx.stream);
  });
  w.start();

  // Continuous batching: `live` requests at once, a new one as soon as one ends; every 7th is
  // cancelled, at a moment that moves through its life (right after its submit, or when a later
  // request is submitted).
  std::uint64_t next = 0;
  auto submit_until = [&](std::uint64_t total) {
    while (next < total) {
      while (next - flow.ended.load(std::memory_order_acquire) >= live)
        std::this_thread::yield();
      const std::uint32_t frames = 24 + static_cast<std::uint32_t>((next * 37) % 57);
      w.submit(next, frames);
      if (next % 7 == 3) w.cancel(next - (next / 7) % 3 * 7);
      ++next;
    }
  };
  // Warm-up: until `warmup` requests have ended (every thread has run its part and is told apart by
  // then), and the lane stream exists (it is created, allocating, at the first side step on the
  // lane; lane_mode automatic tries both arms first, so it comes early).
  while (flow.ended.load(std::memory_order_acquire) < warmup ||
         (lane != mstar::lane_mode::off && w.counters().lane_created.load() == 0 && next < 20ull * warmup + live))
    submit_until(next + 1);
  const auto before = take(w, flow);
  const auto warmed = next;
  steady.store(true, std::memory_order_relaxed);
  submit_until(warmed + requests);
  // The steady phase ends with the last submit: the tail (the live count draining to 0) is not steady.
  steady.store(false, std::memory_order_relaxed);
  const auto after = take(w, flow);
  w.wait_idle();
  w.stop();

  const auto chain = after.chain_steps - before.chain_steps, side = after.side_steps - before.side_steps;
  const auto staged = after.staged - before.staged, ended = after.ended - before.ended;
  std::printf("mstar_worker_allocs: warm-up %llu requests, steady phase %u requests (%u live at once, max_batch %u, "
              "lane %s, prefill min_batch %u, codec batched %s, every 7th cancelled)\n",
              static_cast<unsigned long long>(warmed), requests, live, max_batch, lane_name.c_str(), min_batch,
              per_key ? "per key" : "every key");
  std::printf("  steady phase: %llu chain steps, %llu side steps, %llu staged, %llu requests ended\n",
              static_cast<unsigned long long>(chain), static_cast<unsigned long long>(side),
              static_cast<unsigned long long>(staged), static_cast<unsigned long long>(ended));
  std::printf("  %-8s %14s %10s %14s %14s\n", "thread", "until steady", "allocs", "per step", "per request");
  const double steps = double(std::max<std::uint64_t>(chain + side, 1));
  for (int r : {int(role::main), int(role::gpu), int(role::other), int(role::client), int(role::stream)}) {
    const auto n = after.allocs[std::size_t(r)] - before.allocs[std::size_t(r)];
    std::printf("  %-8s %14llu %10llu %14.4f %14.4f\n", role_names[std::size_t(r)],
                static_cast<unsigned long long>(before.allocs[std::size_t(r)]), static_cast<unsigned long long>(n),
                double(n) / steps, double(n) / double(std::max<std::uint64_t>(ended, 1)));
  }
  int status = 0;
  if (chain == 0 || side == 0 || staged == 0) {
    std::fprintf(stderr, "FAIL: the steady phase ran no chain step, side step or stage; it measured nothing\n");
    status = 1;
  }
  for (const role r : {role::gpu, role::other}) {
    const auto n = after.allocs[std::size_t(r)] - before.allocs[std::size_t(r)];
    if (n != 0) {
      std::fprintf(stderr,
                   "FAIL: the %s thread allocated %llu times in the steady phase (%llu steps); its per-step path "
                   "must not allocate. Find where: gdb --args %s, break allocated_in_steady_phase, run, bt\n",
                   role_names[std::size_t(r)], static_cast<unsigned long long>(n),
                   static_cast<unsigned long long>(chain + side), argv[0]);
      status = 1;
    }
  }
  return status;
}
