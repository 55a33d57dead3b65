// The host backend: the device model of the engine on plain host threads, so that every engine test
// runs without a GPU. Each stream is an in-order queue run by a host thread of its own; events mark a
// stream's position; "device" memory is host memory; the recurrent-state moves run the host reference
// kernels (mstar::kernels::host). It also checks stream ordering (ordering.hpp): every tracked slot
// access from another stream must be separated from the last one by an event edge.
//
//   mstar::host_backend backend;                                   // ordering checks on by default
//   auto chain = backend.create_stream();
//   auto lane = backend.create_stream(mstar::stream_priority::high);
//   auto done = backend.create_event();
//   backend.enqueue(chain, [] { /* a "kernel" */ });
//   backend.record(done, chain);
//   backend.wait(lane, done);                                      // lane's later work runs after it
//   backend.synchronize(lane);
//   if (backend.checker().violation_count() != 0) ...              // unordered accesses, described
//
// Enqueueing takes a per-stream spin lock (several host threads may enqueue on one stream, as on
// CUDA) and never allocates: tasks live in a fixed ring of `queue_capacity` slots, captures up to
// 104 bytes inline; a full ring makes the producer wait. A task that throws marks its stream with
// its exception, as a failed kernel marks a CUDA stream: query on an event recorded on that stream
// after the task rethrows it (and keeps it, as cudaEventQuery keeps reporting a sticky error);
// synchronize on such an event rethrows it and clears the errors of the tasks before the event (a
// later task's error stays, for the events after it), synchronize on the stream clears them all. An
// event recorded before a failing task completes without its error. Priorities are recorded but do
// not change the host threads' scheduling.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/backend/ordering.hpp"
#include "mstar/detail/spin_lock.hpp"
#include "mstar/detail/wake_word.hpp"
#include "mstar/kernels/recurrent.hpp"

namespace mstar {

struct host_backend_options {
  bool check_ordering = true;          // keep the vector clocks and report unordered slot accesses
  bool abort_on_violation = false;     // print the report and abort at the first one (CI soaks)
  std::uint32_t queue_capacity = 1024; // tasks in flight per stream; a power of two
  // How long an idle stream thread (or a host thread waiting on a stream) spins before it sleeps.
  std::chrono::nanoseconds spin_before_sleep{std::chrono::microseconds(50)};
};

namespace detail {

inline constexpr std::size_t host_task_bytes = 104;

struct host_task {
  void (*run)(void*) = nullptr;
  void (*destroy)(void*) noexcept = nullptr;
  alignas(16) unsigned char storage[host_task_bytes];
};

struct host_stream_state {
  std::uint32_t index = 0;
  stream_priority priority = stream_priority::normal;
  std::uint64_t mask = 0;
  std::unique_ptr<host_task[]> ring;
  spin_lock producer; // serializes producers; the consumer never takes it
  // Each on its own cache line pair: producers write tail and ring the consumer's bell, the consumer
  // writes executed and rings the bell host waiters sleep on.
  alignas(128) std::atomic<std::uint64_t> tail{0};     // tasks enqueued
  alignas(128) std::atomic<std::uint64_t> executed{0}; // tasks finished, in order
  alignas(128) wake_word work;                         // the consumer sleeps here, waiting for tail
  alignas(128) wake_word done;                         // host threads and other streams wait for executed
  alignas(128) std::atomic<bool> stop{false};
  std::mutex error_mutex;
  // Tasks that threw and whose exception was not taken yet, with their positions in the stream
  // (0-based), oldest first; up to max_kept_errors (reserved at creation, so the stream thread never
  // allocates for them): when full, the newest replaces the last kept, so the oldest error is still
  // reported first and an event after the newest failing task still reports one.
  std::vector<std::pair<std::uint64_t, std::exception_ptr>> errors;
  std::atomic<bool> has_error{false}; // errors is not empty (queries skip the mutex otherwise)
  static constexpr std::size_t max_kept_errors = 1024;
  std::thread thread;
};

struct host_event_state {
  spin_lock lock;
  host_stream_state* stream = nullptr; // where it was last recorded; nullptr: never (complete)
  std::uint64_t position = 0;          // complete once stream->executed >= position
  vector_clock clock{};                // the ordering checker's snapshot at the record
  bool timed = false;                  // create_timing_event: each record also stamps the time
  std::atomic<std::int64_t> stamp{0};  // steady-clock ns when the stream reached the record (timed only)
};

} // namespace detail

struct host_stream {
  detail::host_stream_state* state = nullptr;
  friend constexpr bool operator==(host_stream, host_stream) = default;
};
struct host_event {
  detail::host_event_state* state = nullptr;
  friend constexpr bool operator==(host_event, host_event) = default;
};

class host_backend {
public:
  using stream_type = host_stream;
  using event_type = host_event;
  static constexpr bool checks_ordering = true;

