// A recurrent state pool: per-request state slots that a node's steps read and write in place (the
// codec's decoder state). The runtime side of the mstar::recurrent_pool policy.
//
// Storage is layer-major, [layers][slots][state] of T in one device allocation; kernels see one
// segment per layer (mstar::kernels::recurrent_segment). Slot 0 is the sink: padding rows address
// it, it is zero from load and never written (scatter skips it). Slots 1.. are handed out from a
// LIFO free list (the slot freed last is reused first, warm in cache), one per (request, label).
//
// Handles carry the slot's generation, bumped at every release, so a stale handle (kept past a
// release) is detected, and releasing a free slot is a resource_error: the free list never holds a
// slot twice.
//
// Teardown zeroes a slot on the stream it is given, which the engine makes the owner stream (the
// side lane's, once set_side_stream registered it): a slot goes back to the free list as soon as its
// zero is enqueued, and the pool remembers the stream of every slot's last access (plan or zero). A
// later access from the same stream is ordered by the stream itself; one from another stream first
// makes that stream wait on an event recorded on the previous one. So the next user of a slot can
// never run ahead of its zero, on any stream, and the host backend's ordering checker agrees: the
// pool notes each access after it is enqueued (a step's at commit, a zero at once).
//
// Thread use: the GPU thread admits, plans and commits; the plan thread pre-admits and pre-plans
// (chain pools only); the main thread reserves at readiness and tears down. One spin lock guards the
// tables; it is held for O(rows) work and never across a blocking wait.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/detail/spin_lock.hpp"
#include "mstar/kernels/recurrent.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar {

template <device_backend Backend, kernels::state_element T>
class recurrent_state_pool {
public:
  using backend_type = Backend;
  using stream_type = typename Backend::stream_type;
  using event_type = typename Backend::event_type;
  using element_type = T;

  struct handle {
    std::int32_t slot = -1;
    std::uint32_t generation = 0;
    friend constexpr bool operator==(handle, handle) = default;
  };

  // What a forward function reads: per padded row the slot (0: the sink) and whether it holds
  // committed state, on the device and on the host, and the pool's segments.
  struct plan_type {
    const std::int32_t* slots = nullptr;
    const std::uint8_t* has_state = nullptr;
    std::span<const std::int32_t> host_slots;
    std::span<const std::uint8_t> host_has_state;
    kernels::segment_table<T> segments;
    std::uint32_t rows = 0;
    std::uint32_t bucket = 0;
  };

  explicit recurrent_state_pool(const resource_context<Backend>& ctx)
      : backend_(ctx.backend), key_(ctx.desc->key), layers_(ctx.desc->layers), slots_(ctx.desc->slots),
        elems_(ctx.desc->state_elements()), labels_(ctx.options->max_labels),
        slot_of_(std::size_t(ctx.options->max_requests) * ctx.options->max_labels, -1), owner_key_(slots_, 0),
        generation_(slots_, 0), held_(slots_, 0), valid_(slots_, 0), last_stream_(slots_), has_last_(slots_, 0),
        free_(slots_, 0), staged_generation_(ctx.options->max_batch, 0) {
    if (ctx.desc->kind != resource_kind::recurrent_pool || slots_ < 2 || layers_ == 0 || elems_ == 0)
      throw std::invalid_argument("mstar::recurrent_state_pool: resource " + std::string(key_) +
                                  " is not a recurrent pool with layers >= 1, slots >= 2 and a non-empty state");
    if (ctx.desc->state_bytes() != elems_ * sizeof(T))
      throw std::invalid_argument("mstar::recurrent_state_pool: resource " + std::string(key_) + " declares " +
                                  std::string(name_of(ctx.desc->element)) + " state but the pool stores " +
                                  std::to_string(sizeof(T)) + "-byte elements; give the policy the same element type");
    const std::size_t bytes = std::size_t(layers_) * slots_ * elems_ * sizeof(T);
    storage_ = static_cast<T*>(backend_->allocate_device(bytes));
    backend_->zero_now(storage_, bytes);
    segments_.resize(layers_);
    for (std::uint32_t l = 0; l < layers_; ++l)
      segments_[l] =
          kernels::recurrent_segment<T>{storage_ + std::size_t(l) * slots_ * elems_, static_cast<std::int64_t>(elems_),
                                        static_cast<std::int32_t>(slots_), 0};
    // LIFO: slot 1 on top, so a fresh pool hands out 1, 2, 3, ...
    for (std::uint32_t s = slots_ - 1; s >= 1; --s)
      free_[free_top_++] = static_cast<std::int32_t>(s);
    region_ = backend_->track_region(key_, slots_);
    fence_ = backend_->create_event();
  }

