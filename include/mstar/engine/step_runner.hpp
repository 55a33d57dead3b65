// The step runner: drives a model's resources through a step's lifecycle and owns the chain's
// staged pre-plan.
//
//   declare   the keys a step needs: its node's declares<...>, known at compile time
//   admit     reserve capacity for the rows, resource by resource in dependency order; a refusal
//             (or a raise) ends the step with an outcome naming the resource, never an exception
//   plan      build and stage per-row metadata: one plan buffer and one host-to-device copy per step
//   forward   the model's kernels, on the step's stream (the engine's run(), or the worker)
//   commit    make the step's effects visible
//
// The staged pre-plan (one at most): after chain step N commits, the plan thread calls pre_plan for
// step N+1, which pre-admits and pre-plans every resource of N+1's node that pre-plans and records
// the step's identity: node, rows, CUDA-graph bucket and per-resource segments of its plan buffer.
// When a chain step is admitted, it promotes the stage if it is that very step (its plan is then a
// promote: cheap), and otherwise it drops the stage (clear_preplan on every resource that pre-plans)
// on admit and resets the record on plan.
//
// Side steps (mstar::side_step: a side-lane node, whose keys are all side resources, handed to the
// runner with the model) run beside the stage: they never promote, drop or clear it, whether they
// admit, plan, refuse or raise. This holds by construction: the stage's mutators take a chain_step
// (as the witness that a chain step is acting), and their side_step overloads are deleted.
//
// Threads: admit, plan and commit run on one thread (the GPU thread), pre_plan on one other (the
// plan thread); a chain admit that finds the plan thread still staging waits for it to finish
// (microseconds). remove_request runs on the main thread, after the request was retired in the
// request table (so a step that names it from then on fails validation): it waits for every step in
// flight to settle (a step is in flight from its admit to its commit, or to the refusal, raise or
// abandon() that ends it; a pre-plan for its whole call), then tears every resource down, side
// resources on the lane's stream registered with set_side_stream. So no step in flight can write a
// torn-down request's state after its teardown, and none can reserve for it afterwards.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/detail/spin_lock.hpp"
#include "mstar/engine/node_staging.hpp"
#include "mstar/engine/resource_set.hpp"
#include "mstar/engine/step.hpp"
#include "mstar/model/model.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar {

namespace detail {
// An exception's message: what() of a std::exception, else "a non-standard exception".
inline std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "a non-standard exception";
  }
}
} // namespace detail

enum class step_status : std::uint8_t { ok, refused, failed };

// How a phase of a step ended.
struct step_outcome {
  step_status status = step_status::ok;
  std::uint8_t resource = no_index; // the resource that refused or raised (no_index: the runner's own checks)
  std::optional<refusal> why;       // refused: the resource's reason
  std::exception_ptr error;         // failed: what was raised
  bool promoted = false;            // plan: the staged pre-plan became this step's plan

  explicit operator bool() const noexcept { return status == step_status::ok; }
  bool refused() const noexcept { return status == step_status::refused; }
  bool failed() const noexcept { return status == step_status::failed; }
  std::string message() const {
    if (status == step_status::refused) return std::string(why->message());
    if (status == step_status::failed && error) return detail::what_of(error);
    return "ok";
  }
  static step_outcome refuse(std::uint8_t resource, const refusal& why) {
    step_outcome o;
    o.status = step_status::refused;
    o.resource = resource;
    o.why = why;
    return o;
  }
  static step_outcome fail(std::uint8_t resource, std::exception_ptr e) {
    step_outcome o;
    o.status = step_status::failed;
    o.resource = resource;
    o.error = std::move(e);
    return o;
  }
};

// The type a deleted stage mutator names, so that the compiler's error reads as the rule.
struct side_steps_never_touch_the_chain_stage {};

// The chain's staged pre-plan. Observers are open to anyone; every mutator takes the chain step
// acting on the stage.
template <class Model, device_backend Backend>
class staged_preplan {
public:
  using resources_type = resource_set<Model, Backend>;
  using stream_type = typename Backend::stream_type;
  enum class phase : std::uint8_t { empty, staging, staged };
  struct segment {
    std::uint32_t offset = 0; // in the node's plan buffer
    std::uint32_t bytes = 0;
    bool staged = false;
  };
  using segment_table = std::array<segment, resources_type::count>;

