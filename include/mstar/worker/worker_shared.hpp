// What the worker's three threads share: the fixed configuration (set at construction, read-only
// after), the per-step handoff rings, the step records, and the few flags and words one thread writes
// and another reads. Each part of the worker (admission on the main thread, the launcher on the GPU
// thread, the stager on the plan thread) owns the rest of its state.
//
// The ordering that protects the shared state, once: every ring is single-producer single-consumer
// (detail::spsc_ring: a push publishes with release, a pop acquires), and a step record belongs to the
// thread that last popped its index: the GPU thread forms and launches it, hands it to the plan thread
// (to_plan) and takes it back (from_plan), hands it to the main thread when it lands (done_ring), and
// gets it back to reuse (recycle_ring). The flags and words below are release stores read with
// acquire, each with one writer (named at its declaration); chain_busy is a hint (relaxed).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mstar/detail/affinity.hpp"
#include "mstar/detail/spsc_ring.hpp"
#include "mstar/detail/type_list.hpp"
#include "mstar/engine/engine.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/options.hpp"
#include "mstar/worker/ready_queues.hpp"

namespace mstar {

// Counters of a worker's run (any thread may read them; they are relaxed atomics).
struct worker_counters {
  std::atomic<std::uint64_t> chain_steps{0}, side_steps{0}, side_steps_on_lane{0}, promoted{0}, staged{0};
  // Of the stages the plan thread published: those whose rows include predicted rows (rows not ready
  // when staged), and those that were dropped instead of promoted (the next chain step was another
  // step, a resource found the staged plan stale, or nothing of it became ready).
  std::atomic<std::uint64_t> speculative_stages{0}, stage_drops{0};
  std::atomic<std::uint64_t> refusals{0}, side_refusals{0}, failed_steps{0}, parked{0}, unparked{0};
  std::atomic<std::uint64_t> dropped_rows{0}, teardowns{0}, teardown_errors{0}, lane_created{0};
  // End hooks that threw (each request counted failed in the request metrics) and admit-failure
  // handlers that threw (each failing the refused step's requests).
  std::atomic<std::uint64_t> end_hook_errors{0}, refusal_handler_errors{0};
  // Where cancels found their request: not admitted yet (backlog), a row parked, a row out on a side
  // node, a row out on the chain only, nothing out, or already ended (a cancel during or after teardown).
  std::atomic<std::uint64_t> cancel_backlog{0}, cancel_parked{0}, cancel_side{0}, cancel_chain{0}, cancel_idle{0},
      cancel_ended{0};
  // Requests failed to break a stall: every live request parked, none with a row out (a KV cache too
  // small for the live requests' growth); see detail::worker_admission::break_stall.
  std::atomic<std::uint64_t> stall_failures{0};
  // Picks of the next chain step that passed over a node waiting for its min_batch (node_options).
  std::atomic<std::uint64_t> batch_waits{0};
};

namespace detail {

template <class Model, class Backend, class Flow>
struct worker_shared {
  using engine_type = mstar::engine<Model, Backend>;
  using stream_type = typename Backend::stream_type;
  using event_type = typename Backend::event_type;
  using payload_type = typename Flow::payload;
  static constexpr std::size_t node_count = Model::descriptor.nodes.size();
  using ready_row = detail::ready_row<payload_type>;
  static constexpr std::uint32_t no_record = ~0u;

  struct done_item {
    std::uint32_t record = no_record; // no_record: a dropped row (r, node)
    std::uint8_t node = 0;
    row r{};
  };
  struct plan_ack {
    std::uint32_t record = 0;
    bool staged = false;
    metrics::nanos pushed = 0;
  };
  enum class record_status : std::uint8_t { ok, failed };
  struct step_record : step_rows<payload_type> {
    bool on_lane = false;
    event_type done{};
    stream_type stream{};
    record_status status = record_status::ok;
    std::string error;
    bool enqueued = false; // stream work was enqueued (poll the event)
    metrics::nanos launched = 0, host_ns = 0;
    std::atomic<metrics::nanos> device_begin{0}, device_end{0};
  };

  worker_shared(engine_type& eng, Flow& fl, worker_options opts)
      : engine(&eng), backend(&eng.backend()), flow(&fl), options(checked(std::move(opts))),
        max_requests(eng.options().max_requests), max_batch(eng.options().max_batch), cancel_word(max_requests),
        ready_ring(std::bit_ceil(std::size_t(max_requests) * node_count + 2)),
        done_ring(std::bit_ceil(std::size_t(max_requests) * node_count + options.step_records + 2)),
        recycle_ring(std::bit_ceil(std::size_t(options.step_records) + 2)), to_plan(4), from_plan(4),
        records(options.step_records) {
    for (auto& w : cancel_word)
      w.store(0, std::memory_order_relaxed);
    spin_for_stage = options.spins_for_stage(detail::allowed_cpus().size());
    for (std::size_t n = 0; n < node_count; ++n) {
      node_opts[n] = n < options.nodes.size() ? options.nodes[n] : node_options{};
      if (node_opts[n].max_batch == 0 || node_opts[n].max_batch > max_batch) node_opts[n].max_batch = max_batch;
      check_buckets(n);
      check_min_batch(n);
    }
    for (auto& r : records) {
      r.size_for(max_batch);
      r.done = backend->create_event();
    }
    chain = backend->create_stream();
  }
  worker_shared(const worker_shared&) = delete;
  worker_shared& operator=(const worker_shared&) = delete;
  // The streams drain before the records' events go.
  ~worker_shared() {
    drain();
    for (auto& r : records)
      backend->destroy_event(r.done);
  }
  // Waits for the work enqueued on the chain and the lane (errors ignored: the worker is going away).
  void drain() noexcept {
    try {
      backend->synchronize(chain);
      if (lane) backend->synchronize(*lane);
    } catch (...) {
    }
  }

