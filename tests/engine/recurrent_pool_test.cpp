// The recurrent state pool (invariant 5): layer-major storage, a LIFO free list, the slot 0 sink, a
// generation per slot, double releases refused, a full pool refusing with a reason, per-row plans,
// and teardown zeroing on the owner stream before any reuse.
#include <doctest/doctest.h>

#include "engine/engine_test_model.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace engine_test;

namespace {

using pool_t = mstar::recurrent_state_pool<mstar::host_backend, float>;

struct fixture {
  mstar::host_backend backend;
  mstar::engine_options options = small_options();
  mstar::request_table requests{options.max_requests};
  mstar::resource_desc desc = State::descriptor();
  pool_t pool{mstar::resource_context<mstar::host_backend>{&backend, &desc, &options, &requests}};
  mstar::host_stream chain = backend.create_stream();
  mstar::host_stream lane = backend.create_stream();
  std::vector<std::byte> buffer = std::vector<std::byte>(4096);

  mstar::request_ref add(mstar::request_id id) { return *requests.add(id); }
  mstar::step_view view(std::span<const mstar::row> rows, std::uint32_t bucket = 0) {
    return mstar::step_view{2, "codec", rows, bucket ? bucket : static_cast<std::uint32_t>(rows.size()), 0};
  }
  mstar::plan_arena arena() { return mstar::plan_arena(buffer.data(), buffer.data(), buffer.size()); }
  bool slot_is_zero(std::int32_t slot) const {
    for (std::uint32_t l = 0; l < pool.layers(); ++l)
      for (std::size_t e = 0; e < pool.state_elements(); ++e)
        if (pool.state(l, slot)[e] != 0.0f) return false;
    return true;
  }
  void fill_slot(std::int32_t slot, float v) {
    for (std::uint32_t l = 0; l < pool.layers(); ++l)
      for (std::size_t e = 0; e < pool.state_elements(); ++e)
        pool.state(l, slot)[e] = v;
  }
};

struct gate {
  std::atomic<bool> open{false};
};

} // namespace

TEST_CASE("RecurrentPool.storage is layer-major, one segment per layer, zero at load") {
  fixture f;
  REQUIRE(f.pool.layers() == 2);
  REQUIRE(f.pool.slots() == 4);
  REQUIRE(f.pool.state_elements() == 6);
  const auto segs = f.pool.segments();
  REQUIRE(segs.size() == 2);
  for (std::uint32_t l = 0; l < 2; ++l) {
    CHECK(segs[l].pool_layer == f.pool.state(l, 0));
    CHECK(segs[l].slot_count == 4);
    CHECK(segs[l].state_elems == 6);
    for (std::uint32_t s = 0; s < 4; ++s)
      CHECK(f.pool.state(l, s) == f.pool.state(0, 0) + (l * 4 + s) * 6);
  }
  for (std::int32_t s = 0; s < 4; ++s)
    CHECK(f.slot_is_zero(s));
  CHECK(f.pool.capacity() == 3);
  CHECK(f.pool.free_count() == 3);
}

TEST_CASE("RecurrentPool.the free list is LIFO and never hands out the sink") {
  fixture f;
  auto a = f.add(1), b = f.add(2), c = f.add(3);
  const auto ha = *f.pool.reserve(a, 0), hb = *f.pool.reserve(b, 0), hc = *f.pool.reserve(c, 0);
  CHECK(ha.slot == 1);
  CHECK(hb.slot == 2);
  CHECK(hc.slot == 3);
  f.pool.release(hb, f.lane);
  f.pool.release(ha, f.lane);
  auto d = f.add(4), e = f.add(5);
  CHECK(f.pool.reserve(d, 0)->slot == 1); // freed last, reused first
  CHECK(f.pool.reserve(e, 0)->slot == 2);
  f.backend.synchronize(f.lane);
}

