// Batching across time for one chain node (node_options::min_batch, max_wait; docs/worker.md).
//
// While the chain has other work, a node whose step costs about the same for one row as for a few (a
// prefill) may wait for more rows. Waiting pays only when rows come often enough to arrive during the
// wait: the window learns the mean gap between the node's rows and waits only while it is at most
// max_wait (at a low load, where a row comes every few chain steps, a wait would only add latency).
// A wait gains about max_wait / gap rows: at a gap near max_wait it trades up to max_wait of latency
// for one more row a step (halving the node's steps), and it fills min_batch only when the gap is at
// most max_wait / (min_batch - 1). The mean moves by 1/16 of each gap, so after the load drops the
// node still waits for its next ~8 rows or so.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mstar::detail {

class batch_window {
 public:
  batch_window() = default;
  batch_window(std::uint32_t min_batch, std::int64_t max_wait_ns) noexcept
      : min_batch_(min_batch), max_wait_(max_wait_ns), gap_(max_wait_ns + 1) {}

  bool waits() const noexcept { return min_batch_ > 1; }

  // A row of the node became ready at `now`. The mean gap moves by 1/16 of each new gap (rows that
  // come together have gaps of 0); it starts above max_wait, so the node waits only once its rows have
  // come fast for a while.
  void arrived(std::int64_t now) noexcept {
    if (last_ > 0) gap_ += ((now - last_) - gap_) / 16;
    last_ = now;
  }

  // Whether `ready` rows, the oldest ready since `oldest`, make a step at `now`.
  bool due(std::size_t ready, std::int64_t oldest, std::int64_t now) const noexcept {
    if (min_batch_ <= 1 || ready >= min_batch_) return true;
    if (gap_ > max_wait_) return true; // rows too rare to arrive during a wait: no wait
    return now - oldest >= max_wait_;
  }

  std::int64_t mean_gap() const noexcept { return gap_; }
  std::uint32_t min_batch() const noexcept { return min_batch_; }

private:
  std::uint32_t min_batch_ = 0;
  std::int64_t max_wait_ = 0;
  std::int64_t gap_ = 0;
  std::int64_t last_ = 0;
};

} // namespace mstar::detail
