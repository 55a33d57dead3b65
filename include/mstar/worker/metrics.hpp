// Host-side metrics of a worker: per-phase timing (admit, plan, promote, launch, commit, wait and
// user phases) per node and per thread, per-request latencies (first output, gaps between outputs,
// total), and the GPU busy fraction; plus a summary and a plain-text formatter.
//
// Recording is meant for the per-step path: each thread owns a thread_recorder whose histograms are
// all allocated when it is made, and a record is a few relaxed atomic loads and stores to memory only
// that thread writes (no lock, no read-modify-write, no allocation). Reading (summarize) may happen at
// any time from any thread: every counter is an atomic, so a live snapshot is race-free, though a
// histogram being written at that moment may be off by the records in flight.
//
//   mstar::metrics::recorder_layout layout{.nodes = {"talker_decode", "codec_chunk"}, .user_phases = {"route"}};
//   mstar::metrics::thread_recorder gpu("GPU", layout);       // before the thread starts
//   { auto t = gpu.time(0, mstar::metrics::phase::admit); ... }   // on the GPU thread
//   std::puts(mstar::metrics::format(mstar::metrics::summarize({&gpu})).c_str());
//
// Header-only and fmt-free (the formatter uses snprintf), so it can be included from .cu files.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mstar::metrics {

using nanos = std::int64_t;

// Nanoseconds on the steady clock (monotonic; vDSO, ~20-30 ns a read, no rdtsc calibration). Every
// timestamp in metrics and trace comes from here, so intervals from different threads compare.
inline nanos now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A log-linear histogram of durations in nanoseconds (HDR-style): values below 128 ns have a bucket
// each; above, every power of two is cut into 128 equal buckets, so a bucket is at most 1/128 of its
// lower bound wide. A percentile is reported as its bucket's midpoint, clamped to the exact min and
// max, so it is within 1/256 (0.4%) of the true order statistic, from 0 ns up to 2^37 ns (137 s);
// the 100th percentile is the exact max. Larger values land in the last bucket and are counted in
// overflows(); a percentile that falls in that bucket then reports max().
//
// One writer (record, merge_from, reset) at a time; readers may run concurrently with it.
class histogram {
public:
  static constexpr int sub_bucket_bits = 7;
  static constexpr std::uint64_t sub_bucket_count = std::uint64_t{1} << sub_bucket_bits;
  static constexpr std::uint64_t highest_trackable = (std::uint64_t{1} << 37) - 1; // 137 s: covers 100 s
  static constexpr int top_exponent = std::bit_width(highest_trackable) - 1;
  static constexpr std::size_t bucket_count = std::size_t(top_exponent - sub_bucket_bits + 2) * sub_bucket_count;
  // Largest relative distance between a reported percentile and the true order statistic.
  static constexpr double relative_precision = 1.0 / double(2 * sub_bucket_count);

  static constexpr std::size_t bucket_of(std::uint64_t v) noexcept {
    if (v > highest_trackable) v = highest_trackable;
    if (v < sub_bucket_count) return std::size_t(v);
    const int exponent = std::bit_width(v) - 1;
    const int shift = exponent - sub_bucket_bits;
    return std::size_t(shift + 1) * sub_bucket_count + std::size_t((v >> shift) - sub_bucket_count);
  }
  static constexpr std::uint64_t bucket_lower(std::size_t i) noexcept {
    if (i < sub_bucket_count) return i;
    const std::size_t shift = i / sub_bucket_count - 1;
    return (sub_bucket_count + i % sub_bucket_count) << shift;
  }
  // Exclusive upper bound.
  static constexpr std::uint64_t bucket_upper(std::size_t i) noexcept {
    if (i < sub_bucket_count) return i + 1;
    const std::size_t shift = i / sub_bucket_count - 1;
    return (sub_bucket_count + i % sub_bucket_count + 1) << shift;
  }

  histogram() : s_(std::make_unique<state>()) {}
  histogram(const histogram& o) : s_(std::make_unique<state>()) { merge_from(o); }
  histogram& operator=(const histogram& o) {
    if (this != &o) {
      reset();
      merge_from(o);
    }
    return *this;
  }
  // A moved-from histogram may only be destroyed or assigned to.
  histogram(histogram&&) noexcept = default;
  histogram& operator=(histogram&&) noexcept = default;

