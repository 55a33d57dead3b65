// An edge between two workers: each producer step's per-row outputs (for Qwen3-TTS, the 16 codes of
// each new frame) moved into a preallocated ring on the consumer's side, one batched copy per
// producer step, on a copy stream of its own, with an event the consumer's step waits on before it
// reads. A slot is reused only after every row in it was consumed (read by a consumer step that has
// since landed, or dropped because its request ended), so the ring never grows: a producer that
// finds every slot held waits (backpressure) or, with try_send, is told so.
//
//   mstar::local_edge<mstar::host_backend, frame> e(backend, {.slots = 64, .max_rows = 128, .name = "codes"});
//   // producer step (its GPU thread), after the forward wrote `rows` values at src on `producer`:
//   mstar::edge_ticket t = e.send(producer, src, rows);   // copy queued; `producer` waits on it
//   // consumer step (the other worker's GPU thread), before reading row i of the ticket:
//   const frame* slot = e.receive(consumer, t);           // `consumer` waits on the copy's event
//   backend.copy_to_host(dst, slot + i, sizeof(frame), consumer);  // the read, on `consumer`
//   e.note_read(consumer, t);                             // for the ordering checker
//   e.release(consumer, t, 1);                            // row i consumed: the slot frees once it lands
//   // a consumer request that ends without reading its row: e.drop(t, 1) (any thread)
//
// The producer's stream waits on the copy, so a producer step that landed has its rows in the ring:
// what the producer's main thread then tells the consumer (the ticket and the row) is always
// readable, and a producer buffer can be reused as soon as its step landed. The consumer's wait is
// still needed: it is the only ordering edge between the copy stream and the consumer's stream, and
// on the host backend the ordering checker reports a read without it (each slot is a tracked region).
//
// The concept mstar::edge_transport is what a worker's forward uses; local_edge backs it within one
// process (one device: a device-to-device copy; two devices: a peer copy, through the backend's
// copy_on_device when it has one). A cross-process or cross-node transport (docs/topology.md) keeps
// the same four calls: send queues the transfer and returns a ticket, receive makes the consumer's
// stream wait for its arrival, release/drop give the slot back.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "mstar/backend/backend.hpp"

namespace mstar {

// Where a producer step's rows went: a slot of the consumer's ring and how many rows it holds.
struct edge_ticket {
  std::uint32_t slot = ~0u;
  std::uint32_t rows = 0;
  std::uint64_t sequence = 0; // the send's number, for traces and checks (a stale ticket is refused)
  constexpr bool valid() const { return slot != ~0u; }
};

// The calls a worker's forward and flow make on an edge. P and C are the producer's and the
// consumer's stream types (one backend's stream type within a process).
template <class E>
concept edge_transport = requires(E& e, typename E::producer_stream p, typename E::consumer_stream c,
                                  const typename E::value_type* src, std::uint32_t n, edge_ticket t) {
  typename E::value_type;
  { e.try_send(p, src, n) } -> std::same_as<std::optional<edge_ticket>>;
  { e.send(p, src, n) } -> std::same_as<edge_ticket>;
  { e.receive(c, t) } -> std::same_as<const typename E::value_type*>;
  e.note_read(c, t);
  e.release(c, t, n);
  e.drop(t, n);
  { e.slots_free() } -> std::convertible_to<std::uint32_t>;
};

struct edge_options {
  std::uint32_t slots = 64;     // producer steps whose rows can be in the ring at once
  std::uint32_t max_rows = 128; // rows of one producer step (the producer's max_batch)
  std::string name = "edge";    // in errors and in the ordering checker's reports
  // send() waits this long for a free slot, then throws: a consumer that never consumes (or a ring
  // smaller than the rows the consumer holds before its first read) would otherwise hang the producer.
  std::chrono::milliseconds send_timeout{10000};
  // Times each copy on the copy stream with a pair of timing events (a backend that has them:
  // mstar::timing_backend); local_edge::copy_time() sums them. Off: no timing events are recorded.
  bool time_copies = false;
};

// The device time of an edge's copies: each from the copy stream reaching it (its waits satisfied) to
// the copy's end. A copy whose events were still pending when its slot was reused (every row of it
// dropped unread) is counted in `unmeasured` instead.
struct edge_copy_time {
  std::uint64_t copies = 0, unmeasured = 0;
  std::int64_t total_ns = 0, max_ns = 0;
  double mean_ns() const { return copies ? double(total_ns) / double(copies) : 0.0; }
};

// An edge within one process, over one backend (both workers on one device, or on two devices of
// a backend whose copy_on_device does peer copies). Thread-safe: the producer's GPU thread sends,
// the consumer's GPU thread receives and releases, any thread drops.
template <device_backend Backend, class T>
class local_edge {
public:
  static_assert(std::is_trivially_copyable_v<T>, "mstar::local_edge: the rows must be trivially copyable");
  using value_type = T;
  using producer_stream = typename Backend::stream_type;
  using consumer_stream = typename Backend::stream_type;

