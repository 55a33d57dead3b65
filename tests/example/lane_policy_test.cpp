// lane_mode::automatic's chooser (mstar/worker/lane_policy.hpp) fed the way the worker feeds it, by a
// simulated device whose two arms cost what the test says: the chooser must end on the arm that costs
// the chain less, whichever arm it used before. A chooser that mixes the side step's time beside the
// chain (stretched) into its inline cost, or counts a side step on the chain stream as chain idle time,
// reinforces whichever arm it is on and fails these cases.
#include <doctest/doctest.h>

#include <mstar/worker/lane_policy.hpp>

namespace {

// One arm's costs, ms. Per side step the chain runs `chain_per_side` steps; beside the lane, one of
// them overlaps the side step.
struct device_model {
  double chain_alone = 2.3, chain_beside = 2.35; // a chain step alone, and beside a lane step
  double side_alone = 0.3, side_beside = 0.56;   // the side step on the chain stream, and on the lane
  double host_lane = 0.02;                       // host time the lane adds per side step
  int chain_per_side = 1;
  // Every prefill_every-th side step a prefill (another chain node, prefill ms) runs alone first.
  int prefill_every = 0;
  double prefill = 15.0;
  bool kinds = true; // feed the chain steps' kinds (false: every chain step of one kind)
  int decode_kinds = 1; // the decode chain steps take this many kinds in turn (1, 3, 4, ...)
  // Side steps per chain step (with chain_per_side 1): a chain step overlaps the group of this many side steps
  // before it, and is beside the lane when the last of them ran there; its slowdown is then the lane steps'
  // together.
  int sides_per_chain = 1;
  // What each arm costs the chain per side step.
  double lane_cost() const { return (chain_beside - chain_alone) / sides_per_chain + host_lane; }
  double chain_cost() const { return side_alone; }
  bool lane_better() const { return lane_cost() < chain_cost(); }
};

// chain step alone / beside, side step on the chain / on the lane, host time of the lane (ms), and
// chain steps per side step.
device_model costs(double alone, double beside, double side, double side_beside, double host, int chain_per_side) {
  return {alone, beside, side, side_beside, host, chain_per_side};
}

// `decisions` side steps, fed as the worker does: the decision, the side step's device time when it
// lands, the chain steps' device times (beside or not) and the chain stream's gap before each (the
// side step's time when it ran on the chain stream right before). Returns the share on the lane over
// the last `tail` decisions.
double simulate(mstar::lane_chooser& c, const device_model& d, int decisions, int tail) {
  int lane_tail = 0;
  const std::uint64_t prefill_kind = d.kinds ? 2 : 0;
  std::uint64_t chain_steps = 0;
  const auto decode_kind_next = [&] {
    const std::uint64_t turn = chain_steps++ % std::uint64_t(d.decode_kinds);
    return d.kinds ? (turn == 0 ? 1 : 2 + turn) : 0;
  };
  double group_inline = 0; // sides_per_chain > 1: the group's side steps on the chain stream, ns
  for (int i = 0; i < decisions; ++i) {
    if (d.prefill_every != 0 && i % d.prefill_every == 0) {
      c.chain_step(d.prefill * 1e6, false, prefill_kind);
      c.chain_gap(0, d.prefill * 1e6);
    }
    const bool lane = c.decide();
    if (i >= decisions - tail) lane_tail += lane;
    if (d.sides_per_chain > 1) {
      if (lane) {
        c.side_host(d.host_lane * 1e6);
        c.side_step(d.side_beside * 1e6);
      } else {
        c.side_step(d.side_alone * 1e6);
        group_inline += d.side_alone * 1e6;
      }
      if (i % d.sides_per_chain == d.sides_per_chain - 1) {
        const double t = (lane ? d.chain_beside : d.chain_alone) * 1e6;
        c.chain_step(t, lane, decode_kind_next());
        c.chain_gap(group_inline, t);
        group_inline = 0;
      }
      continue;
    }
    if (lane) {
      c.side_host(d.host_lane * 1e6);
      c.side_step(d.side_beside * 1e6);
      for (int k = 0; k < d.chain_per_side; ++k) {
        const bool beside = k == 0;
        const double t = (beside ? d.chain_beside : d.chain_alone) * 1e6;
        c.chain_step(t, beside, decode_kind_next());
        c.chain_gap(0, t);
      }
    } else {
      c.side_step(d.side_alone * 1e6);
      for (int k = 0; k < d.chain_per_side; ++k) {
        c.chain_step(d.chain_alone * 1e6, false, decode_kind_next());
        c.chain_gap(k == 0 ? d.side_alone * 1e6 : 0.0, d.chain_alone * 1e6);
      }
    }
  }
  return double(lane_tail) / double(tail);
}

// A change of load: `before` runs until the chooser settles on its better arm, then `after` for
// `decisions`; the chooser must end on after's better arm (share over the last 1000 decisions).
void check_follows(const device_model& before, const device_model& after, int before_decisions, int decisions) {
  REQUIRE(before.lane_better() != after.lane_better());
  mstar::lane_chooser c;
  const double settled = simulate(c, before, before_decisions, 1000);
  CHECK(before.lane_better() ? settled > 0.95 : settled < 0.05);
  const double followed = simulate(c, after, decisions, 1000);
  CHECK(after.lane_better() ? followed > 0.95 : followed < 0.05);
}

} // namespace

