// The device backend concept: what the engine needs from a device, with every operation taking its
// stream as an argument. Two implementations: mstar::host_backend (backend/host.hpp: each stream an
// in-order queue run by its own host thread, with the stream-ordering checker) and
// mstar::cuda_backend (backend/cuda.hpp: CUDA streams with priorities, events, device memory).
//
// There is no "current stream" anywhere in the engine (invariant 4: the seed crashed when a stream
// object entered as a context by the GPU thread was entered again by the main thread). The one
// convenience, stream_guard, is per thread and nesting-safe, and the engine never reads it.
//
// 1. Streams. create_stream(priority) / destroy_stream(s). Work enqueued on one stream runs in
//    order; several host threads may enqueue on one stream at once.
// 2. Events. record(e, s) marks s's position; wait(s2, e) makes s2's later work run after
//    everything enqueued on s before the latest record(e, ...) that preceded the wait call; query(e)
//    and synchronize(e) ask / block until that record's position is reached. A never-recorded event
//    is complete.
// 3. Memory. allocate_device / free_device, allocate_host / free_host (pinned on CUDA: async copies
//    from it are truly async), zero_now (synchronous zero of device memory, for load time),
//    copy_to_device / copy_to_host / memset_2d on a stream, and zero_state (zero one recurrent state
//    slot in every segment of a pool, on a stream).
// 4. Ordering checks. checking() / track_region(name, count) / note_access(s, region, index) /
//    note_accesses(s, region, indices): the host backend checks that accesses to one slot from
//    different streams are ordered by events (ordering.hpp); the CUDA backend ignores them.
// 5. Timing (optional, concept timing_backend): create_timing_event() gives an event that also takes
//    the time its stream reached it, and elapsed_ns(from, to) the time between two such events once
//    both completed (nullopt before). Timing events cost more to record than plain ones, so the engine
//    never uses them; measurements (the edge's copy time) do, where a backend has them.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "mstar/backend/ordering.hpp"
#include "mstar/kernels/recurrent.hpp"

namespace mstar {

enum class stream_priority : std::uint8_t { normal, high, low };

template <class B>
concept device_backend = requires(B& b, const B& cb, typename B::stream_type s, typename B::event_type e, void* p,
                                  const void* cp, std::size_t n, std::string_view name, region_id r,
                                  std::span<const std::int32_t> indices, kernels::segment_table<float> segments) {
  requires std::is_trivially_copyable_v<typename B::stream_type>;
  requires std::equality_comparable<typename B::stream_type>;
  requires std::is_trivially_copyable_v<typename B::event_type>;
  { B::checks_ordering } -> std::convertible_to<bool>;
  { cb.checking() } -> std::convertible_to<bool>;
  { b.create_stream(stream_priority::normal) } -> std::same_as<typename B::stream_type>;
  b.destroy_stream(s);
  { b.create_event() } -> std::same_as<typename B::event_type>;
  b.destroy_event(e);
  b.record(e, s);
  b.wait(s, e);
  { b.query(e) } -> std::same_as<bool>;
  b.synchronize(e);
  b.synchronize(s);
  { b.allocate_device(n) } -> std::same_as<void*>;
  b.free_device(p);
  { b.allocate_host(n) } -> std::same_as<void*>;
  b.free_host(p);
  b.zero_now(p, n);
  b.copy_to_device(p, cp, n, s);
  b.copy_to_host(p, cp, n, s);
  b.memset_2d(p, n, 0, n, n, s);
  b.zero_state(segments, std::int32_t{0}, s);
  { b.track_region(name, std::uint32_t{0}) } -> std::same_as<region_id>;
  b.note_access(s, r, std::uint32_t{0});
  b.note_accesses(s, r, indices);
};

// A backend whose events can also time the work between them (section 5 above).
template <class B>
concept timing_backend = device_backend<B> && requires(B& b, typename B::event_type e) {
  { b.create_timing_event() } -> std::same_as<typename B::event_type>;
  { b.elapsed_ns(e, e) } -> std::same_as<std::optional<std::int64_t>>;
};

// A scoped "this thread's stream", for user code that wants one (a forward function calling helpers
// that do not take a stream). Per thread: two threads may hold guards on the same stream at once and
// neither sees the other's. Nesting-safe: a guard restores the stream it found, and guards must end
// in the reverse order they began (they are neither copyable nor movable, so scopes ensure it; an
// out-of-order end is a bug and terminates with a message). The engine never reads it.
template <class Stream>
class stream_guard {
public:
  explicit stream_guard(Stream s) noexcept : stream_(s), previous_(top_) { top_ = this; }
  ~stream_guard() {
    if (top_ != this) {
      std::fputs("mstar::stream_guard: guards ended out of order on one thread; end them in reverse order of "
                 "creation (keep each in its own scope)\n",
                 stderr);
      std::terminate();
    }
    top_ = previous_;
  }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

  // The innermost guard's stream on the calling thread, or nullopt outside every guard.
  static std::optional<Stream> current() noexcept {
    if (top_ == nullptr) return std::nullopt;
    return top_->stream_;
  }
  // The same, for code that cannot run without one.
  static Stream require() {
    if (top_ == nullptr)
      throw std::logic_error("mstar::stream_guard::require: no stream guard on this thread; open one with "
                             "mstar::stream_guard guard(stream) or pass the stream explicitly");
    return top_->stream_;
  }

private:
  Stream stream_;
  stream_guard* previous_;
  static inline thread_local stream_guard* top_ = nullptr;
};

} // namespace mstar
