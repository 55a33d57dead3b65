// Host cost of the step runner on the Qwen3-TTS model: admit + plan + commit of one step at 8, 64,
// 128 and 256 rows, with and without a promoted pre-plan, and the pre-plan itself; heap allocations
// per step counted (a global operator new that counts). On the host backend (ordering checks off;
// the host_checked variants keep them on), whose enqueue stands in for cudaMemcpyAsync; and, in the
// mstar_planner_bench_cuda build (MSTAR_PLANNER_BENCH_CUDA), on the CUDA backend, where a plan's
// one copy is a real cudaMemcpyAsync from pinned memory and its event a real cudaEventRecord.
//
//   meson setup build --buildtype=release && ninja -C build bench/planner/mstar_planner_bench
//   build/bench/planner/mstar_planner_bench --benchmark_counters_tabular=true
//
// Each step is timed alone (two steady_clock reads, ~40 ns, are in every figure), so that work that
// belongs to another thread (the plan thread's pre-plan) or to no step (recycling the requests
// before the KV cache fills) stays out of it. Counters: p50_ns (the figure: an uninterrupted step),
// p90_ns, mean_ns (includes preemptions on a shared machine), allocs_per_step.
//
//   decode_step        talker_decode (KV cache, attention, positions, sampler), fresh admit + plan
//   decode_promoted    the same step staged beforehand by pre_plan: admit + plan (a promote) + commit
//   decode_preplan     pre_plan alone (the plan thread's cost per chain step)
//   decode_preplan_and_promote   pre_plan + admit + promote + commit (both threads' cost)
//   codec_side_step    codec_chunk on its recurrent pool, on the lane: admit + plan + commit
#include <benchmark/benchmark.h>

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#if defined(MSTAR_PLANNER_BENCH_CUDA)
#include <mstar/backend/cuda_impl.hpp>
#endif

#include "qwen3_tts/model.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

// ---- allocation counting ----
#include "../common/counting_new.hpp"
namespace {
std::atomic<std::uint64_t> allocations{0};
}
void mstar_bench::count_allocation() noexcept { allocations.fetch_add(1, std::memory_order_relaxed); }

namespace {

using Model = qwen3_tts::Model;
using Decode = mstar::chain_step<Model, qwen3_tts::TalkerDecode>;
using Prefill = mstar::chain_step<Model, qwen3_tts::TalkerPrefill>;
using Codec = mstar::side_step<Model, qwen3_tts::CodecChunk>;
using clock_type = std::chrono::steady_clock;

// Every 256 steps the requests are torn down and added again (untimed), so the KV cache never fills.
constexpr int recycle_every = 256;

mstar::engine_options options() {
  mstar::engine_options o;
  if (const char* d = std::getenv("MSTAR_BENCH_STAGING_DEPTH"))
    o.staging_depth = static_cast<std::uint32_t>(std::atoi(d));
  return o;
}
inline mstar::host_backend_options backend_options(mstar::host_backend*, bool checked) {
  return mstar::host_backend_options{.check_ordering = checked};
}
#if defined(MSTAR_PLANNER_BENCH_CUDA)
inline mstar::cuda_backend_options backend_options(mstar::cuda_backend*, bool) { return {}; }
#endif

template <class Backend>
struct bench_engine {
  using stream_type = typename Backend::stream_type;
  Backend backend;
  mstar::engine<Model, Backend> engine;
  stream_type chain, lane;
  std::vector<mstar::row> rows;

