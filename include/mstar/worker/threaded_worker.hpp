// The worker: a model loaded on an engine, run by three threads.
//
//   main   ingests requests (submit/cancel from any client thread), decides readiness through the
//          flow's hooks, reserves capacity at readiness (ask/reserve through admission: a node's
//          recurrent pools), parks rows whose pool is full, routes landed steps back to the flow, and
//          tears requests down (engine::remove_request: it waits for the lane's admit in flight, then
//          tears side keys down on the lane's stream)
//   GPU    batches ready rows per node, launches chain steps and side steps (admit, plan or promote,
//          forward, commit), sends refusals to the one admit-failure handler, polls steps' completion
//          events and hands landed steps to the main thread
//   plan   pre-plans (stages) the next chain step while the device runs the current one
//
// Staging the next chain step. Right after chain step N is launched (and committed), the GPU thread
// hands the plan thread a prediction of step N+1: another chain node's ready rows when round robin
// picks one, otherwise the same node over the rows ready now followed by N's rows whose request the
// flow says continues on that node (Flow::continues, seen by the GPU thread as a bit on each ready
// row; without the hook every row continues), in N's order. Once N has landed and the main thread
// has routed it (so every row it made ready has been pushed), the GPU thread forms N+1: the predicted
// rows that are ready, in the predicted order, then any other ready rows. When that is the predicted
// step, its plan is a promote; otherwise (a request cancelled or finished, a newcomer joined) the
// runner drops the stage and the step plans afresh: a miss costs a drop, never a wrong result.
//
// Per-step handoffs are single-producer single-consumer rings (detail::spsc_ring): main -> GPU (ready
// rows), GPU -> main (landed steps, dropped rows), main -> GPU (step records to reuse), GPU -> plan
// (the step to stage), plan -> GPU (staged). No lock on that path and no sleeping in steady state: an
// idle thread spins, then yields, and sleeps only after worker_options::*_backoff.idle_before_sleep.
// The GPU and plan threads make no heap allocation per step once warm (every
// container they fill is sized at construction; tests/worker/steady_allocs.cpp fails otherwise).
// Client ingest (submit/cancel) takes a mutex once per request, off the per-step path.
//
// Cancellation at any moment. The main thread marks the request cancelled (and the GPU thread sees a
// per-request cancel word): rows still queued on the GPU thread are dropped and handed back, rows in a
// formed step run to their landing with their outputs discarded, a parked row is unparked. Once the
// request has no row outside the main thread, it is torn down. A step never carries a torn-down
// request, so a cancel never fails another request's step.
//
//   mstar::host_backend backend;
//   mstar::engine<Model, mstar::host_backend> engine(backend, options);
//   my_flow flow;
//   mstar::threaded_worker<Model, mstar::host_backend, my_flow> w(engine, flow, {.lane = mstar::lane_mode::on});
//   w.forward<Decode>([&](const auto& ctx) { /* enqueue on ctx.stream; ctx.payloads[i] is row i's */ });
//   w.forward<Codec>(...);  w.forward<Prefill>(...);
//   w.start();
//   w.submit(42, input);  w.cancel(42);
//   w.wait_idle();  w.stop();
//   std::puts(mstar::metrics::format(w.summary()).c_str());
//   w.write_trace("run.trace.json");
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "mstar/detail/affinity.hpp"
#include "mstar/detail/spsc_ring.hpp"
#include "mstar/detail/type_list.hpp"
#include "mstar/engine.hpp"
#include "mstar/metrics.hpp"
#include "mstar/trace.hpp"
#include "mstar/worker/batch_window.hpp"
#include "mstar/worker/flow.hpp"
#include "mstar/worker/lane_policy.hpp"
#include "mstar/worker/options.hpp"
#include "mstar/worker/stage_watch.hpp"

namespace mstar {

namespace detail {

// A fixed-capacity double-ended queue owned by one thread (the GPU thread's ready and held rows).
template <class T>
class row_queue {
public:
  explicit row_queue(std::size_t capacity = 0) : items_(std::bit_ceil(std::max<std::size_t>(capacity, 2))) {}
  std::size_t size() const noexcept { return tail_ - head_; }
  bool empty() const noexcept { return head_ == tail_; }
  T& operator[](std::size_t i) noexcept { return items_[(head_ + i) & (items_.size() - 1)]; }
  void push_back(const T& v) {
    check_room();
    items_[tail_++ & (items_.size() - 1)] = v;
  }
  void push_front(const T& v) {
    check_room();
    items_[--head_ & (items_.size() - 1)] = v;
  }
  T pop_front() noexcept { return items_[head_++ & (items_.size() - 1)]; }
  // Removes element i, keeping the order of the rest.
  void erase(std::size_t i) noexcept {
    for (std::size_t k = i; k > 0; --k)
      (*this)[k] = (*this)[k - 1];
    ++head_;
  }

private:
  void check_room() const {
    if (size() == items_.size())
      throw std::length_error("mstar::threaded_worker: a ready queue holds " + std::to_string(items_.size()) +
                              " rows and is full; this is a worker bug (each request has at most one row per node)");
  }
  std::vector<T> items_;
  std::size_t head_ = std::size_t{1} << 62, tail_ = std::size_t{1} << 62;
};

} // namespace detail

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
  // small for the live requests' growth); see threaded_worker::break_stall.
  std::atomic<std::uint64_t> stall_failures{0};
  // Picks of the next chain step that passed over a node waiting for its min_batch (node_options).
  std::atomic<std::uint64_t> batch_waits{0};
};

template <class Model, device_backend Backend, worker_flow Flow>
class threaded_worker {
public:
  using engine_type = mstar::engine<Model, Backend>;
  using stream_type = typename Backend::stream_type;
  using event_type = typename Backend::event_type;
  using payload_type = typename Flow::payload;
  using request_input = typename Flow::request_input;
  using request_state = typename Flow::request_state;
  static constexpr std::size_t node_count = Model::descriptor.nodes.size();
  template <class Node>
  using context_type = worker_step_context<Model, Backend, Node, payload_type>;
  template <class Node>
  using forward_type = std::function<void(const context_type<Node>&)>;

  threaded_worker(engine_type& eng, Flow& flow, worker_options options = {})
      : engine_(&eng), backend_(&eng.backend()), flow_(&flow), options_(checked(std::move(options))),
        max_requests_(eng.options().max_requests), max_batch_(eng.options().max_batch),
        slots_(max_requests_), cancel_word_(max_requests_),
        ready_ring_(std::bit_ceil(std::size_t(max_requests_) * node_count + 2)),
        done_ring_(std::bit_ceil(std::size_t(max_requests_) * node_count + options_.step_records + 2)),
        recycle_ring_(std::bit_ceil(std::size_t(options_.step_records) + 2)), to_plan_(4), from_plan_(4),
        records_(options_.step_records), chooser_(options_.lane_policy),
        layout_{node_names(), {"handoff", "pass", "route", "teardown", "stage_drop", "stage", "handoff_idle"}}, main_rec_("main", layout_),
        gpu_rec_("GPU", layout_), plan_rec_("plan", layout_), trace_(0, "mstar worker") {
    for (auto& w : cancel_word_)
      w.store(0, std::memory_order_relaxed);
    spin_for_stage_ = options_.spins_for_stage(detail::allowed_cpus().size());
    for (std::size_t n = 0; n < node_count; ++n) {
      node_opts_[n] = n < options_.nodes.size() ? options_.nodes[n] : node_options{};
      if (node_opts_[n].max_batch == 0 || node_opts_[n].max_batch > max_batch_) node_opts_[n].max_batch = max_batch_;
      check_buckets(n);
      check_min_batch(n);
      windows_[n] = detail::batch_window(node_opts_[n].min_batch,
                                         std::chrono::nanoseconds(node_opts_[n].max_wait).count());
      batch_limit_[n] = node_opts_[n].max_batch;
      ready_[n] = detail::row_queue<ready_row>(max_requests_);
      held_[n] = detail::row_queue<ready_row>(max_requests_);
    }
    // Every container the GPU thread fills per step holds its bound from here, so that no step
    // allocates (tests/worker/steady_allocs.cpp): step records free or in flight, and held rows
    // (at most one per request and node) moved back by release_held.
    free_records_.reserve(options_.step_records);
    in_flight_.reserve(options_.step_records);
    scratch_.reserve(max_requests_);
    // The main thread's (and the client's) per-request entries: tables sized for the live requests,
    // and their nodes reused (insert_reusing).
    by_id_.reserve(max_requests_);
    spare_by_id_.reserve(max_requests_);
    ids_.reserve(max_requests_);
    spare_ids_.reserve(max_requests_);
    for (std::uint32_t i = 0; i < options_.step_records; ++i) {
      records_[i].rows.resize(max_batch_);
      records_[i].payloads.resize(max_batch_);
      records_[i].continues.resize(max_batch_);
      records_[i].done = backend_->create_event();
      free_records_.push_back(i);
    }
    busy_ = metrics::busy_tracker(options_.busy_intervals);
    slot_of_.assign(max_requests_, 0);
    slot_stamp_.assign(max_requests_, 0);
    found_.resize(max_batch_);
    present_.resize(max_batch_);
    chain_ = backend_->create_stream();
    // Trace: one track per thread and per stream.
    t_main_ = trace_.add_track("main");
    t_gpu_ = trace_.add_track("GPU");
    t_plan_ = trace_.add_track("plan");
    t_chain_ = trace_.add_track("chain stream");
    t_lane_ = trace_.add_track("lane stream");
    for (std::size_t n = 0; n < node_count; ++n)
      node_name_id_[n] = trace_.intern(Model::descriptor.nodes[n].name);
    n_rows_ = trace_.intern("rows");
    n_preplan_ = trace_.intern("pre_plan");
    n_teardown_ = trace_.intern("teardown");
    n_cancel_ = trace_.intern("cancel");
    n_park_ = trace_.intern("park");
    n_refused_ = trace_.intern("refused");
    n_promoted_ = trace_.intern("promoted");
    const std::size_t cap = std::max<std::size_t>(options_.trace_events, 1);
    main_buf_ = &trace_.add_buffer(cap);
    gpu_buf_ = &trace_.add_buffer(cap);
    plan_buf_ = &trace_.add_buffer(cap);
  }

  threaded_worker(const threaded_worker&) = delete;
  threaded_worker& operator=(const threaded_worker&) = delete;

  ~threaded_worker() {
    try {
      stop();
    } catch (...) {
    }
    try {
      backend_->synchronize(chain_);
      if (lane_) backend_->synchronize(*lane_);
    } catch (...) {
    }
    for (auto& r : records_)
      backend_->destroy_event(r.done);
  }

