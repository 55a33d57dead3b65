// NVTX ranges as a profiler sees them: this binary links a recording NVTX tool (nvtx_recorder.cpp),
// so every range the library pushes reaches it, with its thread, name, domain and colour.
#include <doctest/doctest.h>

#include <thread>

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