  staged_preplan(resources_type& resources, std::uint32_t max_batch) : resources_(&resources), rows_(max_batch) {}
  staged_preplan(const staged_preplan&) = delete;
  staged_preplan& operator=(const staged_preplan&) = delete;

  // ---- observers ----
  phase current() const noexcept { return phase_.load(std::memory_order_acquire); }
  bool staged() const noexcept { return current() == phase::staged; }
  // The staged step's identity (meaningful while staged).
  std::uint8_t node() const noexcept { return node_; }
  std::span<const row> rows() const noexcept { return {rows_.data(), size_}; }
  std::uint32_t bucket() const noexcept { return bucket_; }
  const segment& segment_of(std::size_t resource) const { return segments_.at(resource); }
  // Lifetime counts: stages published, promoted, dropped (including stale promotes), records reset.
  std::uint64_t stages() const noexcept { return stages_.load(std::memory_order_relaxed); }
  std::uint64_t promotions() const noexcept { return promotions_.load(std::memory_order_relaxed); }
  std::uint64_t drops() const noexcept { return drops_.load(std::memory_order_relaxed); }
  std::uint64_t resets() const noexcept { return resets_.load(std::memory_order_relaxed); }

  // Returns once the plan thread is not in the middle of staging.
  void wait_settled() const noexcept {
    for (std::uint32_t spins = 0; current() == phase::staging; ++spins)
      if (spins < 128)
        detail::spin_pause();
      else
        std::this_thread::yield();
  }

  template <class Node>
  bool matches(const chain_step<Model, Node>&, const step_view& v) const noexcept {
    if (current() != phase::staged || node_ != v.node || bucket_ != v.bucket || size_ != v.rows.size()) return false;
    return std::equal(v.rows.begin(), v.rows.end(), rows_.begin());
  }

  // ---- mutators (a chain step is the witness) ----
  // empty -> staging (the plan thread); false when a stage is held or being staged.
  template <class Node>
  bool begin(const chain_step<Model, Node>&) noexcept {
    auto expected = phase::empty;
    return phase_.compare_exchange_strong(expected, phase::staging, std::memory_order_acq_rel);
  }
  // staging -> staged, with the step's identity.
  template <class Node>
  void publish(const chain_step<Model, Node>&, const step_view& v, const segment_table& segments) {
    node_ = v.node;
    bucket_ = v.bucket;
    size_ = v.rows.size();
    std::copy(v.rows.begin(), v.rows.end(), rows_.begin());
    segments_ = segments;
    stages_.fetch_add(1, std::memory_order_relaxed);
    phase_.store(phase::staged, std::memory_order_release);
  }
  // staging -> empty: the pre-admit refused or a pre-plan raised; whatever was staged is cleared.
  template <class Node>
  void abandon(const chain_step<Model, Node>&) {
    clear_every_resource();
    empty_out();
  }
  // staged -> empty. The staged plan becomes the step's plan on every resource that pre-plans; false
  // (and the stage cleared everywhere) when a resource finds its staged plan stale.
  template <class Node>
  bool promote(const chain_step<Model, Node>&, const step_view& v, stream_type stream) {
    const bool ok = resources_->template for_each_of<Node>([&](auto i, auto& r) -> bool {
      if constexpr (resources_type::preplans(decltype(i)::value))
        return r.promote(v, stream);
      else
        return true;
    });
    if (ok) {
      promotions_.fetch_add(1, std::memory_order_relaxed);
    } else {
      clear_every_resource();
      drops_.fetch_add(1, std::memory_order_relaxed);
    }
    empty_out();
    return ok;
  }
  // staged -> empty: another chain step was admitted; clear_preplan on every resource that pre-plans.
  template <class Node>
  void drop(const chain_step<Model, Node>&) {
    if (current() != phase::staged) return;
    clear_every_resource();
    drops_.fetch_add(1, std::memory_order_relaxed);
    empty_out();
  }
  // A chain step that did not promote plans: the record is reset (a stage still held is dropped).
  template <class Node>
  void reset(const chain_step<Model, Node>& step) {
    drop(step);
    resets_.fetch_add(1, std::memory_order_relaxed);
  }

