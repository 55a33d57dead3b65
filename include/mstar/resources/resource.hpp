// The one resource concept, and what every resource implementation shares: sizing options, the
// refusal a full resource gives, its statistics, and the plan arena it stages metadata into.
//
// A resource is per-row capacity and addressing behind a key (a recurrent state pool, a paged KV
// cache, positions, a sampler, attention metadata). The step runner drives it through:
//
//   declare(node)           load time: `node` declares this resource
//   admit(step)             reserve capacity for the step's rows; a refusal says why (nothing thrown).
//                           Idempotent per request: what a row already holds is kept, so a refused
//                           or repeated admit leaks nothing (teardown frees it).
//   plan(step, arena, s)    build per-row addressing and metadata in the arena (one host-to-device
//                           copy per step, issued by the runner on s); order cross-stream hazards on s
//   commit(step)            make the step's effects visible (state valid, positions advanced)
//   pre_admit(step)         the plan thread's admit for the chain's next step
//   pre_plan(step, arena)   the plan thread's plan for it, kept aside as the staged plan
//   promote(step, s)        the staged plan becomes the live one; false when it went stale (the runner
//                           then clears the stage and plans afresh)
//   clear_preplan()         drop the staged plan
//   remove_request(r, s)    teardown on stream s (a recurrent pool zeroes the slot there)
//   stats()                 capacity, free count, counters
//   current_plan()          the live plan, for the forward function
//   staging_bytes(rows, tokens)  the most arena bytes one plan can take
#pragma once

#include <array>
#include <concepts>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mstar/detail/spin_lock.hpp"
#include "mstar/model/descriptor.hpp"
#include "mstar/resources/step_view.hpp"

namespace mstar {

// Sizes the engine preallocates at load, so that the per-step path never allocates.
struct engine_options {
  std::uint32_t max_batch = 256;            // rows per step, padding included (the largest graph bucket)
  std::uint32_t max_tokens = 8192;          // new tokens per step over all rows (prefill chunks)
  std::uint32_t max_requests = 1024;        // live requests
  std::uint32_t max_labels = 4;             // states per request in one recurrent pool
  std::uint32_t max_blocks_per_request = 0; // KV blocks one request may hold; 0: the default below
  // max_blocks_per_request when it is 0: a KV cache's blocks, at most 1024.
  static constexpr std::uint32_t default_max_blocks_per_request(std::uint32_t blocks) {
    return blocks < 1024 ? blocks : 1024;
  }
  std::uint32_t blocks_per_request(std::uint32_t blocks) const {
    return max_blocks_per_request != 0 ? max_blocks_per_request : default_max_blocks_per_request(blocks);
  }
  std::uint32_t staging_depth = 8;          // plan buffers per node: how many steps a stream may lag
                                            // behind the host before a plan waits for its copy
  std::uint64_t sampler_seed = 0;           // mixed with each request's id into its default seed

  void check() const {
    auto bad = [](const char* what, std::uint32_t v, const char* fix) {
      throw std::invalid_argument(std::string("mstar::engine_options: ") + what + " is " + std::to_string(v) + "; " +
                                  fix);
    };
    if (max_batch == 0) bad("max_batch", max_batch, "a step holds at least one row");
    if (max_tokens < max_batch) bad("max_tokens", max_tokens, "allow at least one token per row (>= max_batch)");
    if (max_requests == 0) bad("max_requests", max_requests, "allow at least one request");
    if (max_labels == 0) bad("max_labels", max_labels, "a request holds at least one state per pool");
    if (staging_depth < 2) bad("staging_depth", staging_depth, "use at least 2 (the staged plan and the live one)");
  }
};

// A misuse of a resource that is a bug in the caller (a double release, a stale handle, planning a
// row that was never admitted): thrown, never silently absorbed.
struct resource_error : std::logic_error {
  using std::logic_error::logic_error;
};

// Why a resource refused a step, with the numbers (built without allocating).
struct refusal {
  std::string_view resource;
  std::array<char, 240> text{};

