// Plan-thread to GPU-thread handoff latency: the time from the plan thread's push to the GPU thread
// holding the item, through mstar::detail::spsc_ring with spin_wait (the worker's per-step path), and
// in the same run through a std::mutex + std::condition_variable queue (the usual baseline).
//
// One item is in flight at a time, as in the worker (the plan thread stages one step, the GPU thread
// takes it): the producer stamps the item with the steady clock and pushes it; the consumer reads the
// clock as soon as it holds the item and acknowledges; the producer waits for the acknowledgement
// (and an optional gap, to let the consumer's backoff reach its yield phase) before the next push.
// The acknowledgement path is the same in both arms, so only the handoff itself differs.
//
//   mstar_handoff_bench [--handoffs N] [--baseline-handoffs N] [--gap-ns G] [--spin-us S] [--no-pin]
//
// --spin-us sets the ring's backoff_policy::spin_for (how long a waiting side spins before yielding;
// default: backoff_policy::dedicated_core() when pinned, backoff_policy{} when not).
//
// Threads are pinned to two different CPUs when the process may run on at least two; the output
// says whether they were. Target (issue 4): ring p99 under 1 us with both threads on their own cores.
#include <mstar/detail/spsc_ring.hpp>
#include <mstar/worker/metrics.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>

namespace {

using mstar::metrics::nanos;
using mstar::metrics::now_ns;

struct item {
  nanos pushed_at = 0;
  std::uint64_t seq = 0;
};

struct options {
  std::uint64_t handoffs = 1'000'000;
  std::uint64_t baseline_handoffs = 1'000'000;
  nanos gap_ns = 0;
  long long spin_us = -1; // -1: backoff_policy's default
  bool pin = true;
};

struct pinning {
  bool pinned = false;
  int producer_cpu = -1, consumer_cpu = -1;
  std::string why_not;
};

pinning choose_cpus(bool want) {
  pinning p;
  if (!want) {
    p.why_not = "--no-pin";
    return p;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    p.why_not = std::string("sched_getaffinity failed: ") + std::strerror(errno);
    return p;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.size() < 2) {
    p.why_not = "only " + std::to_string(cpus.size()) + " CPU available";
    return p;
  }
  p.pinned = true;
  p.producer_cpu = cpus[0];
  p.consumer_cpu = cpus[1];
  return p;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0)
    std::fprintf(stderr, "warning: pinning to cpu %d failed: %s\n", cpu, std::strerror(rc));
}

void spin_until(nanos t) {
  while (now_ns() < t)
    mstar::detail::cpu_relax();
}

// Runs the producer/consumer pair; push(item) and pop() -> item are the handoff under test.
template <class Push, class Pop>
std::vector<nanos> run_pingpong(std::uint64_t n, const options& opt, const pinning& pins, Push push, Pop pop) {
  std::vector<nanos> latency(n);
  std::atomic<std::uint64_t> acked{0};
  std::thread consumer([&] {
    pin_to(pins.consumer_cpu);
    for (std::uint64_t i = 0; i < n; ++i) {
      const item it = pop();
      latency[i] = now_ns() - it.pushed_at;
      if (it.seq != i) {
        std::fprintf(stderr, "error: item %llu arrived as %llu\n", (unsigned long long)i, (unsigned long long)it.seq);
        std::exit(2);
      }
      acked.store(i + 1, std::memory_order_release);
    }
  });
  std::thread producer([&] {
    pin_to(pins.producer_cpu);
    for (std::uint64_t i = 0; i < n; ++i) {
      if (opt.gap_ns > 0) spin_until(now_ns() + opt.gap_ns);
      push(item{now_ns(), i});
      while (acked.load(std::memory_order_acquire) != i + 1)
        mstar::detail::cpu_relax();
    }
  });
  producer.join();
  consumer.join();
  return latency;
}

struct stats {
  nanos p50 = 0, p99 = 0, p999 = 0, max = 0;
  double mean = 0;
};

stats describe(std::vector<nanos> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double p) {
    const auto rank = std::clamp<std::size_t>(std::size_t(p / 100.0 * double(v.size()) + 0.999999), 1, v.size());
    return v[rank - 1];
  };
  double sum = 0;
  for (nanos x : v)
    sum += double(x);
  return {at(50), at(99), at(99.9), v.back(), sum / double(v.size())};
}

