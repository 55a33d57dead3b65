// How long the GPU thread watches the plan thread's ring while it waits for a staged step's answer
// (worker_options::stage_watch, watch_expected; docs/worker.md, "Threads").
//
// The GPU thread alternates looks at the ring (stage_watch long) with passes of its whole loop. An
// answer that lands during a pass waits for the rest of it, and a pass reads lines other threads write
// (each a cache miss across cores): that wait is the handoff's tail. The plan thread takes about the
// same time for each step, so the GPU thread learns it (an average, and the average distance from it)
// and, when the answer is due within its next two looks, watches through the expected arrival instead.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mstar::detail {

class stage_arrival {
 public:
  // One answer: `ns` from handing the step over to the answer's push. Weight 1/8; the first one sets
  // the average.
  void learn(std::int64_t ns) noexcept {
    if (ns <= 0) return;
    if (mean_ <= 0) {
      mean_ = ns;
      return;
    }
    const auto off = ns - mean_;
    mean_ += off / 8;
    spread_ += ((off < 0 ? -off : off) - spread_) / 8;
  }

  // When a watch that starts at `now` ends, for a step handed over at `handed`: after `watch`, or, when
  // the answer is expected before the end of the next look (and it is not overdue by more than the
  // slack, four spreads but at least one `watch`), after the expected arrival plus the slack, but at
  // most 16 watches from now, so the loop still runs when the plan thread stalls.
  std::int64_t watch_until(std::int64_t now, std::int64_t handed, std::int64_t watch) const noexcept {
    const auto until = now + watch;
    if (mean_ <= 0) return until;
    const auto expect = handed + mean_;
    const auto slack = std::max(watch, 4 * spread_);
    if (expect > until + watch || expect + slack < now) return until; // not due yet, or overdue
    return std::max(until, std::min(expect + slack, now + 16 * watch));
  }

  std::int64_t mean() const noexcept { return mean_; }
  std::int64_t spread() const noexcept { return spread_; }

 private:
  std::int64_t mean_ = 0;
  std::int64_t spread_ = 0;
};

} // namespace mstar::detail
