// The worker's plan thread: the stager. The GPU thread hands it the next chain step (its rows formed
// from the ready queue, or predicted from the step just launched) while the device runs the current
// one; it pre-plans (stages) that step in the runner and answers whether a stage was published. The
// GPU thread's next chain step then promotes the stage when it came out as staged, or drops it. It has
// no state of its own beyond its loop: the record it stages belongs to it from to_plan's pop to
// from_plan's push.
#pragma once

#include <cstdint>
#include <exception>
#include <span>

#include "mstar/detail/affinity.hpp"
#include "mstar/worker/client_inbox.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/worker_shared.hpp"
#include "mstar/worker/worker_trace.hpp"

namespace mstar::detail {

template <class Model, class Backend, class Flow>
class worker_stager {
public:
  using shared_type = worker_shared<Model, Backend, Flow>;
  using inbox_type = client_inbox<typename Flow::request_input>;

  worker_stager(shared_type& shared, inbox_type& inbox, worker_trace& trace) : sh_(shared), inbox_(inbox), tr_(trace) {}

  // The plan thread's loop, until the GPU thread has ended, or a fatal error.
  void loop() {
    try {
      passes();
    } catch (...) {
      inbox_.fatal(std::current_exception());
    }
  }

private:
  void passes() {
    backoff wait(sh_.options.plan_backoff);
    for (;;) {
      if (inbox_.aborted()) return;
      std::uint32_t rec_index;
      if (!sh_.to_plan.try_pop(rec_index)) {
        if (sh_.plan_stop.load(std::memory_order_acquire)) break;
        // While a chain step runs, the next one to stage arrives as soon as it lands or is formed.
        if (sh_.spin_for_stage && sh_.chain_busy.load(std::memory_order_relaxed))
          wait.pause_expecting();
        else if (sh_.idle.load(std::memory_order_relaxed) && !sh_.chain_busy.load(std::memory_order_relaxed))
          wait.pause_idle(sh_.plan_bell, [&] {
            return sh_.idle.load(std::memory_order_acquire) && !sh_.plan_stop.load(std::memory_order_acquire) &&
                   !inbox_.aborted();
          });
        else
          wait.pause();
        continue;
      }
      wait.reset();
      auto& rec = sh_.records[rec_index];
      const nvtx::range range(tr_.nvtx_domain, tr_.nvtx_stage[rec.node]);
      const auto begin = metrics::now_ns();
      bool staged = false;
      shared_type::with_node(rec.node, [&]<class Node>() {
        if constexpr (runs_on_the_chain<Model, Node>) {
          const chain_step<Model, Node> step{std::span<const row>(rec.rows.data(), rec.count),
                                             sh_.bucket_of(rec.node, rec.count)};
          staged = static_cast<bool>(sh_.engine->runner().pre_plan(step, sh_.chain));
        }
      });
      const auto end = metrics::now_ns();
      tr_.plan_rec.record(rec.node, metrics::phase::plan, end - begin);
      tr_.plan_buf->complete(tr_.t_plan, tr_.preplan, begin, end, trace::arg{tr_.rows, rec.count});
      sh_.from_plan.push_wait(typename shared_type::plan_ack{rec_index, staged, metrics::now_ns()});
    }
  }

  shared_type& sh_;
  inbox_type& inbox_;
  worker_trace& tr_;
};

} // namespace mstar::detail