  // Negative durations (impossible on a steady clock, but cheap to guard) count as 0.
  void record(nanos duration) noexcept {
    const std::uint64_t v = duration < 0 ? 0 : std::uint64_t(duration);
    bump(s_->buckets[bucket_of(v)], 1);
    bump(s_->count, 1);
    bump(s_->sum, v);
    if (v > highest_trackable) bump(s_->overflows, 1);
    if (v < s_->min.load(std::memory_order_relaxed)) s_->min.store(v, std::memory_order_relaxed);
    if (v > s_->max.load(std::memory_order_relaxed)) s_->max.store(v, std::memory_order_relaxed);
  }

  // Adds o's records to this one (o may be written meanwhile; its records in flight may be missed).
  void merge_from(const histogram& o) noexcept {
    for (std::size_t i = 0; i < bucket_count; ++i) {
      const std::uint64_t c = o.s_->buckets[i].load(std::memory_order_relaxed);
      if (c != 0) bump(s_->buckets[i], c);
    }
    bump(s_->count, o.s_->count.load(std::memory_order_relaxed));
    bump(s_->sum, o.s_->sum.load(std::memory_order_relaxed));
    bump(s_->overflows, o.s_->overflows.load(std::memory_order_relaxed));
    const std::uint64_t omin = o.s_->min.load(std::memory_order_relaxed);
    const std::uint64_t omax = o.s_->max.load(std::memory_order_relaxed);
    if (omin < s_->min.load(std::memory_order_relaxed)) s_->min.store(omin, std::memory_order_relaxed);
    if (omax > s_->max.load(std::memory_order_relaxed)) s_->max.store(omax, std::memory_order_relaxed);
  }

  void reset() noexcept {
    for (auto& b : s_->buckets)
      b.store(0, std::memory_order_relaxed);
    s_->count.store(0, std::memory_order_relaxed);
    s_->sum.store(0, std::memory_order_relaxed);
    s_->overflows.store(0, std::memory_order_relaxed);
    s_->min.store(UINT64_MAX, std::memory_order_relaxed);
    s_->max.store(0, std::memory_order_relaxed);
  }

  std::uint64_t count() const noexcept { return s_->count.load(std::memory_order_relaxed); }
  std::uint64_t overflows() const noexcept { return s_->overflows.load(std::memory_order_relaxed); }
  std::uint64_t min() const noexcept { return count() == 0 ? 0 : s_->min.load(std::memory_order_relaxed); }
  std::uint64_t max() const noexcept { return s_->max.load(std::memory_order_relaxed); }
  double mean() const noexcept {
    const std::uint64_t n = count();
    return n == 0 ? 0.0 : double(s_->sum.load(std::memory_order_relaxed)) / double(n);
  }

  // The p-th percentile (p in [0, 100]) in nanoseconds: the value of rank ceil(p/100 * count), at
  // least rank 1, i.e. the same order statistic as sorted[ceil(p/100 * n) - 1]. 0 when empty.
  std::uint64_t percentile(double p) const noexcept {
    const std::uint64_t n = count();
    if (n == 0) return 0;
    p = std::clamp(p, 0.0, 100.0);
    // In integers, p taken to a millionth: in floating point p / 100 * n (and p * n / 100) can round an
    // exact rank up (99.9 / 100 * 1000 is 999.0000000000001: rank 1000, the max, instead of 999).
    constexpr std::uint64_t whole = 100'000'000; // 100 in millionths
    const auto per = std::uint64_t(std::llround(p * 1e6));
    std::uint64_t rank = n / whole * per + (n % whole * per + whole - 1) / whole;
    rank = std::clamp<std::uint64_t>(rank, 1, n);
    if (rank == n) return max();
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
      seen += s_->buckets[i].load(std::memory_order_relaxed);
      if (seen >= rank) {
        // The top bucket also holds the overflows, so its midpoint says nothing about them.
        if (i == bucket_count - 1 && overflows() > 0) return max();
        const std::uint64_t lo = bucket_lower(i), hi = bucket_upper(i);
        return std::clamp(lo + (hi - 1 - lo) / 2, min(), max());
      }
    }
    return max(); // a concurrent writer bumped count before its bucket
  }