  // The ring, the copy stream and the slots' events live on `b`, the consumer's device. `producer`:
  // the producer's backend when it is another device (its streams' events must be its own).
  local_edge(Backend& b, edge_options o, Backend* producer = nullptr)
      : b_(&b), p_(producer ? producer : &b), o_(std::move(o)) {
    if (o_.slots == 0 || o_.max_rows == 0)
      throw std::invalid_argument("mstar::local_edge '" + o_.name + "': slots " + std::to_string(o_.slots) +
                                  " and max_rows " + std::to_string(o_.max_rows) + " must both be >= 1");
    if constexpr (!timing_backend<Backend>)
      if (o_.time_copies)
        throw std::invalid_argument("mstar::local_edge '" + o_.name + "': time_copies needs a backend with timing "
                                    "events (mstar::timing_backend); turn it off for this backend");
    ring_ = static_cast<T*>(b_->allocate_device(std::size_t(o_.slots) * o_.max_rows * sizeof(T)));
    copy_ = b_->create_stream(stream_priority::high);
    slots_.resize(o_.slots);
    for (auto& s : slots_) {
      s.ready = b_->create_event();
      s.released = b_->create_event();
      if constexpr (timing_backend<Backend>)
        if (o_.time_copies) {
          s.copy_begin = b_->create_timing_event();
          s.copy_end = b_->create_timing_event();
        }
    }
    produced_ = p_->create_event();
    region_ = b_->track_region(o_.name + " ring slot", o_.slots);
  }
  // Destroy it after every stream that sent on it or received from it was synchronized or destroyed:
  // on the host backend a stream's wait on the copy stream reads that stream's state while it runs.
  ~local_edge() {
    b_->synchronize(copy_);
    for (auto& s : slots_) {
      b_->destroy_event(s.ready);
      b_->destroy_event(s.released);
      if (o_.time_copies) {
        b_->destroy_event(s.copy_begin);
        b_->destroy_event(s.copy_end);
      }
    }
    p_->destroy_event(produced_);
    b_->destroy_stream(copy_);
    b_->free_device(ring_);
  }
  local_edge(const local_edge&) = delete;
  local_edge& operator=(const local_edge&) = delete;