TEST_CASE("LaneChooser.a side step's time goes to the arm it ran on, and a side step on the chain stream is not idle "
          "time") {
  mstar::lane_chooser c;
  c.side_step(300.0); // before any decision: the chain stream
  CHECK(c.measurements().samples_side == 1);
  CHECK(c.measurements().samples_side_lane == 0);
  c.side_step(900.0, true);
  CHECK(c.measurements().side_ns == doctest::Approx(300.0));
  CHECK(c.measurements().side_lane_ns == doctest::Approx(900.0));
  // The side step on the chain stream fills 300 of the 500 ns gap before the next chain step.
  c.chain_gap(500.0, 1500.0);
  CHECK(c.measurements().gpu_idle_fraction == doctest::Approx(200.0 / 2000.0));
  // Only once: the next gap has no side step in it.
  mstar::lane_chooser d;
  d.side_step(300.0, false);
  d.chain_gap(500.0, 1500.0);
  d.chain_gap(500.0, 1500.0);
  CHECK(d.measurements().gpu_idle_fraction == doctest::Approx((0.1 + 0.25) / 2));
  // side_step(ns) follows the last decision.
  mstar::lane_policy_options o;
  o.min_samples = 100; // stays cold: alternates, first decision on the lane
  mstar::lane_chooser e(o);
  const bool first = e.decide();
  e.side_step(700.0);
  CHECK(first);
  CHECK(e.measurements().samples_side_lane == 1);
  CHECK_FALSE(e.decide());
  e.side_step(200.0);
  CHECK(e.measurements().samples_side == 1);
  CHECK(e.measurements().side_ns == doctest::Approx(200.0));
}

TEST_CASE("LaneChooser.ends on the better arm: H200-like costs, the lane pays") {
  const device_model h200; // the example's decode with a codec window beside it (docs/benchmarks.md, the lane study)
  REQUIRE(h200.lane_better());
  mstar::lane_chooser c;
  CHECK(simulate(c, h200, 2000, 1000) > 0.95);
}

TEST_CASE("LaneChooser.ends on the chain when the overlap costs more than the side step alone, though the side step "
          "beside the chain takes twice as long") {
  // GPU-bound (the seed's regime): beside the lane, the chain step slows by more than the whole side
  // step costs on the chain stream.
  const device_model gpu_bound = costs(4.8, 7.4, 2.2, 4.6, 0.004, 2);
  REQUIRE_FALSE(gpu_bound.lane_better()); // 2.6 ms beside against 2.2 ms on the chain
  mstar::lane_chooser c;
  CHECK(simulate(c, gpu_bound, 3000, 1000) < 0.05);
}

TEST_CASE("LaneChooser.weighs a chain step's slowdown by the side steps it overlapped: with three codec steps a "
          "decode step, the lane pays though one decode step slows by more than a codec step costs") {
  // Costs of the real 0.6B model's order at c = 64 on an H100 (docs/benchmarks.md, "Where the end-to-end time went":
  // a decode step 6.6 ms alone and 12.7 ms beside, a codec step 6.4 ms on the chain stream, 7.7 ms on the lane, and
  // more codec steps than decode steps beside them), the slowdown made a little larger than a codec step's cost.
  device_model real = costs(6.6, 13.2, 6.4, 7.7, 0.02, 1);
  real.sides_per_chain = 3;
  REQUIRE(real.lane_better()); // 6.6 / 3 + 0.02 ms against 6.4 ms a codec step
  mstar::lane_chooser c;
  CHECK(simulate(c, real, 3000, 1000) > 0.95);
  CHECK(c.measurements().beside_per_side == doctest::Approx(1.0 / 3.0).epsilon(0.1));
  // One codec step a decode step, the same costs: a decode step's slowdown is one codec step's alone, and the
  // chain stream is the better arm.
  device_model one = real;
  one.sides_per_chain = 1;
  REQUIRE_FALSE(one.lane_better()); // 6.62 ms against 6.4
  mstar::lane_chooser d;
  CHECK(simulate(d, one, 3000, 1000) < 0.05);
  CHECK(d.measurements().beside_per_side == doctest::Approx(1.0).epsilon(0.1));
}

