// The worker's GPU thread: the launcher. It takes ready rows from the main thread into per-node
// queues (detail::ready_queues), forms chain steps (round robin over chain nodes, a node's min_batch
// respected) and side steps, launches each (admit, plan or promote, forward, commit) on the chain or
// the lane stream, sends refusals to the one admit-failure handler, hands the next chain step to the
// plan thread while the current one runs (a prediction from the step just launched, or rows ready
// now), polls steps' completion events and hands landed steps to the main thread. Its state (queues,
// free and in-flight records, the stage's progress, the lane chooser, the busy intervals, the forward
// functions) is its own.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mstar/detail/affinity.hpp"
#include "mstar/detail/stage_watch.hpp"
#include "mstar/detail/type_list.hpp"
#include "mstar/worker/client_inbox.hpp"
#include "mstar/worker/flow.hpp"
#include "mstar/worker/lane_policy.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/ready_queues.hpp"
#include "mstar/worker/worker_shared.hpp"
#include "mstar/worker/worker_trace.hpp"

namespace mstar::detail {

template <class Model, class Backend, class Flow>
class worker_launcher {
public:
  using shared_type = worker_shared<Model, Backend, Flow>;
  using engine_type = typename shared_type::engine_type;
  using stream_type = typename shared_type::stream_type;
  using payload_type = typename Flow::payload;
  using inbox_type = client_inbox<typename Flow::request_input>;
  using ready_row = typename shared_type::ready_row;
  using step_record = typename shared_type::step_record;
  using record_status = typename shared_type::record_status;
  static constexpr std::size_t node_count = shared_type::node_count;
  static constexpr std::uint32_t no_record = shared_type::no_record;
  template <class Node>
  using context_type = worker_step_context<Model, Backend, Node, payload_type>;
  template <class Node>
  using forward_type = std::function<void(const context_type<Node>&)>;

  worker_launcher(shared_type& shared, inbox_type& inbox, worker_trace& trace)
      : sh_(shared), inbox_(inbox), tr_(trace),
        queues_(shared.node_opts, shared.max_requests, shared.max_batch, shared.engine->options().max_tokens),
        chooser_(shared.options.lane_policy) {
    // Every container this thread fills per step holds its bound from here, so that no step
    // allocates (tests/worker/steady_allocs.cpp): step records free or in flight.
    free_records_.reserve(sh_.options.step_records);
    in_flight_.reserve(sh_.options.step_records);
    for (std::uint32_t i = 0; i < sh_.options.step_records; ++i)
      free_records_.push_back(i);
    busy_ = metrics::busy_tracker(sh_.options.busy_intervals);
  }