TEST_CASE("RecurrentPool.a full pool refuses with a reason and reserves nothing") {
  fixture f;
  std::vector<mstar::row> rows;
  for (int i = 0; i < 3; ++i)
    rows.push_back({f.add(i)});
  REQUIRE_FALSE(f.pool.admit(f.view(rows)).has_value());
  CHECK(f.pool.free_count() == 0);
  CHECK_FALSE(f.pool.ask(1));

  mstar::row more[] = {{f.add(10)}, {f.add(11)}};
  const auto why = f.pool.admit(f.view(more));
  REQUIRE(why.has_value());
  CHECK(why->resource == "codec_state");
  const std::string text(why->message());
  CHECK(text.find("codec_state is full") != std::string::npos);
  CHECK(text.find("2 row(s) need a new slot and 0 of 3 slots are free") != std::string::npos);
  CHECK_FALSE(f.pool.find(more[0].request, 0).has_value());
  CHECK(f.pool.stats().refusals == 1);

  mstar::refusal r;
  CHECK_FALSE(f.pool.reserve(more[0].request, 0, &r).has_value());
  CHECK(std::string(r.message()).find("0 of 3") != std::string::npos);
}

TEST_CASE("RecurrentPool.a step needing more slots than are free takes none, not the ones that were free") {
  fixture f;
  mstar::row first[] = {{f.add(1)}, {f.add(2)}};
  REQUIRE_FALSE(f.pool.admit(f.view(first)).has_value());
  REQUIRE(f.pool.free_count() == 1);
  mstar::row more[] = {{f.add(10)}, {f.add(11)}}; // two new rows, one free slot
  const auto why = f.pool.admit(f.view(more));
  REQUIRE(why.has_value());
  CHECK(std::string(why->message()).find("2 row(s) need a new slot and 1 of 3 slots are free") != std::string::npos);
  CHECK(f.pool.free_count() == 1); // all or nothing: the free slot is still free
  CHECK_FALSE(f.pool.find(more[0].request, 0).has_value());
  CHECK_FALSE(f.pool.find(more[1].request, 0).has_value());
  mstar::row one[] = {{f.add(12)}}; // another step can take it
  CHECK_FALSE(f.pool.admit(f.view(one)).has_value());
  CHECK(f.pool.free_count() == 0);
}

TEST_CASE("RecurrentPool.admit holds one slot per (request, label) and is idempotent") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a, 1, 0}, {a, 1, 1}};
  REQUIRE_FALSE(f.pool.admit(f.view(rows)).has_value());
  const auto s0 = f.pool.find(a, 0), s1 = f.pool.find(a, 1);
  REQUIRE(s0.has_value());
  REQUIRE(s1.has_value());
  CHECK(s0->slot != s1->slot);
  REQUIRE_FALSE(f.pool.admit(f.view(rows)).has_value());
  CHECK(f.pool.find(a, 0) == s0);
  CHECK(f.pool.free_count() == 1);
  mstar::row bad[] = {{a, 1, 7}};
  CHECK_THROWS_WITH_AS(f.pool.admit(f.view(bad)), doctest::Contains("beyond engine_options.max_labels"),
                       mstar::resource_error);
}

TEST_CASE("RecurrentPool.a handle kept past its release is stale and releasing it is an error") {
  fixture f;
  auto a = f.add(1), b = f.add(2);
  const auto h = *f.pool.reserve(a, 0);
  CHECK(f.pool.is_current(h));
  f.pool.release(h, f.lane);
  CHECK_FALSE(f.pool.is_current(h));
  const auto h2 = *f.pool.reserve(b, 0); // the same slot, a new generation
  REQUIRE(h2.slot == h.slot);
  CHECK(h2.generation == h.generation + 1);
  CHECK_THROWS_WITH_AS(f.pool.release(h, f.lane), doctest::Contains("stale handle for slot 1"), mstar::resource_error);
  CHECK(f.pool.is_current(h2)); // the new owner keeps it
  CHECK(f.pool.free_count() == 2);
  f.backend.synchronize(f.lane);
}

