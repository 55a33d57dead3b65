// The GPU thread's estimate of when the plan thread's answer arrives (detail::stage_arrival): what it
// learns from a run of answers, and how long a watch lasts before, around and after the expected time.
#include <mstar/detail/stage_watch.hpp>

#include <doctest/doctest.h>

#include <cstdint>

namespace {

using mstar::detail::stage_arrival;

constexpr std::int64_t watch = 2000; // ns, the default stage_watch

} // namespace

TEST_CASE("stage_arrival: before any answer every watch lasts stage_watch") {
  stage_arrival a;
  CHECK(a.watch_until(100, 0, watch) == 100 + watch);
  a.learn(0);  // not a time: ignored
  a.learn(-5);
  CHECK(a.mean() == 0);
  CHECK(a.watch_until(100, 0, watch) == 100 + watch);
}

TEST_CASE("stage_arrival: the first answer sets the average, later ones move it by 1/8 and learn the spread") {
  stage_arrival a;
  a.learn(8000);
  CHECK(a.mean() == 8000);
  CHECK(a.spread() == 0);
  a.learn(16000); // 8000 above: mean + 1000, spread + 1000
  CHECK(a.mean() == 9000);
  CHECK(a.spread() == 1000);
  for (int i = 0; i < 200; ++i)
    a.learn(9000);
  CHECK(a.mean() == 9000);
  CHECK(a.spread() < 10); // settles towards 0 (integer steps of 1/8)
}

TEST_CASE("stage_arrival: a watch covers the expected arrival only when it is due within the next two looks") {
  stage_arrival a;
  a.learn(9000); // answers come 9 us after the handover, spread 0
  const std::int64_t handed = 1'000'000, expect = handed + 9000;
  SUBCASE("not due yet: one look") {
    const auto now = expect - 2 * watch - 1;
    CHECK(a.watch_until(now, handed, watch) == now + watch);
  }
  SUBCASE("due in the next look but one: through the arrival plus one look (the spread is 0)") {
    const auto now = expect - 2 * watch;
    CHECK(a.watch_until(now, handed, watch) == expect + watch);
  }
  SUBCASE("due in this look: through the arrival plus one look") {
    const auto now = expect - 500;
    CHECK(a.watch_until(now, handed, watch) == expect + watch);
  }
  SUBCASE("just overdue: one look, which already covers the rest of the slack") {
    const auto now = expect + 300;
    CHECK(a.watch_until(now, handed, watch) == now + watch);
  }
  SUBCASE("overdue by more than the slack: plain looks again, so the loop runs while the plan thread is slow") {
    const auto now = expect + watch + 1;
    CHECK(a.watch_until(now, handed, watch) == now + watch);
  }
}

TEST_CASE("stage_arrival: a wide spread widens the watch, and it never exceeds 16 looks") {
  stage_arrival a;
  a.learn(10000);
  a.learn(2000); // 8000 below: mean 9000, spread 1000
  REQUIRE(a.mean() == 9000);
  REQUIRE(a.spread() == 1000);
  const std::int64_t handed = 0;
  CHECK(a.watch_until(8000, handed, watch) == 9000 + 4 * 1000); // slack: four spreads > one look
  // A tiny look: the cap of 16 looks from now binds before the expected arrival plus the slack.
  CHECK(a.watch_until(8900, handed, 100) == 8900 + 16 * 100);
}
