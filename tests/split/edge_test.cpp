// The edge on the host backend: rows arrive intact, a full ring pushes back, a slot is reused only
// after its reads landed, and the ordering checker reports a consumer that reads a slot without
// waiting on the copy's event (the planted bug).
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include <mstar/backend/host.hpp>
#include <mstar/worker/edge.hpp>

namespace {

struct codes {
  std::array<std::int32_t, 16> v{};
};
using host_edge = mstar::local_edge<mstar::host_backend, codes>;
static_assert(mstar::edge_transport<host_edge>);

// A producer step's outputs: written by a task on the producer's stream, as a forward does.
void produce(mstar::host_backend& b, mstar::host_stream s, codes* out, std::uint32_t rows, std::int32_t base) {
  b.enqueue(s, [out, rows, base] {
    for (std::uint32_t r = 0; r < rows; ++r)
      for (int k = 0; k < 16; ++k)
        out[r].v[k] = base + std::int32_t(r) * 100 + k;
  });
}

} // namespace

TEST_CASE("Edge.a producer step's rows reach the consumer's stream intact, with no ordering report") {
  mstar::host_backend b;
  auto producer = b.create_stream(), consumer = b.create_stream();
  {
    host_edge e(b, {.slots = 4, .max_rows = 8, .name = "codes"});
    std::array<codes, 8> src{}, dst{};
    for (std::int32_t step = 0; step < 20; ++step) { // five times round the ring
      produce(b, producer, src.data(), 8, step * 1000);
      const auto t = e.send(producer, src.data(), 8);
      b.synchronize(producer); // the producer's step "lands": the copy is part of it
      const codes* slot = e.receive(consumer, t);
      b.copy_to_host(dst.data(), slot, sizeof(codes) * 8, consumer);
      e.note_read(consumer, t);
      e.release(consumer, t, 8);
      b.synchronize(consumer);
      for (std::uint32_t r = 0; r < 8; ++r)
        CHECK(dst[r].v[3] == step * 1000 + std::int32_t(r) * 100 + 3);
    }
    CHECK(e.sends() == 20);
    CHECK(e.slots_free() == 4);
  }
  CHECK(b.checker().violation_count() == 0);
}

TEST_CASE("Edge.a full ring refuses try_send and send times out naming the fix; a consumed slot frees once its read "
          "landed") {
  mstar::host_backend b;
  auto producer = b.create_stream(), consumer = b.create_stream();
  host_edge e(b, {.slots = 2, .max_rows = 4, .name = "codes", .send_timeout = std::chrono::milliseconds(30)});
  std::array<codes, 4> src{};
  const auto t0 = e.send(producer, src.data(), 4);
  const auto t1 = e.send(producer, src.data(), 2);
  CHECK(e.slots_free() == 0);
  CHECK_FALSE(e.try_send(producer, src.data(), 1).has_value());
  CHECK_THROWS_WITH(e.send(producer, src.data(), 1),
                    doctest::Contains("raise edge_options::slots above the producer steps a consumer row waits for"));
  CHECK(e.full_waits() > 0);

  // A consumer step that reads slot t0 and is held on the device: the slot stays taken until it lands.
  std::atomic<bool> gate{false};
  e.receive(consumer, t0);
  b.enqueue(consumer, [&gate] {
    while (!gate.load()) std::this_thread::yield();
  });
  e.note_read(consumer, t0);
  e.release(consumer, t0, 4);
  CHECK_FALSE(e.try_send(producer, src.data(), 1).has_value()); // consumed, but the read has not landed
  gate.store(true);
  b.synchronize(consumer);
  const auto t2 = e.try_send(producer, src.data(), 1);
  REQUIRE(t2.has_value());
  CHECK(t2->slot == t0.slot);
  CHECK_THROWS_WITH(e.release(consumer, t0, 1), doctest::Contains("not the slot's current one")); // stale ticket

  // Rows whose requests ended are dropped: the slot frees with no read.
  e.drop(t1, 1);
  CHECK_THROWS_WITH(e.drop(t1, 2), doctest::Contains("release or drop each row once"));
  e.drop(t1, 1);
  e.drop(*t2, 1);
  b.synchronize(producer);
  CHECK(e.slots_free() == 2);
  CHECK(b.checker().violation_count() == 0);
}

