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
//
// The worker is a composition of parts, each entered one thread at a time: detail::client_inbox (the
// client's submits, cancels and wakes; the fatal error), detail::worker_admission (the main thread),
// detail::worker_launcher (the GPU thread, with detail::ready_queues), detail::worker_stager (the plan
// thread), detail::worker_trace (metrics and trace names), and detail::worker_shared (what the threads
// share, with the ordering that protects it).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mstar/detail/affinity.hpp"
#include "mstar/engine/engine.hpp"
#include "mstar/worker/admission.hpp"
#include "mstar/worker/client_inbox.hpp"
#include "mstar/worker/flow.hpp"
#include "mstar/worker/lane_policy.hpp"
#include "mstar/worker/launcher.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/options.hpp"
#include "mstar/worker/stager.hpp"
#include "mstar/worker/trace.hpp"
#include "mstar/worker/worker_shared.hpp"
#include "mstar/worker/worker_trace.hpp"

namespace mstar {

template <class Model, class Backend, class Flow>
class threaded_worker {
  // Checked here, not as constraints on the parameters, so that the compiler says what is missing
  // (nvcc says only "no instance of" for a constrained template). After a flow without its types, the
  // hooks are not checked (they would only repeat it).
  static_assert(device_backend<Backend>,
                "mstar::threaded_worker: the Backend is not an mstar::device_backend (mstar/backend/backend.hpp lists "
                "what one provides); use mstar::host_backend or mstar::cuda_backend.");
  static_assert(flow_types<Flow>,
                "mstar::threaded_worker: the flow lacks its types, or they do not fit: declare request_state "
                "(default-constructible, move-assignable), request_input (move-constructible) and payload (trivially "
                "copyable, default-constructible) in the flow.");
  // The hooks' sentences quote no code in backticks: nvcc prints a backtick as '?'.
  static_assert(!flow_types<Flow> || flow_start_hook<Flow>,
                "mstar::threaded_worker: the flow has no start hook; add the member "
                "void start(request_state&, mstar::request_id, const request_input&).");
  static_assert(!flow_types<Flow> || flow_ready_hook<Flow>,
                "mstar::threaded_worker: the flow has no ready hook; add the member "
                "bool ready(request_state&, std::uint8_t node, mstar::row&, payload&) (true when the request is ready "
                "for the node now).");
  static_assert(!flow_types<Flow> || flow_landed_hook<Flow>,
                "mstar::threaded_worker: the flow has no landed hook; add the member "
                "bool landed(request_state&, std::uint8_t node, const payload&) (true when the step produced an "
                "output for the client).");
  static_assert(!flow_types<Flow> || flow_finished_hook<Flow>,
                "mstar::threaded_worker: the flow has no finished hook; add the member "
                "bool finished(const request_state&) const.");
  static_assert(!flow_types<Flow> || flow_end_hook<Flow>,
                "mstar::threaded_worker: the flow has no end hook; add the member "
                "void end(request_state&, mstar::request_id, mstar::request_end) (or with a fourth std::string_view "
                "argument: why a request failed).");
  static_assert(!flow_types<Flow> || flow_batch_key_hook<Flow>,
                "mstar::threaded_worker: the flow has no batch_key hook; add the member "
                "std::uint32_t batch_key(std::uint8_t node, const payload&) const (read only for a node that batches "
                "per_key).");

  using shared_type = detail::worker_shared<Model, Backend, Flow>;
  using inbox_type = detail::client_inbox<typename Flow::request_input>;

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
      : shared_(eng, flow, std::move(options)), inbox_(shared_.max_requests),
        trace_(node_names(), shared_.options.trace_events), admission_(shared_, inbox_, trace_),
        launcher_(shared_, inbox_, trace_), stager_(shared_, inbox_, trace_) {}

  threaded_worker(const threaded_worker&) = delete;
  threaded_worker& operator=(const threaded_worker&) = delete;

  // The streams drain before the forward functions (and what they captured) go.
  ~threaded_worker() {
    try {
      stop();
    } catch (...) {
    }
    shared_.drain();
  }

  // The forward function of Node (before start()).
  template <class Node, class F>
  requires node_of<Model, Node>
  void forward(F&& f) {
    if (started_) throw std::logic_error("mstar::threaded_worker::forward: set every forward before start()");
    launcher_.template set_forward<Node>(forward_type<Node>(std::forward<F>(f)));
  }

