// NVTX ranges as a profiler sees them: this binary links a recording NVTX tool (nvtx_recorder.cpp),
// so every range the library pushes reaches it, with its thread, name, domain and colour.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/mstar.hpp>
#include <mstar/worker.hpp>
#include <mstar/worker/nvtx.hpp>

#include "nvtx_recorder.hpp"

TEST_CASE("Nvtx.a range reaches the tool with its registered name, domain and colour, and ends where its scope ends") {
  static_assert(mstar::nvtx::available);
  nvtx_recorder::take();
  mstar::nvtx::domain d("mstar test");
  const auto outer = d.make_label("outer", mstar::nvtx::color_of(1));
  const auto inner = d.make_label("inner", mstar::nvtx::color_of(2));
  {
    mstar::nvtx::range a(d, outer);
    mstar::nvtx::range b(d, inner);
  }
  const auto ev = nvtx_recorder::take();
  REQUIRE(ev.size() == 4);
  CHECK((ev[0].push && ev[0].name == "outer" && ev[0].domain == "mstar test"));
  CHECK(ev[0].color == mstar::nvtx::color_of(1));
  CHECK((ev[1].push && ev[1].name == "inner" && ev[1].color == mstar::nvtx::color_of(2)));
  CHECK((!ev[2].push && !ev[3].push));
  CHECK(ev[0].thread == nvtx_recorder::current_thread());
}

TEST_CASE("Nvtx.a thread named through name_this_thread is named in the tool, and node colours differ") {
  std::uint32_t tid = 0;
  std::thread t([&] {
    mstar::nvtx::name_this_thread("mstar w0 gpu");
    tid = nvtx_recorder::current_thread();
  });
  t.join();
  CHECK(nvtx_recorder::threads().at(tid) == "mstar w0 gpu");
  for (std::uint32_t i = 0; i < 16; ++i)
    for (std::uint32_t j = i + 1; j < 16; ++j)
      CHECK(mstar::nvtx::color_of(i) != mstar::nvtx::color_of(j));
}

// ---- a worker's ranges -----------------------------------------------------------------------------

namespace {

using Positions = mstar::positions<"positions">;
using Sum = mstar::recurrent_pool<"sum", float, mstar::shape<1, 1>, 1, 9>;
using Generate = mstar::node<"generate", mstar::declares<Positions>, mstar::walk::chain>;
using Spell = mstar::node<"spell", mstar::declares<Sum>>;
using Model = mstar::model<"nvtx_model", mstar::worker<"w", mstar::group<"Chain", Generate>,
                                                        mstar::group<"Side", mstar::side_stream, Spell>>>;

struct count_flow {
  struct request_state {
    std::uint32_t length = 0, generated = 0, spelled = 0;
  };
  using request_input = std::uint32_t;
  struct payload {};
  void start(request_state& s, mstar::request_id, const std::uint32_t& length) { s.length = length; }
  bool ready(request_state& s, std::uint8_t node, mstar::row& r, payload&) {
    if (node == Model::node_index<Generate>) {
      r.tokens = 1;
      return s.generated < s.length;
    }
    return s.spelled < s.generated;
  }
  bool landed(request_state& s, std::uint8_t node, const payload&) {
    (node == Model::node_index<Generate> ? s.generated : s.spelled) += 1;
    return node == Model::node_index<Spell>;
  }
  bool finished(const request_state& s) const { return s.spelled == s.length; }
  void end(request_state&, mstar::request_id, mstar::request_end) {}
  std::uint32_t batch_key(std::uint8_t, const payload&) const { return 0; }
};

} // namespace

TEST_CASE("Nvtx.a worker names its three threads and pushes balanced ranges for every step it launches, lands and "
          "routes, and for admission and teardown") {
  nvtx_recorder::take();
  {
    mstar::host_backend backend;
    mstar::engine<Model, mstar::host_backend> engine(backend, {.max_batch = 4, .max_tokens = 16, .max_requests = 8});
    count_flow flow;
    mstar::threaded_worker<Model, mstar::host_backend, count_flow> worker(engine, flow, {.lane = mstar::lane_mode::on});
    worker.forward<Generate>([](const auto&) {});
    worker.forward<Spell>([](const auto&) {});
    worker.start();
    for (std::uint32_t id = 0; id < 6; ++id)
      REQUIRE(worker.submit(id, 3 + id));
    worker.wait_idle();
    worker.stop();
  }
  const auto events = nvtx_recorder::take();
  const auto names = nvtx_recorder::threads();
  std::map<std::string, std::uint32_t> thread_of; // role -> OS thread
  for (const auto& [tid, name] : names)
    for (const char* role : {"main", "GPU", "plan"})
      if (name == std::string("mstar nvtx_model ") + role) thread_of[role] = tid;
  REQUIRE(thread_of.size() == 3);

  std::map<std::uint32_t, int> depth;
  std::map<std::pair<std::uint32_t, std::string>, int> pushes; // (thread, range name) -> count
  bool negative = false;
  for (const auto& e : events) {
    if (e.domain != "mstar") continue;
    depth[e.thread] += e.push ? 1 : -1;
    negative |= depth[e.thread] < 0;
    if (e.push) ++pushes[{e.thread, e.name}];
  }
  CHECK_FALSE(negative);
  for (const auto& [tid, d] : depth)
    CHECK_MESSAGE(d == 0, "thread " << tid << " ended with " << d << " ranges open");
  const auto gpu = thread_of["GPU"], main = thread_of["main"];
  for (const char* node : {"generate", "spell"}) {
    const std::string n(node);
    CHECK(pushes[{gpu, n + " launch"}] > 0);
    CHECK(pushes[{gpu, n + " forward"}] == pushes[{gpu, n + " launch"}]); // no step failed before its forward
    CHECK(pushes[{gpu, n + " land"}] > 0);
    CHECK(pushes[{main, n + " route"}] > 0);
  }
  CHECK(pushes[{gpu, "generate launch"}] >= 3); // at least the longest request's tokens, batched
  CHECK(pushes[{main, "admit"}] == 6);
  CHECK(pushes[{main, "teardown"}] == 6);
}
