// lane_mode::automatic: whether a side step should run beside the chain (on the lane stream) or on
// the chain stream, decided per step from what the worker measured over a window of recent steps.
//
// Inputs (lane_measurements), each an exponential moving average over about `window` steps:
//   chain_alone_ns    device time of a chain step that ran with no lane step beside it
//   chain_beside_ns   device time of a chain step that overlapped a lane step
//   side_ns           device time of a side step run on the chain stream: what it costs there
//   side_lane_ns      device time of a side step run on the lane (stretched by the chain step beside
//                     it; reported, not used by the rule)
//   gpu_idle_fraction the chain stream's idle share: the gaps between one chain step's end and the
//                     next one's start, less the side steps that ran on the chain stream in them,
//                     over the whole span
//   side_host_ns      host time the lane adds on the GPU thread per side step (its launch on the
//                     lane: admit, plan, forward launch, commit; its landing poll is not timed)
//   beside_per_side   chain steps that overlapped a lane step per side step run on the lane, over
//                     about `window` chain steps (1 until both have been seen)
//
// Each side step's time goes to side_ns or side_lane_ns by where it ran: side_step(ns, on_lane), or
// side_step(ns) for the side step of the last decide() (a worker has at most one side step in flight;
// before any decision, the chain stream). Keeping the two apart matters: a side step beside a chain
// step takes longer than alone (the two share the device), and counting those times as the inline
// cost made the rule favour the lane more the more it used it; likewise a side step on the chain
// stream counted as chain idle time made the rule favour the chain more the more it used it. Either
// way the chooser could stay on the worse arm (tests/example/lane_policy_test.cpp simulates both).
//
// The rule (beside_pays): on the chain stream, a side step delays the chain by the part of it that does
// not fall into the chain's idle gaps, side_ns * (1 - gpu_idle_fraction). Beside it, it costs the chain
// the slowdown it causes, (chain_beside_ns - chain_alone_ns) * beside_per_side (the two compete for the
// device; a chain step's slowdown is shared by the side steps it overlapped, or one side step slows
// several chain steps), plus the host time the lane adds. The lane pays when the first exceeds the
// second by more than `margin` of side_ns. So a GPU-bound worker (no idle gaps, and a slowdown close to side_ns:
// nothing to overlap) keeps the codec on the chain, and a worker with idle device time or a cheap overlap runs it
// beside.
//
// Chain steps are compared within a kind (chain_step's third argument: the worker passes the node
// and its padding bucket): chain_alone_ns and chain_beside_ns are the per-kind averages, weighted by
// how often each kind ran beside, over the kinds seen both ways. Mixing kinds compared prefills
// (long, and mostly alone) with decodes (short, and mostly beside), which made beside look faster.
//
// The chooser (lane_chooser) needs both arms measured: until each of "chain step alone", "chain step
// beside" and "side step" has min_samples samples it alternates lane and chain; afterwards it follows
// the rule, and every explore_every-th decision takes the other arm once so that the arm it is not
// using keeps being measured (the GPU's load changes). Exploring costs what the other arm costs more:
// on the H200 (docs/benchmarks.md, the lane study) a codec step explored on the chain stream took 2 ms of chain time
// against about nothing on the lane, and 1 step in 32 took 3-4 % off auto's throughput next to `on`.
// So when the rule is clear (the arms differ by at least clear_margin of side_ns) the chooser explores
// explore_stretch times less often, and a sample of a series that came after a longer gap (side_ns,
// a kind's alone or beside time: whichever the rule's arm leaves to exploring) counts for the
// explore_every intervals it covers, up to explore_stretch (boost()): an average then follows a change
// of load about as many decisions later as when exploring 1 in explore_every, with fewer, weightier
// samples.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mstar {

struct lane_measurements {
  double chain_alone_ns = 0;
  double chain_beside_ns = 0;
  double side_ns = 0;
  double gpu_idle_fraction = 0;
  double side_host_ns = 0;
  std::uint64_t samples_alone = 0;
  std::uint64_t samples_beside = 0;
  std::uint64_t samples_side = 0;
  double side_lane_ns = 0;
  std::uint64_t samples_side_lane = 0;
  double beside_per_side = 1.0;
};