private:
  struct state {
    std::array<std::atomic<std::uint64_t>, bucket_count> buckets{};
    std::atomic<std::uint64_t> count{0}, sum{0}, overflows{0}, min{UINT64_MAX}, max{0};
  };

  // Single writer: a load and a store, no lock-prefixed read-modify-write.
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t by) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  std::unique_ptr<state> s_;
};

// The phases of the step lifecycle the worker times; user phases are numbered after them.
using node_id = std::uint16_t;
using phase_id = std::uint16_t;
enum class phase : phase_id { admit, plan, promote, launch, commit, wait };
inline constexpr phase_id builtin_phase_count = 6;
inline constexpr std::array<std::string_view, builtin_phase_count> builtin_phase_names{"admit",  "plan",   "promote",
                                                                                       "launch", "commit", "wait"};

// The grid a thread_recorder allocates: one histogram per (node, phase). Node ids are indices into
// nodes; user phase i has id builtin_phase_count + i.
struct recorder_layout {
  std::vector<std::string> nodes{};
  std::vector<std::string> user_phases{};

  std::size_t node_count() const noexcept { return nodes.size(); }
  std::size_t phase_count() const noexcept { return builtin_phase_count + user_phases.size(); }
  std::string phase_name(phase_id p) const {
    if (p < builtin_phase_count) return std::string(builtin_phase_names[p]);
    if (std::size_t(p - builtin_phase_count) < user_phases.size()) return user_phases[p - builtin_phase_count];
    return "phase#" + std::to_string(p);
  }
  // Looks a user phase up by name (not for the hot path: resolve ids once, up front).
  phase_id user_phase(std::string_view name) const {
    for (std::size_t i = 0; i < user_phases.size(); ++i)
      if (user_phases[i] == name) return phase_id(builtin_phase_count + i);
    throw std::invalid_argument("metrics: no user phase named '" + std::string(name) +
                                "'; add it to recorder_layout::user_phases before making the recorders");
  }
  friend bool operator==(const recorder_layout&, const recorder_layout&) = default;
};

class thread_recorder;

// Records the time from its construction to its destruction (or stop()) into one cell.
class [[nodiscard]] scoped_timer {
public:
  scoped_timer(thread_recorder* r, node_id n, phase_id p) noexcept : r_(r), node_(n), phase_(p), start_(now_ns()) {}
  scoped_timer(const scoped_timer&) = delete;
  scoped_timer& operator=(const scoped_timer&) = delete;
  ~scoped_timer() { stop(); }
  // Records now and returns the duration; later calls (and the destructor) record nothing.
  nanos stop() noexcept;

private:
  thread_recorder* r_;
  node_id node_;
  phase_id phase_;
  nanos start_;
};

// One thread's phase timings. Make it before the thread starts (this allocates
// node_count * phase_count histograms of ~31 KiB each); record only from that one thread.
class thread_recorder {
public:
  thread_recorder(std::string thread_name, recorder_layout layout)
      : name_(std::move(thread_name)), layout_(std::move(layout)),
        cells_(layout_.node_count() * layout_.phase_count()) {
    if (layout_.phase_count() > 0xffff)
      throw std::invalid_argument("metrics: " + std::to_string(layout_.phase_count()) +
                                  " phases do not fit a 16-bit phase id; use fewer user phases");
    if (layout_.node_count() > 0xffff)
      throw std::invalid_argument("metrics: " + std::to_string(layout_.node_count()) +
                                  " nodes do not fit a 16-bit node id");
  }

  // An id outside the layout is not recorded; it is counted in dropped() so a report shows it.
  void record(node_id n, phase_id p, nanos duration) noexcept {
    if (n >= layout_.node_count() || p >= layout_.phase_count()) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
    cells_[std::size_t(n) * layout_.phase_count() + p].record(duration);
  }
  void record(node_id n, phase p, nanos duration) noexcept { record(n, phase_id(p), duration); }

  scoped_timer time(node_id n, phase_id p) noexcept { return scoped_timer(this, n, p); }
  scoped_timer time(node_id n, phase p) noexcept { return scoped_timer(this, n, phase_id(p)); }