  std::string_view message() const { return {text.data()}; }

#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  static refusal
  make(std::string_view key, const char* format, ...) {
    refusal r;
    r.resource = key;
    va_list args;
    va_start(args, format);
    std::vsnprintf(r.text.data(), r.text.size(), format, args);
    va_end(args);
    return r;
  }
};

struct resource_stats {
  std::string_view key;
  resource_kind kind = resource_kind::kv_cache;
  std::uint32_t capacity = 0; // slots (the sink excluded), blocks, or requests
  std::uint32_t free = 0;
  std::uint32_t requests = 0; // requests holding something
  std::uint64_t admits = 0, refusals = 0, plans = 0, commits = 0, pre_admits = 0, pre_plans = 0, promotes = 0,
                stale_promotes = 0, clears = 0, removes = 0;
  bool staged = false; // holds a staged pre-plan
};

// Host and device addresses of one staged array.
template <class T>
struct staged_span {
  T* host = nullptr;
  T* device = nullptr;
  std::size_t count = 0;
  std::span<T> span() const { return {host, count}; }
};

namespace detail {
// The counters every resource keeps (under its own lock).
struct resource_counters {
  std::uint64_t admits = 0, refusals = 0, plans = 0, commits = 0, pre_admits = 0, pre_plans = 0, promotes = 0,
                stale_promotes = 0, clears = 0, removes = 0;
  void fill(resource_stats& s) const {
    s.admits = admits;
    s.refusals = refusals;
    s.plans = plans;
    s.commits = commits;
    s.pre_admits = pre_admits;
    s.pre_plans = pre_plans;
    s.promotes = promotes;
    s.stale_promotes = stale_promotes;
    s.clears = clears;
    s.removes = removes;
  }
};

// The live plan and the one the plan thread staged, with the bookkeeping every pre-planning resource
// shares: a promote succeeds only if the staged plan has the step's row count and every row is still
// current (`row_current(i)`: the request's committed state is what the plan was built from), and it
// consumes the stage either way; a clear drops it. The caller holds its own lock.
template <class Plan>
struct staged_plan {
  Plan live{}, staged{};
  bool has_staged = false;

  void stage(const Plan& p, resource_counters& c) {
    staged = p;
    has_staged = true;
    ++c.pre_plans;
  }
  template <class RowCurrent>
  bool promote(std::size_t rows, resource_counters& c, RowCurrent&& row_current) {
    bool ok = has_staged && staged.rows == rows;
    for (std::size_t i = 0; ok && i < rows; ++i) ok = row_current(i);
    has_staged = false;
    if (!ok) {
      ++c.stale_promotes;
      return false;
    }
    live = staged;
    ++c.promotes;
    return true;
  }
  void clear(resource_counters& c) {
    has_staged = false;
    ++c.clears;
  }
};
} // namespace detail

// One step's plan buffer: a host (pinned) block and its device twin. Resources take aligned arrays
// from it in dependency order; the runner copies [0, used) to the device once per step.
class plan_arena {
public:
  static constexpr std::size_t alignment = 16;

  plan_arena() = default;
  plan_arena(std::byte* host, std::byte* device, std::size_t capacity)
      : host_(host), device_(device), capacity_(capacity) {}

  template <class T>
  staged_span<T> take(std::size_t count) {
    const std::size_t at = (used_ + alignment - 1) / alignment * alignment;
    const std::size_t bytes = count * sizeof(T);
    if (at + bytes > capacity_)
      throw std::length_error("mstar::plan_arena: a plan needs " + std::to_string(at + bytes) +
                              " bytes, the arena has " + std::to_string(capacity_) +
                              "; a resource's staging_bytes() is too small");
    used_ = at + bytes;
    return {reinterpret_cast<T*>(host_ + at), reinterpret_cast<T*>(device_ + at), count};
  }
  std::size_t used() const { return used_; }
  std::size_t capacity() const { return capacity_; }
  std::byte* host() const { return host_; }
  std::byte* device() const { return device_; }

  static constexpr std::size_t padded(std::size_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }

private:
  std::byte* host_ = nullptr;
  std::byte* device_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
};

namespace detail {
// The entry points of a small resource (attention, positions, KV cache, sampler) written once: each takes
// the resource's lock, does the resource's own part through a hook called under that lock, and keeps the
// counters. Derived (which befriends this base) provides
//   fill(s, arena, staging) -> Plan     the step's addressing; staging: for pre_plan, so note what promote
//                                       will check
//   row_current(s, i) -> bool           promote's check that row i's staged plan still holds
// and hides the defaults below where it has more to do:
//   admit_rows(s) -> optional<refusal>  reserve for the step (admit and pre_admit alike)
//   commit_rows(s)                      advance per-request state
//   release(r) -> bool                  teardown of r; true when r held something
//   planned_on(stream)                  a plan became live for stream
//   fill_stats(st)                      capacity, free and requests
// Everything is resolved at compile time (no virtual call on the per-step path).
template <class Derived, class Backend, class Plan, resource_kind Kind>
class locked_resource {
public:
  using plan_type = Plan;
  using stream_type = typename Backend::stream_type;

