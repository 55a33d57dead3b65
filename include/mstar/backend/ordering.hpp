// The host backend's stream-ordering checker: for every tracked slot (a recurrent pool's state slot,
// a KV cache block) it keeps the stream and the time of the last access, and it reports an access
// from another stream that no ordering edge separates from it. This is the seed's zero race made
// visible: a slot zeroed on the chain stream and reused on the lane stream with no event in between.
//
// Model (vector clocks, one per stream, as in race detectors): each stream s has a clock C_s, one
// entry per stream. An access on s ticks C_s[s] and stamps the slot with (s, C_s[s]). Recording an
// event on s ticks C_s[s] and snapshots C_s into the event; a stream that waits on the event joins
// the snapshot into its own clock (entrywise max). A later access from stream b to a slot stamped
// (a, t) is ordered iff a == b or C_b[a] >= t, i.e. b has waited on an event recorded on a after
// that access, directly or through other streams.
//
// Host threads order work too: a thread that synchronized on an event or a stream learns that
// clock, and whatever it enqueues afterwards on any stream is ordered after it (the stream joins
// what the thread knows). That is CUDA's rule as well: after cudaStreamSynchronize(a) returns, any
// later launch is ordered after a's work. Any other hand-off between host threads (a mutex, a ring)
// is not seen, so ordering that relies on it alone is reported: make it an event.
//
// Every access is treated as a write: an engine step reads and writes its rows' state, and a
// teardown zeroes it.
//
// The checker is bookkeeping only (it never delays work); the host backend calls it at enqueue time,
// so a report does not depend on how the host threads happened to interleave.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mstar {

// Streams a checker orders over its life (a host backend never reuses a stream's index).
inline constexpr std::size_t max_ordered_streams = 32;
using vector_clock = std::array<std::uint64_t, max_ordered_streams>;

// A family of tracked slots, e.g. one recurrent pool's slots. Backends that do not check ordering
// hand out invalid ids and ignore them.
struct region_id {
  std::uint32_t value = ~std::uint32_t{0};
  constexpr bool valid() const { return value != ~std::uint32_t{0}; }
  friend constexpr bool operator==(region_id, region_id) = default;
};

struct ordering_violation {
  std::string region;
  std::uint32_t index = 0;       // the slot within the region
  std::uint32_t last_stream = 0; // the stream of the previous access
  std::uint64_t last_time = 0;   // that stream's clock at the previous access
  std::uint32_t stream = 0;      // the stream of this access
  std::uint64_t known = 0;       // what this stream knew of last_stream's clock (< last_time)

  std::string describe() const {
    return region + "[" + std::to_string(index) + "] was last accessed on stream " + std::to_string(last_stream) +
           " (its step " + std::to_string(last_time) + ") and is now accessed on stream " + std::to_string(stream) +
           ", which has waited on nothing recorded on stream " + std::to_string(last_stream) +
           " after that access (it knows that stream up to step " + std::to_string(known) +
           "). Record an event on stream " + std::to_string(last_stream) + " after the access and make stream " +
           std::to_string(stream) + " wait on it, or keep both accesses on one stream.";
  }
};

class ordering_checker {
public:
  explicit ordering_checker(bool abort_on_violation = false)
      : abort_(abort_on_violation), epoch_(next_epoch().fetch_add(1, std::memory_order_relaxed) + 1) {}
  ordering_checker(const ordering_checker&) = delete;
  ordering_checker& operator=(const ordering_checker&) = delete;

  // Load time: a family of `count` slots, each never accessed.
  region_id add_region(std::string_view name, std::uint32_t count) {
    std::lock_guard g(m_);
    regions_.push_back(region{std::string(name), std::vector<stamp>(count)});
    return region_id{static_cast<std::uint32_t>(regions_.size() - 1)};
  }

  // An access on stream s to slot `index` of region r; reported when unordered after the last access.
  void access(std::uint32_t s, region_id r, std::uint32_t index) {
    std::lock_guard g(m_);
    access_locked(s, r, index);
  }
  // Several slots at once (one step's rows); negative entries (no slot) are skipped.
  void access(std::uint32_t s, region_id r, std::span<const std::int32_t> indices) {
    std::lock_guard g(m_);
    for (auto i : indices)
      if (i >= 0) access_locked(s, r, static_cast<std::uint32_t>(i));
  }