TEST_CASE("RecurrentPool.a double release is an error and never puts a slot twice in the free list") {
  fixture f;
  auto a = f.add(1);
  const auto h = *f.pool.reserve(a, 0);
  f.pool.release(h, f.lane);
  CHECK(f.pool.free_count() == 3);
  CHECK_THROWS_WITH_AS(f.pool.release(h, f.lane), doctest::Contains("released twice"), mstar::resource_error);
  CHECK(f.pool.free_count() == 3);
  std::set<std::int32_t> handed;
  for (int i = 0; i < 3; ++i)
    handed.insert(f.pool.reserve(f.add(10 + i), 0)->slot);
  CHECK(handed == std::set<std::int32_t>{1, 2, 3}); // three distinct slots: no duplicate was pushed
  CHECK_FALSE(f.pool.reserve(f.add(20), 0).has_value());
  CHECK_THROWS_WITH_AS(f.pool.release({0, 0}, f.lane), doctest::Contains("slot 0 is the sink"), mstar::resource_error);
  f.backend.synchronize(f.lane);
}

TEST_CASE("RecurrentPool.plan gives each row its slot and whether it holds state, padding rows the sink") {
  fixture f;
  auto a = f.add(1), b = f.add(2);
  mstar::row rows[] = {{a}, {b}};
  const auto v = f.view(rows, 4);
  REQUIRE_FALSE(f.pool.admit(v).has_value());
  auto arena = f.arena();
  f.pool.plan(v, arena, f.lane);
  auto p = f.pool.current_plan();
  REQUIRE(p.bucket == 4);
  REQUIRE(p.rows == 2);
  CHECK(p.host_slots[0] == f.pool.find(a, 0)->slot);
  CHECK(p.host_slots[1] == f.pool.find(b, 0)->slot);
  CHECK(p.host_slots[2] == 0);
  CHECK(p.host_slots[3] == 0);
  for (int i = 0; i < 4; ++i)
    CHECK(p.host_has_state[i] == 0);
  f.pool.commit(v);
  arena = f.arena();
  f.pool.plan(v, arena, f.lane);
  p = f.pool.current_plan();
  CHECK(p.host_has_state[0] == 1); // committed: the state is valid
  CHECK(p.host_has_state[1] == 1);
  CHECK(p.host_has_state[2] == 0); // padding never has state
  f.backend.synchronize(f.lane);
}

TEST_CASE("RecurrentPool.a staged plan whose slot was released and handed out again is stale and is not promoted") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a}};
  const auto v = f.view(rows);
  REQUIRE_FALSE(f.pool.admit(v).has_value());
  auto arena = f.arena();
  f.pool.plan(v, arena, f.lane);
  f.pool.commit(v); // the slot holds state
  REQUIRE_FALSE(f.pool.pre_admit(v).has_value());
  arena = f.arena();
  f.pool.pre_plan(v, arena);
  const auto h = *f.pool.find(a, 0);
  // The slot is released and the same request takes it again: the same slot number, a new generation,
  // zeroed, so the staged "has state" is wrong.
  f.pool.release(h, f.lane);
  const auto again = *f.pool.reserve(a, 0);
  REQUIRE(again.slot == h.slot);
  REQUIRE(again.generation == h.generation + 1);
  CHECK_FALSE(f.pool.promote(v, f.lane));
  CHECK(f.pool.stats().stale_promotes == 1);
  arena = f.arena();
  f.pool.plan(v, arena, f.lane);
  CHECK(f.pool.current_plan().host_has_state[0] == 0); // planned afresh: a zeroed slot has no state
  f.backend.synchronize(f.lane);
}

TEST_CASE("RecurrentPool.planning a row that holds no slot is an error, not a silent sink") {
  fixture f;
  mstar::row rows[] = {{f.add(1)}};
  auto arena = f.arena();
  CHECK_THROWS_WITH_AS(f.pool.plan(f.view(rows), arena, f.lane), doctest::Contains("holds no slot"),
                       mstar::resource_error);
}