  // ---- side steps have no access: each overload exists to refuse, by name ----
  template <class Node>
  bool begin(const side_step<Model, Node>&, side_steps_never_touch_the_chain_stage = {}) = delete;
  template <class Node>
  void publish(const side_step<Model, Node>&, const step_view&, const segment_table&,
               side_steps_never_touch_the_chain_stage = {}) = delete;
  template <class Node>
  void abandon(const side_step<Model, Node>&, side_steps_never_touch_the_chain_stage = {}) = delete;
  template <class Node>
  bool promote(const side_step<Model, Node>&, const step_view&, stream_type,
               side_steps_never_touch_the_chain_stage = {}) = delete;
  template <class Node>
  void drop(const side_step<Model, Node>&, side_steps_never_touch_the_chain_stage = {}) = delete;
  template <class Node>
  void reset(const side_step<Model, Node>&, side_steps_never_touch_the_chain_stage = {}) = delete;

private:
  void clear_every_resource() {
    resources_->for_each([](auto i, auto& r) {
      if constexpr (resources_type::preplans(decltype(i)::value)) r.clear_preplan();
    });
  }
  void empty_out() {
    size_ = 0;
    phase_.store(phase::empty, std::memory_order_release);
  }

  resources_type* resources_;
  std::atomic<phase> phase_{phase::empty};
  std::uint8_t node_ = no_index;
  std::uint32_t bucket_ = 0;
  std::size_t size_ = 0;
  std::vector<row> rows_;
  segment_table segments_{};
  std::atomic<std::uint64_t> stages_{0}, promotions_{0}, drops_{0}, resets_{0};
};

template <class Model, device_backend Backend>
class step_runner {
public:
  using resources_type = resource_set<Model, Backend>;
  using stage_type = staged_preplan<Model, Backend>;
  using stream_type = typename Backend::stream_type;
  static constexpr std::size_t node_count = Model::descriptor.nodes.size();

  step_runner(Backend& backend, resources_type& resources, const request_table& requests, const engine_options& options)
      : backend_(&backend), resources_(&resources), requests_(&requests), options_(options),
        stage_(resources, options.max_batch), gpu_seen_(std::size_t(options.max_requests) * options.max_labels, 0),
        plan_seen_(std::size_t(options.max_requests) * options.max_labels, 0) {
    options_.check();
    [&]<std::size_t... N>(std::index_sequence<N...>) { (make_staging<N>(), ...); }
    (std::make_index_sequence<node_count>{});
  }
  step_runner(const step_runner&) = delete;
  step_runner& operator=(const step_runner&) = delete;

  // ---- declare ----
  template <step S>
  static constexpr const auto& declare(const S&) {
    return Model::descriptor.nodes[S::node].resources;
  }

  // ---- admit ----
  template <class Node>
  step_outcome admit(const chain_step<Model, Node>& step) {
    begin_flight(chain_window);
    const step_view v = view(step);
    if (auto bad = validate(v, gpu_seen_, gpu_stamp_)) return ended(chain_window, *bad);
    stage_.wait_settled();
    if (stage_.matches(step, v)) {
      // The staged step: its pre-plan resources were pre-admitted on the plan thread.
      promote_pending_ = true;
      return ended_unless_ok(chain_window, admit_each<Node>(v, false));
    }
    promote_pending_ = false;
    stage_.drop(step);
    return ended_unless_ok(chain_window, admit_each<Node>(v, true));
  }
  template <class Node>
  step_outcome admit(const side_step<Model, Node>& step) {
    begin_flight(side_window(step.node));
    const step_view v = view(step);
    if (auto bad = validate(v, gpu_seen_, gpu_stamp_)) return ended(side_window(step.node), *bad);
    return ended_unless_ok(side_window(step.node), admit_each<Node>(v, true));
  }

