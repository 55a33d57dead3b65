// What a threaded_worker is configured with: the lane mode of side nodes, the admit-failure action,
// per-node batching, the threads' backoff, and the sizes of what it preallocates.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/detail/affinity.hpp"
#include "mstar/detail/spsc_ring.hpp"
#include "mstar/worker/lane_policy.hpp"

namespace mstar {

// Where a side node's steps run.
//   off        on the chain stream, in the chain's order (the node still runs beside the stage: a side
//              step never touches the chain's staged pre-plan, whatever its stream)
//   on         on the lane stream, beside the chain, one step in flight
//   automatic  per step, on whichever the lane policy says pays (lane_policy.hpp)
enum class lane_mode : std::uint8_t { off, on, automatic };

constexpr std::string_view name_of(lane_mode m) {
  switch (m) {
  case lane_mode::off: return "off";
  case lane_mode::on: return "on";
  case lane_mode::automatic: return "auto";
  }
  return "?";
}

// What the one admit-failure handler does with the rows of a refused step (chain or side). Whatever it
// picks, a refused step routes no output: its rows only change queues.
//   push_back    back to the front of the node's ready queue, in order; the next pass tries again
//   hold         aside until something may have freed capacity: a teardown or cancel on the main
//                thread, or any step landing, or the next pass when no step is in flight; then back to
//                the front of the ready queue
//   limit_batch  back to the front of the ready queue, and the node's batch is halved (down to 1 row)
//                until a step of that node is admitted again, which doubles it back toward its maximum
enum class admit_action : std::uint8_t { push_back, hold, limit_batch };

// How a node's ready rows are batched into one step.
//   every_key  rows of every batch key share a step (the codec: one step for every chunk width)
//   per_key    a step holds rows of one batch key only (the codec: one step per chunk width); the key
//              of the oldest ready row goes first
enum class batching : std::uint8_t { every_key, per_key };

struct node_options {
  std::uint32_t max_batch = 0; // rows per step; 0: engine_options.max_batch
  batching batch = batching::every_key;
  admit_action on_refusal = admit_action::hold;
  // The node's padding buckets (the batch sizes its CUDA graphs replay), ascending, none 0, the
  // largest at least the node's max_batch and at most engine_options.max_batch. A step of n rows
  // carries the smallest bucket >= n (rows [n, bucket) are padding), so the bucket is part of the
  // staged step's identity: a staged step promotes only into a step of the same bucket. Empty: each
  // step's bucket is its row count.
  std::vector<std::uint32_t> buckets{};
  // Batching across time, for a node whose step costs about the same for one row as for a few
  // (a prefill, run eagerly: its fixed cost is the model's weights read once). While a chain step is
  // in flight or another chain node has ready rows, the node is passed over until it has min_batch
  // ready rows or its oldest ready row has waited max_wait; it never idles the chain (with nothing
  // else to run, once the last landing is routed, it runs with what it has), and it waits only while
  // its rows come at most max_wait apart on average (detail::batch_window), so a lightly loaded node
  // does not add latency for rows that would not come. A row waits at most max_wait plus the chain
  // steps in flight and staged when it becomes due (with the staged pre-plan, two). Rows handed back
  // by a refused step count as due. 0 or 1: no minimum (the default). A side node (a codec whose
  // step has a fixed cost of its own) waits the same way while the chain has work (a step in flight
  // or staged, a landing being routed, ready chain rows), and runs with what it has when the chain
  // has none. A per_key node counts its ready rows key by key: a key with min_batch rows makes a step
  // of that key, else the oldest row's wait makes one of the oldest row's key. A row the flow's optional
  // urgent hook calls urgent (a request's first output) never waits: it makes a step of its key at once.
  std::uint32_t min_batch = 0;
  std::chrono::microseconds max_wait{0};
};

// What the admit-failure handler is told about a refusal.
struct refusal_event {
  std::uint8_t node = 0;
  std::string_view node_name;
  bool side = false;           // a side step (lane or chain stream) or a chain step
  std::uint32_t rows = 0;      // rows in the refused step
  std::string_view resource;   // the resource that refused ("" for the runner's own checks)
  std::string_view reason;     // its sentence, with the numbers
};

// The CPU each worker thread is pinned to when it starts (an OS CPU number from the set the process
// may use, per sched_getaffinity), or unpinned (-1, the default: the scheduler places it). Pin the GPU
// and plan threads to cores of their own for the sub-microsecond staged-step handoff (docs/worker.md);
// the same CPU twice is allowed (a 2-core machine), at the cost of the two threads taking turns.
struct thread_affinity {
  static constexpr int unpinned = -1;
  int main = unpinned;
  int gpu = unpinned;
  int plan = unpinned;
};

// How the GPU thread waits for the plan thread's staged step, and the plan thread for the next step to
// stage while a chain step runs.
//   automatic  spin when the two threads can be assumed to have cores of their own: both pinned to
//              different CPUs, or not both pinned and the process may use at least 4 CPUs (the three
//              threads and the device's host side); back off otherwise
//   spin       spin with pause hints for backoff_policy::expect_spin_for (50 us), then yield; never sleep
//   back_off   the thread's ordinary backoff (spin 5 us, then yield): for threads sharing a core, where a
//              spinning GPU thread would hold the core the plan thread needs to finish the stage
enum class handoff_wait : std::uint8_t { automatic, spin, back_off };

struct worker_options {
  lane_mode lane = lane_mode::on;
  stream_priority lane_priority = stream_priority::high; // the lane stream is created on first launch
  lane_policy_options lane_policy{};                     // lane_mode::automatic only

