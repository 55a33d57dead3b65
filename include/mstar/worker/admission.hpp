// The worker's main thread: admission and teardown. It takes the client's submits and cancels in
// order, gives each request an index (the backlog waits for one), asks the flow's hooks what the
// request is ready for, reserves capacity at readiness (a row whose pool or KV cache is full parks
// here), routes landed steps back to the flow, tears requests down (engine::remove_request) and
// retries the parked rows, and breaks a stall (every live request parked, none in flight) by failing
// the youngest. Its state (request slots, backlog, parked rows) is its own; it talks to the GPU thread
// through worker_shared's rings and words.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mstar/detail/affinity.hpp"
#include "mstar/worker/client_inbox.hpp"
#include "mstar/worker/flow.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/worker_shared.hpp"
#include "mstar/worker/worker_trace.hpp"

namespace mstar::detail {

template <class Model, class Backend, class Flow>
class worker_admission {
public:
  using shared_type = worker_shared<Model, Backend, Flow>;
  using payload_type = typename Flow::payload;
  using request_input = typename Flow::request_input;
  using request_state = typename Flow::request_state;
  using inbox_type = client_inbox<request_input>;
  using submission = typename inbox_type::submission_type;
  using stream_type = typename shared_type::stream_type;
  static constexpr std::size_t node_count = shared_type::node_count;

  worker_admission(shared_type& shared, inbox_type& inbox, worker_trace& trace)
      : sh_(shared), inbox_(inbox), tr_(trace), slots_(shared.max_requests) {
    // Tables sized for the live requests, their nodes reused (insert_reusing).
    by_id_.reserve(sh_.max_requests);
    spare_by_id_.reserve(sh_.max_requests);
  }

  // The main thread's loop, until stop() and every request ended, or a fatal error.
  void loop() {
    try {
      backoff wait(sh_.options.main_backoff);
      for (;;) {
        if (inbox_.aborted()) break;
        bool did = false;
        sh_.routing.store(true, std::memory_order_release);
        if (inbox_.flag()) did |= take_inbox();
        did |= drain_done();
        did |= admit_backlog();
        if (!did) did = break_stall();
        sh_.routing.store(false, std::memory_order_release);
        // A submit that came after this pass looked at the inbox is taken (and ended) first.
        if (inbox_.stopping() && live_ == 0 && backlog_.empty() && !inbox_.flag()) break;
        // With no request live nor waiting, every thread may sleep longer (backoff::pause_idle); requests
        // after such an idle ring the GPU and plan threads awake (their sleeps look at `idle` first).
        const bool idle = live_ == 0 && backlog_.empty() && !inbox_.flag();
        if (idle != sh_.idle.load(std::memory_order_relaxed)) {
          sh_.idle.store(idle, std::memory_order_release);
          if (!idle) {
            sh_.gpu_bell.ring();
            sh_.plan_bell.ring();
          }
        }
        if (did)
          wait.reset();
        else if (idle)
          wait.pause_idle(inbox_.bell(), [&] { return !inbox_.flag() && !inbox_.aborted(); });
        else
          wait.pause();
      }
    } catch (...) {
      inbox_.fatal(std::current_exception());
    }
    if (inbox_.aborted()) end_all_failed();
    sh_.gpu_stop.store(true, std::memory_order_release);
    sh_.gpu_bell.ring();
  }

private:
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
  static constexpr std::uint32_t no_index32 = ~std::uint32_t{0};
  static constexpr bool is_side(std::uint8_t n) { return shared_type::is_side(n); }

