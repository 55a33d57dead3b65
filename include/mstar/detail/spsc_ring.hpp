// A bounded single-producer single-consumer ring and the spin-with-backoff wait the worker's per-step
// handoffs use (plan thread -> GPU thread, GPU thread -> main thread). The per-step path must take no
// lock and never sleep in steady state (issue 4), so:
//   - push and pop are one acquire load (only when the cached opposite index says full/empty), one
//     construct or move, and one release store; no lock, no allocation after construction;
//   - the producer's index and the consumer's index live on their own cache lines, each beside that
//     side's cached copy of the other's index, so the two cores only exchange a line when the cached
//     copy runs out (once per "lap" of the free/used space, not once per item);
//   - a waiting side spins with _mm_pause (5 us by default), then yields; it sleeps only after
//     an idle period the caller chooses (default: never), and each sleep is bounded by the caller too.
//
// Exactly one thread may push and exactly one thread may pop at a time (they may be different
// threads over the ring's life if the hand-over is itself synchronised, e.g. by a thread join).
//
//   mstar::detail::spsc_ring<staged_step> ring(64);            // capacity: a power of two
//   // plan thread                                   // GPU thread
//   while (!ring.try_push(step)) ...;                staged_step s;
//                                                    if (!ring.pop_wait(s, [&] { return stop.load(); })) return;
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mstar::detail {

// 128, not 64: on x86 the adjacent-line prefetcher pulls lines in pairs, so two indices 64 bytes apart
// still ping-pong (folly and crossbeam pad to 128 for the same reason). std::hardware_destructive_
// interference_size is not used because g++ warns that its value may differ between translation units.
inline constexpr std::size_t cache_line_pad = 128;

// One spin-loop hint: tells the core it is in a spin-wait (saves power, frees the sibling hyperthread,
// avoids the memory-order mis-speculation flush when the awaited line changes).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// How a waiting thread backs off: spin with pause hints for spin_for, then yield, and sleep only
// once idle_before_sleep (0: never) has passed, each sleep sleep_quantum, or, for a thread with
// nothing in progress (backoff::pause_idle), a sixteenth of the wait so far, at least sleep_quantum
// and at most longest_sleep (sleep_for_wait).
//
// The default suits threads that may share a core (CI has 2 cores and the worker more threads than
// that): a 5 us spin covers a handoff whose other side is running (0.3-1 us), and when two threads
// share one core each wait burns at most 5 us before giving the core to the other. dedicated_core()
// suits a pinned thread with a core of its own: it spins through any gap up to 100 us, since a
// yield there only adds the scheduler's latency. A thread that may idle for long (between requests)
// sets idle_before_sleep, so it gives the core back after that much idle time.
// The spin phase is bounded by time, not by a count, because one pause costs from a few cycles (AMD
// Zen 1) to ~140 (Intel since Skylake-SP): a fixed count would spin 40x longer on one than the other.
struct backoff_policy {
  std::chrono::nanoseconds spin_for{std::chrono::microseconds(5)};
  // Spin round k issues min(2^k, max_pauses_per_round) pause hints between two checks; the cap bounds
  // the time between checks (4 pauses: ~0.2 us on Intel Xeon, where one costs ~140 cycles).
  std::uint32_t max_pauses_per_round = 4;
  // 0: never sleep (the per-step default). Otherwise: after this long waiting, sleep in quanta.
  std::chrono::nanoseconds idle_before_sleep{0};
  // Each sleep once the idle threshold is passed (pause()): the most a sleep adds to the wake-up
  // latency of a thread waiting for work in progress (a step in flight, a request's next row).
  std::chrono::nanoseconds sleep_quantum{std::chrono::microseconds(50)};
  // The longest sleep of a thread with nothing in progress (pause_idle()): its sleeps grow with the
  // wait (a sixteenth of it) up to this, so a worker idle for seconds wakes 100 times a second a thread
  // rather than 20,000 (bench/idle_cpu.sh). With a doorbell the work that ends the idle rings the
  // thread awake, so this bounds only what comes unrung; without one, it is the most a sleep adds to
  // the wake-up latency.
  std::chrono::nanoseconds longest_sleep{std::chrono::milliseconds(10)};
  // A wait whose other side is known to be producing the item right now (pause_expecting(): the GPU
  // thread waiting for the plan thread's staged step, the plan thread while a chain step runs) spins
  // this long before yielding, and never sleeps. A yield costs a system call (~1 us) and, when another
  // thread is runnable on the core, a time slice: the item would then be picked up microseconds late.
  std::chrono::nanoseconds expect_spin_for{std::chrono::microseconds(50)};

  static constexpr backoff_policy dedicated_core() noexcept {
    backoff_policy p;
    p.spin_for = std::chrono::microseconds(100);
    return p;
  }
};

// How long an idle wait (backoff::pause_idle) that has lasted `waited` sleeps once past
// policy.idle_before_sleep: waited / 16 within [sleep_quantum, max(sleep_quantum, longest_sleep)], so
// the wake-ups fall as the idle lasts.
constexpr std::chrono::nanoseconds sleep_for_wait(const backoff_policy& policy,
                                                  std::chrono::nanoseconds waited) noexcept {
  const auto longest = std::max(policy.sleep_quantum, policy.longest_sleep);
  return std::clamp(waited / 16, policy.sleep_quantum, longest);
}

// A thread's doorbell: its idle sleeps (backoff::pause_idle) end as soon as another thread rings it,
// so that sleeping long costs an idle thread nothing in wake-up latency. The ringer first makes the
// work it brings visible (a flag, a ring's item), then rings; the sleeper looks for that work
// (still_idle) under the bell's mutex before sleeping, and the ringer takes the mutex too, so either
// the sleeper sees the work or the ringer finds it asleep and wakes it. Only the transitions ring (a
// submit, an idle's end, a thread's end), never the per-step handoffs, so the mutex is off the
// per-step path.
class doorbell {
public:
  void ring() {
    std::lock_guard g(m_);
    if (!asleep_) return;
    rung_ = true;
    cv_.notify_one();
  }
  // Sleeps for `d` or until rung, unless still_idle() says work came meanwhile.
  template <class StillIdle>
  void sleep_for(std::chrono::nanoseconds d, StillIdle&& still_idle) {
    std::unique_lock g(m_);
    if (!still_idle()) return;
    asleep_ = true;
    cv_.wait_for(g, d, [&] { return rung_; });
    asleep_ = false;
    rung_ = false;
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  bool asleep_ = false, rung_ = false; // under m_
};

// The state of one wait: construct it when the wait starts (free: no clock read), call pause() after
// each failed check. The clock is first read in the first pause(), so a wait whose condition already
// holds costs nothing.
class backoff {
public:
  explicit backoff(const backoff_policy& policy = {}) noexcept : policy_(policy) {}

  void pause() noexcept {
    if (const auto d = pause_for(policy_.spin_for, true, false); d.count() > 0) std::this_thread::sleep_for(d);
  }

  // As pause(), for a thread with nothing in progress (no request live, nothing in flight): once
  // sleeping, each sleep is sleep_for_wait(policy, the wait so far). With a doorbell, a sleep ends when
  // it is rung, and is not begun where still_idle() is false.
  void pause_idle() noexcept {
    if (const auto d = pause_for(policy_.spin_for, true, true); d.count() > 0) std::this_thread::sleep_for(d);
  }
  template <class StillIdle>
  void pause_idle(doorbell& bell, StillIdle&& still_idle) {
    if (const auto d = pause_for(policy_.spin_for, true, true); d.count() > 0) bell.sleep_for(d, still_idle);
  }

  // As pause(), for a wait whose item is on its way: spins for expect_spin_for (at least spin_for),
  // then yields; never sleeps.
  void pause_expecting() noexcept { pause_for(std::max(policy_.spin_for, policy_.expect_spin_for), false, false); }

  void reset() noexcept {
    rounds_ = 0;
    yields_ = 0;
    sleeps_ = 0;
  }

  // How the wait went, for tests and metrics: a steady-state handoff shows sleeps() == 0.
  std::uint32_t rounds() const noexcept { return rounds_; }
  std::uint32_t yields() const noexcept { return yields_; }
  std::uint32_t sleeps() const noexcept { return sleeps_; }

private:
  // Spins or yields and returns 0, or returns how long to sleep (the caller sleeps).
  std::chrono::nanoseconds pause_for(std::chrono::nanoseconds spin, bool may_sleep, bool idle) noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (rounds_ == 0) start_ = now;
    const std::uint32_t round = rounds_++;
    const auto waited = now - start_;
    if (waited < spin) {
      const std::uint32_t pauses =
          std::min<std::uint32_t>(std::uint32_t{1} << std::min<std::uint32_t>(round, 31), policy_.max_pauses_per_round);
      for (std::uint32_t i = 0; i < pauses; ++i)
        cpu_relax();
      return {};
    }
    if (may_sleep && policy_.idle_before_sleep.count() > 0 && waited >= policy_.idle_before_sleep) {
      ++sleeps_;
      return idle ? sleep_for_wait(policy_, std::chrono::duration_cast<std::chrono::nanoseconds>(waited))
                  : policy_.sleep_quantum;
    }
    ++yields_;
    std::this_thread::yield();
    return {};
  }

  backoff_policy policy_;
  std::uint32_t rounds_ = 0;
  std::uint32_t yields_ = 0;
  std::uint32_t sleeps_ = 0;
  std::chrono::steady_clock::time_point start_{};
};

// A stop predicate that never fires, for waits that only end when the condition holds.
struct never_stop {
  constexpr bool operator()() const noexcept { return false; }
};

// Waits until ready() is true (returns true) or stop() is true (returns false). ready() is checked
// before stop(), so an item that arrived together with the stop request is still taken.
template <class Ready, class Stop = never_stop>
bool spin_wait(Ready&& ready, Stop&& stop = {}, const backoff_policy& policy = {}) {
  backoff b(policy);
  for (;;) {
    if (ready()) return true;
    if (stop()) return false;
    b.pause();
  }
}

template <class T>
class spsc_ring {
  static_assert(std::is_nothrow_move_constructible_v<T> && std::is_nothrow_destructible_v<T>,
                "spsc_ring<T>: T must be nothrow move-constructible and nothrow destructible, because a pop "
                "moves the item out after the producer has published it and cannot roll back. Hand over a "
                "pointer or an index to the object instead.");

public:
  using value_type = T;

  // Allocates all slots now; nothing allocates afterwards.
  explicit spsc_ring(std::size_t capacity)
      : mask_(checked_capacity(capacity) - 1),
        slots_(static_cast<slot*>(::operator new[](capacity * sizeof(slot), std::align_val_t{alignof(slot)}))) {}

  spsc_ring(const spsc_ring&) = delete;
  spsc_ring& operator=(const spsc_ring&) = delete;

  ~spsc_ring() {
    // Items still queued are destroyed; by now neither side may be running.
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    for (std::size_t h = head_.load(std::memory_order_relaxed); h != t; ++h)
      std::destroy_at(item(h));
    ::operator delete[](slots_, std::align_val_t{alignof(slot)});
  }

  std::size_t capacity() const noexcept { return mask_ + 1; }

  // Producer side. Returns false (and leaves v untouched) when the ring is full.
  bool try_push(const T& v) noexcept(std::is_nothrow_copy_constructible_v<T>) { return try_emplace(v); }
  bool try_push(T&& v) noexcept { return try_emplace(std::move(v)); }

  template <class... Args>
  bool try_emplace(Args&&... args) noexcept(std::is_nothrow_constructible_v<T, Args&&...>) {
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    if (t - producer_cached_head_ == capacity()) {
      // Only now touch the consumer's line: the cached head said full, the real one may not.
      producer_cached_head_ = head_.load(std::memory_order_acquire);
      if (t - producer_cached_head_ == capacity()) return false;
    }
    std::construct_at(item(t), std::forward<Args>(args)...);
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

  // Consumer side. Returns false (and leaves out untouched) when the ring is empty.
  bool try_pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
    const std::size_t h = head_.load(std::memory_order_relaxed);
    if (h == consumer_cached_tail_) {
      consumer_cached_tail_ = tail_.load(std::memory_order_acquire);
      if (h == consumer_cached_tail_) return false;
    }
    T* p = item(h);
    out = std::move(*p);
    std::destroy_at(p);
    head_.store(h + 1, std::memory_order_release);
    return true;
  }

  // Blocking variants: spin with backoff until the item moved (true) or stop() fired first (false).
  template <class Stop = never_stop>
  bool push_wait(T v, Stop&& stop = {}, const backoff_policy& policy = {}) {
    return spin_wait([&] { return try_push(std::move(v)); }, std::forward<Stop>(stop), policy);
  }
  template <class Stop = never_stop>
  bool pop_wait(T& out, Stop&& stop = {}, const backoff_policy& policy = {}) {
    return spin_wait([&] { return try_pop(out); }, std::forward<Stop>(stop), policy);
  }

  // A snapshot, exact only when called by one side while the other is idle; for metrics and tests.
  std::size_t size_approx() const noexcept {
    const std::size_t h = head_.load(std::memory_order_acquire);
    const std::size_t t = tail_.load(std::memory_order_acquire);
    return t - h;
  }
  bool empty_approx() const noexcept { return size_approx() == 0; }

private:
  struct slot {
    alignas(T) unsigned char bytes[sizeof(T)];
  };

  static std::size_t checked_capacity(std::size_t capacity) {
    if (capacity < 2 || !std::has_single_bit(capacity))
      throw std::invalid_argument("spsc_ring: capacity " + std::to_string(capacity) +
                                  " is not a power of two of at least 2 (the index mask needs one); use " +
                                  std::to_string(std::bit_ceil(capacity < 2 ? std::size_t{2} : capacity)));
    if (capacity > (std::size_t{1} << 40))
      throw std::invalid_argument("spsc_ring: capacity " + std::to_string(capacity) + " is over 2^40 slots");
    return capacity;
  }

  T* item(std::size_t index) const noexcept { return std::launder(reinterpret_cast<T*>(slots_[index & mask_].bytes)); }

  // Indices count up forever (2^64 items never wrap in practice); the slot is index & mask_.
  // Consumer line: what the consumer writes, plus its cache of the producer's index.
  alignas(cache_line_pad) std::atomic<std::size_t> head_{0};
  std::size_t consumer_cached_tail_ = 0;
  // Producer line.
  alignas(cache_line_pad) std::atomic<std::size_t> tail_{0};
  std::size_t producer_cached_head_ = 0;
  // Read-only after construction, so sharing this line costs nothing.
  alignas(cache_line_pad) const std::size_t mask_;
  slot* const slots_;
};

} // namespace mstar::detail
