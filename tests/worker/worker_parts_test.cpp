// The worker's parts on their own, without threads or a model: the client inbox (order of submits
// and cancels, duplicate ids, idle, stop and the fatal error) and the GPU thread's ready queues (a step
// formed from a node's ready rows, cancelled rows handed back, per-key batches, refused rows held and
// released, a predicted step formed again at launch).
#include <mstar/worker/client_inbox.hpp>
#include <mstar/worker/ready_queues.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using inbox = mstar::detail::client_inbox<std::string>;

struct payload {
  std::uint32_t key = 0;
  bool urgent = false;
};
constexpr std::size_t nodes = 2;
using queues = mstar::detail::ready_queues<payload, nodes>;
using ready_row = queues::row_type;
using step_rows = mstar::detail::step_rows<payload>;

// ready_queues' environment: cancelled request indices, the rows handed back, the batch key from
// the payload, and the passes over a waiting node.
struct fake_env {
  std::set<std::uint32_t> cancelled_indices;
  std::vector<std::uint32_t> dropped;
  int waits = 0;
  bool cancelled(const mstar::row& r) const { return cancelled_indices.count(r.request.index) > 0; }
  void drop(const ready_row& rr) { dropped.push_back(rr.r.request.index); }
  std::uint32_t batch_key(std::uint8_t, const payload& p) const { return p.key; }
  bool urgent(std::uint8_t, const payload& p) const { return p.urgent; }
  void batch_waited() { ++waits; }
};

// The same without urgent(): an environment whose flow has no urgent hook.
struct env_without_urgent {
  int waits = 0;
  bool cancelled(const mstar::row&) const { return false; }
  void drop(const ready_row&) {}
  std::uint32_t batch_key(std::uint8_t, const payload& p) const { return p.key; }
  void batch_waited() { ++waits; }
};

queues make(std::uint32_t max_batch, std::uint32_t max_tokens = 1000,
            mstar::batching batch = mstar::batching::every_key) {
  std::array<mstar::node_options, nodes> o{};
  for (auto& n : o) {
    n.max_batch = max_batch;
    n.batch = batch;
  }
  return queues(o, 16, 8, max_tokens);
}

step_rows record() {
  step_rows r;
  r.size_for(8);
  return r;
}

ready_row row_of(std::uint32_t index, std::uint8_t node = 0, std::uint32_t key = 0, std::uint32_t tokens = 1) {
  ready_row rr;
  rr.r.request = {index, 1};
  rr.r.tokens = tokens;
  rr.node = node;
  rr.payload.key = key;
  return rr;
}

void push(queues& q, std::initializer_list<std::uint32_t> indices, std::uint8_t node = 0) {
  mstar::metrics::nanos now = 0;
  for (auto i : indices)
    q.arrive(row_of(i, node), now);
}

std::vector<std::uint32_t> indices_of(const step_rows& r) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t i = 0; i < r.count; ++i)
    v.push_back(r.rows[i].request.index);
  return v;
}

} // namespace

TEST_CASE("client_inbox: submits and cancels are taken in the client's order, a cancel after the submits before it") {
  inbox box(8);
  CHECK_FALSE(box.flag());
  CHECK(box.submit(1, "a"));
  box.cancel(7);
  CHECK(box.submit(2, "b"));
  box.wake(1);
  CHECK(box.flag());
  std::vector<inbox::submission_type> subs;
  std::vector<inbox::cancel_type> cancels;
  std::vector<mstar::request_id> wakes;
  CHECK_FALSE(box.take(subs, cancels, wakes));
  CHECK_FALSE(box.flag());
  REQUIRE(subs.size() == 2);
  CHECK(subs[0].id == 1);
  CHECK(subs[0].input == "a");
  CHECK(subs[1].id == 2);
  REQUIRE(cancels.size() == 1);
  CHECK(cancels[0] == inbox::cancel_type{1, 7});
  CHECK(wakes == std::vector<mstar::request_id>{1});
}

TEST_CASE("client_inbox: an id is refused while live and accepted again once it ended") {
  inbox box(8);
  CHECK(box.submit(5, "x"));
  CHECK_FALSE(box.submit(5, "y"));
  box.ended(5);
  CHECK(box.submit(5, "z"));
}

TEST_CASE("client_inbox: wait_idle returns once every submitted request ended") {
  inbox box(8);
  box.submit(1, "a");
  box.submit(2, "b");
  std::thread t([&] {
    box.ended(1);
    box.ended(2);
  });
  box.wait_idle(); // would block forever if an end were missed
  t.join();
  CHECK(box.submit(1, "again"));
}