  // The forward function of Node (before start()).
  template <class Node, class F>
  requires node_of<Model, Node>
  void forward(F&& f) {
    if (started_) throw std::logic_error("mstar::threaded_worker::forward: set every forward before start()");
    std::get<node_index<Node>>(forwards_) = forward_type<Node>(std::forward<F>(f));
  }

  // Starts the three threads, each pinned first where worker_options::affinity says. Returns once all
  // three are pinned and running; when a pin fails (a CPU taken offline since construction), none
  // runs and the error names the thread.
  void start() {
    if (started_) throw std::logic_error("mstar::threaded_worker::start: already started");
    check_forwards(std::make_index_sequence<node_count>{});
    t0_ = metrics::now_ns();
    busy_.start(t0_);
    const auto& a = options_.affinity;
    plan_thread_ = std::thread([this, cpu = a.plan] {
      if (thread_begins(2, cpu)) plan_loop();
    });
    gpu_thread_ = std::thread([this, cpu = a.gpu] {
      if (thread_begins(1, cpu)) gpu_loop();
    });
    main_thread_ = std::thread([this, cpu = a.main] {
      if (thread_begins(0, cpu)) main_loop();
    });
    std::unique_lock g(start_lock_);
    start_cv_.wait(g, [&] { return start_reported_ == 3; });
    const bool ok = start_error_.empty();
    start_go_ = ok ? 1 : 2;
    start_cv_.notify_all();
    g.unlock();
    if (!ok) {
      main_thread_.join();
      gpu_thread_.join();
      plan_thread_.join();
      throw std::runtime_error("mstar::threaded_worker::start: " + start_error_ + "; no thread was started");
    }
    started_ = true;
  }

  // Whether the GPU thread spins for the plan thread's stage (worker_options::stage_wait resolved).
  bool spins_for_stage() const noexcept { return spin_for_stage_; }

  // The CPUs a worker thread (0 main, 1 GPU, 2 plan) may run on, as read by that thread once it was
  // pinned (every CPU of the process when unpinned). Empty before start().
  const std::vector<int>& thread_cpus(int thread) const { return thread_cpus_.at(static_cast<std::size_t>(thread)); }

  // Client side (any thread). False when `id` is already live in this worker.
  bool submit(request_id id, request_input input) {
    std::lock_guard g(inbox_lock_);
    if (stopping_.load(std::memory_order_relaxed))
      throw std::logic_error("mstar::threaded_worker::submit: the worker is stopping");
    if (abort_.load(std::memory_order_relaxed))
      throw std::runtime_error("mstar::threaded_worker::submit: " + fatal_why_ + "; stop() it and start a new one");
    if (!insert_reusing(ids_, spare_ids_, id)) return false;
    inbox_submits_.push_back({id, std::move(input), metrics::now_ns()});
    ++submitted_;
    inbox_flag_.store(true, std::memory_order_release);
    return true;
  }
  void cancel(request_id id) {
    std::lock_guard g(inbox_lock_);
    inbox_cancels_.push_back({inbox_submits_.size(), id});
    inbox_flag_.store(true, std::memory_order_release);
  }
  // Asks the flow's ready hook again, for each node the request has no row queued, out or parked
  // for: something outside this worker (another worker's step, through an edge) changed what the
  // request can run. Ignored for a request that is not live (still queued: its start asks anyway).
  void wake(request_id id) {
    std::lock_guard g(inbox_lock_);
    inbox_wakes_.push_back(id);
    inbox_flag_.store(true, std::memory_order_release);
  }
  // Blocks until every submitted request has ended.
  void wait_idle() {
    std::unique_lock g(inbox_lock_);
    idle_cv_.wait(g, [&] { return ended_ == submitted_ || abort_.load(std::memory_order_relaxed); });
    if (main_error_) std::rethrow_exception(main_error_);
  }
  // Cancels what is still live, tears it down, and joins the threads.
  void stop() {
    if (!started_ || stopped_.load(std::memory_order_relaxed)) return;
    {
      std::lock_guard g(inbox_lock_);
      stopping_.store(true, std::memory_order_release);
      inbox_flag_.store(true, std::memory_order_release);
    }
    main_thread_.join();
    gpu_thread_.join();
    plan_thread_.join();
    t1_ = metrics::now_ns();
    stopped_.store(true, std::memory_order_release); // summary() on another thread reads t1_ and busy_ after it
    if (main_error_) std::rethrow_exception(main_error_);
  }

  // ---- results ----
  const worker_counters& counters() const noexcept { return counters_; }
  const lane_chooser& lane_decisions() const noexcept { return chooser_; }
  // Per-phase host time per node and thread, request latencies and the GPU busy fraction. After stop()
  // (or from any thread at any time, as a live approximation of the histograms; the busy fraction
  // only after stop()).
  metrics::summary summary() const {
    double busy = -1.0;
    if (stopped_.load(std::memory_order_acquire)) {
      const auto end = t1_;
      busy = busy_.fraction(end);
    }
    return metrics::summarize({&main_rec_, &gpu_rec_, &plan_rec_}, &requests_rec_, busy);
  }
  const metrics::thread_recorder& recorder(int thread) const {
    return thread == 0 ? main_rec_ : thread == 1 ? gpu_rec_ : plan_rec_;
  }
  const metrics::request_recorder& request_metrics() const noexcept { return requests_rec_; }
  const trace::session& trace_session() const noexcept { return trace_; }
  void write_trace(const std::string& path) const { trace::write_json(path, trace_); }
  engine_type& engine() noexcept { return *engine_; }
  stream_type chain_stream() const noexcept { return chain_; }
  // The lane's stream, once the first side step on the lane created it (read after stop()).
  std::optional<stream_type> lane_stream() const { return lane_; }
  // The steps' busy intervals (read after stop()): the latest, up to worker_options::busy_intervals
  // (the busy fraction covers every step).
  std::span<const metrics::interval> busy_intervals() const { return busy_.kept(); }

  template <class Node>
  static constexpr std::uint8_t node_index = Model::template node_index<Node>;

private:
  // ---------------------------------------------------------------------------------------------
  // Types
  struct ready_row {
    row r{};
    std::uint8_t node = 0;
    bool continues = true; // the flow's prediction: a row of the same node follows once this one lands
    payload_type payload{};
    // When the GPU thread took it from the ring (only with a node's min_batch); 0 for rows handed back
    // by a refused step (ready_of), which count as having waited long enough.
    metrics::nanos since = 0;
  };
  static_assert(std::is_trivially_copyable_v<ready_row>);
  struct done_item {
    std::uint32_t record = ~0u; // ~0u: a dropped row (r, node)
    std::uint8_t node = 0;
    row r{};
  };
  struct plan_ack {
    std::uint32_t record = 0;
    bool staged = false;
    metrics::nanos pushed = 0;
  };
  enum class record_status : std::uint8_t { ok, failed };
  struct step_record {
    std::uint8_t node = 0;
    bool side = false;
    bool on_lane = false;
    std::uint32_t count = 0;
    std::vector<row> rows;
    std::vector<payload_type> payloads;
    std::vector<std::uint8_t> continues; // per row, from its ready_row
    // A staged record: `predicted` > 0 when its rows include rows that were not ready when it was
    // staged; `speculative` when its rows are a prediction left in the ready queue (formed at launch);
    // `published` once the plan thread answered that it staged them.
    std::uint32_t predicted = 0;
    bool speculative = false;
    event_type done{};
    stream_type stream{};
    record_status status = record_status::ok;
    std::string error;
    bool enqueued = false; // stream work was enqueued (poll the event)
    metrics::nanos launched = 0, host_ns = 0;
    std::atomic<metrics::nanos> device_begin{0}, device_end{0};
  };
  struct request_slot {
    request_ref ref{};
    request_id id = 0;
    request_state state{};
    metrics::request_timing timing{};
    std::uint32_t outstanding = 0;
    std::array<bool, node_count> out_node{};
    std::array<bool, node_count> parked{};
    bool live = false, cancelled = false, failed = false;
    bool stepped = false; // a step of it landed: it holds what its admits gave it
    std::string failure;  // why it failed (for the flow's end hook)
  };
  struct parked_row {
    std::uint32_t index = 0;
    request_ref ref{};
    row r{};
    payload_type payload{};
  };
  struct submission {
    request_id id = 0;
    request_input input;
    metrics::nanos at = 0;
  };

  template <class List>
  struct forward_tuple;
  template <class... N>
  struct forward_tuple<detail::type_list<N...>> {
    using type = std::tuple<forward_type<N>...>;
  };