  // Queues the copy of `rows` values at `src` (written by work already on `producer`) into a free
  // slot, and makes `producer` wait for it. Nullopt when every slot is held.
  std::optional<edge_ticket> try_send(producer_stream producer, const T* src, std::uint32_t rows) {
    if (rows == 0 || rows > o_.max_rows)
      throw std::invalid_argument("mstar::local_edge '" + o_.name + "': a send of " + std::to_string(rows) +
                                  " rows; give 1.." + std::to_string(o_.max_rows) + " (edge_options::max_rows)");
    std::lock_guard g(m_);
    const auto found = free_slot();
    if (!found) return std::nullopt;
    auto& s = slots_[*found];
    T* dst = ring_ + std::size_t(*found) * o_.max_rows;
    p_->record(produced_, producer);
    b_->wait(copy_, produced_);
    if (s.reads > 0) b_->wait(copy_, s.released); // the last consumer step that read the slot
    if constexpr (timing_backend<Backend>)
      if (o_.time_copies) {
        harvest(s);
        b_->record(s.copy_begin, copy_);
      }
    copy_on(dst, src, std::size_t(rows) * sizeof(T));
    if constexpr (timing_backend<Backend>)
      if (o_.time_copies) {
        b_->record(s.copy_end, copy_);
        s.timing_pending = true;
      }
    b_->note_access(copy_, region_, *found);
    b_->record(s.ready, copy_);
    p_->wait(producer, s.ready);
    s.held = rows;
    s.reads = 0;
    s.sequence = ++sequence_;
    ++sends_;
    return edge_ticket{*found, rows, s.sequence};
  }
  // The same, waiting for a free slot (backpressure); throws after edge_options::send_timeout.
  edge_ticket send(producer_stream producer, const T* src, std::uint32_t rows) {
    const auto deadline = std::chrono::steady_clock::now() + o_.send_timeout;
    for (;;) {
      if (auto t = try_send(producer, src, rows)) return *t;
      {
        std::lock_guard g(m_);
        ++full_waits_;
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("mstar::local_edge '" + o_.name + "': every one of its " + std::to_string(o_.slots) +
                                 " slots stayed held for " + std::to_string(o_.send_timeout.count()) +
                                 " ms; the consumer is not consuming its rows: raise edge_options::slots above the "
                                 "producer steps a consumer row waits for, or check that the consumer runs");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Makes `consumer` wait for the ticket's copy, and gives the slot's rows.
  const T* receive(consumer_stream consumer, edge_ticket t) {
    std::lock_guard g(m_);
    auto& s = checked(t, "receive");
    b_->wait(consumer, s.ready);
    return ring_ + std::size_t(t.slot) * o_.max_rows;
  }
  // The slot's rows without the wait: for a consumer that ordered itself otherwise. A read with no
  // ordering edge is what the ordering checker reports (see note_read).
  const T* rows_of(edge_ticket t) {
    std::lock_guard g(m_);
    checked(t, "rows_of");
    return ring_ + std::size_t(t.slot) * o_.max_rows;
  }
  // Tells the ordering checker that work queued on `consumer` read the ticket's slot (call it after
  // queueing that work).
  void note_read(consumer_stream consumer, edge_ticket t) { b_->note_access(consumer, region_, t.slot); }
  // `rows` of the ticket were read by work queued on `consumer`; the slot frees once all its rows are
  // consumed and the last read has landed.
  void release(consumer_stream consumer, edge_ticket t, std::uint32_t rows) {
    std::lock_guard g(m_);
    auto& s = checked(t, "release");
    take(s, t, rows, "release");
    ++s.reads;
    b_->record(s.released, consumer);
  }
  // `rows` of the ticket will never be read (their request ended).
  void drop(edge_ticket t, std::uint32_t rows) {
    std::lock_guard g(m_);
    auto& s = checked(t, "drop");
    take(s, t, rows, "drop");
  }

  std::uint32_t slots_free() {
    std::lock_guard g(m_);
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < o_.slots; ++i)
      n += is_free(slots_[i]) ? 1 : 0;
    return n;
  }
  // The copies' device time so far (edge_options::time_copies; zeros without it). Copies still running
  // are left for a later call.
  edge_copy_time copy_time() {
    std::lock_guard g(m_);
    if constexpr (timing_backend<Backend>)
      for (auto& s : slots_)
        if (s.timing_pending && b_->query(s.copy_end)) harvest(s);
    return timed_;
  }
  std::uint64_t sends() const { return sends_; }
  std::uint64_t full_waits() const { return full_waits_; } // send() found every slot held, per try
  typename Backend::stream_type copy_stream() const { return copy_; }
  const edge_options& options() const { return o_; }

private:
  struct slot_state {
    typename Backend::event_type ready{}, released{};
    std::uint32_t held = 0;  // rows not yet released or dropped
    std::uint32_t reads = 0; // releases since the last send (released is recorded when > 0)
    std::uint64_t sequence = 0;
    typename Backend::event_type copy_begin{}, copy_end{}; // edge_options::time_copies
    bool timing_pending = false;                           // a timed copy not yet summed
  };

  // Adds the slot's last timed copy to the sums (its events may still be pending when every row of
  // the slot was dropped unread: then it counts as unmeasured).
  void harvest(slot_state& s) {
    if constexpr (timing_backend<Backend>) {
      if (!s.timing_pending) return;
      s.timing_pending = false;
      const auto ns = b_->elapsed_ns(s.copy_begin, s.copy_end);
      if (!ns) {
        ++timed_.unmeasured;
        return;
      }
      ++timed_.copies;
      timed_.total_ns += *ns;
      timed_.max_ns = std::max(timed_.max_ns, *ns);
    }
  }

  bool is_free(slot_state& s) { return s.held == 0 && (s.reads == 0 || b_->query(s.released)); }
  // Round robin from the slot after the last one given, so slots are reused as late as possible.
  std::optional<std::uint32_t> free_slot() {
    for (std::uint32_t k = 0; k < o_.slots; ++k) {
      const std::uint32_t i = (next_ + k) % o_.slots;
      if (is_free(slots_[i])) {
        next_ = (i + 1) % o_.slots;
        return i;
      }
    }
    return std::nullopt;
  }
  slot_state& checked(edge_ticket t, const char* what) {
    if (!t.valid() || t.slot >= o_.slots || slots_[t.slot].sequence != t.sequence)
      throw std::logic_error(std::string("mstar::local_edge '") + o_.name + "': " + what + " of a ticket (slot " +
                             std::to_string(t.slot) + ", send " + std::to_string(t.sequence) +
                             ") that is not the slot's current one; a ticket is good until all its rows were "
                             "released or dropped");
    return slots_[t.slot];
  }
  void take(slot_state& s, edge_ticket t, std::uint32_t rows, const char* what) {
    if (rows > s.held)
      throw std::logic_error(std::string("mstar::local_edge '") + o_.name + "': " + what + " of " +
                             std::to_string(rows) + " rows of slot " + std::to_string(t.slot) + ", which holds " +
                             std::to_string(s.held) + "; release or drop each row once");
    s.held -= rows;
  }
  void copy_on(T* dst, const T* src, std::size_t bytes) {
    if constexpr (requires { b_->copy_on_device(dst, src, bytes, copy_); })
      b_->copy_on_device(dst, src, bytes, copy_);
    else
      b_->copy_to_device(dst, src, bytes, copy_); // the host backend: a memcpy on the copy stream
  }

  Backend* b_;
  Backend* p_; // the producer's device
  edge_options o_;
  T* ring_ = nullptr;
  typename Backend::stream_type copy_{};
  typename Backend::event_type produced_{};
  std::vector<slot_state> slots_;
  region_id region_{};
  std::mutex m_;
  std::uint32_t next_ = 0;
  std::uint64_t sequence_ = 0, sends_ = 0, full_waits_ = 0;
  edge_copy_time timed_{};
};

} // namespace mstar
