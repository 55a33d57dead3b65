// The engine's lock for short critical sections (a resource's tables, a host stream's producer side):
// uncontended it is one atomic exchange and one store, about a tenth of a std::mutex round trip; when
// contended it spins with a pause hint and then yields, so two threads sharing one core (CI has two
// cores) still make progress. Never held across a blocking call.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace mstar::detail {

// A spin-loop hint (named apart from the worker's cpu_relax so both headers can be included together).
// The builtin rather than _mm_pause: <immintrin.h> alone costs about 1.5 s of compile time.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

class spin_lock {
public:
  spin_lock() = default;
  spin_lock(const spin_lock&) = delete;
  spin_lock& operator=(const spin_lock&) = delete;

  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      std::uint32_t spins = 0;
      while (locked_.load(std::memory_order_relaxed)) {
        // 64 pauses cover a critical section of the engine (well under a microsecond); past that the
        // holder was likely preempted, and yielding hands it the core.
        if (++spins < 64)
          spin_pause();
        else
          std::this_thread::yield();
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

private:
  std::atomic<bool> locked_{false};
};

} // namespace mstar::detail