TEST_CASE("client_inbox: after stop is asked, a submit is refused and take says stopping") {
  inbox box(8);
  box.request_stop();
  CHECK(box.stopping());
  CHECK_THROWS_WITH_AS(box.submit(1, "a"), "mstar::threaded_worker::submit: the worker is stopping", std::logic_error);
  std::vector<inbox::submission_type> subs;
  std::vector<inbox::cancel_type> cancels;
  std::vector<mstar::request_id> wakes;
  CHECK(box.take(subs, cancels, wakes));
}

TEST_CASE("client_inbox: a fatal error refuses submits with its message, and wait_idle rethrows the first") {
  inbox box(8);
  box.submit(1, "a");
  box.fatal(std::make_exception_ptr(std::runtime_error("boom")));
  box.fatal(std::make_exception_ptr(std::runtime_error("second")));
  CHECK(box.aborted());
  CHECK(box.fatal_why() == "the worker stopped on an error: boom");
  CHECK_THROWS_WITH_AS(box.submit(2, "b"),
                       "mstar::threaded_worker::submit: the worker stopped on an error: boom; stop() it and start a new one",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(box.wait_idle(), "boom", std::runtime_error);
  std::vector<inbox::submission_type> left;
  box.take_all(left);
  REQUIRE(left.size() == 1);
  CHECK(left[0].id == 1);
}

TEST_CASE("ready_queues: a step takes the node's ready rows in queue order up to its batch, handing cancelled rows back") {
  auto q = make(3);
  fake_env env;
  push(q, {4, 5, 6, 7, 8});
  env.cancelled_indices = {5};
  auto rec = record();
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{4, 6, 7});
  CHECK(env.dropped == std::vector<std::uint32_t>{5});
  CHECK(q.ready(0).size() == 1);
  CHECK_FALSE(q.form(1, false, rec, env)); // nothing ready on the other node
}

TEST_CASE("ready_queues: a step stops at max_tokens, but always takes its first row") {
  auto q = make(8, 10);
  fake_env env;
  mstar::metrics::nanos now = 0;
  q.arrive(row_of(1, 0, 0, 12), now);
  q.arrive(row_of(2, 0, 0, 4), now);
  auto rec = record();
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{1});
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{2});
}

TEST_CASE("ready_queues: a per_key node's step holds only its first row's key, the others keep their place") {
  auto q = make(8, 1000, mstar::batching::per_key);
  fake_env env;
  mstar::metrics::nanos now = 0;
  for (auto [index, key] : std::initializer_list<std::pair<std::uint32_t, std::uint32_t>>{{1, 7}, {2, 9}, {3, 7}, {4, 9}})
    q.arrive(row_of(index, 0, key), now);
  auto rec = record();
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{1, 3});
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{2, 4});
}

TEST_CASE("ready_queues: a waiting per_key node counts its rows key by key: a key's min_batch rows make a step of "
          "that key, the oldest row's wait one of the oldest row's key") {
  std::array<mstar::node_options, nodes> o{};
  for (auto& n : o) {
    n.max_batch = 8;
    n.batch = mstar::batching::per_key;
    n.min_batch = 3;
    n.max_wait = std::chrono::milliseconds(5);
  }
  queues q(o, 16, 8, 1000);
  fake_env env;
  // Rows 1 us apart: the node's mean gap falls below max_wait from its second row, so it waits.
  mstar::metrics::nanos t = 1'000'000'000;
  auto arrive = [&](std::uint32_t index, std::uint32_t key) {
    mstar::metrics::nanos now = t;
    q.arrive(row_of(index, 0, key), now);
    t += 1000;
  };
  arrive(1, 1);
  arrive(2, 8);
  arrive(3, 8);
  mstar::metrics::nanos now = t;
  CHECK_FALSE(q.batch_due(0, now, env)); // three rows, but no key has three
  CHECK(env.waits == 1);
  arrive(4, 8);
  now = t;
  REQUIRE(q.batch_due(0, now, env));
  auto rec = record();
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{2, 3, 4}); // key 8's, though row 1 is older
  now = t;
  CHECK_FALSE(q.batch_due(0, now, env)); // row 1 alone, 3 us old
  now = 1'000'000'000 + 5'000'000;       // row 1 has waited max_wait
  REQUIRE(q.batch_due(0, now, env));
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{1});
}