  ~recurrent_state_pool() {
    // Work still queued may touch the storage (a zero, a forward): wait for every stream the pool
    // has used before freeing it.
    std::vector<stream_type> seen;
    for (std::uint32_t s = 0; s < slots_; ++s)
      if (has_last_[s] && std::find(seen.begin(), seen.end(), last_stream_[s]) == seen.end())
        seen.push_back(last_stream_[s]);
    for (auto st : seen) {
      try {
        backend_->record(fence_, st);
        backend_->synchronize(fence_);
      } catch (...) { // an error of unrelated queued work; the storage must be freed all the same
      }
    }
    backend_->destroy_event(fence_);
    backend_->free_device(storage_);
  }
  recurrent_state_pool(const recurrent_state_pool&) = delete;
  recurrent_state_pool& operator=(const recurrent_state_pool&) = delete;

  std::string_view key() const { return key_; }
  void declare(std::uint8_t) { ++declaring_nodes_; }

  // ---- the lifecycle ----
  std::optional<refusal> admit(const step_view& s) {
    std::lock_guard g(lock_);
    auto r = admit_locked(s);
    ++(r ? refusals_ : admits_);
    return r;
  }
  void plan(const step_view& s, plan_arena& arena, stream_type stream) {
    std::lock_guard g(lock_);
    live_ = fill(s, arena);
    fence_rows(live_.host_slots.first(live_.rows), stream);
    planned_stream_ = stream;
    ++plans_;
  }
  void commit(const step_view& s) {
    std::lock_guard g(lock_);
    if (s.rows.size() != live_.rows)
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": commit of a " +
                           std::to_string(s.rows.size()) + "-row step, but the live plan has " +
                           std::to_string(live_.rows) + " rows; commit the step that was planned last");
    const auto rows = live_.host_slots.first(live_.rows);
    for (auto slot : rows)
      valid_[slot] = 1;
    backend_->note_accesses(planned_stream_, region_, rows);
    ++commits_;
  }
  std::optional<refusal> pre_admit(const step_view& s) {
    std::lock_guard g(lock_);
    auto r = admit_locked(s);
    ++(r ? refusals_ : pre_admits_);
    return r;
  }
  void pre_plan(const step_view& s, plan_arena& arena) {
    std::lock_guard g(lock_);
    staged_ = fill(s, arena);
    for (std::uint32_t i = 0; i < staged_.rows; ++i)
      staged_generation_[i] = generation_[staged_.host_slots[i]];
    has_staged_ = true;
    ++pre_plans_;
  }
  bool promote(const step_view& s, stream_type stream) {
    std::lock_guard g(lock_);
    if (!has_staged_ || staged_.rows != s.rows.size()) return stale_promote();
    for (std::uint32_t i = 0; i < staged_.rows; ++i) {
      const auto slot = staged_.host_slots[i];
      if (slot_of_[key_of(s.rows[i])] != slot || generation_[slot] != staged_generation_[i]) return stale_promote();
    }
    live_ = staged_;
    has_staged_ = false;
    fence_rows(live_.host_slots.first(live_.rows), stream);
    planned_stream_ = stream;
    ++promotes_;
    return true;
  }
  void clear_preplan() {
    std::lock_guard g(lock_);
    has_staged_ = false;
    ++clears_;
  }
  // Frees every slot the request holds, each zeroed on `stream` before it can be reused.
  void remove_request(request_ref r, stream_type stream) {
    std::lock_guard g(lock_);
    if (r.index >= slot_of_.size() / labels_) return;
    bool any = false;
    for (std::uint32_t label = 0; label < labels_; ++label) {
      auto& slot = slot_of_[std::size_t(r.index) * labels_ + label];
      if (slot <= 0) continue;
      release_slot(slot, stream);
      slot = -1;
      any = true;
    }
    removes_ += any ? 1 : 0;
  }
  resource_stats stats() const {
    std::lock_guard g(lock_);
    resource_stats st;
    st.key = key_;
    st.kind = resource_kind::recurrent_pool;
    st.capacity = slots_ - 1;
    st.free = free_top_;
    st.requests = st.capacity - st.free;
    st.admits = admits_;
    st.refusals = refusals_;
    st.plans = plans_;
    st.commits = commits_;
    st.pre_admits = pre_admits_;
    st.pre_plans = pre_plans_;
    st.promotes = promotes_;
    st.stale_promotes = stale_promotes_;
    st.clears = clears_;
    st.removes = removes_;
    st.staged = has_staged_;
    return st;
  }
  std::size_t staging_bytes(std::uint32_t max_rows, std::uint32_t) const {
    return plan_arena::padded(max_rows * sizeof(std::int32_t)) + plan_arena::padded(max_rows) + plan_arena::alignment;
  }
  const plan_type& current_plan() const { return live_; }

  // ---- direct use: admission at readiness, tests ----
  // Reserves a slot for (request, label), or returns the one it holds; nullopt (and *why) when full.
  std::optional<handle> reserve(request_ref r, std::uint32_t label, refusal* why = nullptr) {
    std::lock_guard g(lock_);
    check_label(label, r);
    auto& slot = slot_of_[std::size_t(r.index) * labels_ + label];
    if (slot <= 0) {
      if (free_top_ == 0) {
        ++refusals_;
        if (why) *why = full(1);
        return std::nullopt;
      }
      slot = take_slot(std::size_t(r.index) * labels_ + label);
    }
    return handle{slot, generation_[slot]};
  }
  // Releases one slot, zeroed on `stream`. A stale handle or a second release is a resource_error.
  void release(handle h, stream_type stream) {
    std::lock_guard g(lock_);
    if (h.slot <= 0 || std::uint32_t(h.slot) >= slots_)
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": release of slot " +
                           std::to_string(h.slot) + ", outside 1.." + std::to_string(slots_ - 1) +
                           " (slot 0 is the sink and is never handed out)");
    if (!held_[h.slot])
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": slot " + std::to_string(h.slot) +
                           " (generation " + std::to_string(h.generation) +
                           ") released twice; it is already free, so nothing changed. Release each handle once.");
    if (generation_[h.slot] != h.generation)
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": stale handle for slot " +
                           std::to_string(h.slot) + " (generation " + std::to_string(h.generation) +
                           ", the slot is now at generation " + std::to_string(generation_[h.slot]) +
                           " and held by another owner); drop handles when their request is torn down");
    slot_of_[owner_key_[h.slot]] = -1;
    release_slot(h.slot, stream);
  }
  bool is_current(handle h) const {
    std::lock_guard g(lock_);
    return h.slot > 0 && std::uint32_t(h.slot) < slots_ && held_[h.slot] && generation_[h.slot] == h.generation;
  }
  std::optional<handle> find(request_ref r, std::uint32_t label) const {
    std::lock_guard g(lock_);
    if (label >= labels_ || r.index >= slot_of_.size() / labels_) return std::nullopt;
    const auto slot = slot_of_[std::size_t(r.index) * labels_ + label];
    if (slot <= 0) return std::nullopt;
    return handle{slot, generation_[slot]};
  }
  bool ask(std::uint32_t slots) const {
    std::lock_guard g(lock_);
    return free_top_ >= slots;
  }
  std::uint32_t free_count() const {
    std::lock_guard g(lock_);
    return free_top_;
  }
  std::uint32_t capacity() const { return slots_ - 1; }
  std::uint32_t layers() const { return layers_; }
  std::uint32_t slots() const { return slots_; }
  std::size_t state_elements() const { return elems_; }
  kernels::segment_table<T> segments() const { return {segments_.data(), segments_.size()}; }
  // Where (layer, slot) lives (device memory; host memory on the host backend).
  T* state(std::uint32_t layer, std::uint32_t slot) const {
    return storage_ + (std::size_t(layer) * slots_ + slot) * elems_;
  }
  region_id region() const { return region_; }