  // Chain steps enqueued on the chain stream and not yet landed. With 1, the next chain step is
  // staged on the plan thread while the device runs the current one, and promoted when it lands. With
  // more, the GPU thread runs ahead of the device and launches ready rows at once (planned inline);
  // staging then happens only while that many steps are in flight.
  std::uint32_t max_chain_in_flight = 1;
  // Stage the next chain step on the plan thread after each launch (off: every chain step admits and
  // plans inline on the GPU thread).
  bool preplan = true;
  // With preplan and max_chain_in_flight 1, when no other chain node has ready rows, stage the next
  // step of the node just launched speculatively: the rows ready now, then the rows of the step just
  // launched that the flow says continue (Flow::continues; every row without it), in that step's
  // order. The step formed once they are ready promotes the stage when it is that very step and drops
  // it otherwise (a cancel, a request that finished). Off: only rows already ready are staged, so a
  // single group of requests decoding together is never staged. Not for nodes batched per_key (the
  // next row's key is unknown before it is ready).
  bool predict_next = true;

  // Per node, by node index in the model (missing entries: defaults).
  std::vector<node_options> nodes{};
  // The one admit-failure handler, for chain and side steps alike; when empty, each node's
  // node_options::on_refusal. Runs on the GPU thread; must not block.
  std::function<admit_action(const refusal_event&)> on_refusal{};

  // How each thread waits when it has nothing to do. Steady state never reaches idle_before_sleep;
  // an idle worker gives its cores back after it.
  detail::backoff_policy main_backoff = idle_policy();
  detail::backoff_policy gpu_backoff = idle_policy();
  detail::backoff_policy plan_backoff = idle_policy();
  // Where each thread runs; checked at construction against the CPUs the process may use.
  thread_affinity affinity{};
  handoff_wait stage_wait = handoff_wait::automatic;
  // While stage_wait spins and the plan thread is staging, the GPU thread looks only at the plan
  // thread's ring, up to this long at a time, before going once through its whole loop (ready rows,
  // landings, the side lane). 0: the whole loop between two looks. A pass of the loop reads several
  // lines other threads write (each a cache miss across cores): on the H200's host it added about
  // 0.4 us to the handoff's p99 over the bare ring's (docs/benchmarks.md).
  std::chrono::nanoseconds stage_watch{std::chrono::microseconds(2)};
  // Watch through the answer's expected arrival: the GPU thread learns how long the plan thread takes to
  // answer, and when the answer is due within its next two looks it watches until the expected arrival
  // plus four times that time's spread (at least stage_watch, at most 16 stage_watch in one go), so an
  // answer that comes on time is not taken after a pass of the loop (detail::stage_arrival). false:
  // looks of stage_watch with one pass of the loop between each two.
  bool watch_expected = true;