  explicit host_backend(host_backend_options options = {}) : options_(options), checker_(options.abort_on_violation) {
    const auto q = options_.queue_capacity;
    if (q < 2 || (q & (q - 1)) != 0)
      throw std::invalid_argument("mstar::host_backend: queue_capacity is " + std::to_string(q) +
                                  "; use a power of two >= 2 (e.g. 1024)");
  }
  ~host_backend() {
    std::vector<std::unique_ptr<detail::host_stream_state>> streams;
    {
      std::lock_guard g(registry_);
      streams.swap(streams_);
    }
    for (auto& s : streams)
      stop_stream(*s);
  }
  host_backend(const host_backend&) = delete;
  host_backend& operator=(const host_backend&) = delete;

  // ---- streams and events ----
  host_stream create_stream(stream_priority priority = stream_priority::normal) {
    std::lock_guard g(registry_);
    if (next_index_ >= max_ordered_streams)
      throw std::length_error("mstar::host_backend: at most " + std::to_string(max_ordered_streams) +
                              " streams over a backend's life (the ordering checker's clock width); reuse "
                              "streams instead of creating one per step");
    auto st = std::make_unique<detail::host_stream_state>();
    st->index = next_index_++;
    st->priority = priority;
    st->mask = options_.queue_capacity - 1;
    st->ring = std::make_unique<detail::host_task[]>(options_.queue_capacity);
    st->errors.reserve(detail::host_stream_state::max_kept_errors);
    auto* raw = st.get();
    raw->thread = std::thread([raw, spin = options_.spin_before_sleep] { run_stream(*raw, spin); });
    streams_.push_back(std::move(st));
    return host_stream{raw};
  }
  // Runs what is queued, then ends the stream's thread.
  void destroy_stream(host_stream s) {
    std::unique_ptr<detail::host_stream_state> owned;
    {
      std::lock_guard g(registry_);
      for (auto it = streams_.begin(); it != streams_.end(); ++it)
        if (it->get() == s.state) {
          owned = std::move(*it);
          streams_.erase(it);
          break;
        }
    }
    if (!owned) throw std::invalid_argument("mstar::host_backend::destroy_stream: not a live stream of this backend");
    stop_stream(*owned);
  }
  host_event create_event() {
    std::lock_guard g(registry_);
    events_.push_back(std::make_unique<detail::host_event_state>());
    return host_event{events_.back().get()};
  }
  void destroy_event(host_event e) {
    std::lock_guard g(registry_);
    for (auto it = events_.begin(); it != events_.end(); ++it)
      if (it->get() == e.state) {
        events_.erase(it);
        return;
      }
    throw std::invalid_argument("mstar::host_backend::destroy_event: not a live event of this backend");
  }

  // An event that also takes the time its stream reached it (a task on the stream, before the record).
  host_event create_timing_event() {
    const host_event e = create_event();
    e.state->timed = true;
    return e;
  }
  // Nanoseconds between two timing events' records, once both completed (nullopt before).
  std::optional<std::int64_t> elapsed_ns(host_event from, host_event to) const {
    if (!event(from).timed || !event(to).timed)
      throw std::invalid_argument("mstar::host_backend::elapsed_ns: an event made by create_event(); time with "
                                  "events of create_timing_event()");
    if (!query(from) || !query(to)) return std::nullopt;
    return to.state->stamp.load(std::memory_order_acquire) - from.state->stamp.load(std::memory_order_acquire);
  }