struct lane_policy_options {
  std::uint32_t window = 64;        // steps an average spans (EMA weight 1/window)
  std::uint32_t min_samples = 8;    // per arm, before the rule is trusted
  std::uint32_t explore_every = 32; // decisions between two forced picks of the other arm; 0: never
  double margin = 0.05;             // of side_ns: the lane must win by this much
  double clear_margin = 0.25;       // of side_ns: the arms differ by this much: the rule is clear
  std::uint32_t explore_stretch = 8; // while the rule is clear, explore this many times less often

  void check() const {
    if (window == 0) throw std::invalid_argument("mstar::lane_policy_options: window is 0; average over >= 1 step");
    if (explore_stretch == 0)
      throw std::invalid_argument("mstar::lane_policy_options: explore_stretch is 0; use 1 to explore at the same "
                                  "rate whatever the arms' difference");
    if (!(clear_margin >= 0.0))
      throw std::invalid_argument("mstar::lane_policy_options: clear_margin is " + std::to_string(clear_margin) +
                                  "; use a fraction of the side step's time >= 0");
    if (!(margin >= 0.0 && margin < 1.0))
      throw std::invalid_argument("mstar::lane_policy_options: margin is " + std::to_string(margin) +
                                  "; use a fraction of the side step's time in [0, 1)");
  }
};

// The rule alone: true when running the side step beside the chain is expected to cost the chain
// less than running it on the chain stream.
// What running the side step on the chain stream costs the chain more than running it beside (ns;
// negative when beside costs more).
constexpr double beside_advantage(const lane_measurements& m) {
  const double idle = std::clamp(m.gpu_idle_fraction, 0.0, 1.0);
  const double inline_cost = m.side_ns * (1.0 - idle);
  const double slowdown = std::max(0.0, m.chain_beside_ns - m.chain_alone_ns) * m.beside_per_side;
  const double beside_cost = slowdown + m.side_host_ns;
  return inline_cost - beside_cost;
}
constexpr bool beside_pays(const lane_measurements& m, const lane_policy_options& o) {
  return beside_advantage(m) > o.margin * m.side_ns;
}

// The measurements, fed by the GPU thread as steps land, and the per-step decision.
class lane_chooser {
public:
  explicit lane_chooser(lane_policy_options o = {}) : o_(o) { o_.check(); }

  // A chain step landed: its device time, whether a lane step overlapped it, and its kind (the
  // worker passes its node and padding bucket). Alone and beside are compared within a kind: a
  // prefill is not a slower decode, and counting the prefills that happen to run alone against the
  // decodes that run beside once made every beside step look faster than alone (the H200 study of
  // 2026-12-04: alone 3.5 ms, beside 2.6 ms), so the lane always won.
  void chain_step(double device_ns, bool beside, std::uint64_t kind = 0) {
    auto& k = kind_slot(kind);
    const double keep = 1.0 - 1.0 / double(o_.window);
    for (std::size_t i = 0; i < n_kinds_; ++i) // flushed to 0 before it gets subnormal (slow arithmetic)
      kinds_[i].recent_beside = kinds_[i].recent_beside > 1e-300 ? kinds_[i].recent_beside * keep : 0.0;
    // Chain steps beside a lane step and side steps on the lane, both decayed per chain step: their ratio.
    recent_beside_chain_ = recent_beside_chain_ > 1e-300 ? recent_beside_chain_ * keep : 0.0;
    recent_lane_sides_ = recent_lane_sides_ > 1e-300 ? recent_lane_sides_ * keep : 0.0;
    if (beside) recent_beside_chain_ += 1.0;
    if (recent_beside_chain_ > 0.0 && recent_lane_sides_ > 0.0)
      m_.beside_per_side = recent_beside_chain_ / recent_lane_sides_;
    if (beside) {
      k.recent_beside += 1.0;
      add(k.beside_ns, k.samples_beside, device_ns, boost(k.last_beside));
    } else {
      add(k.alone_ns, k.samples_alone, device_ns, boost(k.last_alone));
    }
    combine_kinds();
  }
  // The chain stream's gap before a chain step started (0 when it was queued behind the last one).
  // Side steps that ran on the chain stream since the previous chain step fill part of it: they are
  // busy time, not idle.
  void chain_gap(double gap_ns, double step_ns) {
    const double busy = std::max(step_ns, 0.0), gap = std::max(gap_ns, 0.0);
    const double idle = std::max(0.0, gap - inline_since_chain_);
    inline_since_chain_ = 0;
    if (busy + gap <= 0) return;
    const double f = idle / (busy + gap);
    idle_samples_ == 0 ? void(m_.gpu_idle_fraction = f) : void(m_.gpu_idle_fraction += (f - m_.gpu_idle_fraction) / weight(idle_samples_));
    ++idle_samples_;
  }
  void side_step(double device_ns, bool on_lane) {
    if (on_lane) {
      recent_lane_sides_ += 1.0;
      add(m_.side_lane_ns, m_.samples_side_lane, device_ns, boost(last_side_lane_));
    } else {
      add(m_.side_ns, m_.samples_side, device_ns, boost(last_side_));
      inline_since_chain_ += std::max(device_ns, 0.0);
    }
  }
  // The side step of the last decide() (the chain stream before any decision).
  void side_step(double device_ns) { side_step(device_ns, last_on_lane_); }
  void side_host(double host_ns) {
    side_host_samples_ == 0 ? void(m_.side_host_ns = host_ns)
                            : void(m_.side_host_ns += (host_ns - m_.side_host_ns) / weight(side_host_samples_));
    ++side_host_samples_;
  }
  // Replaces the measurements (tests; a worker restoring what it learned).
  void set(const lane_measurements& m) { m_ = m; }
  const lane_measurements& measurements() const noexcept { return m_; }
  const lane_policy_options& options() const noexcept { return o_; }

