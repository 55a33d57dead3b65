// The vocabulary resources share with the runner, with no model policy in it: request ids and their
// dense handles (the request table), rows, and the view of one step that a resource sees.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mstar/detail/spin_lock.hpp"

namespace mstar {

// The caller's name for a request (stable across runs: the sampler seeds from it).
using request_id = std::uint64_t;

// A request's dense handle: resources keep per-request state in arrays indexed by `index`, so a row
// costs an array access rather than a hash lookup. `generation` tells a live request from an earlier
// one that held the same index (a stale handle).
struct request_ref {
  std::uint32_t index = ~std::uint32_t{0};
  std::uint32_t generation = 0;
  friend constexpr bool operator==(request_ref, request_ref) = default;
};

// One request's place in a step's batch.
struct row {
  request_ref request;
  std::uint32_t tokens = 1; // new tokens this step (KV blocks, positions, attention)
  std::uint32_t label = 0;  // which of the request's states (recurrent pools hold a slot per (request, label))
  friend constexpr bool operator==(const row&, const row&) = default;
};

// What a resource sees of a step. Rows [rows.size(), bucket) are padding (a CUDA graph replays a
// fixed batch): they address the sink and hold no request.
struct step_view {
  std::uint8_t node = 0;
  std::string_view node_name;
  std::span<const row> rows;
  std::uint32_t bucket = 0;
  std::uint32_t tokens = 0; // sum of the rows' tokens
};

// Live requests and their dense handles. The main thread adds and removes (at ingest and teardown);
// any thread may ask whether a handle is current. A LIFO free list of indices, a generation per
// index (odd while live).
class request_table {
public:
  explicit request_table(std::uint32_t capacity)
      : generation_(capacity), ids_(capacity), taken_(capacity, 0), free_(capacity) {
    if (capacity == 0) throw std::invalid_argument("mstar::request_table: capacity 0; allow at least one request");
    for (std::uint32_t i = 0; i < capacity; ++i)
      free_[i] = capacity - 1 - i;
    top_ = capacity;
  }

  // nullopt when every index is live (the caller parks the request or raises max_requests).
  std::optional<request_ref> add(request_id id) {
    std::lock_guard g(lock_);
    if (top_ == 0) return std::nullopt;
    const std::uint32_t i = free_[--top_];
    ids_[i] = id;
    taken_[i] = 1;
    const std::uint32_t gen = generation_[i].load(std::memory_order_relaxed) + 1; // odd: live
    generation_[i].store(gen, std::memory_order_release);
    return request_ref{i, gen};
  }
  // Teardown in two halves. retire: r stops being current at once (a step that names it now fails
  // validation), but its index stays taken while its resources are torn down; release: the index
  // may be handed out again. False when r is not current (already retired, or never added).
  bool retire(request_ref r) {
    std::lock_guard g(lock_);
    if (!current(r)) return false;
    generation_[r.index].store(r.generation + 1, std::memory_order_seq_cst);
    return true;
  }
  void release(request_ref r) {
    std::lock_guard g(lock_);
    if (r.index >= generation_.size() || !taken_[r.index] ||
        generation_[r.index].load(std::memory_order_relaxed) != r.generation + 1)
      throw std::logic_error("mstar::request_table::release: request index " + std::to_string(r.index) +
                             " generation " + std::to_string(r.generation) +
                             " was not retired (or was released already)");
    taken_[r.index] = 0;
    free_[top_++] = r.index;
  }
  // retire and release at once (a request that never reached a resource).
  bool remove(request_ref r) {
    if (!retire(r)) return false;
    release(r);
    return true;
  }
  bool current(request_ref r) const noexcept {
    return r.index < generation_.size() && (r.generation & 1u) == 1u &&
           generation_[r.index].load(std::memory_order_seq_cst) == r.generation;
  }
  request_id id_of(request_ref r) const {
    if (!current(r))
      throw std::invalid_argument("mstar::request_table::id_of: request index " + std::to_string(r.index) +
                                  " generation " + std::to_string(r.generation) + " is not a live request");
    return ids_[r.index];
  }
  std::uint32_t capacity() const noexcept { return static_cast<std::uint32_t>(generation_.size()); }
  // Indices taken (live or retired and not yet released).
  std::uint32_t live() const {
    std::lock_guard g(lock_);
    return capacity() - top_;
  }

private:
  mutable detail::spin_lock lock_;
  std::vector<std::atomic<std::uint32_t>> generation_;
  std::vector<request_id> ids_;
  std::vector<std::uint8_t> taken_;
  std::vector<std::uint32_t> free_;
  std::uint32_t top_ = 0;
};

} // namespace mstar