TEST_CASE("RecurrentPool.teardown zeroes the slot on the stream it is given, and the slot is free at once") {
  fixture f;
  auto a = f.add(1);
  const auto h = *f.pool.reserve(a, 0);
  f.fill_slot(h.slot, 5.0f);
  gate g;
  f.backend.enqueue(f.lane, [&g] {
    while (!g.open.load())
      std::this_thread::yield();
  });
  f.pool.remove_request(a, f.lane);
  CHECK(f.pool.free_count() == 3);
  CHECK_FALSE(f.pool.is_current(h));
  f.backend.synchronize(f.chain);
  CHECK_FALSE(f.slot_is_zero(h.slot)); // the zero waits on the lane, behind the gate
  g.open.store(true);
  f.backend.synchronize(f.lane);
  CHECK(f.slot_is_zero(h.slot));
  CHECK(f.slot_is_zero(0));
  CHECK(f.pool.stats().removes == 1);
}

TEST_CASE("RecurrentPool.teardown frees and zeroes the slot of every label the request holds") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a, 1, 0}, {a, 1, 1}};
  REQUIRE_FALSE(f.pool.admit(f.view(rows)).has_value());
  const auto s0 = f.pool.find(a, 0)->slot, s1 = f.pool.find(a, 1)->slot;
  f.fill_slot(s0, 3.0f);
  f.fill_slot(s1, 4.0f);
  REQUIRE(f.pool.free_count() == 1);
  f.pool.remove_request(a, f.lane);
  CHECK(f.pool.free_count() == 3); // nothing leaks: both labels' slots are back
  CHECK_FALSE(f.pool.find(a, 1).has_value());
  f.backend.synchronize(f.lane);
  CHECK(f.slot_is_zero(s0));
  CHECK(f.slot_is_zero(s1));
}

TEST_CASE("RecurrentPool.a slot last used on the chain and torn down on the lane is zeroed on the lane") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a}};
  const auto v = f.view(rows);
  REQUIRE_FALSE(f.pool.admit(v).has_value());
  auto arena = f.arena();
  f.pool.plan(v, arena, f.chain);
  f.pool.commit(v); // the slot's last use is on the chain
  const auto slot = f.pool.find(a, 0)->slot;
  f.backend.synchronize(f.chain);
  f.fill_slot(slot, 5.0f);
  gate g;
  f.backend.enqueue(f.lane, [&g] {
    while (!g.open.load())
      std::this_thread::yield();
  });
  f.pool.remove_request(a, f.lane); // the owner stream is the lane: the zero goes behind the lane's work
  f.backend.synchronize(f.chain);
  CHECK_FALSE(f.slot_is_zero(slot)); // not run on the chain
  g.open.store(true);
  f.backend.synchronize(f.lane);
  CHECK(f.slot_is_zero(slot));
  CHECK(f.backend.checker().violation_count() == 0);
}

TEST_CASE("RecurrentPool.a slot used on one stream and zeroed or reused on another is fenced, and the checker agrees") {
  fixture f;
  auto a = f.add(1);
  mstar::row rows[] = {{a}};
  const auto v = f.view(rows);
  REQUIRE_FALSE(f.pool.admit(v).has_value());
  auto arena = f.arena();
  f.pool.plan(v, arena, f.lane);
  f.pool.commit(v); // noted on the lane
  CHECK(f.pool.fences() == 0);
  f.pool.remove_request(a, f.chain); // a teardown on the chain: fenced after the lane's use
  CHECK(f.pool.fences() == 1);
  auto b = f.add(2);
  mstar::row rows_b[] = {{b}};
  const auto vb = f.view(rows_b);
  REQUIRE_FALSE(f.pool.admit(vb).has_value());
  REQUIRE(f.pool.find(b, 0)->slot == 1); // LIFO: the slot just zeroed on the chain
  arena = f.arena();
  f.pool.plan(vb, arena, f.lane); // the lane waits for the chain's zero
  f.pool.commit(vb);
  CHECK(f.pool.fences() == 2);
  f.backend.synchronize(f.lane);
  CHECK(f.backend.checker().violation_count() == 0);
}