  explicit locked_resource(std::string_view key) : key_(key) {}
  locked_resource(const locked_resource&) = delete;
  locked_resource& operator=(const locked_resource&) = delete;

  std::string_view key() const { return key_; }
  void declare(std::uint8_t) {}
  std::optional<refusal> admit(const step_view& s) {
    std::lock_guard g(lock_);
    auto r = self().admit_rows(s);
    ++(r ? counters_.refusals : counters_.admits);
    return r;
  }
  void plan(const step_view& s, plan_arena& arena, stream_type stream) {
    std::lock_guard g(lock_);
    plans_.live = self().fill(s, arena, false);
    self().planned_on(stream);
    ++counters_.plans;
  }
  void commit(const step_view& s) {
    std::lock_guard g(lock_);
    self().commit_rows(s);
    ++counters_.commits;
  }
  std::optional<refusal> pre_admit(const step_view& s) {
    std::lock_guard g(lock_);
    auto r = self().admit_rows(s);
    ++(r ? counters_.refusals : counters_.pre_admits);
    return r;
  }
  void pre_plan(const step_view& s, plan_arena& arena) {
    std::lock_guard g(lock_);
    plans_.stage(self().fill(s, arena, true), counters_);
  }
  bool promote(const step_view& s, stream_type stream) {
    std::lock_guard g(lock_);
    const bool ok = plans_.promote(s.rows.size(), counters_, [&](std::size_t i) { return self().row_current(s, i); });
    if (ok) self().planned_on(stream);
    return ok;
  }
  void clear_preplan() {
    std::lock_guard g(lock_);
    plans_.clear(counters_);
  }
  void remove_request(request_ref r, stream_type) {
    std::lock_guard g(lock_);
    if (self().release(r)) ++counters_.removes;
  }
  resource_stats stats() const {
    std::lock_guard g(lock_);
    resource_stats st;
    st.key = key_;
    st.kind = Kind;
    self().fill_stats(st);
    counters_.fill(st);
    st.staged = plans_.has_staged;
    return st;
  }
  const plan_type& current_plan() const { return plans_.live; }

protected:
  std::optional<refusal> admit_rows(const step_view&) { return std::nullopt; }
  void commit_rows(const step_view&) {}
  bool release(request_ref) { return false; }
  void planned_on(stream_type) {}
  void fill_stats(resource_stats&) const {}

  // The lock guards the derived resource's tables too (its direct-use calls take it).
  template <class F>
  auto locked(F&& f) const {
    std::lock_guard g(lock_);
    return f();
  }

  std::string_view key_;
  mutable spin_lock lock_;
  staged_plan<plan_type> plans_;
  resource_counters counters_;

private:
  Derived& self() { return static_cast<Derived&>(*this); }
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};
} // namespace detail

// What a resource is built from at load time.
template <class Backend>
struct resource_context {
  Backend* backend = nullptr;
  const resource_desc* desc = nullptr;
  const engine_options* options = nullptr;
  const request_table* requests = nullptr;
};

template <class R>
concept resource = requires(R& r, const R& cr, const step_view& s, plan_arena& a, typename R::stream_type st,
                            request_ref q, std::uint8_t node) {
  typename R::backend_type;
  typename R::plan_type;
  { cr.key() } -> std::convertible_to<std::string_view>;
  r.declare(node);
  { r.admit(s) } -> std::same_as<std::optional<refusal>>;
  r.plan(s, a, st);
  r.commit(s);
  { r.pre_admit(s) } -> std::same_as<std::optional<refusal>>;
  r.pre_plan(s, a);
  { r.promote(s, st) } -> std::same_as<bool>;
  r.clear_preplan();
  r.remove_request(q, st);
  { cr.stats() } -> std::same_as<resource_stats>;
  { cr.staging_bytes(std::uint32_t{}, std::uint32_t{}) } -> std::same_as<std::size_t>;
  { cr.current_plan() } -> std::same_as<const typename R::plan_type&>;
};

} // namespace mstar