  // The decision for the next side step: true = on the lane.
  bool decide() {
    ++decisions_;
    const bool warm = m_.samples_alone >= o_.min_samples && m_.samples_beside >= o_.min_samples &&
                      m_.samples_side >= o_.min_samples;
    bool lane;
    if (!warm) {
      lane = (decisions_ & 1u) == 1u; // alternate until both arms are measured
    } else {
      const double advantage = beside_advantage(m_); // beside_pays, and whether the rule is clear
      lane = advantage > o_.margin * m_.side_ns;
      const bool clear = std::abs(advantage) >= o_.clear_margin * m_.side_ns;
      const std::uint64_t every = std::uint64_t(o_.explore_every) * (clear ? o_.explore_stretch : 1u);
      if (o_.explore_every != 0 && ++since_explore_ >= every) {
        since_explore_ = 0;
        lane = !lane;
        ++explored_;
      }
    }
    (lane ? on_lane_ : on_chain_) += 1;
    last_on_lane_ = lane;
    return lane;
  }
  std::uint64_t decisions_on_lane() const noexcept { return on_lane_; }
  std::uint64_t decisions_on_chain() const noexcept { return on_chain_; }
  // Decisions that took the other arm than the rule's, to keep it measured.
  std::uint64_t decisions_explored() const noexcept { return explored_; }

private:
  double weight(std::uint64_t samples) const { return double(std::min<std::uint64_t>(samples + 1, o_.window)); }
  // The weight of a sample of a series whose last sample came at decision `last` (updated to now):
  // how many explore_every intervals passed since, between 1 and explore_stretch. A series sampled at
  // every decision, or by exploring at the old rate (1 in explore_every), weighs 1; one sampled only
  // by the rarer exploration of a clear rule (1 in explore_every x explore_stretch) weighs up to
  // explore_stretch, so its average follows a change about as many decisions later as before.
  double boost(std::uint64_t& last) {
    const std::uint64_t gap = decisions_ - last;
    last = decisions_;
    if (o_.explore_every == 0) return 1.0;
    return std::clamp(double(gap) / double(o_.explore_every), 1.0, double(o_.explore_stretch));
  }
  // A running mean up to `window` samples, then an exponential average; a sample of weight w counts
  // as w samples.
  void add(double& avg, std::uint64_t& n, double v, double w = 1.0) {
    avg = n == 0 ? v : avg + (v - avg) * std::min(1.0, w / (weight(n) - 1.0 + w));
    ++n;
  }