  // Recording an event on s: ticks s and returns its clock (the event's snapshot).
  void snapshot_for_record(std::uint32_t s, vector_clock& out) {
    std::lock_guard g(m_);
    check_stream(s);
    ++clocks_[s][s];
    out = clocks_[s];
  }
  // s's clock now, without a tick (a host thread synchronizing on s learns it).
  void clock_of(std::uint32_t s, vector_clock& out) const {
    std::lock_guard g(m_);
    check_stream(s);
    out = clocks_[s];
  }
  // s waits on an event whose snapshot is c.
  void join(std::uint32_t s, const vector_clock& c) {
    std::lock_guard g(m_);
    check_stream(s);
    max_into(clocks_[s], c);
  }
  // The calling host thread synchronized on something whose clock is c.
  void learn(const vector_clock& c) { max_into(knowledge(), c); }
  // The calling host thread enqueues work on s: s is ordered after what the thread has waited for.
  void teach(std::uint32_t s) {
    const vector_clock& k = knowledge();
    std::lock_guard g(m_);
    check_stream(s);
    max_into(clocks_[s], k);
  }

  std::vector<ordering_violation> violations() const {
    std::lock_guard g(m_);
    return violations_;
  }
  std::size_t violation_count() const { return count_.load(std::memory_order_acquire); }
  void clear_violations() {
    std::lock_guard g(m_);
    violations_.clear();
    count_.store(0, std::memory_order_release);
  }

private:
  struct stamp {
    std::uint32_t stream = ~std::uint32_t{0};
    std::uint64_t time = 0;
  };
  struct region {
    std::string name;
    std::vector<stamp> slots;
  };
  struct thread_knowledge {
    std::uint64_t epoch = 0;
    vector_clock clock{};
  };

  static std::atomic<std::uint64_t>& next_epoch() {
    static std::atomic<std::uint64_t> e{0};
    return e;
  }
  // What the calling thread has synchronized on, for this checker (epochs tell checkers apart even
  // when one is allocated where another died; a thread alternating between checkers forgets, which
  // can only add reports, never hide one).
  vector_clock& knowledge() const {
    thread_local thread_knowledge k;
    if (k.epoch != epoch_) {
      k.epoch = epoch_;
      k.clock.fill(0);
    }
    return k.clock;
  }
  static void max_into(vector_clock& a, const vector_clock& b) {
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] = a[i] < b[i] ? b[i] : a[i];
  }
  static void check_stream(std::uint32_t s) {
    if (s >= max_ordered_streams)
      throw std::out_of_range("mstar::ordering_checker: stream index " + std::to_string(s) + " is beyond the " +
                              std::to_string(max_ordered_streams) + " streams a checker orders");
  }

  void access_locked(std::uint32_t s, region_id r, std::uint32_t index) {
    check_stream(s);
    if (!r.valid() || r.value >= regions_.size())
      throw std::out_of_range("mstar::ordering_checker: unknown region " + std::to_string(r.value));
    auto& reg = regions_[r.value];
    if (index >= reg.slots.size())
      throw std::out_of_range("mstar::ordering_checker: slot " + std::to_string(index) + " is outside region " +
                              reg.name + " (" + std::to_string(reg.slots.size()) + " slots)");
    const std::uint64_t now = ++clocks_[s][s];
    stamp& last = reg.slots[index];
    if (last.stream != ~std::uint32_t{0} && last.stream != s && clocks_[s][last.stream] < last.time) {
      violations_.push_back(ordering_violation{reg.name, index, last.stream, last.time, s, clocks_[s][last.stream]});
      count_.fetch_add(1, std::memory_order_release);
      if (abort_) {
        std::fprintf(stderr, "mstar: stream ordering violated: %s\n", violations_.back().describe().c_str());
        std::abort();
      }
    }
    last = stamp{s, now};
  }

  mutable std::mutex m_;
  bool abort_;
  std::uint64_t epoch_;
  std::array<vector_clock, max_ordered_streams> clocks_{};
  std::vector<region> regions_;
  std::vector<ordering_violation> violations_;
  std::atomic<std::size_t> count_{0};
};

} // namespace mstar