TEST_CASE("LaneChooser.moves to the lane when it becomes the better arm after a spell on the chain") {
  // First the overlap is expensive (the chain is better); then it becomes cheap while each side step on
  // the chain stream stays long (the lane is better by 0.8 ms a step, 19% of a 4.3 ms cycle).
  const device_model before = costs(2.3, 5.3, 2.0, 2.4, 0.02, 1);
  device_model after = before;
  after.chain_beside = 3.5;
  // The beside arm is measured only on explored steps, so its average takes a few thousand decisions
  // to follow; afterwards the lane holds.
  check_follows(before, after, 2000, 6000);
}

TEST_CASE("LaneChooser.moves back to the chain when the overlap becomes expensive after a spell on the lane") {
  const device_model before; // H200-like: the lane pays
  const device_model after = costs(2.3, 3.0, 0.5, 1.2, 0.02, 1); // 0.72 ms beside against 0.5 ms on the chain
  check_follows(before, after, 2000, 6000);
}

TEST_CASE("LaneChooser.compares a chain step alone and beside within its kind: prefills running alone do not make the "
          "lane look free") {
  // The chain is better (0.62 ms beside against 0.4 ms on the chain stream), and a 15 ms prefill runs
  // alone before every third side step, as a worker's prefills run when no codec window is in flight.
  device_model d = costs(2.3, 2.9, 0.4, 0.8, 0.02, 1);
  d.prefill_every = 3;
  REQUIRE_FALSE(d.lane_better());
  mstar::lane_chooser c;
  CHECK(simulate(c, d, 3000, 1000) < 0.05);
  // Fed as one kind, the prefills raise "alone" above "beside" and the chooser ends on the lane.
  d.kinds = false;
  mstar::lane_chooser mixed;
  CHECK(simulate(mixed, d, 3000, 1000) > 0.5);
  // Per kind, the averages are the decode's: alone 2.3 ms, beside 2.9 ms.
  CHECK(c.measurements().chain_alone_ns == doctest::Approx(2.3e6));
  CHECK(c.measurements().chain_beside_ns == doctest::Approx(2.9e6));
}

TEST_CASE("LaneChooser.keeps a bounded table of chain-step kinds; a kind seen only one way does not count") {
  mstar::lane_policy_options o;
  o.min_samples = 1;
  mstar::lane_chooser c(o);
  for (std::uint64_t k = 0; k < 40; ++k) // more kinds than the table holds, each seen alone only
    c.chain_step(1000.0 + double(k), false, 100 + k);
  CHECK(c.measurements().samples_alone == 0); // no kind seen both ways: still cold
  CHECK(c.measurements().samples_beside == 0);
  CHECK(c.measurements().chain_alone_ns == 0);
  c.chain_step(2000.0, false, 7);
  c.chain_step(2500.0, true, 7);
  CHECK(c.measurements().samples_alone == 1);
  CHECK(c.measurements().samples_beside == 1);
  CHECK(c.measurements().chain_alone_ns == doctest::Approx(2000.0));
  CHECK(c.measurements().chain_beside_ns == doctest::Approx(2500.0));
}

TEST_CASE("LaneChooser.after the load changes, new chain-step kinds replace the least recently seen ones and take over "
          "the averages") {
  mstar::lane_chooser c;
  // The table fills with 16 kinds, each seen alone and beside many times (slowdown 0.1 us).
  for (int round = 0; round < 50; ++round)
    for (std::uint64_t k = 0; k < 16; ++k) {
      c.chain_step(1000.0, false, k);
      c.chain_step(1100.0, true, k);
    }
  CHECK(c.measurements().chain_beside_ns - c.measurements().chain_alone_ns == doctest::Approx(100.0));
  // Then only two new kinds run, taking turns, with a 2 us slowdown beside the lane. Evicting the
  // kind with the fewest samples would have them evict each other for ever; by recency they stay.
  // The order: 100 alone, 101 alone, 100 beside, 101 beside, ...
  for (int i = 0; i < 8000; ++i) {
    const std::uint64_t k = 100 + std::uint64_t(i % 2);
    const bool beside = (i / 2) % 2 == 1;
    c.chain_step(beside ? 3000.0 : 1000.0, beside, k);
  }
  CHECK(c.measurements().chain_beside_ns - c.measurements().chain_alone_ns > 1500.0);
}

TEST_CASE("LaneChooser.set() measurements stand until some chain-step kind has been seen both alone and beside") {
  mstar::lane_chooser c;
  c.set({.chain_alone_ns = 1000, .chain_beside_ns = 1200, .side_ns = 800, .samples_alone = 50, .samples_beside = 50,
         .samples_side = 50});
  c.chain_step(5000.0, false, 3); // a kind seen one way only: nothing to compare yet
  CHECK(c.measurements().samples_alone == 50);
  CHECK(c.measurements().chain_alone_ns == doctest::Approx(1000.0));
  c.chain_step(5500.0, true, 3);
  CHECK(c.measurements().samples_alone == 1);
  CHECK(c.measurements().chain_beside_ns - c.measurements().chain_alone_ns == doctest::Approx(500.0));
}