  void record(host_event e, host_stream s) {
    auto& st = stream(s);
    auto& ev = event(e);
    if (ev.timed)
      push(st, [p = &ev.stamp] {
        p->store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now().time_since_epoch()).count(),
                 std::memory_order_release);
      }, [] {});
    std::lock_guard g(st.producer);
    std::lock_guard ge(ev.lock);
    ev.stream = &st;
    ev.position = st.tail.load(std::memory_order_relaxed);
    if (options_.check_ordering) {
      checker_.teach(st.index);
      checker_.snapshot_for_record(st.index, ev.clock);
    }
  }
  // s's later work runs after e's last record. Waiting on a record of s itself needs nothing (the
  // queue is in order); on another stream it is a task that blocks s's thread until that position.
  void wait(host_stream s, host_event e) {
    auto& st = stream(s);
    auto& ev = event(e);
    detail::host_stream_state* from = nullptr;
    std::uint64_t position = 0;
    vector_clock clock{};
    {
      std::lock_guard g(ev.lock);
      from = ev.stream;
      position = ev.position;
      if (options_.check_ordering) clock = ev.clock;
    }
    if (from == nullptr || from == &st) return;
    push(
        st,
        [from, position, spin = options_.spin_before_sleep] {
          from->done.wait_until([&] { return from->executed.load(std::memory_order_acquire) >= position; }, spin);
        },
        [&] {
          if (options_.check_ordering) checker_.join(st.index, clock);
        });
  }
  // True once the work before the event's record ran; rethrows the exception of a task of that work
  // that threw, as cudaEventQuery reports a failed kernel, and keeps it (synchronize clears it).
  bool query(host_event e) const {
    auto& ev = event(e);
    detail::host_stream_state* from = nullptr;
    std::uint64_t position = 0;
    {
      std::lock_guard g(ev.lock);
      if (ev.stream == nullptr) return true;
      if (ev.stream->executed.load(std::memory_order_acquire) < ev.position) return false;
      from = ev.stream;
      position = ev.position;
    }
    rethrow_before(*from, position, false);
    return true;
  }
  void synchronize(host_event e) {
    auto& ev = event(e);
    detail::host_stream_state* from = nullptr;
    std::uint64_t position = 0;
    vector_clock clock{};
    {
      std::lock_guard g(ev.lock);
      from = ev.stream;
      position = ev.position;
      if (options_.check_ordering) clock = ev.clock;
    }
    if (from == nullptr) return;
    wait_for(*from, position);
    if (options_.check_ordering) checker_.learn(clock);
    rethrow_before(*from, position, true);
  }
  void synchronize(host_stream s) {
    auto& st = stream(s);
    std::uint64_t target = 0;
    vector_clock clock{};
    {
      std::lock_guard g(st.producer);
      target = st.tail.load(std::memory_order_relaxed);
      if (options_.check_ordering) checker_.clock_of(st.index, clock);
    }
    wait_for(st, target);
    if (options_.check_ordering) checker_.learn(clock);
    rethrow(st);
  }

  // ---- memory ("device" memory is host memory here) ----
  void* allocate_device(std::size_t bytes) { return allocate(bytes); }
  void free_device(void* p) noexcept { release(p); }
  void* allocate_host(std::size_t bytes) { return allocate(bytes); }
  void free_host(void* p) noexcept { release(p); }
  void zero_now(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
  void copy_to_device(void* dst, const void* src, std::size_t bytes, host_stream s) {
    enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, host_stream s) {
    enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void memset_2d(void* dst, std::size_t pitch, int value, std::size_t width, std::size_t height, host_stream s) {
    enqueue(s, [dst, pitch, value, width, height] {
      for (std::size_t r = 0; r < height; ++r)
        std::memset(static_cast<char*>(dst) + r * pitch, value, width);
    });
  }
  // Zeroes `slot` in every segment (layer) of a pool, with the host reference kernel.
  template <kernels::state_element T>
  void zero_state(kernels::segment_table<T> segments, std::int32_t slot, host_stream s) {
    enqueue(s, [segments, slot] { kernels::host::zero_slots<T>(segments, &slot, 1, nullptr); });
  }
  // Live allocations of this backend (a leak check for tests).
  std::size_t live_allocations() const noexcept { return live_.load(std::memory_order_acquire); }

  // ---- host tasks: the host stand-in for a kernel launch ----
  template <class F>
  void enqueue(host_stream s, F&& f) {
    push(stream(s), std::forward<F>(f), [] {});
  }

  // ---- ordering checks ----
  region_id track_region(std::string_view name, std::uint32_t count) {
    return options_.check_ordering ? checker_.add_region(name, count) : region_id{};
  }
  // An access to a slot by the work enqueued on s so far. Call it after enqueueing that work: the
  // checker then can only be stricter than the truth, never looser.
  void note_access(host_stream s, region_id r, std::uint32_t index) {
    if (!options_.check_ordering || !r.valid()) return;
    auto& st = stream(s);
    std::lock_guard g(st.producer);
    checker_.teach(st.index);
    checker_.access(st.index, r, index);
  }
  void note_accesses(host_stream s, region_id r, std::span<const std::int32_t> indices) {
    if (!options_.check_ordering || !r.valid() || indices.empty()) return;
    auto& st = stream(s);
    std::lock_guard g(st.producer);
    checker_.teach(st.index);
    checker_.access(st.index, r, indices);
  }
  ordering_checker& checker() noexcept { return checker_; }
  const ordering_checker& checker() const noexcept { return checker_; }
  bool checking() const noexcept { return options_.check_ordering; }
  // The stream's index in the checker's reports.
  static std::uint32_t index_of(host_stream s) noexcept { return s.state->index; }
  static stream_priority priority_of(host_stream s) noexcept { return s.state->priority; }

private:
  static detail::host_stream_state& stream(host_stream s) {
    if (s.state == nullptr)
      throw std::invalid_argument("mstar::host_backend: null stream; create one with create_stream()");
    return *s.state;
  }
  static detail::host_event_state& event(host_event e) {
    if (e.state == nullptr)
      throw std::invalid_argument("mstar::host_backend: null event; create one with create_event()");
    return *e.state;
  }

  template <class F, class WhileLocked>
  void push(detail::host_stream_state& st, F&& f, WhileLocked&& while_locked) {
    using Fn = std::decay_t<F>;
    static_assert(sizeof(Fn) <= detail::host_task_bytes && alignof(Fn) <= 16,
                  "mstar::host_backend::enqueue: the task's captures exceed 104 bytes (or 16-byte alignment); "
                  "capture a pointer to the data instead of the data");
    std::unique_lock lock(st.producer);
    std::uint64_t t = st.tail.load(std::memory_order_relaxed);
    while (t - st.executed.load(std::memory_order_acquire) > st.mask) {
      lock.unlock();
      st.done.wait_until(
          [&] {
            return st.tail.load(std::memory_order_relaxed) - st.executed.load(std::memory_order_acquire) <= st.mask;
          },
          options_.spin_before_sleep);
      lock.lock();
      t = st.tail.load(std::memory_order_relaxed);
    }
    if (options_.check_ordering) checker_.teach(st.index);
    while_locked();
    detail::host_task& slot = st.ring[t & st.mask];
    ::new (static_cast<void*>(slot.storage)) Fn(std::forward<F>(f));
    slot.run = [](void* p) { (*static_cast<Fn*>(p))(); };
    slot.destroy = [](void* p) noexcept { static_cast<Fn*>(p)->~Fn(); };
    st.tail.store(t + 1, std::memory_order_release);
    lock.unlock();
    st.work.notify();
  }

  static void run_stream(detail::host_stream_state& st, std::chrono::nanoseconds spin) {
    std::uint64_t head = 0;
    for (;;) {
      st.work.wait_until(
          [&] { return st.tail.load(std::memory_order_acquire) != head || st.stop.load(std::memory_order_acquire); },
          spin);
      if (st.tail.load(std::memory_order_acquire) == head) return; // stopped, and everything ran
      detail::host_task& t = st.ring[head & st.mask];
      try {
        t.run(t.storage);
      } catch (...) {
        std::lock_guard g(st.error_mutex);
        if (st.errors.size() < detail::host_stream_state::max_kept_errors)
          st.errors.emplace_back(head, std::current_exception());
        else
          st.errors.back() = {head, std::current_exception()};
        st.has_error.store(true, std::memory_order_release);
      }
      t.destroy(t.storage);
      ++head;
      st.executed.store(head, std::memory_order_release);
      st.done.notify();
    }
  }

  void wait_for(detail::host_stream_state& st, std::uint64_t position) {
    st.done.wait_until([&] { return st.executed.load(std::memory_order_acquire) >= position; },
                       options_.spin_before_sleep);
  }
  static void rethrow(detail::host_stream_state& st) { rethrow_before(st, ~std::uint64_t{0}, true); }
  // Rethrows the oldest error of a task before `position`; `take` clears every error before it
  // (the errors of later tasks stay, for the events recorded after them).
  static void rethrow_before(detail::host_stream_state& st, std::uint64_t position, bool take) {
    if (!st.has_error.load(std::memory_order_acquire)) return;
    std::exception_ptr e;
    {
      std::lock_guard g(st.error_mutex);
      if (st.errors.empty() || st.errors.front().first >= position) return;
      e = st.errors.front().second;
      if (take) {
        std::size_t n = 0;
        while (n < st.errors.size() && st.errors[n].first < position)
          ++n;
        st.errors.erase(st.errors.begin(), st.errors.begin() + static_cast<std::ptrdiff_t>(n));
        st.has_error.store(!st.errors.empty(), std::memory_order_relaxed);
      }
    }
    std::rethrow_exception(e);
  }
  static void stop_stream(detail::host_stream_state& st) {
    st.stop.store(true, std::memory_order_release);
    st.work.notify();
    if (st.thread.joinable()) st.thread.join();
  }

  void* allocate(std::size_t bytes) {
    void* p = ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{64});
    live_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  void release(void* p) noexcept {
    if (p == nullptr) return;
    ::operator delete (p, std::align_val_t{64});
    live_.fetch_sub(1, std::memory_order_relaxed);
  }

  host_backend_options options_;
  ordering_checker checker_;
  std::mutex registry_;
  std::uint32_t next_index_ = 0;
  std::vector<std::unique_ptr<detail::host_stream_state>> streams_;
  std::vector<std::unique_ptr<detail::host_event_state>> events_;
  std::atomic<std::size_t> live_{0};
};

static_assert(device_backend<host_backend>);
static_assert(timing_backend<host_backend>);

} // namespace mstar