  // ---- plan ----
  template <class Node>
  step_outcome plan(const chain_step<Model, Node>& step, stream_type stream) {
    return ended_unless_ok(chain_window, plan_chain(step, stream));
  }
  template <class Node>
  step_outcome plan(const side_step<Model, Node>& step, stream_type stream) {
    return ended_unless_ok(side_window(step.node), plan_each<Node>(view(step), stream, true));
  }

private:
  template <class Node>
  step_outcome plan_chain(const chain_step<Model, Node>& step, stream_type stream) {
    const step_view v = view(step);
    if (std::exchange(promote_pending_, false) && stage_.matches(step, v)) {
      bool promoted = false;
      try {
        promoted = stage_.promote(step, v, stream);
      } catch (...) {
        stage_.drop(step);
        return step_outcome::fail(no_index, std::current_exception());
      }
      if (promoted) {
        auto out = plan_each<Node>(v, stream, false);
        out.promoted = static_cast<bool>(out);
        return out;
      }
      // A resource found its staged plan stale (the stage is cleared): admit and plan afresh.
      if (auto a = admit_each<Node>(v, true); !a) return a;
    } else {
      stage_.reset(step);
    }
    return plan_each<Node>(v, stream, true);
  }

public:
  // ---- commit ----
  template <step S>
  step_outcome commit(const S& step) {
    using Node = typename S::node_type;
    const step_view v = view(step);
    step_outcome out;
    resources_->template for_each_of<Node>([&](auto i, auto& r) -> bool {
      try {
        r.commit(v);
        return true;
      } catch (...) {
        out = step_outcome::fail(static_cast<std::uint8_t>(decltype(i)::value), std::current_exception());
        return false;
      }
    });
    end_flight(window_of(step));
    return out;
  }
  // Ends a step that was admitted (and maybe planned) but will not be committed (its forward raised,
  // or the caller dropped it), so that teardown does not wait for it.
  template <step S>
  void abandon(const S& step) {
    end_flight(window_of(step));
  }

  // ---- the plan thread: stage the chain's next step ----
  template <class Node>
  step_outcome pre_plan(const chain_step<Model, Node>& step, stream_type stream) {
    plan_flight in_flight(*this);
    const step_view v = view(step);
    if (auto bad = validate(v, plan_seen_, plan_stamp_)) return *bad;
    if (!stage_.begin(step))
      return step_outcome::refuse(no_index, refusal::make("stage", "the chain already holds a staged pre-plan; one "
                                                                   "stage at most: the staged step promotes it and any "
                                                                   "other chain step drops it"));
    step_outcome out;
    const bool admitted = resources_->template for_each_of<Node>([&](auto i, auto& r) -> bool {
      constexpr std::size_t I = decltype(i)::value;
      if constexpr (resources_type::preplans(I)) {
        try {
          if (auto why = r.pre_admit(v)) {
            out = step_outcome::refuse(static_cast<std::uint8_t>(I), *why);
            return false;
          }
        } catch (...) {
          out = step_outcome::fail(static_cast<std::uint8_t>(I), std::current_exception());
          return false;
        }
      }
      return true;
    });
    if (!admitted) {
      stage_.abandon(step);
      return out;
    }
    typename stage_type::segment_table segments{};
    std::uint8_t at = no_index;
    try {
      if constexpr (any_preplans<Node>()) {
        auto& staging = *staging_[step.node];
        auto& e = staging.acquire(stream);
        auto arena = staging.arena(e);
        resources_->template for_each_of<Node>([&](auto i, auto& r) {
          constexpr std::size_t I = decltype(i)::value;
          if constexpr (resources_type::preplans(I)) {
            at = static_cast<std::uint8_t>(I);
            const auto start = plan_arena::padded(arena.used());
            r.pre_plan(v, arena);
            segments[I] = {static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(arena.used() - start), true};
          }
        });
        at = no_index;
        staging.submit(e, arena.used(), stream);
      }
    } catch (...) {
      stage_.abandon(step);
      return step_outcome::fail(at, std::current_exception());
    }
    stage_.publish(step, v, segments);
    return out;
  }