  // ---- before start() (the client's thread) ----
  template <class Node>
  void set_forward(forward_type<Node> f) {
    std::get<Model::template node_index<Node>>(forwards_) = std::move(f);
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
  void start_busy(metrics::nanos t0) { busy_.start(t0); }

  // ---- read after stop() (or, for the chooser's relaxed counters, any time) ----
  const lane_chooser& chooser() const noexcept { return chooser_; }
  const metrics::busy_tracker& busy() const noexcept { return busy_; }

  // The GPU thread's loop, until the main thread has ended and nothing is in flight, or a fatal error.
  void loop() {
    try {
      passes();
    } catch (...) {
      inbox_.fatal(std::current_exception());
    }
    sh_.plan_stop.store(true, std::memory_order_release);
    sh_.plan_bell.ring();
    sh_.gpu_exited.store(true, std::memory_order_release);
  }

  // ready_queues' environment: a row's request cancelled, a dropped row back to the main thread, a
  // row's batch key, whether a row may not wait for its node's batch (where the flow says), a pass over a
  // node waiting for its batch.
  bool cancelled(const row& r) const { return sh_.cancelled(r); }
  void drop(const ready_row& rr) {
    sh_.counters.dropped_rows.fetch_add(1, std::memory_order_relaxed);
    sh_.done_ring.push_wait(typename shared_type::done_item{no_record, rr.node, rr.r});
  }
  std::uint32_t batch_key(std::uint8_t n, const payload_type& p) const { return sh_.flow->batch_key(n, p); }
  bool urgent(std::uint8_t n, const payload_type& p) const requires flow_urgent_hook<Flow> {
    return sh_.flow->urgent(n, p);
  }
  void batch_waited() { sh_.counters.batch_waits.fetch_add(1, std::memory_order_relaxed); }

private:
  template <class List>
  struct forward_tuple;
  template <class... N>
  struct forward_tuple<type_list<N...>> {
    using type = std::tuple<forward_type<N>...>;
  };
  static constexpr bool is_side(std::uint8_t n) { return shared_type::is_side(n); }

  void passes() {
    backoff wait(sh_.options.gpu_backoff);
    std::uint64_t seen_epoch = sh_.epoch.load(std::memory_order_acquire);
    for (;;) {
      if (inbox_.aborted()) return;
      bool did = drain_ready();
      std::uint32_t back;
      while (sh_.recycle_ring.try_pop(back))
        free_records_.push_back(back);
      const auto e = sh_.epoch.load(std::memory_order_acquire);
      if (e != seen_epoch) {
        seen_epoch = e;
        queues_.release_held();
        did = true;
      }
      did |= take_ack();
      did |= poll_landed();
      did |= launch_side();
      did |= launch_chain();
      // Held rows with nothing in flight: no landing will release them, so retry now (a refusal that
      // persists then retries each pass until a teardown frees capacity).
      if (!did && in_flight_.empty() && queues_.any_held()) {
        queues_.release_held();
        did = true;
      }
      if (!did && sh_.gpu_stop.load(std::memory_order_acquire) && in_flight_.empty() && staged_ == no_record) break;
      if (did) {
        busy_end_ = metrics::now_ns();
        wait.reset();
      } else if (sh_.spin_for_stage && staged_ != no_record && !staged_acked_) {
        // The plan thread is staging: its answer comes within microseconds.
        if (watch_for_ack())
          wait.reset(); // the answer is in: the wait for the landing starts afresh
        else
          wait.pause_expecting();
      } else if (in_flight_.empty() && staged_ == no_record && sh_.idle.load(std::memory_order_relaxed))
        // Nothing in flight, no request live: a new one comes through the main thread, which rings.
        wait.pause_idle(sh_.gpu_bell, [&] {
          return sh_.idle.load(std::memory_order_acquire) && !sh_.gpu_stop.load(std::memory_order_acquire) &&
                 !inbox_.aborted();
        });
      else
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
    while (sh_.ready_ring.try_pop(rr)) {
      queues_.arrive(rr, now);
      did = true;
    }
    return did;
  }

  std::uint32_t take_record() {
    if (free_records_.empty()) return no_record;
    const auto i = free_records_.back();
    free_records_.pop_back();
    return i;
  }

  bool form(std::uint8_t n, std::uint32_t rec_index) { return queues_.form(n, is_side(n), sh_.records[rec_index], *this); }

  // ---- the chain ----
  // The plan thread's answer, taken as soon as it arrives (the handoff latency is measured here).
  bool take_ack() {
    if (staged_ == no_record || staged_acked_) return false;
    typename shared_type::plan_ack ack;
    if (!sh_.from_plan.try_pop(ack)) return false;
    const auto latency = metrics::now_ns() - ack.pushed;
    if (sh_.options.watch_expected) arrival_.learn(ack.pushed - handed_at_);
    tr_.gpu_rec.record(sh_.records[ack.record].node, worker_trace::handoff, latency);
    // The same latency again when the GPU thread had finished its last piece of work before the push
    // (it was polling): the handoff itself, without the wait behind the GPU thread's own work (a side
    // step it was launching, a landing it was committing).
    if (ack.pushed >= busy_end_) tr_.gpu_rec.record(sh_.records[ack.record].node, worker_trace::handoff_idle, latency);
    staged_acked_ = true;
    if (ack.staged) {
      stage_pending_ = true;
      sh_.counters.staged.fetch_add(1, std::memory_order_relaxed);
      if (sh_.records[ack.record].predicted > 0) sh_.counters.speculative_stages.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  // Looks only at the plan thread's ring for up to worker_options::stage_watch; true once the answer
  // is taken.
  bool watch_for_ack() {
    if (sh_.options.stage_watch.count() <= 0) return false;
    const metrics::nanos watch = sh_.options.stage_watch.count(), now = metrics::now_ns();
    const auto until = sh_.options.watch_expected ? arrival_.watch_until(now, handed_at_, watch) : now + watch;
    for (std::uint32_t i = 1;; ++i) {
      if (take_ack()) return true;
      cpu_relax();
      if ((i & 15u) == 0 && metrics::now_ns() >= until) return false;
    }
  }

  // The main thread has routed every chain step that landed (or the worker is stopping).
  bool chain_routed() const {
    return sh_.routed.load(std::memory_order_acquire) >= route_target_ || sh_.gpu_stop.load(std::memory_order_acquire);
  }

  // A batch is formed once the main thread has routed the last chain step that landed (so its rows'
  // next rows are all queued) and is between routing passes, or the node's batch is full, or after
  // 20 us (a main thread slow to get a core).
  bool batch_settled(std::uint8_t n) {
    const bool routed = chain_routed();
    if (routed) drain_ready();
    if (queues_.ready(n).size() >= queues_.batch_limit(n) || (routed && !sh_.routing.load(std::memory_order_acquire))) {
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
    if (chain_in_flight_ >= sh_.options.max_chain_in_flight) return stage_next();
    std::uint32_t rec_index = no_record;
    metrics::nanos pass_begin = 0;
    bool did = false;
    if (staged_ != no_record) {
      if (!staged_acked_) return false; // the plan thread is still reading its rows
      const auto& st = sh_.records[staged_];
      // Predicted rows come from the chain step that landed last: wait until it is routed.
      if (st.speculative && st.predicted > 0 && !chain_routed()) return false;
      rec_index = std::exchange(staged_, no_record);
      if (sh_.records[rec_index].speculative) drain_ready(); // not part of the pass: the main thread's handoff
      pass_begin = metrics::now_ns();
      if (sh_.records[rec_index].speculative) {
        if (!queues_.form_staged(sh_.records[rec_index], *this)) { // nothing of it is ready: no chain step will take the stage
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
    const std::uint8_t node = sh_.records[rec_index].node;
    predict_from_ = no_record;
    if (launch(rec_index, sh_.chain, false)) {
      ++chain_in_flight_;
      if (sh_.options.preplan) sh_.chain_busy.store(true, std::memory_order_relaxed);
      if (sh_.options.predict_next && sh_.options.max_chain_in_flight == 1 &&
          sh_.node_opts[node].batch == batching::every_key)
        predict_from_ = rec_index;
    }
    if (chain_in_flight_ >= sh_.options.max_chain_in_flight) {
      const auto t = metrics::now_ns();
      if (stage_next()) tr_.gpu_rec.record(node, worker_trace::stage, metrics::now_ns() - t);
    }
    tr_.gpu_rec.record(node, worker_trace::pass, metrics::now_ns() - pass_begin);
    return true;
  }

  // While the chain is full, the next chain step is handed to the plan thread, which stages it while
  // the device runs the current one; nothing else launches on the chain before it. Round robin picks
  // its node among those with ready rows. When that is no node, or the node just launched, and the
  // step just launched may be predicted from, the step is a prediction (ready_queues::predict):
  // formed again from the ready queue at launch (form_staged), it promotes when it came out as
  // predicted. Otherwise its rows are taken from the ready queue now, and it promotes.
  bool stage_next() {
    if (!sh_.options.preplan || staged_ != no_record) return false;
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
        ((n == no_index && !queues_.window(sh_.records[predict_from_].node).waits()) ||
         n == sh_.records[predict_from_].node)) {
      const auto from = std::exchange(predict_from_, no_record); // one prediction per launch
      const auto next = take_record();
      if (next == no_record) return false;
      if (!queues_.predict(sh_.records[from], sh_.records[next], *this)) {
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
    sh_.to_plan.push_wait(next);
    return true;
  }

  // Drops the published stage that no chain step took (and counts it).
  void drop_stage() {
    stage_pending_ = false;
    sh_.counters.stage_drops.fetch_add(1, std::memory_order_relaxed);
    auto& stage = sh_.engine->runner().stage();
    if (!stage.staged()) return; // a chain step's admit dropped it already
    shared_type::with_node(stage.node(), [&]<class Node>() {
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
        if (is_side(n) || queues_.ready(n).empty()) continue;
        if (!queues_.batch_due(n, now, *this)) {
          if (waiting == no_index && !queues_.ready(n).empty()) waiting = n;
          continue;
        }
        last_chain_node_ = n;
        return n;
      }
      if (waiting == no_index || chain_in_flight_ > 0) return no_index;
      if (!chain_routed() || sh_.routing.load(std::memory_order_acquire)) return no_index;
      // Routing has settled: rows it pushed since this pick began may make another node ready.
      if (round == 0 && drain_ready()) continue;
      last_chain_node_ = waiting; // nothing else to run: the chain does not idle for a batch
      return waiting;
    }
  }

  // ---- the side lane ----
  // Whether the chain has work launched or about to launch: a step in flight or staged, a landing the
  // main thread has not routed yet, or a chain node's ready rows (drained first). A side node with a
  // min_batch waits for its batch only then, so a wait never idles the device.
  bool chain_has_work() {
    if (chain_in_flight_ > 0 || staged_ != no_record) return true;
    if (!chain_routed() || sh_.routing.load(std::memory_order_acquire)) return true;
    drain_ready();
    for (std::uint8_t n = 0; n < node_count; ++n)
      if (!is_side(n) && !queues_.ready(n).empty()) return true;
    return false;
  }

  bool launch_side() {
    if (side_in_flight_) return false;
    metrics::nanos now = 0;
    for (std::size_t k = 1; k <= node_count; ++k) {
      const auto n = static_cast<std::uint8_t>((last_side_node_ + k) % node_count);
      if (!is_side(n) || queues_.ready(n).empty()) continue;
      // Batching across time (node_options::min_batch): passed over while the chain has work and the
      // batch is not due; with the chain idle it runs with what it has.
      if (queues_.window(n).waits() && chain_has_work() && !queues_.batch_due(n, now, *this)) continue;
      if (queues_.ready(n).empty()) continue; // batch_due handed back its cancelled rows
      last_side_node_ = n;
      const auto rec_index = take_record();
      if (rec_index == no_record) return false;
      if (!form(n, rec_index)) {
        free_records_.push_back(rec_index);
        continue;
      }
      bool on_lane = sh_.options.lane == lane_mode::on;
      if (sh_.options.lane == lane_mode::automatic) on_lane = chooser_.decide();
      if (on_lane && !sh_.lane) {
        // Created on first launch, with its priority, and registered with the engine so that the side
        // keys' teardown runs on it from now on.
        sh_.lane = sh_.backend->create_stream(sh_.options.lane_priority);
        for (std::uint8_t m = 0; m < node_count; ++m)
          if (is_side(m)) sh_.engine->set_side_stream(m, *sh_.lane);
        sh_.counters.lane_created.fetch_add(1, std::memory_order_relaxed);
      }
      const auto begin = metrics::now_ns();
      if (launch(rec_index, on_lane ? *sh_.lane : sh_.chain, on_lane)) side_in_flight_ = true;
      if (on_lane) chooser_.side_host(double(metrics::now_ns() - begin));
      return true;
    }
    return false;
  }

  // admit -> plan (or promote) -> forward -> commit, for one record. False when nothing was enqueued.
  bool launch(std::uint32_t rec_index, stream_type stream, bool on_lane) {
    auto& rec = sh_.records[rec_index];
    const nvtx::range range(tr_.nvtx_domain, tr_.nvtx_launch[rec.node]);
    rec.stream = stream;
    rec.on_lane = on_lane;
    rec.status = record_status::ok;
    rec.error.clear();
    rec.enqueued = false;
    rec.device_begin.store(0, std::memory_order_relaxed);
    rec.device_end.store(0, std::memory_order_relaxed);
    bool enqueued = false;
    shared_type::with_node(rec.node, [&]<class Node>() { enqueued = launch_as<Node>(rec_index, stream); });
    return enqueued;
  }

  template <class Node>
  bool launch_as(std::uint32_t rec_index, stream_type stream) {
    auto& rec = sh_.records[rec_index];
    auto& runner = sh_.engine->runner();
    using S = step_for<Model, Node>;
    const S step{std::span<const row>(rec.rows.data(), rec.count), sh_.bucket_of(rec.node, rec.count)};
    const auto n = rec.node;
    const auto t0 = metrics::now_ns();
    auto a = runner.admit(step);
    const auto t1 = metrics::now_ns();
    tr_.gpu_rec.record(n, metrics::phase::admit, t1 - t0);
    if (!a) {
      if (a.refused()) {
        refused(rec_index, a);
      } else {
        end_now(rec_index, a.message());
      }
      return false;
    }
    queues_.admitted(n);
    auto p = runner.plan(step, stream);
    const auto t2 = metrics::now_ns();
    tr_.gpu_rec.record(n, p.promoted ? metrics::phase::promote : metrics::phase::plan, t2 - t1);
    if (!p) {
      end_now(rec_index, p.message());
      return false;
    }
    if (p.promoted) sh_.counters.promoted.fetch_add(1, std::memory_order_relaxed);
    if constexpr (!S::beside_stage) {
      // The first chain step to plan after a stage was published took it or dropped it.
      if (std::exchange(stage_pending_, false) && !p.promoted) {
        sh_.counters.stage_drops.fetch_add(1, std::memory_order_relaxed);
        tr_.gpu_rec.record(n, worker_trace::stage_drop, t2 - t0);
      }
    }
    // From here to the commit the step is open in the runner (a teardown waits for it to settle): a
    // backend call that throws in between (a fatal error) abandons it on the way out.
    bool open = true;
    metrics::nanos t3 = 0;
    try {
      stamp(rec.device_begin, stream);
      try {
        const context_type<Node> ctx(sh_.engine->resources(), stream, engine_type::runner_type::view(step),
                                     std::span<const payload_type>(rec.payloads.data(), rec.count), *sh_.backend);
        const nvtx::range forward(tr_.nvtx_domain, tr_.nvtx_forward[n]);
        std::get<Model::template node_index<Node>>(forwards_)(ctx);
      } catch (...) {
        open = false;
        runner.abandon(step);
        rec.status = record_status::failed;
        rec.error = what_of(std::current_exception());
      }
      stamp(rec.device_end, stream);
      sh_.backend->record(rec.done, stream);
      t3 = metrics::now_ns();
      tr_.gpu_rec.record(n, metrics::phase::launch, t3 - t2);
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
    tr_.gpu_rec.record(n, metrics::phase::commit, t4 - t3);
    tr_.gpu_buf->complete(tr_.t_gpu, tr_.node_name[n], t0, t4, trace::arg{tr_.rows, rec.count},
                          trace::arg{tr_.promoted, p.promoted ? 1 : 0});
    if (rec.status != record_status::ok) sh_.counters.failed_steps.fetch_add(1, std::memory_order_relaxed);
    (rec.side ? sh_.counters.side_steps : sh_.counters.chain_steps).fetch_add(1, std::memory_order_relaxed);
    if (rec.on_lane) sh_.counters.side_steps_on_lane.fetch_add(1, std::memory_order_relaxed);
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
      sh_.backend->enqueue(stream, [p = &at] { p->store(metrics::now_ns(), std::memory_order_relaxed); });
    }
  }

  // A step that failed before enqueueing anything: its rows go back now, failed.
  void end_now(std::uint32_t rec_index, std::string why) {
    auto& rec = sh_.records[rec_index];
    rec.status = record_status::failed;
    rec.error = std::move(why);
    sh_.counters.failed_steps.fetch_add(1, std::memory_order_relaxed);
    sh_.done_ring.push_wait(typename shared_type::done_item{rec_index, rec.node, {}});
    ++handed_;
  }

  // The one admit-failure handler, for chain and side steps: the rows change queues, nothing is routed.
  void refused(std::uint32_t rec_index, const step_outcome& why) {
    auto& rec = sh_.records[rec_index];
    const auto n = rec.node;
    sh_.counters.refusals.fetch_add(1, std::memory_order_relaxed);
    if (rec.side) sh_.counters.side_refusals.fetch_add(1, std::memory_order_relaxed);
    tr_.gpu_buf->instant(tr_.t_gpu, tr_.refused, metrics::now_ns(), trace::arg{tr_.rows, rec.count});
    admit_action action = sh_.node_opts[n].on_refusal;
    if (sh_.options.on_refusal) {
      refusal_event ev{n, Model::descriptor.nodes[n].name, rec.side, rec.count,
                       why.why ? why.why->resource : std::string_view{},
                       why.why ? why.why->message() : std::string_view{}};
      try {
        action = sh_.options.on_refusal(ev);
      } catch (...) { // the handler's fault concerns this step's rows: they fail, the worker goes on
        sh_.counters.refusal_handler_errors.fetch_add(1, std::memory_order_relaxed);
        end_now(rec_index, shared_type::node_name(n) +
                               " step refused, and the admit-failure handler (worker_options::on_refusal) threw: " +
                               what_of(std::current_exception()));
        return;
      }
    }
    queues_.refused(rec, action);
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
      auto& rec = sh_.records[rec_index];
      if (running[rec.on_lane ? 1 : 0]) {
        ++i;
        continue;
      }
      bool done = false;
      try {
        done = sh_.backend->query(rec.done);
      } catch (...) {
        stream_failed(rec, what_of(std::current_exception()));
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
      sh_.done_ring.push_wait(typename shared_type::done_item{rec_index, rec.node, {}});
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
      sh_.backend->synchronize(rec.done);
    } catch (...) {
    }
    if (rec.status == record_status::ok) sh_.counters.failed_steps.fetch_add(1, std::memory_order_relaxed);
    if (rec.status == record_status::ok || rec.error.empty()) rec.error = "its stream work raised: " + std::string(what);
    rec.status = record_status::failed;
  }

  void landed(step_record& rec, metrics::nanos now) {
    const nvtx::range range(tr_.nvtx_domain, tr_.nvtx_land[rec.node]);
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
    tr_.gpu_buf->complete(rec.on_lane ? tr_.t_lane : tr_.t_chain, tr_.node_name[rec.node], shown, e,
                          trace::arg{tr_.rows, rec.count});
    const double d = double(e - b);
    if (rec.side) {
      side_in_flight_ = false;
      chooser_.side_step(d, rec.on_lane); // where it ran, whatever the lane mode
      if (rec.on_lane) last_lane_ = {b, e};
    } else {
      if (--chain_in_flight_ == 0) sh_.chain_busy.store(false, std::memory_order_relaxed);
      // Beside: a lane step ran during this chain step (the one in flight counts once it started).
      bool beside = last_lane_.end > b && last_lane_.begin < e;
      for (auto j : in_flight_) {
        const auto& o = sh_.records[j];
        if (o.on_lane) {
          const auto ob = o.device_begin.load(std::memory_order_relaxed);
          if (ob != 0 && ob < e) beside = true;
        }
      }
      // Compared within a kind: the node and its bucket (without buckets, the row count's power of 2).
      const std::uint32_t bucket = sh_.bucket_of(rec.node, rec.count);
      chooser_.chain_step(d, beside, (std::uint64_t(rec.node) << 32) | (bucket != 0 ? bucket : std::bit_ceil(rec.count)));
      if (last_chain_end_ != 0) chooser_.chain_gap(double(b - last_chain_end_), d);
      last_chain_end_ = e;
    }
    queues_.release_held();
  }

  shared_type& sh_;
  inbox_type& inbox_;
  worker_trace& tr_;

  ready_queues<payload_type, node_count> queues_;
  std::vector<std::uint32_t> free_records_;
  std::vector<std::uint32_t> in_flight_;
  std::uint32_t chain_in_flight_ = 0;
  bool side_in_flight_ = false;
  // The stage: the record handed to the plan thread, whether its answer came, and whether it published
  // a stage no chain step has planned against yet.
  std::uint32_t staged_ = no_record;
  bool staged_acked_ = false;
  bool stage_pending_ = false;
  metrics::nanos handed_at_ = 0;           // when staged_ went to the plan thread
  stage_arrival arrival_;                  // how long the plan thread takes to answer
  std::uint32_t predict_from_ = no_record; // the chain step just launched, while its successor may be predicted
  std::uint64_t handed_ = 0;               // step records pushed to the main thread
  std::uint64_t route_target_ = 0;         // handed_ when the last chain step landed
  metrics::nanos stage_wait_since_ = 0;    // stage_next has waited for the main thread's routing since
  metrics::nanos settle_since_ = 0;        // batch_settled has waited since
  std::uint8_t last_chain_node_ = 0, last_side_node_ = 0;
  lane_chooser chooser_;
  metrics::interval last_lane_{};
  metrics::nanos last_chain_end_ = 0;
  std::array<metrics::nanos, 2> landed_end_{}; // the latest landed step's end on the chain, the lane
  metrics::nanos busy_end_ = 0;                // when the last loop pass that did something ended
  metrics::busy_tracker busy_;
  typename forward_tuple<typename Model::nodes>::type forwards_;
};

} // namespace mstar::detail
