// The host backend's stream-ordering checker: an access to a slot from another stream with no event
// edge since the last access is reported; stream order, event waits (direct or through a third
// stream) and host synchronization order accesses.
#include <doctest/doctest.h>

#include <mstar/backend/host.hpp>

#include <string>

namespace {
struct fixture {
  mstar::host_backend backend;
  mstar::host_stream chain = backend.create_stream();
  mstar::host_stream lane = backend.create_stream();
  mstar::region_id pool = backend.track_region("codec_state", 8);
  std::size_t reports() const { return backend.checker().violation_count(); }
};
} // namespace

TEST_CASE("Ordering.the seed's zero race is reported: a slot zeroed on the chain and reused on the lane with no wait") {
  fixture f;
  // Teardown zeroes slot 3 on the chain stream (the main thread's stream in the seed) ...
  f.backend.note_access(f.chain, f.pool, 3);
  // ... and the LIFO free list hands slot 3 to a new request whose first window runs on the lane.
  f.backend.note_access(f.lane, f.pool, 3);
  REQUIRE(f.reports() == 1);
  const auto v = f.backend.checker().violations().front();
  CHECK(v.region == "codec_state");
  CHECK(v.index == 3);
  CHECK(v.last_stream == mstar::host_backend::index_of(f.chain));
  CHECK(v.stream == mstar::host_backend::index_of(f.lane));
  const auto text = v.describe();
  CHECK(text.find("codec_state[3]") != std::string::npos);
  CHECK(text.find("Record an event on stream") != std::string::npos);
}

TEST_CASE("Ordering.the correct order passes: an event recorded after the zero, waited on by the lane") {
  fixture f;
  auto zeroed = f.backend.create_event();
  f.backend.note_access(f.chain, f.pool, 3);
  f.backend.record(zeroed, f.chain);
  f.backend.wait(f.lane, zeroed);
  f.backend.note_access(f.lane, f.pool, 3);
  CHECK(f.reports() == 0);
}

TEST_CASE("Ordering.an event recorded before the access does not order it") {
  fixture f;
  auto early = f.backend.create_event();
  f.backend.record(early, f.chain);
  f.backend.note_access(f.chain, f.pool, 5);
  f.backend.wait(f.lane, early);
  f.backend.note_access(f.lane, f.pool, 5);
  CHECK(f.reports() == 1);
}

TEST_CASE("Ordering.an event recorded after the access but never waited on does not order it") {
  fixture f;
  auto zeroed = f.backend.create_event();
  f.backend.note_access(f.chain, f.pool, 3);
  f.backend.record(zeroed, f.chain); // recorded, but the lane never waits on it
  f.backend.note_access(f.lane, f.pool, 3);
  CHECK(f.reports() == 1);
  // A wait on it afterwards orders the lane's next access, not the one before the wait.
  f.backend.wait(f.lane, zeroed);
  f.backend.note_access(f.lane, f.pool, 3);
  CHECK(f.reports() == 1);
}

TEST_CASE("Ordering.a step's access to several slots checks every slot, not only the first") {
  fixture f;
  const std::int32_t chain_slots[] = {1, 2, 3};
  const std::int32_t lane_slots[] = {5, 6, 3}; // only the last one was touched by the chain
  f.backend.note_accesses(f.chain, f.pool, chain_slots);
  f.backend.note_accesses(f.lane, f.pool, lane_slots);
  REQUIRE(f.reports() == 1);
  CHECK(f.backend.checker().violations()[0].index == 3);
}

TEST_CASE("Ordering.accesses on one stream are ordered by the stream, whatever the slot's history") {
  fixture f;
  for (std::uint32_t i = 0; i < 8; ++i) {
    f.backend.note_access(f.lane, f.pool, i);
    f.backend.note_access(f.lane, f.pool, i);
  }
  CHECK(f.reports() == 0);
}

TEST_CASE("Ordering.an edge through a third stream orders the access (happens-before is transitive)") {
  fixture f;
  auto third = f.backend.create_stream();
  auto e1 = f.backend.create_event();
  auto e2 = f.backend.create_event();
  f.backend.note_access(f.chain, f.pool, 1);
  f.backend.record(e1, f.chain);
  f.backend.wait(third, e1);
  f.backend.record(e2, third);
  f.backend.wait(f.lane, e2);
  f.backend.note_access(f.lane, f.pool, 1);
  CHECK(f.reports() == 0);
}

TEST_CASE("Ordering.a host thread that synchronized on a stream orders what it enqueues next") {
  fixture f;
  f.backend.note_access(f.chain, f.pool, 2);
  f.backend.synchronize(f.chain);
  f.backend.note_access(f.lane, f.pool, 2);
  CHECK(f.reports() == 0);
  // Another thread did not synchronize: its access is unordered after the lane's.
  std::thread([&] { f.backend.note_access(f.chain, f.pool, 2); }).join();
  CHECK(f.reports() == 1);
}

TEST_CASE("Ordering.a write after another stream's access is reported too (the second writer must wait)") {
  fixture f;
  auto e = f.backend.create_event();
  f.backend.note_access(f.lane, f.pool, 4);
  f.backend.record(e, f.lane);
  f.backend.wait(f.chain, e);
  f.backend.note_access(f.chain, f.pool, 4); // ordered
  f.backend.note_access(f.lane, f.pool, 4);  // the lane never waited on the chain's access
  CHECK(f.reports() == 1);
  f.backend.checker().clear_violations();
  CHECK(f.reports() == 0);
}

TEST_CASE("Ordering.a backend without checks records nothing") {
  mstar::host_backend backend(mstar::host_backend_options{.check_ordering = false});
  auto a = backend.create_stream();
  auto b = backend.create_stream();
  auto r = backend.track_region("codec_state", 4);
  CHECK_FALSE(r.valid());
  backend.note_access(a, r, 1);
  backend.note_access(b, r, 1);
  CHECK(backend.checker().violation_count() == 0);
}