  template <class F>
  static void with_node(std::uint8_t n, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((n == I ? (f.template operator()<detail::nth_t<I, typename Model::nodes>>(), 0) : 0), ...);
    }(std::make_index_sequence<node_count>{});
  }
  static constexpr bool is_side(std::uint8_t n) { return Model::verdict.lanes[n].lane == lane::side; }
  static std::string node_name(std::uint8_t n) { return std::string(Model::descriptor.nodes[n].name); }

  // The bucket a step of `rows` rows of node `n` carries: the smallest of the node's buckets that
  // holds them (check_buckets made sure one does), or 0 (the row count) when the node has none.
  std::uint32_t bucket_of(std::uint8_t n, std::uint32_t rows) const noexcept {
    const auto& b = node_opts[n].buckets;
    return b.empty() ? 0 : bucket_for(rows, b);
  }
  bool cancelled(const row& r) const {
    return cancel_word[r.request.index].load(std::memory_order_acquire) == r.request.generation;
  }

  // ---- configuration (read-only once constructed) ----
  engine_type* engine;
  Backend* backend;
  Flow* flow;
  worker_options options;
  std::uint32_t max_requests;
  std::uint32_t max_batch;
  std::array<node_options, node_count> node_opts{}; // max_batch resolved
  bool spin_for_stage = false;                      // worker_options::stage_wait, resolved
  stream_type chain{};

  // ---- shared between threads ----
  worker_counters counters;
  std::vector<std::atomic<std::uint32_t>> cancel_word; // main: per request index, the cancelled generation
  std::atomic<std::uint64_t> epoch{0};                 // main: bumped when capacity may free (held rows retry)
  spsc_ring<ready_row> ready_ring;                     // main -> GPU
  spsc_ring<done_item> done_ring;                      // GPU -> main (landed steps, dropped rows)
  spsc_ring<std::uint32_t> recycle_ring;               // main -> GPU (records to reuse)
  spsc_ring<std::uint32_t> to_plan;                    // GPU -> plan (the step to stage)
  spsc_ring<plan_ack> from_plan;                       // plan -> GPU (staged)
  std::vector<step_record> records;
  std::atomic<bool> gpu_stop{false};    // main: it has ended; the GPU thread stops once idle
  std::atomic<bool> plan_stop{false};   // GPU: it has ended; the plan thread stops
  std::atomic<bool> gpu_exited{false};  // GPU: it launches nothing more (lane is final)
  std::atomic<bool> chain_busy{false};  // GPU: a chain step is in flight (a stage request may come)
  std::atomic<bool> routing{false};     // main: in a pass that may push ready rows
  std::atomic<bool> idle{true};         // main: no request live nor waiting (the threads' long sleeps)
  // The GPU and plan threads' idle sleeps end when rung: by the main thread when requests come after
  // an idle (idle turning false), and at the ends (gpu_stop, plan_stop). The main thread's bell is the
  // client's (client_inbox::bell).
  detail::doorbell gpu_bell, plan_bell;
  std::atomic<std::uint64_t> routed{0}; // main: step records routed (their ready rows pushed)
  // The lane's stream: the GPU thread creates it at the first side step on the lane; the main thread
  // reads it once gpu_exited, a client after stop().
  std::optional<stream_type> lane;

private:
  static worker_options checked(worker_options o) {
    o.check(node_count);
    return o;
  }

  void check_buckets(std::size_t n) const {
    const auto& o = node_opts[n];
    if (o.buckets.empty()) return;
    auto bad = [&](const std::string& what) {
      throw std::invalid_argument("mstar::worker_options: nodes[" + std::to_string(n) + "] (" +
                                  std::string(Model::descriptor.nodes[n].name) + ") buckets " + what);
    };
    for (std::size_t i = 0; i < o.buckets.size(); ++i) {
      if (o.buckets[i] == 0) bad("holds 0 at position " + std::to_string(i) + "; every bucket is at least 1 row");
      if (i > 0 && o.buckets[i] <= o.buckets[i - 1])
        bad("are not strictly ascending (" + std::to_string(o.buckets[i - 1]) + " then " + std::to_string(o.buckets[i]) +
            " at position " + std::to_string(i) + "); sort them and remove duplicates");
    }
    const auto largest = o.buckets.back();
    if (largest < o.max_batch)
      bad("end at " + std::to_string(largest) + ", below the node's max_batch " + std::to_string(o.max_batch) +
          "; add a bucket of " + std::to_string(o.max_batch) + " or lower node_options.max_batch to " +
          std::to_string(largest));
    if (largest > max_batch)
      bad("end at " + std::to_string(largest) + ", above engine_options.max_batch " + std::to_string(max_batch) +
          " (the runner refuses such a step); drop the buckets above it or raise max_batch");
  }

  void check_min_batch(std::size_t n) const {
    const auto& o = node_opts[n];
    if (o.min_batch <= 1) return;
    const std::string which = "mstar::worker_options: nodes[" + std::to_string(n) + "] (" +
                              std::string(Model::descriptor.nodes[n].name) + ") min_batch is " +
                              std::to_string(o.min_batch);
    if (o.min_batch > o.max_batch)
      throw std::invalid_argument(which + ", above the node's max_batch " + std::to_string(o.max_batch) +
                                  " (engine_options.max_batch when 0); lower min_batch or raise max_batch");
  }
};

} // namespace detail
} // namespace mstar