TEST_CASE("LaneChooser.explores explore_stretch times less often while the rule is clear, and as often as before near "
          "the line") {
  // The H200's case (docs/benchmarks.md, the lane study): a codec step costs 2 ms on the chain stream and nearly nothing
  // beside the decode. Exploring 1 decision in 32 there cost auto 3-4 % of its throughput next to `on`.
  const device_model clear = costs(2.5, 2.51, 2.0, 1.0, 0.01, 1);
  REQUIRE(clear.lane_better());
  mstar::lane_chooser c;
  simulate(c, clear, 200, 1); // warm
  const auto chain0 = c.decisions_on_chain(), explored0 = c.decisions_explored();
  CHECK(simulate(c, clear, 4096, 4096) > 0.99);
  // 1 in 32 x 8 = 256: 16 explorations in 4096 decisions (4096 / 32 = 128 at the old rate).
  CHECK(c.decisions_explored() - explored0 == 16);
  CHECK(c.decisions_on_chain() - chain0 == 16);
  // Near the line (lane better by 0.15 of the side step: under clear_margin) it explores 1 in 32.
  const device_model close = costs(2.5, 2.76, 0.32, 0.5, 0.01, 1);
  REQUIRE(close.lane_better());
  mstar::lane_chooser n;
  simulate(n, close, 200, 1);
  const auto near0 = n.decisions_explored();
  CHECK(simulate(n, close, 4096, 4096) > 0.9);
  CHECK(n.decisions_explored() - near0 == 128);
  // explore_stretch 1: the old rate everywhere.
  mstar::lane_policy_options o;
  o.explore_stretch = 1;
  mstar::lane_chooser old(o);
  simulate(old, clear, 200, 1);
  const auto old0 = old.decisions_explored();
  simulate(old, clear, 4096, 4096);
  CHECK(old.decisions_explored() - old0 == 128);
}

TEST_CASE("LaneChooser.options that cannot work are refused with the reason") {
  mstar::lane_policy_options o;
  o.explore_stretch = 0;
  CHECK_THROWS_WITH_AS(mstar::lane_chooser{o}, doctest::Contains("explore_stretch is 0"), std::invalid_argument);
  o = {};
  o.clear_margin = -0.1;
  CHECK_THROWS_WITH_AS(mstar::lane_chooser{o}, doctest::Contains("clear_margin"), std::invalid_argument);
}

TEST_CASE("LaneChooser.with rare exploration, a kind that stopped running beside does not come back into the averages") {
  // Two decode kinds ran beside cheaply (the lane pays); then only one runs, three chain steps per
  // side step, and beside it costs more than the side step on the chain: the rule is clearly on the
  // chain and the lane is seen only by exploring (1 in 256). The old kind's weight decays with every
  // chain step; a fixed floor under which lifetime counts took over brought its cheap overlap back
  // in after each quiet spell, and the rule flipped to the lane (180 times in 20000 decisions).
  device_model before = costs(2.3, 2.35, 0.5, 0.8, 0.02, 3); // kinds 1, 3, 1 | 3, 1, 3 | ...: each
  before.decode_kinds = 2;                                    // runs beside and alone
  const device_model after = costs(2.3, 2.9, 0.4, 0.8, 0.02, 3);
  REQUIRE(before.lane_better());
  REQUIRE_FALSE(after.lane_better());
  mstar::lane_chooser c;
  CHECK(simulate(c, before, 3000, 1000) > 0.95);
  simulate(c, after, 10000, 1);
  const auto lane0 = c.decisions_on_lane(), explored0 = c.decisions_explored();
  simulate(c, after, 20000, 1);
  // Every decision on the lane is an exploration (the rule itself never picks it).
  CHECK(c.decisions_on_lane() - lane0 == c.decisions_explored() - explored0);
  CHECK(c.decisions_explored() - explored0 <= 20000 / 256 + 1);
}

TEST_CASE("LaneChooser.with rare exploration, a chain step alone measured only by exploring still follows a change") {
  // Every chain step overlaps a lane step (one chain step per side step), so "chain step alone" is
  // measured only on explored decisions. When the chain step alone gets faster (2.3 -> 1.9 ms) the
  // overlap's slowdown (now 0.45 ms) exceeds the side step on the chain (0.4 ms): the chooser must
  // move to the chain about as fast as when it explored 1 in 32 (an unweighted sample every 256
  // decisions took 8700 decisions; 1 in 32, 1600).
  const device_model before = costs(2.3, 2.35, 0.4, 0.8, 0.02, 1);
  device_model after = before;
  after.chain_alone = 1.9;
  check_follows(before, after, 3000, 4000);
}
