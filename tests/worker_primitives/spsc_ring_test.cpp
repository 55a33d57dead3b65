// The single-producer single-consumer ring the worker's threads hand steps over with: order and
// completeness under two real threads, wraparound, full and empty, ownership of queued items, and the
// backoff's promise that a waiting thread never sleeps unless the caller allowed it.
#include <mstar/detail/spsc_ring.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

// ThreadSanitizer runs these 5-15x slower; the item counts shrink so each case stays under 2 s on 2 cores.
#if defined(__SANITIZE_THREAD__)
constexpr std::uint64_t scale = 10;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr std::uint64_t scale = 10;
#else
constexpr std::uint64_t scale = 1;
#endif
#else
constexpr std::uint64_t scale = 1;
#endif

using mstar::detail::spsc_ring;

// Counts live instances, so a test can see that the ring destroys what it holds exactly once.
struct tracked {
  static inline std::atomic<int> live{0};
  int value = 0;
  explicit tracked(int v) : value(v) { ++live; }
  tracked(tracked&& o) noexcept : value(o.value) { ++live; }
  tracked& operator=(tracked&& o) noexcept {
    value = o.value;
    return *this;
  }
  ~tracked() { --live; }
};

// Runs a producer thread and a consumer thread over n sequence numbers; returns how many arrived out
// of order (0 when the ring keeps order and loses nothing) and checks the consumer saw exactly n.
std::uint64_t pass_sequence(std::size_t capacity, std::uint64_t n) {
  spsc_ring<std::uint64_t> ring(capacity);
  std::uint64_t received = 0, disorder = 0;
  std::thread consumer([&] {
    for (std::uint64_t expect = 0; expect < n; ++expect) {
      std::uint64_t v = 0;
      ring.pop_wait(v);
      if (v != expect) ++disorder;
      ++received;
    }
  });
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < n; ++i)
      ring.push_wait(i);
  });
  producer.join();
  consumer.join();
  CHECK(received == n);
  CHECK(ring.empty_approx());
  return disorder;
}

} // namespace

TEST_CASE("a ring takes exactly its capacity, refuses the next push, and pops the items back in order") {
  spsc_ring<int> ring(8);
  CHECK(ring.capacity() == 8);
  int out = -1;
  CHECK_FALSE(ring.try_pop(out));
  CHECK(out == -1);
  for (int i = 0; i < 8; ++i)
    CHECK(ring.try_push(i));
  CHECK_FALSE(ring.try_push(99));
  CHECK(ring.size_approx() == 8);
  for (int i = 0; i < 8; ++i) {
    REQUIRE(ring.try_pop(out));
    CHECK(out == i);
  }
  CHECK_FALSE(ring.try_pop(out));
  CHECK(ring.empty_approx());
  // A slot freed by a pop is usable again at once.
  CHECK(ring.try_push(42));
  REQUIRE(ring.try_pop(out));
  CHECK(out == 42);
}

TEST_CASE("a capacity that is not a power of two is refused, naming the capacity and the one to use") {
  try {
    spsc_ring<int> ring(5);
    FAIL("capacity 5 was accepted");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("capacity 5") != std::string::npos);
    CHECK(what.find("use 8") != std::string::npos);
  }
  CHECK_THROWS_AS(spsc_ring<int>(0), std::invalid_argument);
  CHECK_THROWS_AS(spsc_ring<int>(1), std::invalid_argument);
  CHECK_NOTHROW(spsc_ring<int>(2));
}

TEST_CASE("indices wrap around the slot array thousands of times without losing or reordering an item") {
  // Uneven push and pop bursts put head and tail at every offset of a small ring.
  spsc_ring<std::uint32_t> ring(4);
  std::uint32_t next_in = 0, next_out = 0;
  for (int round = 0; round < 20000; ++round) {
    const int pushes = 1 + round % 4, pops = 1 + (round * 7) % 4;
    for (int i = 0; i < pushes; ++i)
      if (ring.try_push(next_in)) ++next_in;
    for (int i = 0; i < pops; ++i) {
      std::uint32_t v = 0;
      if (!ring.try_pop(v)) break;
      REQUIRE(v == next_out);
      ++next_out;
    }
    REQUIRE(next_in - next_out <= 4);
  }
  CHECK(next_out > 4 * 10000); // wrapped the 4-slot array at least ten thousand times
}

TEST_CASE("a producer and a consumer on two threads pass millions of items in order with none lost") {
  CHECK(pass_sequence(1024, 2'000'000 / scale) == 0);
}