  bench_engine(int n, bool checked)
      : backend(backend_options(static_cast<Backend*>(nullptr), checked)), engine(backend, options()),
        chain(backend.create_stream()), lane(backend.create_stream(mstar::stream_priority::high)) {
    engine.template set_side_stream<qwen3_tts::CodecChunk>(lane);
    rows.resize(static_cast<std::size_t>(n));
    add_all();
  }
  ~bench_engine() {
    backend.synchronize(chain);
    backend.synchronize(lane);
  }
  void add_all() {
    static mstar::request_id next = 1;
    for (auto& r : rows)
      r = mstar::row{*engine.add_request(next++), 1, 0};
    if (!engine.runner().admit(Prefill{rows}) || !engine.runner().plan(Prefill{rows}, chain) ||
        !engine.runner().commit(Prefill{rows}))
      std::abort();
  }
  void recycle() {
    backend.synchronize(chain);
    backend.synchronize(lane);
    for (auto& r : rows)
      engine.remove_request(r.request, chain);
    add_all();
    // The teardown queued the codec slots' zeroes (megabytes): let them run before timing resumes.
    backend.synchronize(chain);
    backend.synchronize(lane);
  }
};

// Per-step wall times. This machine is shared (2 cores, other builds running): a step that the OS
// preempts takes milliseconds, so the mean mixes the planner's cost with the scheduler's. The median
// is the cost of an uninterrupted step; both are reported.
struct step_timer {
  std::vector<float> samples;
  double ns = 0;
  std::uint64_t allocs = 0, steps = 0;
  step_timer() { samples.reserve(std::size_t{1} << 22); }
  template <class F>
  void time(F&& f) {
    const auto a0 = allocations.load(std::memory_order_relaxed);
    const auto t0 = clock_type::now();
    f();
    const auto t1 = clock_type::now();
    allocs += allocations.load(std::memory_order_relaxed) - a0;
    const double d = std::chrono::duration<double, std::nano>(t1 - t0).count();
    ns += d;
    if (samples.size() < samples.capacity()) samples.push_back(static_cast<float>(d));
    ++steps;
  }
};

void finish(benchmark::State& state, step_timer& t) {
  auto at = [&](double q) {
    const auto k = static_cast<std::size_t>(q * double(t.samples.size() - 1));
    std::nth_element(t.samples.begin(), t.samples.begin() + static_cast<std::ptrdiff_t>(k), t.samples.end());
    return double(t.samples[k]);
  };
  state.counters["p50_ns"] = benchmark::Counter(at(0.5));
  state.counters["p90_ns"] = benchmark::Counter(at(0.9));
  state.counters["mean_ns"] = benchmark::Counter(t.ns / double(t.steps));
  state.counters["allocs_per_step"] = benchmark::Counter(double(t.allocs) / double(t.steps));
}

template <class Backend, class Body>
void run(benchmark::State& state, bool checked, Body&& body) {
  bench_engine<Backend> b(static_cast<int>(state.range(0)), checked);
  step_timer t;
  int k = 0;
  for (auto _ : state) {
    if (++k % recycle_every == 0) b.recycle();
    const double before = t.ns;
    body(b, t);
    state.SetIterationTime((t.ns - before) * 1e-9);
  }
  finish(state, t);
}

void must(const mstar::step_outcome& o) {
  if (!o) {
    std::fprintf(stderr, "planner_bench: a step did not go through: %s\n", o.message().c_str());
    std::abort();
  }
}

template <class Backend>
void decode_step(benchmark::State& state, bool checked) {
  run<Backend>(state, checked, [](auto& b, step_timer& t) {
    t.time([&] {
      const Decode step{b.rows};
      must(b.engine.runner().admit(step));
      must(b.engine.runner().plan(step, b.chain));
      must(b.engine.runner().commit(step));
    });
  });
}
template <class Backend>
void decode_promoted(benchmark::State& state, bool checked) {
  run<Backend>(state, checked, [](auto& b, step_timer& t) {
    const Decode step{b.rows};
    must(b.engine.runner().pre_plan(step, b.chain)); // the plan thread's part, untimed here
    t.time([&] {
      must(b.engine.runner().admit(step));
      const auto p = b.engine.runner().plan(step, b.chain);
      must(p);
      if (!p.promoted) std::abort();
      must(b.engine.runner().commit(step));
    });
  });
}
template <class Backend>
void decode_preplan(benchmark::State& state, bool checked) {
  run<Backend>(state, checked, [](auto& b, step_timer& t) {
    const Decode step{b.rows};
    t.time([&] { must(b.engine.runner().pre_plan(step, b.chain)); });
    must(b.engine.runner().admit(step));
    must(b.engine.runner().plan(step, b.chain));
    must(b.engine.runner().commit(step));
  });
}
template <class Backend>
void decode_preplan_and_promote(benchmark::State& state, bool checked) {
  run<Backend>(state, checked, [](auto& b, step_timer& t) {
    t.time([&] {
      const Decode step{b.rows};
      must(b.engine.runner().pre_plan(step, b.chain));
      must(b.engine.runner().admit(step));
      must(b.engine.runner().plan(step, b.chain));
      must(b.engine.runner().commit(step));
    });
  });
}
template <class Backend>
void codec_side_step(benchmark::State& state, bool checked) {
  run<Backend>(state, checked, [](auto& b, step_timer& t) {
    t.time([&] {
      const Codec step{b.rows};
      must(b.engine.runner().admit(step));
      must(b.engine.runner().plan(step, b.lane));
      must(b.engine.runner().commit(step));
    });
  });
}

template <class Backend>
void register_all(const std::string& prefix, bool checked) {
  using fn = void (*)(benchmark::State&, bool);
  const std::pair<const char*, fn> all[] = {
      {"decode_step", &decode_step<Backend>},
      {"decode_promoted", &decode_promoted<Backend>},
      {"decode_preplan", &decode_preplan<Backend>},
      {"decode_preplan_and_promote", &decode_preplan_and_promote<Backend>},
      {"codec_side_step", &codec_side_step<Backend>},
  };
  for (const auto& [name, f] : all) {
    if (checked && std::string(name) != "decode_step" && std::string(name) != "codec_side_step") continue;
    auto* b = benchmark::RegisterBenchmark((prefix + "/" + name).c_str(), f, checked);
    for (int r : {8, 64, 128, 256})
      b->Arg(r);
    b->UseManualTime()->Unit(benchmark::kNanosecond);
  }
}

} // namespace

int main(int argc, char** argv) {
  register_all<mstar::host_backend>("host", false);
  register_all<mstar::host_backend>("host_checked", true);
#if defined(MSTAR_PLANNER_BENCH_CUDA)
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0)
    register_all<mstar::cuda_backend>("cuda", false);
  else
    std::printf("no CUDA device: the cuda/ benchmarks are left out\n");
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