nanos clock_cost() {
  constexpr int n = 1'000'000;
  const nanos t0 = now_ns();
  nanos sink = 0;
  for (int i = 0; i < n; ++i)
    sink += now_ns() & 1;
  const nanos t1 = now_ns();
  return (t1 - t0 + sink * 0) / n;
}

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--handoffs" || a == "--baseline-handoffs" || a == "--gap-ns" || a == "--spin-us") {
      const char* v = next();
      if (v == nullptr) return std::fprintf(stderr, "error: %s needs a value\n", a.c_str()), false;
      const long long x = std::atoll(v);
      if (x < (a == "--gap-ns" || a == "--spin-us" ? 0 : 1))
        return std::fprintf(stderr, "error: %s %s is out of range\n", a.c_str(), v), false;
      if (a == "--handoffs")
        o.handoffs = std::uint64_t(x);
      else if (a == "--baseline-handoffs")
        o.baseline_handoffs = std::uint64_t(x);
      else if (a == "--spin-us")
        o.spin_us = x;
      else
        o.gap_ns = x;
    } else if (a == "--no-pin") {
      o.pin = false;
    } else {
      std::fprintf(stderr,
                   "error: unknown argument '%s'\nusage: %s [--handoffs N] [--baseline-handoffs N] [--gap-ns G] "
                   "[--spin-us S] [--no-pin]\n",
                   a.c_str(), argv[0]);
      return false;
    }
  }
  return true;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  if (!parse(argc, argv, opt)) return 1;
  const pinning pins = choose_cpus(opt.pin);

  // The ring arm: a 64-slot ring; pinned threads use the dedicated-core backoff (spin up to 100 us,
  // then yield, never sleep), unpinned ones the default (spin 5 us).
  mstar::detail::spsc_ring<item> ring(64);
  mstar::detail::backoff_policy policy =
      pins.pinned ? mstar::detail::backoff_policy::dedicated_core() : mstar::detail::backoff_policy{};
  if (opt.spin_us >= 0) policy.spin_for = std::chrono::microseconds(opt.spin_us);
  std::uint64_t ring_yields = 0, ring_sleeps = 0;
  auto ring_lat = run_pingpong(
      opt.handoffs, opt, pins, [&](const item& it) { ring.push_wait(it, mstar::detail::never_stop{}, policy); },
      [&] {
        item it;
        mstar::detail::backoff b(policy);
        while (!ring.try_pop(it))
          b.pause();
        ring_yields += b.yields();
        ring_sleeps += b.sleeps();
        return it;
      });

  // The baseline arm: the textbook blocking queue.
  std::mutex m;
  std::condition_variable cv;
  std::deque<item> q;
  auto cv_lat = run_pingpong(
      opt.baseline_handoffs, opt, pins,
      [&](const item& it) {
        {
          std::lock_guard lock(m);
          q.push_back(it);
        }
        cv.notify_one();
      },
      [&] {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return !q.empty(); });
        const item it = q.front();
        q.pop_front();
        return it;
      });

  const stats r = describe(std::move(ring_lat)), c = describe(std::move(cv_lat));
  std::printf("handoff latency, plan thread -> GPU thread, one item in flight, gap %lld ns between handoffs, "
              "ring spins %lld ns before yielding\n",
              (long long)opt.gap_ns, (long long)policy.spin_for.count());
  if (pins.pinned)
    std::printf("threads pinned: yes (plan thread on cpu %d, GPU thread on cpu %d), %u hardware threads\n",
                pins.producer_cpu, pins.consumer_cpu, std::thread::hardware_concurrency());
  else
    std::printf("threads pinned: no (%s)\n", pins.why_not.c_str());
  std::printf("steady_clock read: %lld ns (one read is inside every figure)\n", (long long)clock_cost());
  std::printf("%-24s %10s %10s %10s %10s %10s %10s\n", "", "handoffs", "p50 ns", "p99 ns", "p99.9 ns", "max ns",
              "mean ns");
  std::printf("%-24s %10llu %10lld %10lld %10lld %10lld %10.0f\n", "spsc_ring + spin_wait",
              (unsigned long long)opt.handoffs, (long long)r.p50, (long long)r.p99, (long long)r.p999, (long long)r.max,
              r.mean);
  std::printf("%-24s %10llu %10lld %10lld %10lld %10lld %10.0f\n", "mutex + condition_var",
              (unsigned long long)opt.baseline_handoffs, (long long)c.p50, (long long)c.p99, (long long)c.p999,
              (long long)c.max, c.mean);
  std::printf("%-24s %10s %9.1fx %9.1fx %9.1fx %10s %9.1fx\n", "baseline / ring", "", double(c.p50) / double(r.p50),
              double(c.p99) / double(r.p99), double(c.p999) / double(r.p999), "", c.mean / r.mean);
  std::printf("ring consumer backoff: %llu yields, %llu sleeps over %llu handoffs\n", (unsigned long long)ring_yields,
              (unsigned long long)ring_sleeps, (unsigned long long)opt.handoffs);
  std::printf("target: ring p99 < 1000 ns with both threads on their own cores: %s\n",
              !pins.pinned   ? "not applicable (threads not pinned)"
              : r.p99 < 1000 ? "met"
                             : "NOT met");
  return 0;
}