TEST_CASE("Edge.the ordering checker reports a consumer that reads a ring slot without waiting on the copy's event "
          "(planted bug)") {
  mstar::host_backend b;
  auto producer = b.create_stream(), consumer = b.create_stream();
  host_edge e(b, {.slots = 2, .max_rows = 4, .name = "codes"});
  std::array<codes, 4> src{}, dst{};
  produce(b, producer, src.data(), 4, 7);
  const auto t = e.send(producer, src.data(), 4);
  // The bug: the consumer takes the slot's address and reads it on its stream with no wait. (The
  // stand-in read touches nothing, so the test itself has no data race; the checker judges at enqueue
  // time, so it reports the missing edge whether or not the copy happened to run first. A host thread
  // that synchronized on the producer would have ordered it: the consumer's worker never does.)
  const codes* slot = e.rows_of(t);
  b.enqueue(consumer, [slot] { (void)slot; });
  e.note_read(consumer, t);
  REQUIRE(b.checker().violation_count() == 1);
  const auto report = b.checker().violations().front().describe();
  CHECK(report.find("codes ring slot[" + std::to_string(t.slot) + "]") != std::string::npos);
  CHECK(report.find("now accessed on stream " + std::to_string(mstar::host_backend::index_of(consumer))) !=
        std::string::npos);
  e.release(consumer, t, 4);
  b.synchronize(consumer);
  b.synchronize(producer);

  // The same read through receive() is ordered: no new report.
  const auto t2 = e.send(producer, src.data(), 4);
  b.copy_to_host(dst.data(), e.receive(consumer, t2), sizeof(codes) * 4, consumer);
  e.note_read(consumer, t2);
  e.release(consumer, t2, 4);
  b.synchronize(consumer);
  b.synchronize(producer); // before the edge goes: no stream may still be waiting on its copy stream
  CHECK(b.checker().violation_count() == 1);
}

TEST_CASE("Backend.host timing events time the work between them, are pending until reached, and refuse plain events") {
  mstar::host_backend b;
  auto s = b.create_stream();
  auto from = b.create_timing_event(), to = b.create_timing_event(), plain = b.create_event();
  std::atomic<bool> gate{false};
  b.enqueue(s, [&gate] {
    while (!gate.load()) std::this_thread::yield();
  });
  b.record(from, s);
  b.enqueue(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(3)); });
  b.record(to, s);
  CHECK_FALSE(b.elapsed_ns(from, to).has_value()); // the stream has not reached them
  gate = true;
  b.synchronize(s);
  const auto ns = b.elapsed_ns(from, to);
  REQUIRE(ns.has_value());
  CHECK(*ns >= 3'000'000);
  CHECK_THROWS_WITH(b.elapsed_ns(from, plain), doctest::Contains("create_timing_event"));
  b.destroy_event(from);
  b.destroy_event(to);
  b.destroy_event(plain);
}

TEST_CASE("Edge.time_copies sums each copy's device time from its waits being met to its end, and counts a copy "
          "still pending when its slot was reused as unmeasured") {
  mstar::host_backend b;
  auto producer = b.create_stream(), consumer = b.create_stream();
  {
    host_edge e(b, {.slots = 1, .max_rows = 8, .name = "codes", .time_copies = true});
    std::array<codes, 8> src{};
    // A producer step that takes 50 ms before its rows exist: the copy waits for it, and the wait is not
    // copy time. A copy that counted the wait would measure at least 50 ms; the bound below leaves the
    // copy itself (microseconds) 25 ms, so a copy stream thread preempted mid-copy on a loaded machine
    // (under TSan in split_tests_tsan) does not fail the check, as it could with 5 ms against 4 ms.
    for (int step = 0; step < 3; ++step) {
      b.enqueue(producer, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
      produce(b, producer, src.data(), 8, step);
      const auto t = e.send(producer, src.data(), 8);
      e.receive(consumer, t);
      e.note_read(consumer, t);
      e.release(consumer, t, 8);
      b.synchronize(consumer);
    }
    b.synchronize(e.copy_stream());
    auto timed = e.copy_time();
    CHECK(timed.copies == 3);
    CHECK(timed.unmeasured == 0);
    CHECK(timed.max_ns < 25'000'000);

    // A copy held behind its producer, whose rows are all dropped unread: the slot frees at once, and
    // the next send finds the copy's events pending.
    std::atomic<bool> gate{false};
    b.enqueue(producer, [&gate] {
      while (!gate.load()) std::this_thread::yield();
    });
    const auto held = e.send(producer, src.data(), 8);
    e.drop(held, 8);
    const auto next = e.try_send(consumer, src.data(), 8); // another stream: it does not wait on the gate
    REQUIRE(next.has_value());
    gate = true;
    e.drop(*next, 8);
    b.synchronize(producer);
    b.synchronize(consumer);
    b.synchronize(e.copy_stream());
    timed = e.copy_time();
    CHECK(timed.unmeasured == 1);
    CHECK(timed.copies == 4);
  }
  CHECK(b.checker().violation_count() == 0);
}

TEST_CASE("Edge.time_copies is refused on a backend without timing events, naming the way out") {
  struct untimed : mstar::host_backend {
    // Hides the timing calls: this backend is a device_backend but not a timing_backend.
    void create_timing_event() = delete;
  };
  static_assert(mstar::device_backend<untimed> && !mstar::timing_backend<untimed>);
  untimed b;
  using untimed_edge = mstar::local_edge<untimed, codes>;
  CHECK_THROWS_WITH(untimed_edge(b, {.slots = 2, .max_rows = 2, .name = "codes", .time_copies = true}),
                    doctest::Contains("turn it off for this backend"));
}