  const histogram& at(node_id n, phase_id p) const {
    if (n >= layout_.node_count() || p >= layout_.phase_count())
      throw std::out_of_range("metrics: cell (node " + std::to_string(n) + ", phase " + std::to_string(p) +
                              ") is outside the layout of " + std::to_string(layout_.node_count()) + " nodes and " +
                              std::to_string(layout_.phase_count()) + " phases");
    return cells_[std::size_t(n) * layout_.phase_count() + p];
  }
  const histogram& at(node_id n, phase p) const { return at(n, phase_id(p)); }

  const std::string& thread_name() const noexcept { return name_; }
  const recorder_layout& layout() const noexcept { return layout_; }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

private:
  std::string name_;
  recorder_layout layout_;
  std::vector<histogram> cells_;
  std::atomic<std::uint64_t> dropped_{0};
};

inline nanos scoped_timer::stop() noexcept {
  if (r_ == nullptr) return 0;
  const nanos d = now_ns() - start_;
  r_->record(node_, phase_, d);
  r_ = nullptr;
  return d;
}

// Timestamps of one request, kept in the request's own state (no allocation, no shared structure).
// -1 means "not yet".
struct request_timing {
  nanos submitted = -1;
  nanos first_output = -1;
  nanos last_output = -1;
  nanos finished = -1;
  std::uint32_t outputs = 0;
};

// Per-request latencies over many requests: first-output latency (submit to first output), the gaps
// between consecutive outputs, and total time (submit to finish) of requests that completed.
// Cancelled and failed requests are counted (apart), and their outputs and gaps still recorded, but
// not their total. One writer at a time, like histogram.
enum class request_outcome : std::uint8_t { completed, cancelled, failed };
class request_recorder {
public:
  static void on_submit(request_timing& r, nanos t = now_ns()) noexcept { r = request_timing{.submitted = t}; }

  void on_output(request_timing& r, nanos t = now_ns()) noexcept {
    if (r.outputs == 0) {
      first_output_.record(t - r.submitted);
      r.first_output = t;
    } else {
      gap_.record(t - r.last_output);
    }
    r.last_output = t;
    ++r.outputs;
    bump(outputs_);
  }

  void on_finish(request_timing& r, request_outcome how, nanos t = now_ns()) noexcept {
    r.finished = t;
    switch (how) {
    case request_outcome::completed:
      total_.record(t - r.submitted);
      bump(completed_);
      break;
    case request_outcome::cancelled: bump(cancelled_); break;
    case request_outcome::failed: bump(failed_); break;
    }
  }
  // completed, or else cancelled.
  void on_finish(request_timing& r, bool completed, nanos t = now_ns()) noexcept {
    on_finish(r, completed ? request_outcome::completed : request_outcome::cancelled, t);
  }

  void merge_from(const request_recorder& o) noexcept {
    first_output_.merge_from(o.first_output_);
    gap_.merge_from(o.gap_);
    total_.merge_from(o.total_);
    bump(completed_, o.completed());
    bump(cancelled_, o.cancelled());
    bump(failed_, o.failed());
    bump(outputs_, o.outputs());
  }

  const histogram& first_output() const noexcept { return first_output_; }
  const histogram& gaps() const noexcept { return gap_; }
  const histogram& total() const noexcept { return total_; }
  std::uint64_t completed() const noexcept { return completed_.load(std::memory_order_relaxed); }
  std::uint64_t cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }
  std::uint64_t failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  std::uint64_t outputs() const noexcept { return outputs_.load(std::memory_order_relaxed); }

private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t by = 1) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  histogram first_output_, gap_, total_;
  std::atomic<std::uint64_t> completed_{0}, cancelled_{0}, failed_{0}, outputs_{0};
};

// A span of time the GPU was busy (a kernel, a step from launch-side event to completion event).
struct interval {
  nanos begin = 0;
  nanos end = 0;
};

