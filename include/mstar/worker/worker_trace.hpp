// The worker's metrics and trace names: one recorder per thread (rows: the model's nodes, then
// "request" for what concerns a request as a whole), the request recorder, and the trace session with
// one track per thread and per stream, one buffer per thread and the names its events carry. Each
// recorder and buffer is written by its own thread only. The NVTX labels (registered once, a colour per
// node) name the ranges each thread pushes for an Nsight Systems timeline: "<node> launch" (admit, plan,
// forward, commit) with "<node> forward" inside it and "<node> land" on the GPU thread, "<node> stage"
// on the plan thread, "<node> route", "admit" and "teardown" on the main thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mstar/worker/metrics.hpp"
#include "mstar/worker/nvtx.hpp"
#include "mstar/worker/trace.hpp"

namespace mstar::detail {

struct worker_trace {
  // The worker's phases beyond metrics' built-in ones (their names are the layout's second list).
  static constexpr metrics::phase_id handoff = metrics::builtin_phase_count + 0;
  static constexpr metrics::phase_id pass = metrics::builtin_phase_count + 1;
  static constexpr metrics::phase_id route = metrics::builtin_phase_count + 2;
  static constexpr metrics::phase_id teardown = metrics::builtin_phase_count + 3;
  static constexpr metrics::phase_id stage_drop = metrics::builtin_phase_count + 4;
  static constexpr metrics::phase_id stage = metrics::builtin_phase_count + 5;
  static constexpr metrics::phase_id handoff_idle = metrics::builtin_phase_count + 6;

  // `nodes`: the model's node names, in order; `events`: each thread's buffer capacity.
  worker_trace(const std::vector<std::string_view>& nodes, std::size_t events)
      : layout{rows_of(nodes), {"handoff", "pass", "route", "teardown", "stage_drop", "stage", "handoff_idle"}},
        main_rec("main", layout), gpu_rec("GPU", layout), plan_rec("plan", layout), session(0, "mstar worker") {
    t_main = session.add_track("main");
    t_gpu = session.add_track("GPU");
    t_plan = session.add_track("plan");
    t_chain = session.add_track("chain stream");
    t_lane = session.add_track("lane stream");
    for (const auto name : nodes)
      node_name.push_back(session.intern(name));
    rows = session.intern("rows");
    preplan = session.intern("pre_plan");
    teardown_name = session.intern("teardown");
    cancel = session.intern("cancel");
    park = session.intern("park");
    refused = session.intern("refused");
    promoted = session.intern("promoted");
    const std::size_t cap = std::max<std::size_t>(events, 1);
    main_buf = &session.add_buffer(cap);
    gpu_buf = &session.add_buffer(cap);
    plan_buf = &session.add_buffer(cap);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const std::string name(nodes[i]);
      const auto color = nvtx::color_of(static_cast<std::uint32_t>(i));
      nvtx_launch.push_back(nvtx_domain.make_label(name + " launch", color));
      nvtx_forward.push_back(nvtx_domain.make_label(name + " forward", color));
      nvtx_land.push_back(nvtx_domain.make_label(name + " land", color));
      nvtx_stage.push_back(nvtx_domain.make_label(name + " stage", color));
      nvtx_route.push_back(nvtx_domain.make_label(name + " route", color));
    }
    nvtx_admit = nvtx_domain.make_label("admit");
    nvtx_teardown = nvtx_domain.make_label("teardown");
  }
  worker_trace(const worker_trace&) = delete;
  worker_trace& operator=(const worker_trace&) = delete;

  const metrics::thread_recorder& recorder(int thread) const {
    return thread == 0 ? main_rec : thread == 1 ? gpu_rec : plan_rec;
  }

  metrics::recorder_layout layout;
  metrics::thread_recorder main_rec, gpu_rec, plan_rec;
  metrics::request_recorder requests;
  trace::session session;
  trace::buffer *main_buf = nullptr, *gpu_buf = nullptr, *plan_buf = nullptr;
  trace::track_id t_main = 0, t_gpu = 0, t_plan = 0, t_chain = 0, t_lane = 0;
  std::vector<trace::name_id> node_name; // per node index
  trace::name_id rows = 0, preplan = 0, teardown_name = 0, cancel = 0, park = 0, refused = 0, promoted = 0;
  nvtx::domain& nvtx_domain = nvtx::mstar_domain();
  std::vector<nvtx::label> nvtx_launch, nvtx_forward, nvtx_land, nvtx_stage, nvtx_route; // per node index
  nvtx::label nvtx_admit, nvtx_teardown;

private:
  static std::vector<std::string> rows_of(const std::vector<std::string_view>& nodes) {
    std::vector<std::string> v;
    for (const auto n : nodes)
      v.emplace_back(n);
    v.emplace_back("request");
    return v;
  }
};

} // namespace mstar::detail