  // Sizes preallocated at construction.
  std::uint32_t step_records = 8;            // steps between forming and their return to the main thread
  std::size_t trace_events = std::size_t{1} << 16; // per recording thread; 0: no trace
  // Step intervals kept for inspection (threaded_worker::busy_intervals(): the latest, up to this
  // many); the GPU busy fraction covers the whole run whatever this is (metrics::busy_tracker).
  std::size_t busy_intervals = std::size_t{1} << 16;

  // Whether stage_wait resolves to spinning, given the CPUs the process may use.
  bool spins_for_stage(std::size_t allowed_cpus) const noexcept {
    if (stage_wait != handoff_wait::automatic) return stage_wait == handoff_wait::spin;
    const bool both = affinity.gpu != thread_affinity::unpinned && affinity.plan != thread_affinity::unpinned;
    return both ? affinity.gpu != affinity.plan : allowed_cpus >= 4;
  }

  static constexpr detail::backoff_policy idle_policy() noexcept {
    detail::backoff_policy p;
    p.idle_before_sleep = std::chrono::milliseconds(1);
    return p;
  }

  void check(std::size_t node_count) const {
    auto bad = [](const std::string& what) { throw std::invalid_argument("mstar::worker_options: " + what); };
    if (max_chain_in_flight == 0) bad("max_chain_in_flight is 0; allow at least one chain step in flight");
    if (step_records < max_chain_in_flight + 3)
      bad("step_records is " + std::to_string(step_records) + "; it needs max_chain_in_flight + 3 (" +
          std::to_string(max_chain_in_flight + 3) +
          "): the chain's steps in flight, the staged one, the side step and one being formed");
    if (nodes.size() > node_count)
      bad("nodes has " + std::to_string(nodes.size()) + " entries but the model has " + std::to_string(node_count) +
          " nodes; give one entry per node, in the model's node order");
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const auto& o = nodes[n];
      const std::string which = "nodes[" + std::to_string(n) + "]";
      if (o.max_wait < std::chrono::microseconds(0) || o.max_wait > std::chrono::seconds(1))
        bad(which + ".max_wait is " + std::to_string(o.max_wait.count()) + " us; use 0 to 1 s");
      if (o.min_batch > 1 && o.max_wait.count() == 0)
        bad(which + ".min_batch is " + std::to_string(o.min_batch) +
            " but max_wait is 0, so the node would never wait for it; give max_wait (how long its oldest ready "
            "row may wait for min_batch rows) or set min_batch to 0");
    }
    lane_policy.check();
    if (stage_watch < std::chrono::nanoseconds(0) || stage_watch > std::chrono::milliseconds(1))
      bad("stage_watch is " + std::to_string(stage_watch.count()) +
          " ns; use 0 (no watch) to 1 ms: while it runs the GPU thread launches no side step and polls no "
          "landing");
    if (affinity.main != thread_affinity::unpinned || affinity.gpu != thread_affinity::unpinned ||
        affinity.plan != thread_affinity::unpinned) {
      const auto allowed = detail::allowed_cpus();
      for (auto [who, cpu] : {std::pair{"affinity.main (the main thread)", affinity.main},
                              std::pair{"affinity.gpu (the GPU thread)", affinity.gpu},
                              std::pair{"affinity.plan (the plan thread)", affinity.plan}})
        if (auto why = detail::check_cpu(who, cpu, allowed); !why.empty()) bad(why);
    }
  }
};

} // namespace mstar