  // Starts the three threads, each pinned first where worker_options::affinity says. Returns once all
  // three are pinned and running; when a pin fails (a CPU taken offline since construction), none
  // runs and the error names the thread.
  void start() {
    if (started_) throw std::logic_error("mstar::threaded_worker::start: already started");
    launcher_.check_forwards(std::make_index_sequence<node_count>{});
    t0_ = metrics::now_ns();
    launcher_.start_busy(t0_);
    const auto& a = shared_.options.affinity;
    plan_thread_ = std::thread([this, cpu = a.plan] {
      if (thread_begins(2, cpu)) stager_.loop();
    });
    gpu_thread_ = std::thread([this, cpu = a.gpu] {
      if (thread_begins(1, cpu)) launcher_.loop();
    });
    main_thread_ = std::thread([this, cpu = a.main] {
      if (thread_begins(0, cpu)) admission_.loop();
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
  bool spins_for_stage() const noexcept { return shared_.spin_for_stage; }

  // The CPUs a worker thread (0 main, 1 GPU, 2 plan) may run on, as read by that thread once it was
  // pinned (every CPU of the process when unpinned). Empty before start().
  const std::vector<int>& thread_cpus(int thread) const { return thread_cpus_.at(static_cast<std::size_t>(thread)); }

  // Client side (any thread). False when `id` is already live in this worker.
  bool submit(request_id id, request_input input) { return inbox_.submit(id, std::move(input)); }
  void cancel(request_id id) { inbox_.cancel(id); }
  // Asks the flow's ready hook again, for each node the request has no row queued, out or parked
  // for: something outside this worker (another worker's step, through an edge) changed what the
  // request can run. Ignored for a request that is not live (still queued: its start asks anyway).
  void wake(request_id id) { inbox_.wake(id); }
  // Blocks until every submitted request has ended.
  void wait_idle() { inbox_.wait_idle(); }
  // Cancels what is still live, tears it down, and joins the threads.
  void stop() {
    if (!started_ || stopped_.load(std::memory_order_relaxed)) return;
    inbox_.request_stop();
    main_thread_.join();
    gpu_thread_.join();
    plan_thread_.join();
    t1_ = metrics::now_ns();
    stopped_.store(true, std::memory_order_release); // summary() on another thread reads t1_ and busy after it
    inbox_.rethrow_fatal();
  }

  // ---- results ----
  const worker_counters& counters() const noexcept { return shared_.counters; }
  const lane_chooser& lane_decisions() const noexcept { return launcher_.chooser(); }
  // Per-phase host time per node and thread, request latencies and the GPU busy fraction. After stop()
  // (or from any thread at any time, as a live approximation of the histograms; the busy fraction
  // only after stop()).
  metrics::summary summary() const {
    double busy = -1.0;
    if (stopped_.load(std::memory_order_acquire)) {
      const auto end = t1_;
      busy = launcher_.busy().fraction(end);
    }
    return metrics::summarize({&trace_.main_rec, &trace_.gpu_rec, &trace_.plan_rec}, &trace_.requests, busy);
  }
  const metrics::thread_recorder& recorder(int thread) const { return trace_.recorder(thread); }
  const metrics::request_recorder& request_metrics() const noexcept { return trace_.requests; }
  const trace::session& trace_session() const noexcept { return trace_.session; }
  void write_trace(const std::string& path) const { trace::write_json(path, trace_.session); }
  engine_type& engine() noexcept { return *shared_.engine; }
  stream_type chain_stream() const noexcept { return shared_.chain; }
  // The lane's stream, once the first side step on the lane created it (read after stop()).
  std::optional<stream_type> lane_stream() const { return shared_.lane; }
  // The GPU busy time so far, readable from any thread while the worker runs (a server's /metrics):
  // the union of the landed steps' intervals (as summary()'s fraction counts them), the latest
  // landing, and start()'s time. Busy fraction since start: busy / (now - t0).
  metrics::busy_tracker::live_reading busy_so_far() const noexcept { return launcher_.busy().live(); }
  // The steps' busy intervals (read after stop()): the latest, up to worker_options::busy_intervals
  // (the busy fraction covers every step).
  std::span<const metrics::interval> busy_intervals() const { return launcher_.busy().kept(); }

  template <class Node>
  static constexpr std::uint8_t node_index = Model::template node_index<Node>;

private:
  static std::vector<std::string_view> node_names() {
    std::vector<std::string_view> v;
    for (const auto& n : Model::descriptor.nodes)
      v.emplace_back(n.name);
    return v;
  }

  // Each thread's first act: pin itself, report the CPU set it got, and wait for start()'s word (false:
  // another thread failed to pin, so none runs).
  bool thread_begins(int thread, int cpu) {
    static constexpr const char* names[] = {"the main thread", "the GPU thread", "the plan thread"};
    static constexpr const char* roles[] = {"main", "GPU", "plan"};
    nvtx::name_this_thread("mstar " + std::string(Model::descriptor.name) + " " + roles[thread]);
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

  // Declared in construction order: the parts hold references to the shared state, the inbox and the
  // trace; the shared state goes last (it drains the streams and destroys the records' events).
  shared_type shared_;
  inbox_type inbox_;
  detail::worker_trace trace_;
  detail::worker_admission<Model, Backend, Flow> admission_;
  detail::worker_launcher<Model, Backend, Flow> launcher_;
  detail::worker_stager<Model, Backend, Flow> stager_;

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