// Time covered by the union of the intervals inside [window_begin, window_end): overlapping
// intervals (two streams busy at once) count once, so the result never exceeds the window.
inline nanos busy_time(std::span<const interval> intervals, nanos window_begin, nanos window_end) {
  std::vector<interval> v;
  v.reserve(intervals.size());
  for (interval i : intervals) {
    i.begin = std::max(i.begin, window_begin);
    i.end = std::min(i.end, window_end);
    if (i.end > i.begin) v.push_back(i);
  }
  std::sort(v.begin(), v.end(), [](const interval& a, const interval& b) { return a.begin < b.begin; });
  nanos busy = 0, run_begin = 0, run_end = 0;
  bool open = false;
  for (const interval& i : v) {
    if (open && i.begin <= run_end) {
      run_end = std::max(run_end, i.end);
      continue;
    }
    if (open) busy += run_end - run_begin;
    run_begin = i.begin, run_end = i.end, open = true;
  }
  if (open) busy += run_end - run_begin;
  return busy;
}

// The busy time of a run of any length, in O(1) memory (the GPU thread adds one interval per landed
// step): the union is kept as the latest runs (disjoint, in order; at most recent_runs) plus the total
// of the older ones, folded away. Steps land in order of their end, not of their begin: a lane step
// that ran beside several chain steps lands after them and fills the gaps between them, so a late
// interval is merged into the runs it meets. Exact unless an interval begins before the end of a
// folded run (the union then loses the part before it); the fold happens only once recent_runs runs,
// each after an idle gap, are open, half of them at a time. An add is O(1) for an interval that meets
// or follows the latest run, and at most recent_runs moves of 16 bytes otherwise; nothing allocates
// after construction. The last `keep` intervals are also kept, as they were given, for inspection (kept()).
// One writer; any thread may read live() (the busy total so far, kept up to date in O(1) per add).
class busy_tracker {
public:
  static constexpr std::size_t recent_runs = 128;

  explicit busy_tracker(std::size_t keep = std::size_t{1} << 16) { kept_.reserve(keep); }
  void start(nanos t0) {
    t0_ = floor_ = t0;
    folded_ = 0;
    in_runs_ = 0;
    n_ = 0;
    kept_.clear();
    live_t0_.store(t0, std::memory_order_relaxed);
    live_busy_.store(0, std::memory_order_relaxed);
    live_end_.store(t0, std::memory_order_release);
  }
  void add(nanos begin, nanos end) {
    if (kept_.capacity() != 0) {
      if (kept_.size() == kept_.capacity()) kept_.clear(); // never reallocates
      kept_.push_back({begin, end});
    }
    if (n_ == runs_.size()) fold(runs_.size() / 2);
    begin = std::max(begin, floor_);
    if (end <= begin) return;
    // Runs [i, j) meet [begin, end]: they become one; none meets it: it is inserted at i.
    std::size_t i = n_;
    while (i > 0 && runs_[i - 1].end >= begin)
      --i;
    interval merged{begin, end};
    std::size_t j = i;
    for (; j < n_ && runs_[j].begin <= end; ++j) {
      merged.begin = std::min(merged.begin, runs_[j].begin);
      merged.end = std::max(merged.end, runs_[j].end);
    }
    for (std::size_t k = i; k < j; ++k)
      in_runs_ -= runs_[k].end - runs_[k].begin;
    in_runs_ += merged.end - merged.begin;
    if (j == i) {
      std::move_backward(runs_.begin() + i, runs_.begin() + n_, runs_.begin() + n_ + 1);
      ++n_;
    } else if (j > i + 1) {
      std::move(runs_.begin() + j, runs_.begin() + n_, runs_.begin() + i + 1);
      n_ -= j - i - 1;
    }
    runs_[i] = merged;
    live_busy_.store(folded_ + in_runs_, std::memory_order_relaxed);
    live_end_.store(std::max(live_end_.load(std::memory_order_relaxed), end), std::memory_order_release);
  }
  // The busy total so far as any thread may read it while the writer adds: the union of every interval
  // added (busy(e) for e at or after the latest end), that latest end, and start()'s time. The three are
  // read without a lock, so a reader may pair a total with an end one add apart (a step's length at most).
  struct live_reading {
    nanos busy = 0, t0 = 0, last_end = 0;
  };
  live_reading live() const noexcept {
    live_reading r;
    r.last_end = live_end_.load(std::memory_order_acquire);
    r.busy = live_busy_.load(std::memory_order_relaxed);
    r.t0 = live_t0_.load(std::memory_order_relaxed);
    return r;
  }
  // Busy time from start() to `end` (at or after the last interval's end).
  nanos busy(nanos end) const {
    nanos b = folded_;
    for (std::size_t i = 0; i < n_; ++i)
      b += std::max<nanos>(0, std::min(end, runs_[i].end) - runs_[i].begin);
    return b;
  }
  double fraction(nanos end) const { return end > t0_ ? double(busy(end)) / double(end - t0_) : 0.0; }
  std::span<const interval> kept() const noexcept { return kept_; } // up to `keep`, the latest

private:
  // The oldest `count` runs leave the list: their time is added up, and an interval is clipped at
  // their end from now on.
  void fold(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      folded_ += runs_[i].end - runs_[i].begin;
      in_runs_ -= runs_[i].end - runs_[i].begin;
    }
    floor_ = runs_[count - 1].end;
    std::move(runs_.begin() + count, runs_.begin() + n_, runs_.begin());
    n_ -= count;
  }

  std::vector<interval> kept_;
  std::array<interval, recent_runs> runs_{};
  std::size_t n_ = 0;
  nanos t0_ = 0, floor_ = 0, folded_ = 0;
  nanos in_runs_ = 0; // the runs' total length (busy = folded_ + in_runs_ up to the latest end)
  // Atomics that copy by value, so the tracker stays copyable and movable (a worker assigns a fresh one).
  struct shared_nanos : std::atomic<nanos> {
    shared_nanos() noexcept : std::atomic<nanos>(0) {}
    shared_nanos(const shared_nanos& o) noexcept : std::atomic<nanos>(o.load(std::memory_order_relaxed)) {}
    shared_nanos& operator=(const shared_nanos& o) noexcept {
      store(o.load(std::memory_order_relaxed), std::memory_order_relaxed);
      return *this;
    }
  };
  shared_nanos live_busy_, live_end_, live_t0_;
};