  // ---------------------------------------------------------------------------------------------
  static worker_options checked(worker_options o) {
    o.check(node_count);
    return o;
  }
  // The recorders' rows: the model's nodes, then "request" for what concerns a request as a whole
  // (its teardown), at index node_count.
  static std::vector<std::string> node_names() {
    std::vector<std::string> v;
    for (const auto& n : Model::descriptor.nodes)
      v.emplace_back(n.name);
    v.emplace_back("request");
    return v;
  }
  // A request's entry in an unordered map or set (by_id_, ids_) goes into a node that an erase kept
  // (erase_keeping), so that it allocates only when more requests are known at once than ever before.
  // False, keeping the node, when the key is there already.
  template <class Table>
  static bool insert_reusing(Table& table, std::vector<typename Table::node_type>& spare,
                             typename Table::value_type v) {
    if (spare.empty()) return table.insert(std::move(v)).second;
    auto node = std::move(spare.back());
    spare.pop_back();
    if constexpr (requires { node.mapped(); }) {
      node.key() = v.first;
      node.mapped() = std::move(v.second);
    } else {
      node.value() = std::move(v);
    }
    auto r = table.insert(std::move(node));
    if (!r.inserted) spare.push_back(std::move(r.node));
    return r.inserted;
  }
  template <class Table>
  static void erase_keeping(Table& table, std::vector<typename Table::node_type>& spare,
                            const typename Table::key_type& key) {
    if (auto node = table.extract(key)) spare.push_back(std::move(node));
  }
  template <std::size_t... I>
  void check_forwards(std::index_sequence<I...>) const {
    (
        [&] {
          if (!std::get<I>(forwards_))
            throw std::logic_error("mstar::threaded_worker::start: node " +
                                   std::string(Model::descriptor.nodes[I].name) +
                                   " has no forward function; set one with worker.forward<Node>(fn) before start()");
        }(),
        ...);
  }
  template <class F>
  static void with_node(std::uint8_t n, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((n == I ? (f.template operator()<detail::nth_t<I, typename Model::nodes>>(), 0) : 0), ...);
    }(std::make_index_sequence<node_count>{});
  }
  static constexpr bool is_side(std::uint8_t n) { return Model::verdict.lanes[n].lane == lane::side; }

  // Each thread's first act: pin itself, report the CPU set it got, and wait for start()'s word (false:
  // another thread failed to pin, so none runs).
  bool thread_begins(int thread, int cpu) {
    static constexpr const char* names[] = {"the main thread", "the GPU thread", "the plan thread"};
    std::string error;
    std::vector<int> got;
    try {
      if (cpu != thread_affinity::unpinned) detail::pin_this_thread(cpu);
      got = detail::this_thread_cpus();
    } catch (const std::exception& e) {
      error = std::string("pinning ") + names[thread] + " failed: " + e.what();
    }
    std::unique_lock g(start_lock_);
    thread_cpus_[static_cast<std::size_t>(thread)] = std::move(got);
    if (!error.empty()) start_error_ += (start_error_.empty() ? "" : "; ") + error;
    ++start_reported_;
    start_cv_.notify_all();
    start_cv_.wait(g, [&] { return start_go_ != 0; });
    return start_go_ == 1;
  }

  // =============================================================================================
  // Main thread
  // =============================================================================================
  void main_loop() {
    try {
      detail::backoff wait(options_.main_backoff);
      for (;;) {
        if (abort_.load(std::memory_order_acquire)) break;
        bool did = false;
        routing_.store(true, std::memory_order_release);
        if (inbox_flag_.load(std::memory_order_acquire)) did |= take_inbox();
        did |= drain_done();
        did |= admit_backlog();
        if (!did) did = break_stall();
        routing_.store(false, std::memory_order_release);
        // A submit that came after this pass looked at the inbox is taken (and ended) first.
        if (stopping_.load(std::memory_order_acquire) && live_ == 0 && backlog_.empty() &&
            !inbox_flag_.load(std::memory_order_acquire))
          break;
        if (did)
          wait.reset();
        else
          wait.pause();
      }
    } catch (...) {
      fatal(std::current_exception());
    }
    if (abort_.load(std::memory_order_acquire)) end_all_failed();
    gpu_stop_.store(true, std::memory_order_release);
  }

  // An exception outside any one request's work (a backend call that failed outside a step, a flow
  // hook outside a request, a worker bug) on any of the three threads: the worker stops. wait_idle()
  // and stop() rethrow the first such error; every request still queued or live ends failed with it
  // as the reason, its resources torn down once the GPU thread has stopped and the streams are drained
  // (a teardown that throws quarantines the index, as ever). A flow's end hook and the admit-failure
  // handler are not such errors: they fail one request, or one step's requests.
  void fatal(std::exception_ptr e) noexcept {
    std::lock_guard g(inbox_lock_);
    if (!main_error_) {
      main_error_ = e;
      try {
        fatal_why_ = "the worker stopped on an error: " + detail::what_of(e);
      } catch (...) { // no memory for the message: keep the default
      }
    }
    abort_.store(true, std::memory_order_release);
    idle_cv_.notify_all();
  }
  void end_all_failed() noexcept {
    // The GPU thread launches nothing more; the work it launched may still read and write the live
    // requests' buffers, so it runs out before their end hooks.
    while (!gpu_exited_.load(std::memory_order_acquire))
      std::this_thread::yield();
    for (auto stream : {std::optional<stream_type>(chain_), lane_})
      if (stream) {
        try {
          backend_->synchronize(*stream);
        } catch (...) {
        }
      }
    const std::string_view why = fatal_why_; // written before abort_ was set
    std::vector<submission> inbox;
    {
      std::lock_guard g(inbox_lock_);
      inbox.swap(inbox_submits_);
      inbox_cancels_.clear();
    }
    for (auto& sub : inbox)
      backlog_.push_back(std::move(sub));
    for (auto& sub : backlog_) {
      try {
        end_unstarted(sub, request_end::failed, why);
      } catch (...) {
      }
    }
    backlog_.clear();
    for (auto& s : slots_)
      if (s.live) {
        s.live = false;
        try { // nothing runs any more: the request's resources can be given back (or quarantined)
          engine_->remove_request(s.ref, chain_);
        } catch (...) {
          counters_.teardown_errors.fetch_add(1, std::memory_order_relaxed);
        }
        try {
          finish_request(s.state, s.id, s.timing, request_end::failed, why);
        } catch (...) {
        }
        ended(s.id);
      }
    by_id_.clear();
    live_ = 0;
  }

  // Submits and cancels in the order the client made them: a cancel applies to the submissions made
  // before it only (a cancel of an ended id followed by a submit reusing it leaves the new request).
  // The inbox's vectors are swapped with two the main thread keeps, emptied: the client's next
  // submits fill the capacity the last take left, with no allocation once it is large enough.
  bool take_inbox() {
    auto& subs = taken_submits_;
    auto& cancels = taken_cancels_;
    subs.clear(); // what the last take moved out of (or left, if it threw)
    cancels.clear();
    bool stopping;
    {
      std::lock_guard g(inbox_lock_);
      inbox_flag_.store(false, std::memory_order_relaxed);
      subs.swap(inbox_submits_);
      cancels.swap(inbox_cancels_);
      taken_wakes_.clear();
      taken_wakes_.swap(inbox_wakes_);
      stopping = stopping_.load(std::memory_order_relaxed);
    }
    std::size_t next = 0;
    try {
      for (const auto& [before, id] : cancels) {
        for (; next < before; ++next)
          backlog_.push_back(std::move(subs[next]));
        cancel_now(id);
      }
    } catch (...) { // a fatal error in a cancel: the later submissions still reach the backlog, and end
      for (; next < subs.size(); ++next)
        backlog_.push_back(std::move(subs[next]));
      throw;
    }
    for (; next < subs.size(); ++next)
      backlog_.push_back(std::move(subs[next]));
    for (const auto id : taken_wakes_)
      if (auto found = by_id_.find(id); found != by_id_.end()) settle(found->second);
    if (stopping) {
      while (!backlog_.empty())
        cancel_now(backlog_.front().id);
      std::vector<request_id> live;
      for (auto& [id, index] : by_id_)
        live.push_back(id);
      for (auto id : live)
        cancel_now(id);
    }
    return true;
  }

  static_assert(int(request_end::completed) == int(metrics::request_outcome::completed) &&
                int(request_end::cancelled) == int(metrics::request_outcome::cancelled) &&
                int(request_end::failed) == int(metrics::request_outcome::failed));
  // A request ends: the flow's end hook, then its metrics (the caller then calls ended()). An end hook
  // that throws concerns that request alone: its resources are torn down already, so the request is
  // counted failed and the worker goes on (as a fatal error it would strand every other request).
  void finish_request(request_state& state, request_id id, metrics::request_timing& t, request_end how,
                      std::string_view why, metrics::nanos at = metrics::now_ns()) {
    try {
      detail::flow_end(*flow_, state, id, how, why);
    } catch (...) {
      how = request_end::failed;
      counters_.end_hook_errors.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "mstar::threaded_worker: the flow's end hook threw for request %llu: %s\n",
                   static_cast<unsigned long long>(id), detail::what_of(std::current_exception()).c_str());
    }
    requests_rec_.on_finish(t, static_cast<metrics::request_outcome>(how), at);
  }
  // A request that never got an index ends (on a fresh state).
  void end_unstarted(const submission& sub, request_end how, std::string_view why) {
    request_state s{};
    metrics::request_timing t{};
    metrics::request_recorder::on_submit(t, sub.at);
    finish_request(s, sub.id, t, how, why);
    ended(sub.id);
  }

  // Marks a live request failed, keeping the first reason; settle() then tears it down.
  void fail(std::uint32_t index, std::string why) {
    auto& s = slots_[index];
    if (!s.live || s.cancelled || s.failed) return;
    s.failed = true;
    s.failure = std::move(why);
  }

  void cancel_now(request_id id) {
    for (auto it = backlog_.begin(); it != backlog_.end(); ++it)
      if (it->id == id) {
        main_buf_->instant(t_main_, n_cancel_, metrics::now_ns());
        const auto sub = std::move(*it);
        backlog_.erase(it);
        counters_.cancel_backlog.fetch_add(1, std::memory_order_relaxed);
        end_unstarted(sub, request_end::cancelled, {});
        return;
      }
    auto found = by_id_.find(id);
    if (found == by_id_.end()) { // ended already (or never submitted): nothing to do
      counters_.cancel_ended.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    auto& s = slots_[found->second];
    if (s.cancelled) return;
    if (s.failed) { // it fails already (its rows come back first): it ends failed, with its reason
      counters_.cancel_ended.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    {
      bool parked = false, side = false;
      for (std::uint8_t n = 0; n < node_count; ++n) {
        parked |= s.parked[n];
        side |= s.out_node[n] && is_side(n);
      }
      auto& c = parked ? counters_.cancel_parked
                : side ? counters_.cancel_side
                : s.outstanding > 0 ? counters_.cancel_chain
                                    : counters_.cancel_idle;
      c.fetch_add(1, std::memory_order_relaxed);
    }
    main_buf_->instant(t_main_, n_cancel_, metrics::now_ns());
    s.cancelled = true;
    unpark(found->second);
    cancel_word_[s.ref.index].store(s.ref.generation, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_release);
    settle(found->second);
  }

  bool admit_backlog() {
    bool did = false;
    while (!backlog_.empty()) {
      auto ref = engine_->add_request(backlog_.front().id);
      if (!ref && live_ == 0) {
        // No live request will ever free an index: every free one was quarantined after a failed
        // teardown (engine::remove_request). The request fails instead of waiting forever.
        const auto sub = std::move(backlog_.front());
        backlog_.pop_front();
        end_unstarted(sub, request_end::failed,
                      "no request index can be given: " + std::to_string(engine_->quarantined()) +
                          " were quarantined after failed teardowns (see stderr) and none is live; rebuild the "
                          "engine, or raise engine_options.max_requests");
        did = true;
        continue;
      }
      if (!ref) break;
      auto sub = std::move(backlog_.front());
      backlog_.pop_front();
      auto& s = slots_[ref->index];
      s.ref = *ref;
      s.id = sub.id;
      s.state = request_state{};
      s.outstanding = 0;
      s.out_node.fill(false);
      s.parked.fill(false);
      s.live = true;
      s.cancelled = s.failed = s.stepped = false;
      s.failure.clear();
      metrics::request_recorder::on_submit(s.timing, sub.at);
      insert_reusing(by_id_, spare_by_id_, {sub.id, ref->index}); // not there: ids_ holds a live id once
      ++live_;
      try {
        flow_->start(s.state, sub.id, sub.input);
      } catch (...) {
        fail(ref->index, "the flow's start hook threw: " + detail::what_of(std::current_exception()));
      }
      settle(ref->index);
      did = true;
    }
    return did;
  }

  bool drain_done() {
    bool did = false;
    done_item d;
    while (done_ring_.try_pop(d)) {
      did = true;
      auto timer = main_rec_.time(d.node, route_phase());
      if (d.record == ~0u) {
        returned(d.r, d.node);
        settle(d.r.request.index);
        continue;
      }
      auto& rec = records_[d.record];
      const auto now = metrics::now_ns();
      for (std::uint32_t i = 0; i < rec.count; ++i) {
        const auto index = rec.rows[i].request.index;
        auto& s = slots_[index];
        returned(rec.rows[i], rec.node);
        if (rec.status != record_status::ok) {
          fail(index, std::string(Model::descriptor.nodes[rec.node].name) + " step failed: " + rec.error);
          continue;
        }
        if (s.cancelled || s.failed) continue;
        s.stepped = true;
        try {
          if (flow_->landed(s.state, rec.node, rec.payloads[i])) requests_rec_.on_output(s.timing, now);
        } catch (...) {
          fail(index, "the flow's landed hook threw: " + detail::what_of(std::current_exception()));
        }
      }
      for (std::uint32_t i = 0; i < rec.count; ++i)
        settle(rec.rows[i].request.index);
      const std::uint32_t index = d.record;
      recycle_ring_.push_wait(index);
      // Every row this step made ready has been pushed: the GPU thread may form the chain's next step.
      routed_.store(++routed_count_, std::memory_order_release);
    }
    return did;
  }

  void returned(const row& r, std::uint8_t node) {
    auto& s = slots_[r.request.index];
    if (!s.live || !(s.ref == r.request) || !s.out_node[node])
      throw std::logic_error("mstar::threaded_worker: a row came back for a request that has none out (a worker bug)");
    s.out_node[node] = false;
    --s.outstanding;
    --rows_out_;
  }

  // Decides what happens to a request after something changed: teardown, or readiness.
  void settle(std::uint32_t index) {
    auto& s = slots_[index];
    if (!s.live) return;
    if (s.cancelled || s.failed) {
      if (s.failed) {
        unpark(index);
        cancel_word_[s.ref.index].store(s.ref.generation, std::memory_order_release);
      }
      if (s.outstanding == 0) teardown(index, s.cancelled ? request_end::cancelled : request_end::failed);
      return;
    }
    bool parked = false;
    for (bool p : s.parked)
      parked |= p;
    bool finished = false;
    try {
      finished = s.outstanding == 0 && !parked && flow_->finished(s.state);
    } catch (...) {
      fail(index, "the flow's finished hook threw: " + detail::what_of(std::current_exception()));
    }
    if (s.failed) {
      settle(index);
      return;
    }
    if (finished) {
      teardown(index, request_end::completed);
      return;
    }
    for (std::uint8_t n = 0; n < node_count && !s.failed; ++n) { // a continues hook may fail it
      if (s.out_node[n] || s.parked[n]) continue;
      row r{};
      payload_type p{};
      bool reserved = false;
      try {
        if (!flow_->ready(s.state, n, r, p)) continue;
        r.request = s.ref;
        reserved = reserve(n, r);
      } catch (...) {
        fail(index, row_error(n));
      }
      if (s.failed) break; // its ready hook or a resource refused it for good (past a per-request limit)
      if (reserved) {
        push_ready(index, n, r, p);
      } else {
        s.parked[n] = true;
        parked_[n].push_back({index, s.ref, r, p});
        counters_.parked.fetch_add(1, std::memory_order_relaxed);
        main_buf_->instant(t_main_, n_park_, metrics::now_ns(), {n_rows_, 1});
      }
    }
    if (s.failed) settle(index); // to the failed branch above
  }

  // The reason of a request whose row for node n raised while readied (inside a catch).
  static std::string row_error(std::uint8_t n) {
    return "readying its " + std::string(Model::descriptor.nodes[n].name) +
           " row failed: " + detail::what_of(std::current_exception());
  }

  void push_ready(std::uint32_t index, std::uint8_t n, const row& r, const payload_type& p) {
    auto& s = slots_[index];
    bool continues = true;
    if constexpr (predicts_continuation<Flow>) {
      // A throw fails the request; the row still goes out (and is dropped by the GPU thread once the
      // request's settle() sets its cancel word), so the bookkeeping stays the same on every path.
      try {
        if (!is_side(n)) continues = static_cast<bool>(flow_->continues(s.state, n, p));
      } catch (...) {
        fail(index, "the flow's continues hook threw: " + detail::what_of(std::current_exception()));
      }
    }
    s.out_node[n] = true;
    ++s.outstanding;
    ++rows_out_;
    ready_ring_.push_wait(ready_row{r, n, continues, p});
  }

  // Ask/reserve at readiness: every recurrent pool of the node reserves the row's slot, and every KV
  // cache the blocks the row's tokens need beyond those the request holds (both idempotent). False
  // when one is full: the row parks here while the chain keeps scheduling. A parked row keeps no KV
  // reservation (given back here), so rows parked on different resources never wait on each other's
  // blocks; its pool slot, like any pool reservation, stays with the request until teardown. Throws
  // what a resource throws for a row it can never take (a request past max_blocks_per_request): the
  // callers fail that request alone.
  bool reserve(std::uint8_t n, const row& r) {
    auto timer = main_rec_.time(n, metrics::phase::admit);
    bool ok = true;
    with_node(n, [&]<class Node>() {
      auto& set = engine_->resources();
      set.template for_each_of<Node>([&](auto, auto& res) -> bool {
        if constexpr (requires { res.reserve(r.request, r.label, static_cast<refusal*>(nullptr)); }) {
          if (!res.reserve(r.request, r.label, nullptr)) ok = false;
        } else if constexpr (requires { res.reserve_tokens(r.request, r.tokens, static_cast<refusal*>(nullptr)); }) {
          if (!res.reserve_tokens(r.request, r.tokens, nullptr)) ok = false;
        }
        return ok;
      });
      if (!ok)
        set.template for_each_of<Node>([&](auto, auto& res) -> bool {
          if constexpr (requires { res.unreserve(r.request); }) res.unreserve(r.request);
          return true;
        });
    });
    return ok;
  }

  // A stall: rows are parked, no row of any live request is out (queued, in a step, held), and the
  // inbox is empty, so no step will land and no request will end: nothing frees what the parked rows
  // wait for. It happens when a KV cache is too small for the live requests' growth (decode rows
  // crossing a block boundary park, every live request among them; there is no preemption). After
  // stall_grace of it the youngest parked request that ran a step (so holds blocks; else the youngest
  // parked) fails, with the reason on stderr and counters().stall_failures; its teardown frees what
  // it held and retries the parked rows. Repeats while the stall lasts.
  static constexpr metrics::nanos stall_grace = 10'000'000; // 10 ms
  bool break_stall() {
    std::size_t parked = 0;
    for (const auto& q : parked_)
      parked += q.size();
    if (parked == 0 || rows_out_ != 0 || live_ == 0 || inbox_flag_.load(std::memory_order_acquire)) {
      stall_since_ = 0;
      return false;
    }
    const auto now = metrics::now_ns();
    if (stall_since_ == 0) stall_since_ = now;
    if (now - stall_since_ < stall_grace) return false;
    stall_since_ = 0;
    // Capacity freed without a teardown (a reservation given back) is only retried at teardowns:
    // retry first, and fail no one if that moved a row.
    retry_parked();
    if (rows_out_ != 0) return true;
    std::uint32_t victim = no_index32, youngest = no_index32;
    std::string nodes;
    for (std::uint8_t n = 0; n < node_count; ++n) {
      if (!parked_[n].empty()) nodes += (nodes.empty() ? "" : ", ") + std::string(Model::descriptor.nodes[n].name);
      for (const auto& e : parked_[n]) {
        const auto& s = slots_[e.index];
        if (!s.live || !(s.ref == e.ref) || s.cancelled || s.failed) continue;
        auto younger = [&](std::uint32_t than) { return than == no_index32 || s.timing.submitted > slots_[than].timing.submitted; };
        if (younger(youngest)) youngest = e.index;
        if (s.stepped && younger(victim)) victim = e.index;
      }
    }
    if (victim == no_index32) victim = youngest;
    if (victim == no_index32) return false;
    auto& s = slots_[victim];
    std::fprintf(stderr,
                 "mstar::threaded_worker: request %llu failed to break a stall: all %u live requests wait for "
                 "capacity (rows parked on %s) and none has a step in flight, so none can finish and free it; a KV "
                 "cache too small for the live requests' growth does this (there is no preemption). The youngest "
                 "request holding capacity failed so that the others go on. Size the KV cache for the live "
                 "requests' full length (max_requests x the longest request's tokens) or admit fewer requests.\n",
                 static_cast<unsigned long long>(s.id), static_cast<unsigned>(live_), nodes.c_str());
    counters_.stall_failures.fetch_add(1, std::memory_order_relaxed);
    fail(victim, "failed to break a stall: every live request waited for capacity (rows parked on " + nodes +
                     ") with none in flight; size the KV cache for the live requests' full length or admit "
                     "fewer requests");
    settle(victim); // unparks, then tears down (nothing of it is out)
    return true;
  }

  void unpark(std::uint32_t index) {
    auto& s = slots_[index];
    for (std::uint8_t n = 0; n < node_count; ++n) {
      if (!s.parked[n]) continue;
      s.parked[n] = false;
      auto& q = parked_[n];
      for (auto it = q.begin(); it != q.end(); ++it)
        if (it->index == index) {
          q.erase(it);
          break;
        }
    }
  }

  // Parked rows once a teardown freed capacity: first the rows of requests that have run a step
  // (a decode row crossing into a new block: running requests finish, and free what they hold,
  // before new ones start), then the others; oldest first within each node, stopping at a node's
  // first row that still does not fit. Giving freed blocks to new prefills first made a stall
  // (break_stall) fail nearly every request in turn: each prefill took the victim's blocks, parked
  // on its first decode row and became the next victim.
  void retry_parked() {
    std::vector<std::uint32_t> failed; // requests a resource refused for good: settled after the walk
    for (int pass = 0; pass < 2; ++pass)
      for (std::uint8_t n = 0; n < node_count; ++n) {
        auto& q = parked_[n];
        for (auto it = q.begin(); it != q.end();) {
          auto& s = slots_[it->index];
          if (!s.live || !(s.ref == it->ref) || !s.parked[n]) {
            it = q.erase(it);
            continue;
          }
          if (pass == 0 && !s.stepped) {
            ++it;
            continue;
          }
          bool reserved = false;
          try {
            reserved = reserve(n, it->r);
          } catch (...) {
            fail(it->index, row_error(n));
          }
          if (s.failed) {
            s.parked[n] = false;
            failed.push_back(it->index);
            it = q.erase(it);
            continue;
          }
          if (!reserved) break;
          s.parked[n] = false;
          const auto entry = *it;
          it = q.erase(it);
          counters_.unparked.fetch_add(1, std::memory_order_relaxed);
          push_ready(entry.index, n, entry.r, entry.payload);
          if (s.failed) failed.push_back(entry.index); // its continues hook threw
        }
      }
    for (const auto index : failed)
      settle(index);
  }

  void teardown(std::uint32_t index, request_end how) {
    auto& s = slots_[index];
    const auto begin = metrics::now_ns();
    try {
      engine_->remove_request(s.ref, chain_);
    } catch (const std::exception& e) {
      counters_.teardown_errors.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "mstar::threaded_worker: teardown of request %llu failed: %s\n",
                   static_cast<unsigned long long>(s.id), e.what());
    }
    const auto end = metrics::now_ns();
    main_rec_.record(metrics::node_id(node_count), teardown_phase(), end - begin);
    main_buf_->complete(t_main_, n_teardown_, begin, end);
    counters_.teardowns.fetch_add(1, std::memory_order_relaxed);
    s.live = false;
    const std::string why = how == request_end::failed ? std::move(s.failure) : std::string();
    s.failure.clear();
    finish_request(s.state, s.id, s.timing, how, why, end);
    erase_keeping(by_id_, spare_by_id_, s.id);
    --live_;
    epoch_.fetch_add(1, std::memory_order_release);
    ended(s.id);
    retry_parked();
  }

  void ended(request_id id) {
    std::lock_guard g(inbox_lock_);
    erase_keeping(ids_, spare_ids_, id);
    ++ended_;
    if (ended_ == submitted_) idle_cv_.notify_all();
  }

  // =============================================================================================
  // GPU thread
  // =============================================================================================
  void gpu_loop() {
    try {
      gpu_passes();
    } catch (...) {
      fatal(std::current_exception());
    }
    plan_stop_.store(true, std::memory_order_release);
    gpu_exited_.store(true, std::memory_order_release);
  }
  void gpu_passes() {
    detail::backoff wait(options_.gpu_backoff);
    std::uint64_t seen_epoch = epoch_.load(std::memory_order_acquire);
    for (;;) {
      if (abort_.load(std::memory_order_acquire)) return;
      bool did = drain_ready();
      std::uint32_t back;
      while (recycle_ring_.try_pop(back))
        free_records_.push_back(back);
      const auto e = epoch_.load(std::memory_order_acquire);
      if (e != seen_epoch) {
        seen_epoch = e;
        release_held();
        did = true;
      }
      did |= take_ack();
      did |= poll_landed();
      did |= launch_side();
      did |= launch_chain();
      // Held rows with nothing in flight: no landing will release them, so retry now (a refusal that
      // persists then retries each pass until a teardown frees capacity).
      if (!did && in_flight_.empty() && any_held()) {
        release_held();
        did = true;
      }
      if (!did && gpu_stop_.load(std::memory_order_acquire) && in_flight_.empty() && staged_ == no_record) break;
      if (did) {
        gpu_busy_end_ = metrics::now_ns();
        wait.reset();
      } else if (spin_for_stage_ && staged_ != no_record && !staged_acked_) {
        // The plan thread is staging: its answer comes within microseconds.
        if (watch_for_ack())
          wait.reset(); // the answer is in: the wait for the landing starts afresh
        else
          wait.pause_expecting();
      } else
        wait.pause();
    }
    // A stage no chain step came to take (every request ended): drop it, so no resource keeps it.
    if (stage_pending_) drop_stage();
  }

  // Ready rows from the main thread into the per-node queues.
  bool drain_ready() {
    bool did = false;
    ready_row rr;
    metrics::nanos now = 0;
    while (ready_ring_.try_pop(rr)) {
      if (windows_[rr.node].waits()) { // stamped only for a node with a min_batch
        if (now == 0) now = metrics::now_ns();
        rr.since = now;
        windows_[rr.node].arrived(now);
      }
      ready_[rr.node].push_back(rr);
      did = true;
    }
    return did;
  }

  static constexpr std::uint32_t no_record = ~0u;

  std::uint32_t take_record() {
    if (free_records_.empty()) return no_record;
    const auto i = free_records_.back();
    free_records_.pop_back();
    return i;
  }

  bool cancelled(const row& r) const {
    return cancel_word_[r.request.index].load(std::memory_order_acquire) == r.request.generation;
  }

  // Fills a record with up to the node's batch from its ready queue (dropping cancelled rows back to
  // the main thread). False when nothing is ready.
  bool form(std::uint8_t n, std::uint32_t rec_index) {
    auto& rec = records_[rec_index];
    rec.node = n;
    rec.side = is_side(n);
    rec.count = 0;
    rec.predicted = 0;
    rec.speculative = false;
    fill(n, rec, 0);
    return rec.count > 0;
  }

  // Appends ready rows of node n to rec (which holds `tokens` tokens in rec.count rows already), in
  // queue order, up to the node's batch and max_tokens; cancelled rows are handed back.
  void fill(std::uint8_t n, step_record& rec, std::uint32_t tokens) {
    auto& q = ready_[n];
    const auto limit = batch_limit_[n];
    const auto max_tokens = engine_->options().max_tokens;
    bool keyed = node_opts_[n].batch == batching::per_key;
    std::uint32_t key = 0;
    bool have_key = false;
    for (std::size_t i = 0; i < q.size() && rec.count < limit;) {
      const ready_row& rr = q[i];
      if (cancelled(rr.r)) {
        drop(rr);
        q.erase(i);
        continue;
      }
      if (keyed) {
        const std::uint32_t k = flow_->batch_key(n, rr.payload);
        if (!have_key) {
          key = k;
          have_key = true;
        } else if (k != key) {
          ++i;
          continue;
        }
      }
      if (tokens + rr.r.tokens > max_tokens && rec.count > 0) break;
      tokens += rr.r.tokens;
      take(rec, rr);
      q.erase(i);
    }
  }

  static void take(step_record& rec, const ready_row& rr) {
    rec.rows[rec.count] = rr.r;
    rec.payloads[rec.count] = rr.payload;
    rec.continues[rec.count] = rr.continues;
    ++rec.count;
  }
  static ready_row ready_of(const step_record& rec, std::uint32_t i) {
    return ready_row{rec.rows[i], rec.node, rec.continues[i] != 0, rec.payloads[i]};
  }

  void drop(const ready_row& rr) {
    counters_.dropped_rows.fetch_add(1, std::memory_order_relaxed);
    done_ring_.push_wait(done_item{no_record, rr.node, rr.r});
  }

  bool any_held() const {
    for (const auto& h : held_)
      if (!h.empty()) return true;
    return false;
  }

  // Held rows go back to the front of their ready queue, in the order they were held.
  void release_held() {
    for (std::uint8_t n = 0; n < node_count; ++n) {
      auto& h = held_[n];
      if (h.empty()) continue;
      scratch_.clear();
      while (!h.empty())
        scratch_.push_back(h.pop_front());
      for (auto it = scratch_.rbegin(); it != scratch_.rend(); ++it)
        ready_[n].push_front(*it);
    }
  }

  // ---- the chain ----
  // The plan thread's answer, taken as soon as it arrives (the handoff latency is measured here).
  bool take_ack() {
    if (staged_ == no_record || staged_acked_) return false;
    plan_ack ack;
    if (!from_plan_.try_pop(ack)) return false;
    const auto latency = metrics::now_ns() - ack.pushed;
    if (options_.watch_expected) arrival_.learn(ack.pushed - handed_at_);
    gpu_rec_.record(records_[ack.record].node, handoff_phase(), latency);
    // The same latency again when the GPU thread had finished its last piece of work before the push
    // (it was polling): the handoff itself, without the wait behind the GPU thread's own work (a side
    // step it was launching, a landing it was committing).
    if (ack.pushed >= gpu_busy_end_) gpu_rec_.record(records_[ack.record].node, handoff_idle_phase(), latency);
    staged_acked_ = true;
    if (ack.staged) {
      stage_pending_ = true;
      counters_.staged.fetch_add(1, std::memory_order_relaxed);
      if (records_[ack.record].predicted > 0) counters_.speculative_stages.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  // Looks only at the plan thread's ring for up to worker_options::stage_watch; true once the answer
  // is taken.
  bool watch_for_ack() {
    if (options_.stage_watch.count() <= 0) return false;
    const metrics::nanos watch = options_.stage_watch.count(), now = metrics::now_ns();
    const auto until = options_.watch_expected ? arrival_.watch_until(now, handed_at_, watch) : now + watch;
    for (std::uint32_t i = 1;; ++i) {
      if (take_ack()) return true;
      detail::cpu_relax();
      if ((i & 15u) == 0 && metrics::now_ns() >= until) return false;
    }
  }

  // The main thread has routed every chain step that landed (or the worker is stopping).
  bool chain_routed() const {
    return routed_.load(std::memory_order_acquire) >= route_target_ || gpu_stop_.load(std::memory_order_acquire);
  }

  // A batch is formed once the main thread has routed the last chain step that landed (so its rows'
  // next rows are all queued) and is between routing passes, or the node's batch is full, or after
  // 20 us (a main thread slow to get a core).
  bool batch_settled(std::uint8_t n) {
    const bool routed = chain_routed();
    if (routed) drain_ready();
    if (ready_[n].size() >= batch_limit_[n] || (routed && !routing_.load(std::memory_order_acquire))) {
      settle_since_ = 0;
      return true;
    }
    const auto now = metrics::now_ns();
    if (settle_since_ == 0) settle_since_ = now;
    if (now - settle_since_ > 20000) {
      settle_since_ = 0;
      return true;
    }
    return false;
  }

  bool launch_chain() {
    if (chain_in_flight_ >= options_.max_chain_in_flight) return stage_next();
    std::uint32_t rec_index = no_record;
    metrics::nanos pass_begin = 0;
    bool did = false;
    if (staged_ != no_record) {
      if (!staged_acked_) return false; // the plan thread is still reading its rows
      const auto& st = records_[staged_];
      // Predicted rows come from the chain step that landed last: wait until it is routed.
      if (st.speculative && st.predicted > 0 && !chain_routed()) return false;
      rec_index = std::exchange(staged_, no_record);
      if (records_[rec_index].speculative) drain_ready(); // not part of the pass: the main thread's handoff
      pass_begin = metrics::now_ns();
      if (records_[rec_index].speculative) {
        if (!form_staged(rec_index)) { // nothing of it is ready: no chain step will take the stage
          free_records_.push_back(rec_index);
          rec_index = no_record;
          if (stage_pending_) drop_stage();
          did = true;
        }
      }
    }
    if (rec_index == no_record) {
      const auto n = pick_chain_node();
      if (n == no_index || !batch_settled(n)) return did;
      pass_begin = metrics::now_ns();
      rec_index = take_record();
      if (rec_index == no_record) return did;
      if (!form(n, rec_index)) {
        free_records_.push_back(rec_index);
        return did;
      }
    }
    const std::uint8_t node = records_[rec_index].node;
    predict_from_ = no_record;
    if (launch(rec_index, chain_, false)) {
      ++chain_in_flight_;
      if (options_.preplan) chain_busy_.store(true, std::memory_order_relaxed);
      if (options_.predict_next && options_.max_chain_in_flight == 1 && node_opts_[node].batch == batching::every_key)
        predict_from_ = rec_index;
    }
    if (chain_in_flight_ >= options_.max_chain_in_flight) {
      const auto t = metrics::now_ns();
      if (stage_next()) gpu_rec_.record(node, stage_phase(), metrics::now_ns() - t);
    }
    gpu_rec_.record(node, pass_phase(), metrics::now_ns() - pass_begin);
    return true;
  }

  // While the chain is full, the next chain step is handed to the plan thread, which stages it while
  // the device runs the current one; nothing else launches on the chain before it. Round robin picks
  // its node among those with ready rows. When that is no node, or the node just launched, and the
  // step just launched may be predicted from, the step is a prediction (predict()): formed again
  // from the ready queue at launch (form_staged()), it promotes when it came out as predicted.
  // Otherwise its rows are taken from the ready queue now, and it promotes.
  bool stage_next() {
    if (!options_.preplan || staged_ != no_record) return false;
    // The rows of the chain step that landed last go into the queue first (another group's rows may
    // be routed right now): deciding without them would predict a step that waits for this one's.
    // Bounded like batch_settled (20 us), for a main thread that is slow to get a core.
    if (!chain_routed()) {
      const auto now = metrics::now_ns();
      if (stage_wait_since_ == 0) stage_wait_since_ = now;
      if (now - stage_wait_since_ < 20000) return false;
    }
    stage_wait_since_ = 0;
    drain_ready();
    const auto n = pick_chain_node();
    // No node due: predict the step just launched, unless its node waits for a batch (a prediction
    // would take its waiting rows now).
    if (predict_from_ != no_record &&
        ((n == no_index && !windows_[records_[predict_from_].node].waits()) || n == records_[predict_from_].node)) {
      const auto from = std::exchange(predict_from_, no_record); // one prediction per launch
      const auto next = take_record();
      if (next == no_record) return false;
      if (!predict(from, next)) {
        free_records_.push_back(next);
        return false;
      }
      return hand_to_plan(next);
    }
    if (n == no_index || !batch_settled(n)) return false;
    const auto next = take_record();
    if (next == no_record) return false;
    if (!form(n, next)) {
      free_records_.push_back(next);
      return false;
    }
    return hand_to_plan(next);
  }

  bool hand_to_plan(std::uint32_t next) {
    staged_ = next;
    staged_acked_ = false;
    handed_at_ = metrics::now_ns();
    to_plan_.push_wait(next);
    return true;
  }

  // The predicted next step of the node of chain step `from` (in flight): the node's rows ready now,
  // in queue order (they have waited longest), then `from`'s rows that continue, in `from`'s order;
  // up to the node's batch and max_tokens, a continued row carrying the same tokens and label. The
  // rows stay in the ready queue (a cancel still drops them there). False when the prediction is empty.
  bool predict(std::uint32_t from, std::uint32_t next) {
    const auto& src = records_[from];
    auto& rec = records_[next];
    const auto n = src.node;
    rec.node = n;
    rec.side = false;
    rec.count = 0;
    rec.predicted = 0;
    rec.speculative = true;
    const auto limit = batch_limit_[n];
    const auto max_tokens = engine_->options().max_tokens;
    std::uint32_t tokens = 0;
    auto add = [&](const row& r) {
      if (rec.count >= limit || (tokens + r.tokens > max_tokens && rec.count > 0)) return false;
      tokens += r.tokens;
      rec.rows[rec.count++] = r;
      return true;
    };
    auto& q = ready_[n];
    for (std::size_t i = 0; i < q.size(); ++i)
      if (!cancelled(q[i].r) && !add(q[i].r)) return rec.count > 0;
    for (std::uint32_t i = 0; i < src.count; ++i) {
      if (!src.continues[i] || cancelled(src.rows[i])) continue;
      if (!add(src.rows[i])) break;
      ++rec.predicted;
    }
    return rec.count > 0;
  }

  // Forms a predicted step at launch: its rows that are ready, in the predicted order, then the
  // node's other ready rows in queue order. When every predicted row came and nothing else, it is
  // the staged step. Cancelled rows are handed back. One pass over the ready queue (O(queue +
  // prediction), whatever the order the rows came in). False when nothing is ready.
  bool form_staged(std::uint32_t rec_index) {
    auto& rec = records_[rec_index];
    const auto n = rec.node;
    auto& q = ready_[n];
    const auto predicted = rec.count;
    if (++stamp_ == 0) {
      std::fill(slot_stamp_.begin(), slot_stamp_.end(), 0u);
      stamp_ = 1;
    }
    for (std::uint32_t i = 0; i < predicted; ++i) {
      slot_of_[rec.rows[i].request.index] = i;
      slot_stamp_[rec.rows[i].request.index] = stamp_;
      present_[i] = 0;
    }
    // Predicted rows out of the queue into their slots; the others rotate back in order.
    for (std::size_t k = q.size(); k-- > 0;) {
      const ready_row rr = q.pop_front();
      const auto idx = rr.r.request.index;
      if (slot_stamp_[idx] == stamp_) {
        const auto slot = slot_of_[idx];
        const row& want = rec.rows[slot];
        if (!present_[slot] && want.request == rr.r.request && want.label == rr.r.label) {
          if (cancelled(rr.r)) {
            drop(rr);
          } else {
            found_[slot] = rr;
            present_[slot] = 1;
          }
          continue;
        }
      }
      q.push_back(rr);
    }
    const auto limit = batch_limit_[n];
    const auto max_tokens = engine_->options().max_tokens;
    std::uint32_t tokens = 0;
    rec.count = 0;
    rec.speculative = false;
    std::uint32_t left = 0; // predicted rows that came but do not fit (the batch limit shrank): back in front
    for (std::uint32_t i = 0; i < predicted; ++i) {
      if (!present_[i]) continue; // not ready: cancelled, finished, parked or held
      const ready_row& rr = found_[i];
      if (rec.count >= limit || (tokens + rr.r.tokens > max_tokens && rec.count > 0)) {
        found_[left++] = rr; // left <= i: never overwrites a slot still to read
        continue;
      }
      tokens += rr.r.tokens;
      take(rec, rr);
    }
    for (std::uint32_t i = left; i-- > 0;)
      q.push_front(found_[i]);
    fill(n, rec, tokens);
    return rec.count > 0;
  }

  // The bucket a step of `rows` rows of node `n` carries: the smallest of the node's buckets that
  // holds them (check_buckets made sure one does), or 0 (the row count) when the node has none.
  std::uint32_t bucket_of(std::uint8_t n, std::uint32_t rows) const noexcept {
    const auto& b = node_opts_[n].buckets;
    return b.empty() ? 0 : bucket_for(rows, b);
  }

  void check_buckets(std::size_t n) const {
    const auto& o = node_opts_[n];
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
    if (largest > max_batch_)
      bad("end at " + std::to_string(largest) + ", above engine_options.max_batch " + std::to_string(max_batch_) +
          " (the runner refuses such a step); drop the buckets above it or raise max_batch");
  }

  void check_min_batch(std::size_t n) const {
    const auto& o = node_opts_[n];
    if (o.min_batch <= 1) return;
    const std::string which = "mstar::worker_options: nodes[" + std::to_string(n) + "] (" +
                              std::string(Model::descriptor.nodes[n].name) + ") min_batch is " +
                              std::to_string(o.min_batch);
    if (is_side(std::uint8_t(n)))
      throw std::invalid_argument(which + ", but the node is a side node; min_batch applies to chain nodes "
                                          "(a side step runs beside the chain as soon as it can, and its clients wait on its output): set "
                                          "it to 0");
    if (o.min_batch > o.max_batch)
      throw std::invalid_argument(which + ", above the node's max_batch " + std::to_string(o.max_batch) +
                                  " (engine_options.max_batch when 0); lower min_batch or raise max_batch");
  }

  // Drops the published stage that no chain step took (and counts it).
  void drop_stage() {
    stage_pending_ = false;
    counters_.stage_drops.fetch_add(1, std::memory_order_relaxed);
    auto& stage = engine_->runner().stage();
    if (!stage.staged()) return; // a chain step's admit dropped it already
    with_node(stage.node(), [&]<class Node>() {
      if constexpr (runs_on_the_chain<Model, Node>) stage.drop(chain_step<Model, Node>{});
    });
  }

  // The next chain node with ready rows, round robin. A node waiting for its min_batch
  // (node_options) is passed over while a chain step is in flight, another node has ready rows, or
  // rows of the chain step that landed last may still be on their way (the main thread has not routed
  // it yet); only then, with nothing else to run, does it run with what it has.
  std::uint8_t pick_chain_node() {
    for (int round = 0;; ++round) {
      std::uint8_t waiting = no_index;
      metrics::nanos now = 0;
      for (std::size_t k = 1; k <= node_count; ++k) {
        const auto n = static_cast<std::uint8_t>((last_chain_node_ + k) % node_count);
        if (is_side(n) || ready_[n].empty()) continue;
        if (!batch_due(n, now)) {
          if (waiting == no_index && !ready_[n].empty()) waiting = n;
          continue;
        }
        last_chain_node_ = n;
        return n;
      }
      if (waiting == no_index || chain_in_flight_ > 0) return no_index;
      if (!chain_routed() || routing_.load(std::memory_order_acquire)) return no_index;
      // Routing has settled: rows it pushed since this pick began may make another node ready.
      if (round == 0 && drain_ready()) continue;
      last_chain_node_ = waiting; // nothing else to run: the chain does not idle for a batch
      return waiting;
    }
  }

  // Whether node n's ready rows make a step now (detail::batch_window; `now` read at most once a pick).
  // A waiting node's cancelled rows go back to the main thread at once (their teardown frees what
  // they hold), not when the node next forms a step; a pass over a waiting node is counted
  // (worker_counters::batch_waits).
  bool batch_due(std::uint8_t n, metrics::nanos& now) {
    const auto& w = windows_[n];
    if (!w.waits()) return true;
    auto& q = ready_[n];
    if (now == 0) now = metrics::now_ns();
    if (w.due(q.size(), q[0].since, now)) return true;
    for (std::size_t i = 0; i < q.size();) {
      if (cancelled(q[i].r)) {
        drop(q[i]);
        q.erase(i);
      } else {
        ++i;
      }
    }
    if (!q.empty() && w.due(q.size(), q[0].since, now)) return true;
    counters_.batch_waits.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  // ---- the side lane ----
  bool launch_side() {
    if (side_in_flight_) return false;
    for (std::size_t k = 1; k <= node_count; ++k) {
      const auto n = static_cast<std::uint8_t>((last_side_node_ + k) % node_count);
      if (!is_side(n) || ready_[n].empty()) continue;
      last_side_node_ = n;
      const auto rec_index = take_record();
      if (rec_index == no_record) return false;
      if (!form(n, rec_index)) {
        free_records_.push_back(rec_index);
        continue;
      }
      bool on_lane = options_.lane == lane_mode::on;
      if (options_.lane == lane_mode::automatic) on_lane = chooser_.decide();
      if (on_lane && !lane_) {
        // Created on first launch, with its priority, and registered with the engine so that the side
        // keys' teardown runs on it from now on.
        lane_ = backend_->create_stream(options_.lane_priority);
        for (std::uint8_t m = 0; m < node_count; ++m)
          if (is_side(m)) engine_->set_side_stream(Model::descriptor.nodes[m].name, *lane_);
        counters_.lane_created.fetch_add(1, std::memory_order_relaxed);
      }
      const auto begin = metrics::now_ns();
      if (launch(rec_index, on_lane ? *lane_ : chain_, on_lane)) side_in_flight_ = true;
      if (on_lane) chooser_.side_host(double(metrics::now_ns() - begin));
      return true;
    }
    return false;
  }

  // admit -> plan (or promote) -> forward -> commit, for one record. False when nothing was enqueued.
  bool launch(std::uint32_t rec_index, stream_type stream, bool on_lane) {
    auto& rec = records_[rec_index];
    rec.stream = stream;
    rec.on_lane = on_lane;
    rec.status = record_status::ok;
    rec.error.clear();
    rec.enqueued = false;
    rec.device_begin.store(0, std::memory_order_relaxed);
    rec.device_end.store(0, std::memory_order_relaxed);
    bool enqueued = false;
    with_node(rec.node, [&]<class Node>() { enqueued = launch_as<Node>(rec_index, stream); });
    return enqueued;
  }

  template <class Node>
  bool launch_as(std::uint32_t rec_index, stream_type stream) {
    auto& rec = records_[rec_index];
    auto& runner = engine_->runner();
    using S = step_for<Model, Node>;
    const S step{std::span<const row>(rec.rows.data(), rec.count), bucket_of(rec.node, rec.count)};
    const auto n = rec.node;
    const auto t0 = metrics::now_ns();
    auto a = runner.admit(step);
    const auto t1 = metrics::now_ns();
    gpu_rec_.record(n, metrics::phase::admit, t1 - t0);
    if (!a) {
      if (a.refused()) {
        refused(rec_index, a);
      } else {
        end_now(rec_index, a.message());
      }
      return false;
    }
    if (batch_limit_[n] < node_opts_[n].max_batch) batch_limit_[n] = std::min(batch_limit_[n] * 2, node_opts_[n].max_batch);
    auto p = runner.plan(step, stream);
    const auto t2 = metrics::now_ns();
    gpu_rec_.record(n, p.promoted ? metrics::phase::promote : metrics::phase::plan, t2 - t1);
    if (!p) {
      end_now(rec_index, p.message());
      return false;
    }
    if (p.promoted) counters_.promoted.fetch_add(1, std::memory_order_relaxed);
    if constexpr (!S::beside_stage) {
      // The first chain step to plan after a stage was published took it or dropped it.
      if (std::exchange(stage_pending_, false) && !p.promoted) {
        counters_.stage_drops.fetch_add(1, std::memory_order_relaxed);
        gpu_rec_.record(n, stage_drop_phase(), t2 - t0);
      }
    }
    // From here to the commit the step is open in the runner (a teardown waits for it to settle): a
    // backend call that throws in between (a fatal error) abandons it on the way out.
    bool open = true;
    metrics::nanos t3 = 0;
    try {
      stamp(rec.device_begin, stream);
      try {
        const context_type<Node> ctx(engine_->resources(), stream, engine_type::runner_type::view(step),
                                     std::span<const payload_type>(rec.payloads.data(), rec.count), *backend_);
        std::get<node_index<Node>>(forwards_)(ctx);
      } catch (...) {
        open = false;
        runner.abandon(step);
        rec.status = record_status::failed;
        rec.error = detail::what_of(std::current_exception());
      }
      stamp(rec.device_end, stream);
      backend_->record(rec.done, stream);
      t3 = metrics::now_ns();
      gpu_rec_.record(n, metrics::phase::launch, t3 - t2);
      if (rec.status == record_status::ok) {
        auto c = runner.commit(step); // closes the step (abandon after it does nothing)
        open = false;
        if (!c) {
          rec.status = record_status::failed;
          rec.error = c.message();
        }
      }
    } catch (...) {
      if (open) runner.abandon(step);
      throw;
    }
    const auto t4 = metrics::now_ns();
    gpu_rec_.record(n, metrics::phase::commit, t4 - t3);
    gpu_buf_->complete(t_gpu_, node_name_id_[n], t0, t4, {n_rows_, rec.count}, {n_promoted_, p.promoted ? 1 : 0});
    if (rec.status != record_status::ok) counters_.failed_steps.fetch_add(1, std::memory_order_relaxed);
    (rec.side ? counters_.side_steps : counters_.chain_steps).fetch_add(1, std::memory_order_relaxed);
    if (rec.on_lane) counters_.side_steps_on_lane.fetch_add(1, std::memory_order_relaxed);
    rec.enqueued = true;
    rec.launched = t0;
    rec.host_ns = t4 - t0;
    in_flight_.push_back(rec_index);
    return true;
  }

  // Device-side time stamps where the backend can run host code in stream order (the host backend);
  // elsewhere the interval is taken from the launch to the landing seen by the GPU thread.
  void stamp(std::atomic<metrics::nanos>& at, stream_type stream) {
    if constexpr (requires(Backend& b) { b.enqueue(stream, [] {}); }) {
      backend_->enqueue(stream, [p = &at] { p->store(metrics::now_ns(), std::memory_order_relaxed); });
    }
  }

  // A step that failed before enqueueing anything: its rows go back now, failed.
  void end_now(std::uint32_t rec_index, std::string why) {
    auto& rec = records_[rec_index];
    rec.status = record_status::failed;
    rec.error = std::move(why);
    counters_.failed_steps.fetch_add(1, std::memory_order_relaxed);
    done_ring_.push_wait(done_item{rec_index, rec.node, {}});
    ++handed_;
  }

  // The one admit-failure handler, for chain and side steps: the rows change queues, nothing is routed.
  void refused(std::uint32_t rec_index, const step_outcome& why) {
    auto& rec = records_[rec_index];
    const auto n = rec.node;
    counters_.refusals.fetch_add(1, std::memory_order_relaxed);
    if (rec.side) counters_.side_refusals.fetch_add(1, std::memory_order_relaxed);
    gpu_buf_->instant(t_gpu_, n_refused_, metrics::now_ns(), {n_rows_, rec.count});
    admit_action action = node_opts_[n].on_refusal;
    if (options_.on_refusal) {
      refusal_event ev{n, Model::descriptor.nodes[n].name, rec.side, rec.count,
                       why.why ? why.why->resource : std::string_view{},
                       why.why ? why.why->message() : std::string_view{}};
      try {
        action = options_.on_refusal(ev);
      } catch (...) { // the handler's fault concerns this step's rows: they fail, the worker goes on
        counters_.refusal_handler_errors.fetch_add(1, std::memory_order_relaxed);
        end_now(rec_index, std::string(Model::descriptor.nodes[n].name) +
                               " step refused, and the admit-failure handler (worker_options::on_refusal) threw: " +
                               detail::what_of(std::current_exception()));
        return;
      }
    }
    auto& q = action == admit_action::hold ? held_[n] : ready_[n];
    if (action == admit_action::hold) {
      for (std::uint32_t i = 0; i < rec.count; ++i)
        q.push_back(ready_of(rec, i));
    } else {
      for (std::uint32_t i = rec.count; i-- > 0;)
        q.push_front(ready_of(rec, i));
    }
    if (action == admit_action::limit_batch) batch_limit_[n] = std::max<std::uint32_t>(1, rec.count / 2);
    rec.count = 0;
    free_records_.push_back(rec_index);
  }

  bool poll_landed() {
    bool did = false;
    // A stream (chain, lane) whose earlier step was found running in this pass: its later steps land
    // in a later pass, after it, even if their query (made later) finds them done; landed() takes a
    // stream's steps to land in their launch order.
    std::array<bool, 2> running{};
    for (std::size_t i = 0; i < in_flight_.size();) {
      const auto rec_index = in_flight_[i];
      auto& rec = records_[rec_index];
      if (running[rec.on_lane ? 1 : 0]) {
        ++i;
        continue;
      }
      bool done = false;
      try {
        done = backend_->query(rec.done);
      } catch (...) {
        stream_failed(rec, detail::what_of(std::current_exception()));
        done = true;
      }
      if (!done) {
        running[rec.on_lane ? 1 : 0] = true;
        ++i;
        continue;
      }
      const auto now = metrics::now_ns();
      landed(rec, now);
      in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
      done_ring_.push_wait(done_item{rec_index, rec.node, {}});
      ++handed_;
      // The chain's next step waits for the main thread to route this one (its rows' next rows).
      if (!rec.side) route_target_ = handed_;
      did = true;
    }
    return did;
  }

  // The step's stream work raised (a host-backend task threw; on CUDA, an asynchronous error, sticky
  // there): the step fails with the message. The host backend keeps a task's error for later queries
  // until it is synchronized, so it is taken here and reported once, for this step.
  void stream_failed(step_record& rec, std::string_view what) {
    try {
      backend_->synchronize(rec.done);
    } catch (...) {
    }
    if (rec.status == record_status::ok) counters_.failed_steps.fetch_add(1, std::memory_order_relaxed);
    if (rec.status == record_status::ok || rec.error.empty()) rec.error = "its stream work raised: " + std::string(what);
    rec.status = record_status::failed;
  }

  void landed(step_record& rec, metrics::nanos now) {
    auto b = rec.device_begin.load(std::memory_order_relaxed);
    auto e = rec.device_end.load(std::memory_order_relaxed);
    if (b == 0 || e == 0 || e < b) {
      b = rec.launched;
      e = now;
    }
    // One stream runs its steps in order: without device time stamps (CUDA) a step launched while the
    // one before it on its stream ran waited for it there, so its busy interval and trace event begin
    // at that one's landing (the union is the same; the stream's track then nests).
    auto& stream_end = landed_end_[rec.on_lane ? 1 : 0];
    const auto shown = std::min(std::max(b, stream_end), e);
    stream_end = std::max(stream_end, e);
    busy_.add(shown, e);
    gpu_buf_->complete(rec.on_lane ? t_lane_ : t_chain_, node_name_id_[rec.node], shown, e, {n_rows_, rec.count});
    const double d = double(e - b);
    if (rec.side) {
      side_in_flight_ = false;
      chooser_.side_step(d, rec.on_lane);  // where it ran, whatever the lane mode
      if (rec.on_lane) last_lane_ = {b, e};
    } else {
      if (--chain_in_flight_ == 0) chain_busy_.store(false, std::memory_order_relaxed);
      // Beside: a lane step ran during this chain step (the one in flight counts once it started).
      bool beside = last_lane_.end > b && last_lane_.begin < e;
      for (auto j : in_flight_) {
        const auto& o = records_[j];
        if (o.on_lane) {
          const auto ob = o.device_begin.load(std::memory_order_relaxed);
          if (ob != 0 && ob < e) beside = true;
        }
      }
      // Compared within a kind: the node and its bucket (without buckets, the row count's power of 2).
      const std::uint32_t bucket = bucket_of(rec.node, rec.count);
      chooser_.chain_step(d, beside, (std::uint64_t(rec.node) << 32) | (bucket != 0 ? bucket : std::bit_ceil(rec.count)));
      if (last_chain_end_ != 0) chooser_.chain_gap(double(b - last_chain_end_), d);
      last_chain_end_ = e;
    }
    release_held();
  }

  // =============================================================================================
  // Plan thread
  // =============================================================================================
  void plan_loop() {
    try {
      plan_passes();
    } catch (...) {
      fatal(std::current_exception());
    }
  }
  void plan_passes() {
    detail::backoff wait(options_.plan_backoff);
    for (;;) {
      if (abort_.load(std::memory_order_acquire)) return;
      std::uint32_t rec_index;
      if (!to_plan_.try_pop(rec_index)) {
        if (plan_stop_.load(std::memory_order_acquire)) break;
        // While a chain step runs, the next one to stage arrives as soon as it lands or is formed.
        if (spin_for_stage_ && chain_busy_.load(std::memory_order_relaxed))
          wait.pause_expecting();
        else
          wait.pause();
        continue;
      }
      wait.reset();
      auto& rec = records_[rec_index];
      const auto begin = metrics::now_ns();
      bool staged = false;
      with_node(rec.node, [&]<class Node>() {
        if constexpr (runs_on_the_chain<Model, Node>) {
          const chain_step<Model, Node> step{std::span<const row>(rec.rows.data(), rec.count),
                                             bucket_of(rec.node, rec.count)};
          staged = static_cast<bool>(engine_->runner().pre_plan(step, chain_));
        }
      });
      const auto end = metrics::now_ns();
      plan_rec_.record(rec.node, metrics::phase::plan, end - begin);
      plan_buf_->complete(t_plan_, n_preplan_, begin, end, {n_rows_, rec.count});
      from_plan_.push_wait(plan_ack{rec_index, staged, metrics::now_ns()});
    }
  }

  metrics::phase_id handoff_phase() const { return metrics::builtin_phase_count + 0; }
  metrics::phase_id pass_phase() const { return metrics::builtin_phase_count + 1; }
  metrics::phase_id route_phase() const { return metrics::builtin_phase_count + 2; }
  metrics::phase_id teardown_phase() const { return metrics::builtin_phase_count + 3; }
  metrics::phase_id stage_drop_phase() const { return metrics::builtin_phase_count + 4; }
  metrics::phase_id stage_phase() const { return metrics::builtin_phase_count + 5; }
  metrics::phase_id handoff_idle_phase() const { return metrics::builtin_phase_count + 6; }

  // =============================================================================================
  engine_type* engine_;
  Backend* backend_;
  Flow* flow_;
  worker_options options_;
  std::uint32_t max_requests_;
  std::uint32_t max_batch_;
  std::array<node_options, node_count> node_opts_{};

  // main thread
  std::vector<request_slot> slots_;
  std::unordered_map<request_id, std::uint32_t> by_id_;
  std::vector<typename decltype(by_id_)::node_type> spare_by_id_; // nodes of ended requests, for the next
  std::deque<submission> backlog_;
  std::array<std::deque<parked_row>, node_count> parked_;
  std::size_t rows_out_ = 0;        // rows of live requests out of the main thread (sum of outstanding)
  metrics::nanos stall_since_ = 0;  // break_stall: since when the stall condition has held
  static constexpr std::uint32_t no_index32 = ~std::uint32_t{0};
  std::uint32_t live_ = 0;

  // shared
  std::vector<std::atomic<std::uint32_t>> cancel_word_; // per request index: the cancelled generation
  std::atomic<std::uint64_t> epoch_{0};                 // bumped by the main thread when capacity may free
  detail::spsc_ring<ready_row> ready_ring_;             // main -> GPU
  detail::spsc_ring<done_item> done_ring_;              // GPU -> main
  detail::spsc_ring<std::uint32_t> recycle_ring_;       // main -> GPU
  detail::spsc_ring<std::uint32_t> to_plan_;            // GPU -> plan
  detail::spsc_ring<plan_ack> from_plan_;               // plan -> GPU
  std::vector<step_record> records_;
  std::atomic<bool> gpu_stop_{false}, plan_stop_{false};
  std::atomic<bool> abort_{false}; // a thread hit a fatal error (see fatal()): every loop stops
  std::atomic<bool> gpu_exited_{false};
  bool spin_for_stage_ = false;          // worker_options::stage_wait, resolved at construction
  std::atomic<bool> chain_busy_{false}; // GPU -> plan: a chain step is in flight (a stage request may come)
  std::atomic<bool> routing_{false}; // the main thread is in a pass that may push ready rows
  std::atomic<std::uint64_t> routed_{0}; // step records the main thread has routed (their ready rows pushed)
  std::uint64_t routed_count_ = 0;       // main thread's copy

  // GPU thread
  std::array<detail::row_queue<ready_row>, node_count> ready_;
  std::array<detail::row_queue<ready_row>, node_count> held_;
  std::array<std::uint32_t, node_count> batch_limit_{};
  std::vector<std::uint32_t> free_records_;
  std::vector<std::uint32_t> in_flight_;
  std::vector<ready_row> scratch_;
  std::uint32_t chain_in_flight_ = 0;
  bool side_in_flight_ = false;
  std::uint32_t staged_ = no_record;
  bool staged_acked_ = false;
  metrics::nanos handed_at_ = 0;    // GPU thread: when it handed staged_ to the plan thread
  detail::stage_arrival arrival_;   // GPU thread: how long the plan thread takes to answer
  bool stage_pending_ = false;            // the plan thread published a stage no chain step has planned against yet
  std::uint32_t predict_from_ = no_record; // the chain step just launched, while its successor may be predicted
  std::uint64_t handed_ = 0;              // step records pushed to the main thread
  std::uint64_t route_target_ = 0;        // handed_ when the last chain step landed
  metrics::nanos stage_wait_since_ = 0;   // stage_next has waited for the main thread's routing since
  // form_staged's scratch: per request index, its row's slot in the prediction (valid when its
  // stamp is current); per slot, the ready row found for it.
  std::vector<std::uint32_t> slot_of_, slot_stamp_;
  std::uint32_t stamp_ = 0;
  std::vector<ready_row> found_;
  std::vector<std::uint8_t> present_;
  std::uint8_t last_chain_node_ = 0, last_side_node_ = 0;
  std::array<detail::batch_window, node_count> windows_{}; // GPU thread: each node's min_batch wait
  std::optional<stream_type> lane_;
  lane_chooser chooser_;
  metrics::interval last_lane_{};
  metrics::nanos last_chain_end_ = 0;
  std::array<metrics::nanos, 2> landed_end_{}; // GPU thread: the latest landed step's end on the chain, the lane
  metrics::nanos settle_since_ = 0;
  metrics::nanos gpu_busy_end_ = 0;  // GPU thread: when its last loop pass that did something ended
  metrics::busy_tracker busy_;

  typename forward_tuple<typename Model::nodes>::type forwards_;
  stream_type chain_{};

  // metrics and trace
  metrics::recorder_layout layout_;
  metrics::thread_recorder main_rec_, gpu_rec_, plan_rec_;
  metrics::request_recorder requests_rec_;
  trace::session trace_;
  trace::buffer *main_buf_ = nullptr, *gpu_buf_ = nullptr, *plan_buf_ = nullptr;
  trace::track_id t_main_ = 0, t_gpu_ = 0, t_plan_ = 0, t_chain_ = 0, t_lane_ = 0;
  std::array<trace::name_id, node_count> node_name_id_{};
  trace::name_id n_rows_ = 0, n_preplan_ = 0, n_teardown_ = 0, n_cancel_ = 0, n_park_ = 0, n_refused_ = 0,
                 n_promoted_ = 0;
  worker_counters counters_;

  // client side
  std::mutex inbox_lock_;
  std::condition_variable idle_cv_;
  std::vector<submission> inbox_submits_;
  std::vector<std::pair<std::size_t, request_id>> inbox_cancels_; // (submits queued before it, id)
  std::vector<submission> taken_submits_;                         // main thread: take_inbox's side of the swap
  std::vector<std::pair<std::size_t, request_id>> taken_cancels_;
  std::vector<request_id> inbox_wakes_, taken_wakes_; // wake(): the client's side, the main thread's side
  std::unordered_set<request_id> ids_; // submitted and not ended
  std::vector<typename decltype(ids_)::node_type> spare_ids_;
  std::atomic<bool> inbox_flag_{false}, stopping_{false};
  std::uint64_t submitted_ = 0, ended_ = 0;
  std::string fatal_why_ = "the worker stopped on an error"; // set with abort_, under inbox_lock_
  std::exception_ptr main_error_;

  std::thread main_thread_, gpu_thread_, plan_thread_;
  bool started_ = false;
  std::atomic<bool> stopped_{false}; // stop() -> any thread's summary()
  // start()'s handshake with the threads (off the per-step path).
  std::mutex start_lock_;
  std::condition_variable start_cv_;
  int start_reported_ = 0, start_go_ = 0; // go: 1 run, 2 abort
  std::string start_error_;
  std::array<std::vector<int>, 3> thread_cpus_{};
  metrics::nanos t0_ = 0, t1_ = 0;
};

} // namespace mstar