TEST_CASE("a two-slot ring between two threads stays ordered while it is full or empty most of the time") {
  CHECK(pass_sequence(2, 100'000 / scale) == 0);
}

TEST_CASE("items that own memory move through the ring, and the ones still queued are destroyed with it") {
  {
    spsc_ring<std::unique_ptr<int>> ring(4);
    CHECK(ring.try_push(std::make_unique<int>(7)));
    std::unique_ptr<int> out;
    REQUIRE(ring.try_pop(out));
    REQUIRE(out != nullptr);
    CHECK(*out == 7);
  }
  {
    spsc_ring<tracked> ring(4);
    CHECK(ring.try_emplace(1));
    CHECK(ring.try_emplace(2));
    CHECK(ring.try_emplace(3));
    tracked out(0);
    REQUIRE(ring.try_pop(out));
    CHECK(out.value == 1);
    CHECK(tracked::live == 3); // out, and two still queued
  }
  CHECK(tracked::live == 0);
}

TEST_CASE("a refused push leaves the item with the caller") {
  spsc_ring<std::unique_ptr<int>> ring(2);
  CHECK(ring.try_push(std::make_unique<int>(1)));
  CHECK(ring.try_push(std::make_unique<int>(2)));
  auto third = std::make_unique<int>(3);
  CHECK_FALSE(ring.try_push(std::move(third)));
  REQUIRE(third != nullptr);
  CHECK(*third == 3);
}

TEST_CASE("pop_wait gives up when stop fires on an empty ring, but takes an item that is already there") {
  spsc_ring<int> ring(2);
  int out = 0;
  CHECK_FALSE(ring.pop_wait(out, [] { return true; }));
  REQUIRE(ring.try_push(5));
  CHECK(ring.pop_wait(out, [] { return true; }));
  CHECK(out == 5);

  // A consumer blocked on an empty ring returns once another thread asks it to stop.
  std::atomic<bool> stop{false};
  std::atomic<int> result{-1};
  std::thread consumer([&] { result = ring.pop_wait(out, [&] { return stop.load(); }) ? 1 : 0; });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  consumer.join();
  CHECK(result == 0);
}

TEST_CASE("push_wait on a full ring waits until the consumer frees a slot") {
  spsc_ring<int> ring(2);
  REQUIRE(ring.try_push(1));
  REQUIRE(ring.try_push(2));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    ring.push_wait(3);
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(pushed.load());
  int out = 0;
  REQUIRE(ring.try_pop(out));
  producer.join();
  CHECK(pushed.load());
  REQUIRE(ring.try_pop(out));
  CHECK(out == 2);
  REQUIRE(ring.try_pop(out));
  CHECK(out == 3);
}

TEST_CASE("a backoff spins for its spin time, then yields, and by default never sleeps however long it waits") {
  mstar::detail::backoff_policy policy;
  policy.spin_for = std::chrono::microseconds(200);
  mstar::detail::backoff b(policy);
  const auto start = std::chrono::steady_clock::now();
  while (b.yields() == 0)
    b.pause();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::microseconds(200));
  CHECK(b.rounds() > 1); // it spun before the first yield
  CHECK(b.sleeps() == 0);

  mstar::detail::backoff by_default;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20))
    by_default.pause();
  CHECK(by_default.sleeps() == 0);
  CHECK(by_default.yields() > 0);
  by_default.reset();
  CHECK(by_default.rounds() == 0);
}

TEST_CASE("a backoff's sleeps grow with the wait, a sixteenth of it, from sleep_quantum to longest_sleep") {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  mstar::detail::backoff_policy policy;
  policy.sleep_quantum = microseconds(50);
  policy.longest_sleep = milliseconds(1);
  CHECK(mstar::detail::sleep_for_wait(policy, microseconds(0)) == microseconds(50));
  CHECK(mstar::detail::sleep_for_wait(policy, microseconds(800)) == microseconds(50));
  CHECK(mstar::detail::sleep_for_wait(policy, milliseconds(2)) == microseconds(125));
  CHECK(mstar::detail::sleep_for_wait(policy, milliseconds(16)) == milliseconds(1));
  CHECK(mstar::detail::sleep_for_wait(policy, std::chrono::seconds(30)) == milliseconds(1));
  // A longest_sleep below sleep_quantum leaves every sleep at sleep_quantum.
  policy.longest_sleep = microseconds(10);
  CHECK(mstar::detail::sleep_for_wait(policy, std::chrono::seconds(30)) == microseconds(50));
}

TEST_CASE("a backoff idle for 40 ms (pause_idle) sleeps far fewer times than at sleep_quantum each") {
  // At 50 us a sleep (pause()), 40 ms past the threshold would be some 800 sleeps (fewer where the scheduler
  // rounds a sleep up); with sleeps growing to a sixteenth of the wait, at most ln(41) / ln(17/16) + 1 = 62.
  mstar::detail::backoff_policy policy;
  policy.spin_for = std::chrono::microseconds(1);
  policy.idle_before_sleep = std::chrono::milliseconds(1);
  policy.sleep_quantum = std::chrono::microseconds(50);
  policy.longest_sleep = std::chrono::milliseconds(5);
  mstar::detail::backoff b(policy);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(41))
    b.pause_idle();
  CHECK(b.sleeps() > 0);
  CHECK(b.sleeps() < 100);
}

TEST_CASE("a doorbell ends a sleep when rung, and a sleep whose still_idle is false is not begun") {
  using namespace std::chrono_literals;
  mstar::detail::doorbell bell;
  bell.ring(); // nobody asleep: dropped, so the next sleep is not cut short by it
  std::atomic<bool> work{false};
  auto start = std::chrono::steady_clock::now();
  bell.sleep_for(50ms, [&] { return !work.load(); });
  CHECK(std::chrono::steady_clock::now() - start >= 50ms);
  // A ringer sets the work first, then rings: the sleeper wakes long before its 60 s.
  std::thread ringer([&] {
    std::this_thread::sleep_for(100ms);
    work.store(true);
    bell.ring();
  });
  start = std::chrono::steady_clock::now();
  bell.sleep_for(60s, [&] { return !work.load(); });
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  ringer.join();
  // The work is there already: no sleep at all.
  start = std::chrono::steady_clock::now();
  bell.sleep_for(60s, [&] { return !work.load(); });
  CHECK(std::chrono::steady_clock::now() - start < 30s);
}

TEST_CASE("a backoff sleeps only once the caller's idle threshold has passed, in quanta the caller bounds") {
  mstar::detail::backoff_policy policy;
  policy.spin_for = std::chrono::microseconds(1);
  policy.idle_before_sleep = std::chrono::milliseconds(2);
  policy.sleep_quantum = std::chrono::microseconds(100);
  mstar::detail::backoff b(policy);
  const auto start = std::chrono::steady_clock::now();
  while (b.sleeps() == 0)
    b.pause();
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(2));
  CHECK(b.yields() > 0);
}