// busy_time over the window's length; 0 for an empty window.
inline double busy_fraction(std::span<const interval> intervals, nanos window_begin, nanos window_end) {
  if (window_end <= window_begin) return 0.0;
  return double(busy_time(intervals, window_begin, window_end)) / double(window_end - window_begin);
}

// ---- summary and report -------------------------------------------------------------------------

struct distribution {
  std::uint64_t count = 0;
  std::uint64_t min = 0, p50 = 0, p95 = 0, p99 = 0, max = 0; // nanoseconds
  double mean = 0.0;
};

inline distribution describe(const histogram& h) {
  return {.count = h.count(),
          .min = h.min(),
          .p50 = h.percentile(50),
          .p95 = h.percentile(95),
          .p99 = h.percentile(99),
          .max = h.max(),
          .mean = h.mean()};
}

struct phase_row {
  std::string thread; // "all" in per_node rows
  std::string node;
  std::string phase;
  distribution time;
};

struct request_summary {
  std::uint64_t completed = 0, cancelled = 0, failed = 0, outputs = 0;
  distribution first_output, gap, total;
};

struct summary {
  std::vector<phase_row> per_thread; // every (thread, node, phase) cell with records, in recorder order
  std::vector<phase_row> per_node;   // the same cells merged over all threads
  request_summary requests;
  double gpu_busy_fraction = -1.0; // negative: not measured
  std::uint64_t dropped = 0;       // records with an id outside the layout
};

// Merges at report time; allocates. All recorders must share one layout (same nodes, same phases),
// since cells are matched by id.
inline summary summarize(std::span<const thread_recorder* const> threads, const request_recorder* requests = nullptr,
                         double gpu_busy_fraction = -1.0) {
  summary out;
  out.gpu_busy_fraction = gpu_busy_fraction;
  if (requests != nullptr)
    out.requests = {.completed = requests->completed(),
                    .cancelled = requests->cancelled(),
                    .failed = requests->failed(),
                    .outputs = requests->outputs(),
                    .first_output = describe(requests->first_output()),
                    .gap = describe(requests->gaps()),
                    .total = describe(requests->total())};
  if (threads.empty()) return out;
  const recorder_layout& layout = threads.front()->layout();
  for (const thread_recorder* t : threads)
    if (!(t->layout() == layout))
      throw std::invalid_argument("metrics: recorder '" + t->thread_name() + "' has a layout different from '" +
                                  threads.front()->thread_name() +
                                  "'; make every thread's recorder from the same recorder_layout");
  for (node_id n = 0; n < layout.node_count(); ++n)
    for (phase_id p = 0; p < layout.phase_count(); ++p) {
      histogram merged;
      for (const thread_recorder* t : threads) {
        const histogram& h = t->at(n, p);
        if (h.count() == 0) continue;
        out.per_thread.push_back({t->thread_name(), layout.nodes[n], layout.phase_name(p), describe(h)});
        merged.merge_from(h);
      }
      if (merged.count() > 0) out.per_node.push_back({"all", layout.nodes[n], layout.phase_name(p), describe(merged)});
    }
  for (const thread_recorder* t : threads)
    out.dropped += t->dropped();
  return out;
}