TEST_CASE("ready_queues: an urgent row makes its waiting node's step at once, of its key, which the key's other "
          "rows join; an environment without urgent() waits as before") {
  std::array<mstar::node_options, nodes> o{};
  for (const auto batch : {mstar::batching::per_key, mstar::batching::every_key}) {
    const bool keyed = batch == mstar::batching::per_key;
    INFO(std::string(keyed ? "per_key" : "every_key"));
    for (auto& n : o) {
      n.max_batch = 8;
      n.batch = batch;
      n.min_batch = keyed ? 3 : 4; // the three rows below fill no batch: per key two and one, in all three
      n.max_wait = std::chrono::milliseconds(5);
    }
    queues q(o, 16, 8, 1000), plain(o, 16, 8, 1000);
    fake_env env;
    env_without_urgent without;
    // Rows 1 us apart (the node's mean gap falls below max_wait from its second row, so it waits): two of key 8,
    // then one of key 1 that is urgent.
    mstar::metrics::nanos t = 1'000'000'000;
    auto arrive = [&](std::uint32_t index, std::uint32_t key, bool urgent) {
      auto rr = row_of(index, 0, key);
      rr.payload.urgent = urgent;
      mstar::metrics::nanos now = t;
      q.arrive(rr, now);
      now = t;
      plain.arrive(rr, now);
      t += 1000;
    };
    arrive(1, 8, false);
    arrive(2, 8, false);
    mstar::metrics::nanos now = t;
    CHECK_FALSE(q.batch_due(0, now, env)); // two rows of three, none urgent
    arrive(3, 1, true);
    now = t;
    CHECK_FALSE(plain.batch_due(0, now, without)); // no urgent(): still two of key 8 and one of key 1
    CHECK(without.waits == 1);
    now = t;
    REQUIRE(q.batch_due(0, now, env));
    auto rec = record();
    REQUIRE(q.form(0, false, rec, env));
    // per_key: the urgent row's key alone (row 3), though rows 1 and 2 are older; every_key: all three.
    CHECK(indices_of(rec) == (keyed ? std::vector<std::uint32_t>{3} : std::vector<std::uint32_t>{1, 2, 3}));
    if (keyed) {
      // An urgent row's key takes the key's other ready rows: row 4 (key 8, urgent) forms with rows 1 and 2.
      arrive(4, 8, true);
      now = t;
      REQUIRE(q.batch_due(0, now, env));
      REQUIRE(q.form(0, false, rec, env));
      CHECK(indices_of(rec) == std::vector<std::uint32_t>{1, 2, 4});
    }
  }
}

TEST_CASE("ready_queues: refused rows held come back in front of the queue, in their order, when released") {
  auto q = make(2);
  fake_env env;
  push(q, {1, 2, 3});
  auto rec = record();
  REQUIRE(q.form(0, false, rec, env));
  q.refused(rec, mstar::admit_action::hold);
  CHECK(rec.count == 0);
  CHECK(q.any_held());
  CHECK(q.ready(0).size() == 1);
  q.release_held();
  CHECK_FALSE(q.any_held());
  REQUIRE(q.form(0, false, rec, env));
  CHECK(indices_of(rec) == std::vector<std::uint32_t>{1, 2});
}

TEST_CASE("ready_queues: limit_batch halves the node's batch, and each admitted step doubles it back") {
  auto q = make(8);
  fake_env env;
  push(q, {1, 2, 3, 4, 5, 6});
  auto rec = record();
  REQUIRE(q.form(0, false, rec, env));
  REQUIRE(rec.count == 6);
  q.refused(rec, mstar::admit_action::limit_batch);
  CHECK(q.batch_limit(0) == 3);
  CHECK(q.ready(0).size() == 6); // back in front, in order
  q.admitted(0);
  CHECK(q.batch_limit(0) == 6);
  q.admitted(0);
  CHECK(q.batch_limit(0) == 8);
}

TEST_CASE("ready_queues: a predicted step is the rows ready now then the continuing rows, and forms in that order at launch") {
  auto q = make(8);
  fake_env env;
  push(q, {1, 2});
  auto running = record();
  REQUIRE(q.form(0, false, running, env)); // rows 1, 2 in flight
  push(q, {9});                            // a newcomer, ready now
  running.continues[1] = 0;                // row 2 is its request's last
  auto next = record();
  REQUIRE(q.predict(running, next, env));
  CHECK(indices_of(next) == std::vector<std::uint32_t>{9, 1});
  CHECK(next.predicted == 1);
  CHECK(next.speculative);
  // Row 1 lands and comes back ready, behind a row nobody predicted.
  push(q, {3, 1});
  REQUIRE(q.form_staged(next, env));
  CHECK_FALSE(next.speculative);
  CHECK(indices_of(next) == std::vector<std::uint32_t>{9, 1, 3}); // predicted order, then the rest
  CHECK(q.ready(0).empty());
}

TEST_CASE("ready_queues: a predicted row that was cancelled is handed back at launch and left out") {
  auto q = make(8);
  fake_env env;
  push(q, {1});
  auto running = record();
  REQUIRE(q.form(0, false, running, env));
  auto next = record();
  REQUIRE(q.predict(running, next, env));
  push(q, {1});
  env.cancelled_indices = {1};
  CHECK_FALSE(q.form_staged(next, env));
  CHECK(env.dropped == std::vector<std::uint32_t>{1});
}