  // After a fatal error (on any thread): every request still queued or live ends failed with it as the
  // reason, its resources torn down once the GPU thread has stopped and the streams are drained (a
  // teardown that throws quarantines the index, as ever).
  void end_all_failed() noexcept {
    // The GPU thread launches nothing more; the work it launched may still read and write the live
    // requests' buffers, so it runs out before their end hooks.
    while (!sh_.gpu_exited.load(std::memory_order_acquire))
      std::this_thread::yield();
    const std::optional<stream_type> streams[] = {sh_.chain, sh_.lane}; // an array: nvcc 13 rejects the braced list
    for (const auto& stream : streams)
      if (stream) {
        try {
          sh_.backend->synchronize(*stream);
        } catch (...) {
        }
      }
    const std::string_view why = inbox_.fatal_why(); // written before the abort was seen
    std::vector<submission> inbox;
    inbox_.take_all(inbox);
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
          sh_.engine->remove_request(s.ref, sh_.chain);
        } catch (...) {
          sh_.counters.teardown_errors.fetch_add(1, std::memory_order_relaxed);
        }
        try {
          finish_request(s.state, s.id, s.timing, request_end::failed, why);
        } catch (...) {
        }
        inbox_.ended(s.id);
      }
    by_id_.clear();
    live_ = 0;
  }

  // Submits and cancels in the order the client made them: a cancel applies to the submissions made
  // before it only (a cancel of an ended id followed by a submit reusing it leaves the new request).
  bool take_inbox() {
    auto& subs = taken_submits_;
    auto& cancels = taken_cancels_;
    subs.clear(); // what the last take moved out of (or left, if it threw)
    cancels.clear();
    const bool stopping = inbox_.take(subs, cancels, taken_wakes_);
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
  // A request ends: the flow's end hook, then its metrics (the caller then calls inbox_.ended()). An end
  // hook that throws concerns that request alone: its resources are torn down already, so the request
  // is counted failed and the worker goes on (as a fatal error it would strand every other request).
  void finish_request(request_state& state, request_id id, metrics::request_timing& t, request_end how,
                      std::string_view why, metrics::nanos at = metrics::now_ns()) {
    try {
      flow_end(*sh_.flow, state, id, how, why);
    } catch (...) {
      how = request_end::failed;
      sh_.counters.end_hook_errors.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "mstar::threaded_worker: the flow's end hook threw for request %llu: %s\n",
                   static_cast<unsigned long long>(id), what_of(std::current_exception()).c_str());
    }
    tr_.requests.on_finish(t, static_cast<metrics::request_outcome>(how), at);
  }
  // A request that never got an index ends (on a fresh state).
  void end_unstarted(const submission& sub, request_end how, std::string_view why) {
    request_state s{};
    metrics::request_timing t{};
    metrics::request_recorder::on_submit(t, sub.at);
    finish_request(s, sub.id, t, how, why);
    inbox_.ended(sub.id);
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
        tr_.main_buf->instant(tr_.t_main, tr_.cancel, metrics::now_ns());
        const auto sub = std::move(*it);
        backlog_.erase(it);
        sh_.counters.cancel_backlog.fetch_add(1, std::memory_order_relaxed);
        end_unstarted(sub, request_end::cancelled, {});
        return;
      }
    auto found = by_id_.find(id);
    if (found == by_id_.end()) { // ended already (or never submitted): nothing to do
      sh_.counters.cancel_ended.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    auto& s = slots_[found->second];
    if (s.cancelled) return;
    if (s.failed) { // it fails already (its rows come back first): it ends failed, with its reason
      sh_.counters.cancel_ended.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    {
      bool parked = false, side = false;
      for (std::uint8_t n = 0; n < node_count; ++n) {
        parked |= s.parked[n];
        side |= s.out_node[n] && is_side(n);
      }
      auto& c = parked ? sh_.counters.cancel_parked
                : side ? sh_.counters.cancel_side
                : s.outstanding > 0 ? sh_.counters.cancel_chain
                                    : sh_.counters.cancel_idle;
      c.fetch_add(1, std::memory_order_relaxed);
    }
    tr_.main_buf->instant(tr_.t_main, tr_.cancel, metrics::now_ns());
    s.cancelled = true;
    unpark(found->second);
    sh_.cancel_word[s.ref.index].store(s.ref.generation, std::memory_order_release);
    sh_.epoch.fetch_add(1, std::memory_order_release);
    settle(found->second);
  }

  bool admit_backlog() {
    bool did = false;
    while (!backlog_.empty()) {
      auto ref = sh_.engine->add_request(backlog_.front().id);
      if (!ref && live_ == 0) {
        // No live request will ever free an index: every free one was quarantined after a failed
        // teardown (engine::remove_request). The request fails instead of waiting forever.
        const auto sub = std::move(backlog_.front());
        backlog_.pop_front();
        end_unstarted(sub, request_end::failed,
                      "no request index can be given: " + std::to_string(sh_.engine->quarantined()) +
                          " were quarantined after failed teardowns (see stderr) and none is live; rebuild the "
                          "engine, or raise engine_options.max_requests");
        did = true;
        continue;
      }
      if (!ref) break;
      const nvtx::range range(tr_.nvtx_domain, tr_.nvtx_admit);
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
      insert_reusing(by_id_, spare_by_id_, {sub.id, ref->index}); // not there: the inbox holds a live id once
      ++live_;
      try {
        sh_.flow->start(s.state, sub.id, sub.input);
      } catch (...) {
        fail(ref->index, "the flow's start hook threw: " + what_of(std::current_exception()));
      }
      settle(ref->index);
      did = true;
    }
    return did;
  }

  bool drain_done() {
    bool did = false;
    typename shared_type::done_item d;
    while (sh_.done_ring.try_pop(d)) {
      did = true;
      const nvtx::range range(tr_.nvtx_domain, tr_.nvtx_route[d.node]);
      auto timer = tr_.main_rec.time(d.node, worker_trace::route);
      if (d.record == shared_type::no_record) {
        returned(d.r, d.node);
        settle(d.r.request.index);
        continue;
      }
      auto& rec = sh_.records[d.record];
      const auto now = metrics::now_ns();
      for (std::uint32_t i = 0; i < rec.count; ++i) {
        const auto index = rec.rows[i].request.index;
        auto& s = slots_[index];
        returned(rec.rows[i], rec.node);
        if (rec.status != shared_type::record_status::ok) {
          fail(index, shared_type::node_name(rec.node) + " step failed: " + rec.error);
          continue;
        }
        if (s.cancelled || s.failed) continue;
        s.stepped = true;
        try {
          if (sh_.flow->landed(s.state, rec.node, rec.payloads[i])) tr_.requests.on_output(s.timing, now);
        } catch (...) {
          fail(index, "the flow's landed hook threw: " + what_of(std::current_exception()));
        }
      }
      for (std::uint32_t i = 0; i < rec.count; ++i)
        settle(rec.rows[i].request.index);
      const std::uint32_t index = d.record;
      sh_.recycle_ring.push_wait(index);
      // Every row this step made ready has been pushed: the GPU thread may form the chain's next step.
      sh_.routed.store(++routed_count_, std::memory_order_release);
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
        sh_.cancel_word[s.ref.index].store(s.ref.generation, std::memory_order_release);
      }
      if (s.outstanding == 0) teardown(index, s.cancelled ? request_end::cancelled : request_end::failed);
      return;
    }
    bool parked = false;
    for (bool p : s.parked)
      parked |= p;
    bool finished = false;
    try {
      finished = s.outstanding == 0 && !parked && sh_.flow->finished(s.state);
    } catch (...) {
      fail(index, "the flow's finished hook threw: " + what_of(std::current_exception()));
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
        if (!sh_.flow->ready(s.state, n, r, p)) continue;
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
        sh_.counters.parked.fetch_add(1, std::memory_order_relaxed);
        tr_.main_buf->instant(tr_.t_main, tr_.park, metrics::now_ns(), trace::arg{tr_.rows, 1});
      }
    }
    if (s.failed) settle(index); // to the failed branch above
  }

  // The reason of a request whose row for node n raised while readied (inside a catch).
  static std::string row_error(std::uint8_t n) {
    return "readying its " + shared_type::node_name(n) + " row failed: " + what_of(std::current_exception());
  }

  void push_ready(std::uint32_t index, std::uint8_t n, const row& r, const payload_type& p) {
    auto& s = slots_[index];
    bool continues = true;
    if constexpr (predicts_continuation<Flow>) {
      // A throw fails the request; the row still goes out (and is dropped by the GPU thread once the
      // request's settle() sets its cancel word), so the bookkeeping stays the same on every path.
      try {
        if (!is_side(n)) continues = static_cast<bool>(sh_.flow->continues(s.state, n, p));
      } catch (...) {
        fail(index, "the flow's continues hook threw: " + what_of(std::current_exception()));
      }
    }
    s.out_node[n] = true;
    ++s.outstanding;
    ++rows_out_;
    sh_.ready_ring.push_wait(typename shared_type::ready_row{r, n, continues, p});
  }

  // Ask/reserve at readiness: every recurrent pool of the node reserves the row's slot, and every KV
  // cache the blocks the row's tokens need beyond those the request holds (both idempotent). False
  // when one is full: the row parks here while the chain keeps scheduling. A parked row keeps no KV
  // reservation (given back here), so rows parked on different resources never wait on each other's
  // blocks; its pool slot, like any pool reservation, stays with the request until teardown. Throws
  // what a resource throws for a row it can never take (a request past max_blocks_per_request): the
  // callers fail that request alone.
  bool reserve(std::uint8_t n, const row& r) {
    auto timer = tr_.main_rec.time(n, metrics::phase::admit);
    bool ok = true;
    shared_type::with_node(n, [&]<class Node>() {
      auto& set = sh_.engine->resources();
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
    if (parked == 0 || rows_out_ != 0 || live_ == 0 || inbox_.flag()) {
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
      if (!parked_[n].empty()) nodes += (nodes.empty() ? "" : ", ") + shared_type::node_name(n);
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
    sh_.counters.stall_failures.fetch_add(1, std::memory_order_relaxed);
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
          sh_.counters.unparked.fetch_add(1, std::memory_order_relaxed);
          push_ready(entry.index, n, entry.r, entry.payload);
          if (s.failed) failed.push_back(entry.index); // its continues hook threw
        }
      }
    for (const auto index : failed)
      settle(index);
  }

  void teardown(std::uint32_t index, request_end how) {
    const nvtx::range range(tr_.nvtx_domain, tr_.nvtx_teardown);
    auto& s = slots_[index];
    const auto begin = metrics::now_ns();
    try {
      sh_.engine->remove_request(s.ref, sh_.chain);
    } catch (const std::exception& e) {
      sh_.counters.teardown_errors.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "mstar::threaded_worker: teardown of request %llu failed: %s\n",
                   static_cast<unsigned long long>(s.id), e.what());
    }
    const auto end = metrics::now_ns();
    tr_.main_rec.record(metrics::node_id(node_count), worker_trace::teardown, end - begin);
    tr_.main_buf->complete(tr_.t_main, tr_.teardown_name, begin, end);
    sh_.counters.teardowns.fetch_add(1, std::memory_order_relaxed);
    s.live = false;
    const std::string why = how == request_end::failed ? std::move(s.failure) : std::string();
    s.failure.clear();
    finish_request(s.state, s.id, s.timing, how, why, end);
    erase_keeping(by_id_, spare_by_id_, s.id);
    --live_;
    sh_.epoch.fetch_add(1, std::memory_order_release);
    inbox_.ended(s.id);
    retry_parked();
  }

  shared_type& sh_;
  inbox_type& inbox_;
  worker_trace& tr_;

  std::vector<request_slot> slots_; // per request index
  std::unordered_map<request_id, std::uint32_t> by_id_;
  std::vector<typename std::unordered_map<request_id, std::uint32_t>::node_type> spare_by_id_; // for the next
  std::deque<submission> backlog_;
  std::array<std::deque<parked_row>, node_count> parked_;
  std::size_t rows_out_ = 0;       // rows of live requests out of the main thread (sum of outstanding)
  metrics::nanos stall_since_ = 0; // break_stall: since when the stall condition has held
  std::uint32_t live_ = 0;
  std::uint64_t routed_count_ = 0; // shared_type::routed's value
  // take_inbox's side of the inbox's swap.
  std::vector<submission> taken_submits_;
  std::vector<typename inbox_type::cancel_type> taken_cancels_;
  std::vector<request_id> taken_wakes_;
};

} // namespace mstar::detail
