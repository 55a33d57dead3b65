// Spin-then-park waiting on a condition that other threads change: the host backend's stream threads
// wait for work, and host threads wait for a stream to reach a position. A waiter spins for a short
// while (the condition usually turns within microseconds), then sleeps on a futex word; a notifier
// pays one read-modify-write when nobody sleeps, and a futex wake only when somebody does.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "mstar/detail/spin_lock.hpp"

namespace mstar::detail {

class wake_word {
public:
  // Call after the change that may make a waiter's predicate true. The sleeper check is a
  // read-modify-write on the word the waiter increments before its last check, so either this call
  // sees the sleeper or the sleeper's check sees the change (RMWs on one atomic are totally ordered
  // and synchronize): no fences, which ThreadSanitizer would not understand.
  void notify() noexcept {
    if (sleepers_.fetch_add(0, std::memory_order_seq_cst) != 0) {
      seq_.fetch_add(1, std::memory_order_seq_cst);
      seq_.notify_all();
    }
  }

  // Returns once pred() is true. Spins (pause, then yield) for about `spin` first.
  template <class Pred>
  void wait_until(Pred&& pred, std::chrono::nanoseconds spin) {
    if (pred()) return;
    const auto until = std::chrono::steady_clock::now() + spin;
    for (std::uint32_t round = 0;; ++round) {
      if (pred()) return;
      if ((round & 63) == 63 && std::chrono::steady_clock::now() >= until) break;
      if (round < 256)
        spin_pause();
      else
        std::this_thread::yield();
    }
    for (;;) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t s = seq_.load(std::memory_order_seq_cst);
      if (pred()) {
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      seq_.wait(s, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (pred()) return;
    }
  }

private:
  std::atomic<std::uint32_t> seq_{0};
  std::atomic<std::uint32_t> sleepers_{0};
};

} // namespace mstar::detail