private:
  std::size_t key_of(const row& r) const { return std::size_t(r.request.index) * labels_ + r.label; }

  void check_label(std::uint32_t label, request_ref r) const {
    if (label >= labels_)
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": label " + std::to_string(label) +
                           " of request index " + std::to_string(r.index) + " is beyond engine_options.max_labels (" +
                           std::to_string(labels_) + "); raise max_labels or use labels 0.." +
                           std::to_string(labels_ - 1));
    if (r.index >= slot_of_.size() / labels_)
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": request index " +
                           std::to_string(r.index) + " is beyond engine_options.max_requests");
  }

  refusal full(std::uint32_t need) const {
    return refusal::make(key_,
                         "recurrent pool %.*s is full: %u row(s) need a new slot and %u of %u slots are free; the "
                         "rows wait at readiness until a slot frees (or give the pool more slots)",
                         int(key_.size()), key_.data(), need, free_top_, slots_ - 1);
  }

  std::optional<refusal> admit_locked(const step_view& s) {
    std::uint32_t need = 0;
    for (const auto& r : s.rows) {
      check_label(r.label, r.request);
      need += slot_of_[key_of(r)] <= 0 ? 1 : 0;
    }
    if (need > free_top_) return full(need);
    for (const auto& r : s.rows) {
      auto& slot = slot_of_[key_of(r)];
      if (slot <= 0) slot = take_slot(key_of(r));
    }
    return std::nullopt;
  }

  std::int32_t take_slot(std::size_t owner) {
    const std::int32_t slot = free_[--free_top_];
    held_[slot] = 1;
    valid_[slot] = 0;
    owner_key_[slot] = static_cast<std::uint32_t>(owner);
    return slot;
  }

  plan_type fill(const step_view& s, plan_arena& arena) {
    auto slots = arena.take<std::int32_t>(s.bucket);
    auto has = arena.take<std::uint8_t>(s.bucket);
    const auto rows = static_cast<std::uint32_t>(s.rows.size());
    for (std::uint32_t i = 0; i < rows; ++i) {
      const auto slot = slot_of_[key_of(s.rows[i])];
      if (slot <= 0)
        throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": row " + std::to_string(i) +
                             " (request index " + std::to_string(s.rows[i].request.index) + ", label " +
                             std::to_string(s.rows[i].label) +
                             ") holds no slot; admit the step before planning it (was the request torn down "
                             "between its admit and its plan?)");
      slots.host[i] = slot;
      has.host[i] = valid_[slot];
    }
    for (std::uint32_t i = rows; i < s.bucket; ++i) {
      slots.host[i] = kernels::sink_slot;
      has.host[i] = 0;
    }
    return plan_type{slots.device, has.device, {slots.host, s.bucket}, {has.host, s.bucket}, segments(),
                     rows,         s.bucket};
  }

  // Orders this stream's coming accesses to `slots` after their last access on any other stream.
  void fence_rows(std::span<const std::int32_t> slots, stream_type stream) {
    constexpr std::size_t batch = 8;
    stream_type previous[batch];
    std::size_t n = 0;
    for (auto slot : slots) {
      if (has_last_[slot] && !(last_stream_[slot] == stream)) {
        const auto p = last_stream_[slot];
        if (std::find(previous, previous + n, p) == previous + n) {
          if (n == batch) {
            fence(p, stream);
          } else {
            previous[n++] = p;
          }
        }
      }
      last_stream_[slot] = stream;
      has_last_[slot] = 1;
    }
    for (std::size_t i = 0; i < n; ++i)
      fence(previous[i], stream);
  }
  void fence(stream_type from, stream_type to) {
    backend_->record(fence_, from);
    backend_->wait(to, fence_);
    ++fences_;
  }

  void release_slot(std::int32_t slot, stream_type stream) {
    if (!held_[slot])
      throw resource_error("mstar::recurrent_state_pool " + std::string(key_) + ": slot " + std::to_string(slot) +
                           " released twice; it is already free, so nothing changed");
    const std::int32_t one[1] = {slot};
    fence_rows(one, stream);
    backend_->zero_state(segments(), slot, stream);
    backend_->note_access(stream, region_, static_cast<std::uint32_t>(slot));
    valid_[slot] = 0;
    held_[slot] = 0;
    ++generation_[slot];
    free_[free_top_++] = slot;
  }

  bool stale_promote() {
    has_staged_ = false;
    ++stale_promotes_;
    return false;
  }

  Backend* backend_;
  std::string_view key_;
  std::uint32_t layers_;
  std::uint32_t slots_;
  std::size_t elems_;
  std::uint32_t labels_;
  mutable detail::spin_lock lock_;
  T* storage_ = nullptr;
  std::vector<kernels::recurrent_segment<T>> segments_;
  region_id region_;
  event_type fence_{};

  std::vector<std::int32_t> slot_of_;    // [request index][label] -> slot, -1: none
  std::vector<std::uint32_t> owner_key_; // per slot: request index * labels + label
  std::vector<std::uint32_t> generation_;
  std::vector<std::uint8_t> held_;
  std::vector<std::uint8_t> valid_;
  std::vector<stream_type> last_stream_;
  std::vector<std::uint8_t> has_last_;
  std::vector<std::int32_t> free_;
  std::uint32_t free_top_ = 0;

  plan_type live_;
  plan_type staged_;
  bool has_staged_ = false;
  std::vector<std::uint32_t> staged_generation_;
  stream_type planned_stream_{};

  std::uint32_t declaring_nodes_ = 0;
  std::uint64_t admits_ = 0, refusals_ = 0, plans_ = 0, commits_ = 0, pre_admits_ = 0, pre_plans_ = 0, promotes_ = 0,
                stale_promotes_ = 0, clears_ = 0, removes_ = 0, fences_ = 0;

public:
  // Cross-stream fences issued so far (a test reads it to see the pool ordered a stream switch).
  std::uint64_t fences() const {
    std::lock_guard g(lock_);
    return fences_;
  }
};

} // namespace mstar