  // ---- side lanes and teardown ----
  // The lane's stream of a side node: teardown of its side keys runs there from now on.
  void set_side_stream(std::uint8_t node, stream_type stream) {
    if (node >= node_count)
      throw std::out_of_range("mstar::step_runner::set_side_stream: no node " + std::to_string(node));
    const auto& lane_of = Model::verdict.lanes[node];
    if (lane_of.lane != lane::side)
      throw std::invalid_argument("mstar::step_runner::set_side_stream: node " +
                                  std::string(Model::descriptor.nodes[node].name) +
                                  " runs on the chain; only a node of a side_stream group has a lane stream");
    std::lock_guard g(owner_lock_);
    for (auto key : lane_of.side_keys) {
      const auto i = resources_type::index_of(key);
      owner_[i] = stream;
      has_owner_[i] = true;
    }
  }
  template <class Node>
  requires runs_beside_the_stage<Model, Node>
  void set_side_stream(stream_type stream) { set_side_stream(Model::template node_index<Node>, stream); }
  std::optional<stream_type> owner_stream(std::size_t resource) const {
    std::lock_guard g(owner_lock_);
    if (resource >= resources_type::count || !has_owner_[resource]) return std::nullopt;
    return owner_[resource];
  }
  // Returns once every step in flight when it was called has settled (committed, refused, raised or
  // abandoned; a pre-plan returned). A step admitted later finds a retired request and fails.
  void settle() const {
    for (std::size_t w = 0; w < windows; ++w) {
      const auto s = flights_[w].seq.load(std::memory_order_seq_cst);
      if ((s & 1u) == 0) continue;
      for (std::uint32_t spins = 0; flights_[w].seq.load(std::memory_order_acquire) == s; ++spins)
        if (spins < 128)
          detail::spin_pause();
        else
          std::this_thread::yield();
    }
  }
  // Tears request r down on every resource, dependents first; a side resource on its lane's stream
  // once registered, everything else on `stream`. Retire r in the request table first. Every
  // resource is visited even when one throws; the first exception is rethrown after the last.
  void remove_request(request_ref r, stream_type stream) {
    settle();
    std::array<stream_type, resources_type::count> where{};
    {
      std::lock_guard g(owner_lock_);
      for (std::size_t i = 0; i < resources_type::count; ++i)
        where[i] = has_owner_[i] ? owner_[i] : stream;
    }
    std::exception_ptr first;
    resources_->for_each_reverse([&](auto i, auto& res) {
      try {
        res.remove_request(r, where[decltype(i)::value]);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    });
    if (first) std::rethrow_exception(first);
  }

  stage_type& stage() noexcept { return stage_; }
  const stage_type& stage() const noexcept { return stage_; }
  resources_type& resources() noexcept { return *resources_; }
  const engine_options& options() const noexcept { return options_; }

  template <step S>
  static step_view view(const S& step) {
    step_view v;
    v.node = S::node;
    v.node_name = S::node_type::name;
    v.rows = step.rows;
    v.bucket = step.bucket != 0 ? step.bucket : static_cast<std::uint32_t>(step.rows.size());
    for (const auto& r : step.rows)
      v.tokens += r.tokens;
    return v;
  }

private:
  // Steps in flight, for settle(): one window for the chain's step, one for the plan thread, one per
  // node for side steps. A window's sequence is odd while a step is inside it; `open` is touched only
  // by the window's own thread.
  static constexpr std::size_t chain_window = 0;
  static constexpr std::size_t plan_window = 1;
  static constexpr std::size_t windows = 2 + node_count;
  static constexpr std::size_t side_window(std::uint8_t node) { return 2 + node; }
  template <step S>
  static constexpr std::size_t window_of(const S& s) {
    return S::beside_stage ? side_window(s.node) : chain_window;
  }
  struct flight {
    std::atomic<std::uint64_t> seq{0};
    bool open = false;
  };
  void begin_flight(std::size_t w) {
    if (flights_[w].open) return; // admitted again without a commit: still the same window
    flights_[w].open = true;
    flights_[w].seq.fetch_add(1, std::memory_order_seq_cst);
  }
  void end_flight(std::size_t w) {
    if (!flights_[w].open) return;
    flights_[w].open = false;
    flights_[w].seq.fetch_add(1, std::memory_order_release);
  }
  step_outcome ended(std::size_t w, step_outcome o) {
    end_flight(w);
    return o;
  }
  step_outcome ended_unless_ok(std::size_t w, step_outcome o) {
    if (!o) end_flight(w);
    return o;
  }
  struct plan_flight {
    step_runner& r;
    explicit plan_flight(step_runner& runner) : r(runner) { r.begin_flight(plan_window); }
    ~plan_flight() { r.end_flight(plan_window); }
    plan_flight(const plan_flight&) = delete;
    plan_flight& operator=(const plan_flight&) = delete;
  };

  template <class Node>
  static constexpr bool any_preplans() {
    for (auto i : resources_type::template order<Node>)
      if (resources_type::preplans(i)) return true;
    return false;
  }
  template <class Node>
  static constexpr bool any_live(bool include_preplan) {
    for (auto i : resources_type::template order<Node>)
      if (include_preplan || !resources_type::preplans(i)) return true;
    return false;
  }

  template <std::size_t N>
  void make_staging() {
    using Node = detail::nth_t<N, typename Model::nodes>;
    std::size_t bytes = 0;
    resources_->template for_each_of<Node>(
        [&](auto, auto& r) { bytes += r.staging_bytes(options_.max_batch, options_.max_tokens); });
    staging_[N] = std::make_unique<detail::node_staging<Backend>>(*backend_, bytes, options_.staging_depth);
  }

  // Rows within the step's bucket and the engine's sizes, every request live, no (request, label)
  // twice. A failure is the step's (its rows fail), never the engine's.
  std::optional<step_outcome> validate(const step_view& v, std::vector<std::uint32_t>& seen,
                                       std::uint32_t& stamp) const {
    try {
      auto refuse = [&](const std::string& what) {
        throw resource_error("mstar::step_runner: a step of node " + std::string(v.node_name) + " " + what);
      };
      if (v.rows.size() > v.bucket)
        refuse("has " + std::to_string(v.rows.size()) + " rows but bucket " + std::to_string(v.bucket) +
               "; the bucket is the padded batch and holds every row");
      if (v.bucket > options_.max_batch)
        refuse("has bucket " + std::to_string(v.bucket) + ", beyond engine_options.max_batch (" +
               std::to_string(options_.max_batch) + "); split the batch or raise max_batch");
      if (v.tokens > options_.max_tokens)
        refuse("carries " + std::to_string(v.tokens) + " new tokens, beyond engine_options.max_tokens (" +
               std::to_string(options_.max_tokens) + "); split the prefill or raise max_tokens");
      ++stamp;
      for (std::size_t i = 0; i < v.rows.size(); ++i) {
        const row& r = v.rows[i];
        if (!requests_->current(r.request))
          refuse("names, in row " + std::to_string(i) + ", request index " + std::to_string(r.request.index) +
                 " generation " + std::to_string(r.request.generation) +
                 ", which is not live (torn down, or never added); drop the row");
        if (r.label >= options_.max_labels)
          refuse("gives row " + std::to_string(i) + " label " + std::to_string(r.label) +
                 ", beyond engine_options.max_labels (" + std::to_string(options_.max_labels) + ")");
        auto& mark = seen[std::size_t(r.request.index) * options_.max_labels + r.label];
        if (mark == stamp)
          refuse("names request index " + std::to_string(r.request.index) + " label " + std::to_string(r.label) +
                 " twice (row " + std::to_string(i) + " again); a step holds each (request, label) once");
        mark = stamp;
      }
      return std::nullopt;
    } catch (...) {
      return step_outcome::fail(no_index, std::current_exception());
    }
  }

  template <class Node>
  step_outcome admit_each(const step_view& v, bool include_preplan) {
    step_outcome out;
    resources_->template for_each_of<Node>([&](auto i, auto& r) -> bool {
      constexpr std::size_t I = decltype(i)::value;
      if (!include_preplan && resources_type::preplans(I)) return true;
      try {
        if (auto why = r.admit(v)) {
          out = step_outcome::refuse(static_cast<std::uint8_t>(I), *why);
          return false;
        }
        return true;
      } catch (...) {
        out = step_outcome::fail(static_cast<std::uint8_t>(I), std::current_exception());
        return false;
      }
    });
    return out;
  }

  template <class Node>
  step_outcome plan_each(const step_view& v, stream_type stream, bool include_preplan) {
    if (!any_live<Node>(include_preplan)) return {};
    std::uint8_t at = no_index;
    try {
      auto& staging = *staging_[v.node];
      auto& e = staging.acquire(stream);
      auto arena = staging.arena(e);
      resources_->template for_each_of<Node>([&](auto i, auto& r) {
        constexpr std::size_t I = decltype(i)::value;
        if (!include_preplan && resources_type::preplans(I)) return;
        at = static_cast<std::uint8_t>(I);
        r.plan(v, arena, stream);
      });
      at = no_index;
      staging.submit(e, arena.used(), stream);
      return {};
    } catch (...) {
      return step_outcome::fail(at, std::current_exception());
    }
  }

  Backend* backend_;
  resources_type* resources_;
  const request_table* requests_;
  engine_options options_;
  stage_type stage_;
  std::array<std::unique_ptr<detail::node_staging<Backend>>, node_count> staging_;
  bool promote_pending_ = false; // the chain step admitted last matched the stage
  std::vector<std::uint32_t> gpu_seen_, plan_seen_;
  std::uint32_t gpu_stamp_ = 0, plan_stamp_ = 0;
  std::array<flight, windows> flights_{};
  mutable detail::spin_lock owner_lock_;
  std::array<stream_type, resources_type::count> owner_{};
  std::array<bool, resources_type::count> has_owner_{};
};

} // namespace mstar
