// A chain node's batching across time (detail::batch_window): when a node with a min_batch makes a
// step, and how the mean gap between its rows decides whether it waits at all.
#include <mstar/detail/batch_window.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>

namespace {
using mstar::detail::batch_window;
constexpr std::int64_t ms = 1'000'000; // ns
} // namespace

TEST_CASE("batch_window: without a min_batch every ready row makes a step") {
  for (const std::uint32_t min_batch : {0u, 1u}) {
    batch_window w(min_batch, 8 * ms);
    CHECK_FALSE(w.waits());
    CHECK(w.due(1, 0, 0));
  }
}

TEST_CASE("batch_window: rows that come often wait for min_batch or max_wait") {
  batch_window w(8, 8 * ms);
  REQUIRE(w.waits());
  // Before it has seen its rows come fast, it does not wait (the mean gap starts above max_wait).
  CHECK(w.due(1, 0, 1));
  std::int64_t t = ms;
  for (int i = 0; i < 100; ++i, t += 2 * ms) // a row every 2 ms
    w.arrived(t);
  CHECK(w.mean_gap() <= 2 * ms + ms / 10);
  const std::int64_t oldest = t;
  CHECK_FALSE(w.due(3, oldest, oldest + 7 * ms)); // 3 of 8 rows, 7 ms: waits
  CHECK(w.due(8, oldest, oldest + ms));           // 8 rows: a step
  CHECK(w.due(3, oldest, oldest + 8 * ms));       // waited max_wait: a step with what it has
}

TEST_CASE("batch_window: rows that come more than max_wait apart never wait") {
  batch_window w(8, 8 * ms);
  std::int64_t t = ms;
  for (int i = 0; i < 100; ++i, t += 2 * ms)
    w.arrived(t);
  REQUIRE_FALSE(w.due(1, t, t + ms)); // fast rows: waits
  for (int i = 0; i < 100; ++i, t += 20 * ms) // the load drops: a row every 20 ms
    w.arrived(t);
  CHECK(w.mean_gap() > 8 * ms);
  CHECK(w.due(1, t, t + ms)); // a wait would only add latency: a step now
}

TEST_CASE("batch_window: rows that come together count as fast") {
  batch_window w(4, 8 * ms);
  std::int64_t t = ms;
  for (int i = 0; i < 60; ++i, t += 12 * ms) // bursts of three rows every 12 ms: a row every 4 ms
    for (int k = 0; k < 3; ++k)
      w.arrived(t);
  CHECK(w.mean_gap() < 8 * ms);
  CHECK_FALSE(w.due(3, t, t + ms));
}