  // Alone and beside averages per chain-step kind, in a fixed table (no allocation on the GPU
  // thread); when it is full the kind seen least recently gives way (not the one with the fewest
  // samples: those counts never decay, so after a change of load two new kinds taking turns would
  // evict each other and never be seen both ways, leaving the old kinds' figures in charge).
  struct kind_stats {
    std::uint64_t kind = 0;
    double alone_ns = 0, beside_ns = 0;
    std::uint64_t samples_alone = 0, samples_beside = 0;
    std::uint64_t last_seen = 0;
    double recent_beside = 0; // beside steps of this kind, decayed by 1/window per chain step
    std::uint64_t last_alone = 0, last_beside = 0; // decisions_ at the last sample (see boost())
  };
  static constexpr std::size_t max_kinds = 16;

  kind_stats& kind_slot(std::uint64_t kind) {
    ++chain_steps_;
    for (std::size_t i = 0; i < n_kinds_; ++i)
      if (kinds_[i].kind == kind) {
        kinds_[i].last_seen = chain_steps_;
        return kinds_[i];
      }
    std::size_t i = n_kinds_;
    if (n_kinds_ < max_kinds) {
      ++n_kinds_;
    } else {
      i = 0;
      for (std::size_t j = 1; j < max_kinds; ++j)
        if (kinds_[j].last_seen < kinds_[i].last_seen) i = j;
    }
    kinds_[i] = kind_stats{.kind = kind, .last_seen = chain_steps_};
    return kinds_[i];
  }
  // chain_alone_ns and chain_beside_ns over the kinds measured both ways, each kind weighted by how
  // often it ran beside lately (decayed over the window; by lifetime counts when none did): the
  // slowdown the lane causes where it overlaps now, not where it overlapped before the load changed.
  // Samples count only those kinds, so the rule waits until some kind was seen both ways. Until one
  // is, the measurements stay as they are (those of set(), or of kinds since evicted).
  void combine_kinds() {
    double w = 0, alone = 0, beside = 0, recent = 0;
    std::uint64_t na = 0, nb = 0;
    for (std::size_t i = 0; i < n_kinds_; ++i)
      if (kinds_[i].samples_alone != 0 && kinds_[i].samples_beside != 0) recent += kinds_[i].recent_beside;
    // Recent weights decay per chain step, so with beside steps only every few hundred decisions (a
    // clear rule on the chain explores 1 in 256) they are tiny but still in the right proportion: any
    // positive sum is used, and lifetime counts only when none is left at all.
    const bool by_recent = recent > 0.0;
    for (std::size_t i = 0; i < n_kinds_; ++i) {
      const auto& k = kinds_[i];
      if (k.samples_alone == 0 || k.samples_beside == 0) continue;
      const double wk = by_recent ? k.recent_beside : double(std::min<std::uint64_t>(k.samples_beside, o_.window));
      w += wk;
      alone += wk * k.alone_ns;
      beside += wk * k.beside_ns;
      na += k.samples_alone;
      nb += k.samples_beside;
    }
    if (w <= 0) return;
    m_.chain_alone_ns = alone / w;
    m_.chain_beside_ns = beside / w;
    m_.samples_alone = na;
    m_.samples_beside = nb;
  }

  lane_policy_options o_;
  lane_measurements m_{};
  std::array<kind_stats, max_kinds> kinds_{};
  std::size_t n_kinds_ = 0;
  std::uint64_t chain_steps_ = 0; // chain_step calls: the kinds' recency
  std::uint64_t idle_samples_ = 0, side_host_samples_ = 0;
  std::uint64_t decisions_ = 0, on_lane_ = 0, on_chain_ = 0;
  bool last_on_lane_ = false;
  std::uint64_t since_explore_ = 0, explored_ = 0;
  std::uint64_t last_side_ = 0, last_side_lane_ = 0; // decisions_ at the last sample (see boost())
  double inline_since_chain_ = 0; // side steps on the chain stream since the last chain step's gap
  double recent_beside_chain_ = 0, recent_lane_sides_ = 0; // m_.beside_per_side's terms (chain_step)
};

} // namespace mstar