inline summary summarize(std::initializer_list<const thread_recorder*> threads,
                         const request_recorder* requests = nullptr, double gpu_busy_fraction = -1.0) {
  return summarize(std::span<const thread_recorder* const>(threads.begin(), threads.size()), requests,
                   gpu_busy_fraction);
}

namespace detail {
template <class... Args>
void appendf(std::string& out, const char* format, Args... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, format, args...);
  if (n > 0) out.append(buf, std::size_t(std::min<int>(n, int(sizeof buf) - 1)));
}
inline double us(std::uint64_t ns) { return double(ns) / 1000.0; }
} // namespace detail

// A plain-text report: the per-thread table, the per-node table (merged over threads), request
// latencies and the GPU busy fraction. Times in microseconds.
inline std::string format(const summary& s) {
  std::string out;
  auto table = [&](const char* title, const std::vector<phase_row>& rows) {
    if (rows.empty()) return;
    int wt = 6, wn = 4, wp = 5;
    for (const phase_row& r : rows) {
      wt = std::max(wt, int(r.thread.size()));
      wn = std::max(wn, int(r.node.size()));
      wp = std::max(wp, int(r.phase.size()));
    }
    detail::appendf(out, "%s (us)\n", title);
    detail::appendf(out, "  %-*s  %-*s  %-*s %10s %10s %10s %10s %10s %10s\n", wt, "thread", wn, "node", wp, "phase",
                    "count", "mean", "p50", "p95", "p99", "max");
    for (const phase_row& r : rows)
      detail::appendf(out, "  %-*s  %-*s  %-*s %10llu %10.2f %10.2f %10.2f %10.2f %10.2f\n", wt, r.thread.c_str(), wn,
                      r.node.c_str(), wp, r.phase.c_str(), static_cast<unsigned long long>(r.time.count),
                      r.time.mean / 1000.0, detail::us(r.time.p50), detail::us(r.time.p95), detail::us(r.time.p99),
                      detail::us(r.time.max));
  };
  table("phase time per thread", s.per_thread);
  table("phase time per node, all threads", s.per_node);
  const request_summary& q = s.requests;
  if (q.completed + q.cancelled + q.failed > 0) {
    detail::appendf(out, "requests: %llu completed, %llu cancelled, %llu failed, %llu outputs (ms)\n",
                    static_cast<unsigned long long>(q.completed), static_cast<unsigned long long>(q.cancelled),
                    static_cast<unsigned long long>(q.failed), static_cast<unsigned long long>(q.outputs));
    auto line = [&](const char* name, const distribution& d) {
      detail::appendf(out, "  %-13s %10llu %10.3f %10.3f %10.3f %10.3f\n", name,
                      static_cast<unsigned long long>(d.count), double(d.p50) / 1e6, double(d.p95) / 1e6,
                      double(d.p99) / 1e6, double(d.max) / 1e6);
    };
    detail::appendf(out, "  %-13s %10s %10s %10s %10s %10s\n", "", "count", "p50", "p95", "p99", "max");
    line("first output", q.first_output);
    line("output gap", q.gap);
    line("total", q.total);
  }
  if (s.gpu_busy_fraction >= 0.0) detail::appendf(out, "GPU busy: %.1f%%\n", s.gpu_busy_fraction * 100.0);
  if (s.dropped > 0)
    detail::appendf(out, "dropped: %llu records named a node or phase outside the layout\n",
                    static_cast<unsigned long long>(s.dropped));
  return out;
}

} // namespace mstar::metrics
