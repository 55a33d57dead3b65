// Host metrics: the log-linear histogram against a sorted-vector oracle, merging across threads,
// per-request latencies, the GPU busy fraction against a bitmap oracle, and the report.
#include <mstar/worker/metrics.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace mm = mstar::metrics;

// Rank ceil(p / 100 * n), exact for p given to a millionth.
std::uint64_t oracle_percentile(const std::vector<std::uint64_t>& sorted, double p) {
  const auto per = std::uint64_t(std::llround(p * 1e6));
  std::uint64_t rank = (sorted.size() * per + 99'999'999) / 100'000'000;
  rank = std::clamp<std::uint64_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// Log-uniform durations from 10 ns to 100 s: every decade of the stated range gets samples.
std::vector<std::uint64_t> log_uniform(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(1.0, 11.0);
  std::vector<std::uint64_t> v(n);
  for (auto& x : v)
    x = std::uint64_t(std::pow(10.0, exponent(rng)));
  return v;
}

void check_against_oracle(const mm::histogram& h, std::vector<std::uint64_t> values) {
  std::sort(values.begin(), values.end());
  REQUIRE(h.count() == values.size());
  CHECK(h.min() == values.front());
  CHECK(h.max() == values.back());
  for (double p : {0.0, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0}) {
    const double want = double(oracle_percentile(values, p));
    const double got = double(h.percentile(p));
    INFO("p" << p << ": histogram " << got << " ns, oracle " << want << " ns");
    CHECK(std::abs(got - want) <= want * mm::histogram::relative_precision);
  }
}

} // namespace

TEST_CASE("histogram buckets tile 0 to 2^37 ns without gaps, each at most 1/128 of its lower bound wide") {
  using H = mm::histogram;
  CHECK(H::bucket_lower(0) == 0);
  for (std::size_t i = 0; i < H::bucket_count; ++i) {
    const std::uint64_t lo = H::bucket_lower(i), hi = H::bucket_upper(i);
    REQUIRE(lo < hi);
    REQUIRE(H::bucket_of(lo) == i);
    REQUIRE(H::bucket_of(hi - 1) == i);
    if (i + 1 < H::bucket_count) REQUIRE(H::bucket_lower(i + 1) == hi);
    if (lo >= H::sub_bucket_count) REQUIRE(double(hi - lo) <= double(lo) / 128.0);
  }
  CHECK(H::bucket_upper(H::bucket_count - 1) == H::highest_trackable + 1);
  CHECK(H::highest_trackable >= 100'000'000'000ull); // 100 s
}

TEST_CASE("histogram percentiles match a sorted-vector oracle within the stated precision from 10 ns to 100 s") {
  const auto values = log_uniform(200'000, 1);
  mm::histogram h;
  for (auto v : values)
    h.record(mm::nanos(v));
  check_against_oracle(h, values);
  double sum = 0;
  for (auto v : values)
    sum += double(v);
  CHECK(h.mean() == doctest::Approx(sum / double(values.size())).epsilon(1e-9));
}

TEST_CASE("histogram percentiles are exact for values below 128 ns and for a single sample") {
  mm::histogram h;
  std::vector<std::uint64_t> values;
  for (std::uint64_t v = 0; v < 128; ++v)
    for (std::uint64_t k = 0; k <= v % 3; ++k)
      h.record(mm::nanos(v)), values.push_back(v);
  std::sort(values.begin(), values.end());
  for (double p : {1.0, 33.0, 50.0, 99.0})
    CHECK(h.percentile(p) == oracle_percentile(values, p));

  mm::histogram one;
  one.record(123'456'789);
  CHECK(one.percentile(50) == 123'456'789u); // clamped to the exact min and max
  CHECK(mm::histogram().percentile(50) == 0u);
}

TEST_CASE(
    "a percentile's rank is ceil(p/100 * n) computed exactly, so p99.9 of 1000 samples is the 999th, not the max") {
  // 0.999 has no exact double: p / 100 * n rounds 999 up to 999.0000000000001, whose ceil is 1000.
  mm::histogram h;
  for (int i = 0; i < 999; ++i)
    h.record(5);
  h.record(100);
  CHECK(h.percentile(99.9) == 5u);
  CHECK(h.percentile(100) == 100u);
  mm::histogram big;
  for (int i = 0; i < 19'980; ++i)
    big.record(7);
  for (int i = 0; i < 20; ++i)
    big.record(90);
  CHECK(big.percentile(99.9) == 7u); // rank 19980 of 20000
  // p * n / 100 rounds too: 99.9 * 41000 / 100 is 40959.000000000004.
  mm::histogram odd;
  for (int i = 0; i < 40'959; ++i)
    odd.record(7);
  for (int i = 0; i < 41; ++i)
    odd.record(90);
  CHECK(odd.percentile(99.9) == 7u); // rank 40959 of 41000
  CHECK(odd.percentile(99.95) == 90u);
}

TEST_CASE("values past the top of the range are counted as overflows and keep the exact max") {
  mm::histogram h;
  h.record(1000);
  h.record(mm::nanos(1) << 40);
  h.record(-5); // a negative duration counts as zero
  CHECK(h.count() == 3);
  CHECK(h.overflows() == 1);
  CHECK(h.max() == (std::uint64_t(1) << 40));
  CHECK(h.min() == 0);
  CHECK(h.percentile(100) == (std::uint64_t(1) << 40));
}

TEST_CASE("recorders filled on several threads merge into the same percentiles as one histogram of every value") {
  mm::recorder_layout layout{.nodes = {"talker_decode", "codec_chunk"}, .user_phases = {"route"}};
  const mm::phase_id route = layout.user_phase("route");
  mm::thread_recorder gpu("GPU", layout), plan("plan", layout);
  const auto a = log_uniform(50'000, 2), b = log_uniform(30'000, 3);
  std::thread ta([&] {
    for (auto v : a)
      gpu.record(0, mm::phase::plan, mm::nanos(v));
    gpu.record(1, route, 42);
  });
  std::thread tb([&] {
    for (auto v : b)
      plan.record(0, mm::phase::plan, mm::nanos(v));
  });
  ta.join();
  tb.join();

  mm::histogram all;
  for (auto v : a)
    all.record(mm::nanos(v));
  for (auto v : b)
    all.record(mm::nanos(v));
  std::vector<std::uint64_t> both(a);
  both.insert(both.end(), b.begin(), b.end());

  const mm::summary s = mm::summarize({&gpu, &plan});
  const mm::phase_row* merged = nullptr;
  for (const auto& r : s.per_node)
    if (r.node == "talker_decode" && r.phase == "plan") merged = &r;
  REQUIRE(merged != nullptr);
  CHECK(merged->thread == "all");
  CHECK(merged->time.count == a.size() + b.size());
  CHECK(merged->time.p50 == all.percentile(50));
  CHECK(merged->time.p95 == all.percentile(95));
  CHECK(merged->time.p99 == all.percentile(99));
  CHECK(merged->time.min == all.min());
  CHECK(merged->time.max == all.max());

  mm::histogram merged_by_hand;
  merged_by_hand.merge_from(gpu.at(0, mm::phase::plan));
  merged_by_hand.merge_from(plan.at(0, mm::phase::plan));
  check_against_oracle(merged_by_hand, both);

  int per_thread_plan_rows = 0;
  bool route_row = false;
  for (const auto& r : s.per_thread) {
    if (r.node == "talker_decode" && r.phase == "plan") {
      ++per_thread_plan_rows;
      CHECK(r.time.count == (r.thread == "GPU" ? a.size() : b.size()));
    }
    route_row |= r.thread == "GPU" && r.node == "codec_chunk" && r.phase == "route" && r.time.count == 1;
  }
  CHECK(per_thread_plan_rows == 2);
  CHECK(route_row);
  CHECK(s.per_thread.size() == 3); // cells without records are left out
}

TEST_CASE("a summary taken while threads record never reports more than was recorded") {
  mm::recorder_layout layout{.nodes = {"n"}};
  mm::thread_recorder r1("GPU", layout), r2("plan", layout);
  constexpr int per_thread = 20'000;
  std::atomic<bool> go{false};
  auto writer = [&](mm::thread_recorder& r) {
    while (!go.load())
      std::this_thread::yield();
    for (int i = 0; i < per_thread; ++i)
      r.record(0, mm::phase::commit, 100 + i % 1000);
  };
  std::thread t1(writer, std::ref(r1)), t2(writer, std::ref(r2));
  go = true;
  std::uint64_t last = 0;
  for (int i = 0; i < 50; ++i) {
    const mm::summary s = mm::summarize({&r1, &r2});
    const std::uint64_t n = s.per_node.empty() ? 0 : s.per_node.front().time.count;
    CHECK(n <= 2u * per_thread);
    CHECK(n >= last); // one reader sees counts only grow
    last = n;
  }
  t1.join();
  t2.join();
  CHECK(mm::summarize({&r1, &r2}).per_node.front().time.count == 2u * per_thread);
}

TEST_CASE("recorders with different layouts are refused at report time, naming both threads") {
  mm::thread_recorder a("GPU", {.nodes = {"x"}}), b("plan", {.nodes = {"x", "y"}});
  try {
    (void)mm::summarize({&a, &b});
    FAIL("layouts that differ were merged");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("'plan'") != std::string::npos);
    CHECK(what.find("'GPU'") != std::string::npos);
  }
}

TEST_CASE("a node or phase id outside the layout is dropped and counted, never written out of bounds") {
  mm::thread_recorder r("main", {.nodes = {"a"}});
  r.record(1, mm::phase::admit, 10);
  r.record(0, mm::phase_id(mm::builtin_phase_count), 10); // no user phases in this layout
  r.record(0, mm::phase::admit, 10);
  CHECK(r.dropped() == 2);
  CHECK(r.at(0, mm::phase::admit).count() == 1);
  CHECK_THROWS_AS((void)r.at(1, mm::phase::admit), std::out_of_range);
  CHECK_THROWS_AS((void)r.layout().user_phase("nope"), std::invalid_argument);
  CHECK(mm::summarize({&r}).dropped == 2);
}

TEST_CASE("a scoped timer records one duration into its cell, however often it is stopped") {
  mm::thread_recorder r("GPU", {.nodes = {"a", "b"}});
  mm::nanos took = 0;
  {
    auto t = r.time(1, mm::phase::launch);
    volatile int sink = 0;
    for (int i = 0; i < 1000; ++i)
      sink = sink + i;
    took = t.stop();
    CHECK(t.stop() == 0);
  }
  CHECK(r.at(1, mm::phase::launch).count() == 1);
  CHECK(r.at(0, mm::phase::launch).count() == 0);
  CHECK(took >= 0);
  CHECK(r.at(1, mm::phase::launch).max() == std::uint64_t(took));
}

TEST_CASE("request latencies: first output from submit, gaps between outputs, total only for completed requests") {
  mm::request_recorder rec;
  mm::request_timing done, cancelled;
  rec.on_submit(done, 1'000);
  rec.on_output(done, 5'000);  // first output after 4 us
  rec.on_output(done, 7'000);  // gap 2 us
  rec.on_output(done, 10'000); // gap 3 us
  rec.on_finish(done, true, 12'000);
  rec.on_submit(cancelled, 2'000);
  rec.on_output(cancelled, 9'000);
  rec.on_finish(cancelled, false, 9'500);

  CHECK(done.outputs == 3);
  CHECK(done.first_output == 5'000);
  CHECK(rec.first_output().count() == 2);
  CHECK(rec.first_output().min() == 4'000);
  CHECK(rec.first_output().max() == 7'000);
  CHECK(rec.gaps().count() == 2);
  CHECK(rec.gaps().min() == 2'000);
  CHECK(rec.gaps().max() == 3'000);
  CHECK(rec.total().count() == 1);
  CHECK(rec.total().max() == 11'000);
  CHECK(rec.completed() == 1);
  CHECK(rec.cancelled() == 1);
  CHECK(rec.outputs() == 4);

  mm::request_recorder other;
  other.merge_from(rec);
  other.merge_from(rec);
  CHECK(other.outputs() == 8);
  CHECK(other.gaps().count() == 4);
  const auto s = mm::summarize(std::span<const mm::thread_recorder* const>{}, &other);
  CHECK(s.requests.completed == 2);
  CHECK(s.requests.first_output.max == 7'000);
}

TEST_CASE("GPU busy time counts overlapping intervals once and clips them to the window") {
  const std::vector<mm::interval> fixed{{0, 10}, {5, 15}, {20, 30}, {28, 29}};
  CHECK(mm::busy_time(fixed, 0, 40) == 25);
  CHECK(mm::busy_fraction(fixed, 0, 40) == doctest::Approx(25.0 / 40.0));
  CHECK(mm::busy_time(fixed, 8, 25) == 12);
  CHECK(mm::busy_fraction(fixed, 10, 10) == 0.0);

  // Against a bitmap oracle: random intervals from two "streams" that overlap each other.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> start(0, 990), len(0, 60);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<mm::interval> v;
    std::vector<bool> busy(1000, false);
    for (int i = 0; i < 30; ++i) {
      const int b = start(rng), e = b + len(rng);
      v.push_back({b, e});
      for (int t = b; t < e && t < 1000; ++t)
        busy[t] = true;
    }
    const int w0 = 100, w1 = 900;
    const auto want = std::count(busy.begin() + w0, busy.begin() + w1, true);
    REQUIRE(mm::busy_time(v, w0, w1) == want);
  }
}

TEST_CASE("failed requests are counted apart from cancelled ones, and merge") {
  mm::request_recorder rec;
  mm::request_timing a, b, c;
  rec.on_submit(a, 0);
  rec.on_finish(a, mm::request_outcome::failed, 10);
  rec.on_submit(b, 0);
  rec.on_finish(b, mm::request_outcome::cancelled, 10);
  rec.on_submit(c, 0);
  rec.on_finish(c, mm::request_outcome::completed, 30);
  CHECK(rec.failed() == 1);
  CHECK(rec.cancelled() == 1);
  CHECK(rec.completed() == 1);
  CHECK(rec.total().count() == 1); // only completed requests have a total
  mm::request_recorder other;
  other.merge_from(rec);
  const auto s = mm::summarize(std::span<const mm::thread_recorder* const>{}, &other);
  CHECK(s.requests.failed == 1);
  CHECK(s.requests.cancelled == 1);
  CHECK(mm::format(s).find("1 completed, 1 cancelled, 1 failed") != std::string::npos);
}

// Steps landing in order of their end on two overlapping "streams", as the worker sees them: the
// running union matches the union of every interval (busy_time sorts them all), whatever the number
// of intervals kept for inspection.
TEST_CASE("busy_tracker keeps the union of a whole run in O(1) memory") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> gap(0, 40), len(1, 80);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<mm::interval> all;
    mm::nanos chain_at = 0, lane_at = 0;
    for (int i = 0; i < 250; ++i) {
      chain_at += gap(rng);
      all.push_back({chain_at, chain_at + len(rng)});
      chain_at = all.back().end;
      if (i % 3 == 0) { // a lane step beside the chain
        lane_at = std::max(lane_at, chain_at - 50) + gap(rng);
        all.push_back({lane_at, lane_at + len(rng)});
        lane_at = all.back().end;
      }
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const mm::interval& x, const mm::interval& y) { return x.end < y.end; });
    const mm::nanos end = all.back().end + 10;
    mm::busy_tracker tracker(8);
    tracker.start(0);
    for (const auto& i : all)
      tracker.add(i.begin, i.end);
    const auto exact = mm::busy_time(all, 0, end);
    CHECK(tracker.kept().size() <= 8);
    CHECK(tracker.kept().back().end == all.back().end); // the latest is kept
    CHECK(tracker.busy(end) == exact);
    CHECK(tracker.fraction(end) == doctest::Approx(double(tracker.busy(end)) / double(end)));
  }
  // In order of their begin (one stream, gaps and overlaps), the union is exact.
  mm::busy_tracker one(4);
  one.start(100);
  std::vector<mm::interval> seq;
  mm::nanos at = 100;
  for (int i = 0; i < 100; ++i) {
    const mm::nanos b = at + (i % 3 == 0 ? 3 : 0), e = b + 7 + (i % 5);
    seq.push_back({b, e});
    one.add(b, e);
    at += i % 2 == 0 ? 10 : 4; // every other interval overlaps the next
  }
  const mm::nanos stop = seq.back().end;
  CHECK(one.busy(stop) == mm::busy_time(seq, 100, stop));
  CHECK(one.fraction(stop) == doctest::Approx(double(one.busy(stop)) / double(stop - 100)));
}

// The lane's purpose: a codec step runs beside several decode steps and lands after them (steps land
// in order of their end). It covers the chain's gaps, so the GPU was busy then.
TEST_CASE("busy_tracker counts the chain's gaps that a lane step landing after them covered") {
  mm::busy_tracker t(0);
  t.start(0);
  t.add(0, 10);  // chain
  t.add(20, 30); // chain, after a gap the lane step covers
  t.add(40, 50); // chain
  t.add(5, 55);  // the lane step, begun during the first chain step
  CHECK(t.busy(60) == 55);
  CHECK(t.fraction(60) == doctest::Approx(55.0 / 60.0));

  // Long lane steps, each beside up to 40 chain steps, landing in order of their end: exact.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> gap(0, 30), len(1, 60), lane_len(100, 2000);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<mm::interval> all;
    mm::nanos chain_at = 0, lane_at = 0;
    for (int i = 0; i < 400; ++i) {
      chain_at += gap(rng);
      all.push_back({chain_at, chain_at + len(rng)});
      chain_at = all.back().end;
      if (lane_at <= chain_at && i % 7 == 0) { // the lane is free: a codec step starts beside the chain
        lane_at = std::max<mm::nanos>(lane_at, chain_at - len(rng) / 2 + gap(rng));
        all.push_back({lane_at, lane_at + lane_len(rng)});
        lane_at = all.back().end;
      }
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const mm::interval& x, const mm::interval& y) { return x.end < y.end; });
    mm::busy_tracker tracker(0);
    tracker.start(0);
    for (const auto& i : all)
      tracker.add(i.begin, i.end);
    const mm::nanos end = all.back().end;
    CHECK(tracker.busy(end) == mm::busy_time(all, 0, end));
  }
  // Fewer runs than it keeps: any order of arrival is exact.
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<mm::interval> v(1 + rng() % 120);
    for (auto& i : v) {
      i.begin = mm::nanos(rng() % 5000);
      i.end = i.begin + mm::nanos(rng() % 200);
    }
    mm::busy_tracker tracker(0);
    tracker.start(0);
    for (const auto& i : v)
      tracker.add(i.begin, i.end);
    REQUIRE(tracker.busy(6000) == mm::busy_time(v, 0, 6000));
  }
}

TEST_CASE("the report names every thread, node and phase with records, and the request and GPU lines") {
  mm::recorder_layout layout{.nodes = {"talker_decode", "codec_chunk"}, .user_phases = {"route"}};
  mm::thread_recorder gpu("GPU", layout), main_thread("main", layout);
  gpu.record(0, mm::phase::launch, 2'500);
  gpu.record(1, layout.user_phase("route"), 1'000);
  main_thread.record(1, mm::phase::admit, 800);
  mm::request_recorder req;
  mm::request_timing t;
  req.on_submit(t, 0);
  req.on_output(t, 120'000'000);
  req.on_finish(t, true, 200'000'000);
  const std::string text = mm::format(mm::summarize({&gpu, &main_thread}, &req, 0.875));
  for (const char* s : {"phase time per thread", "phase time per node", "GPU", "main", "talker_decode", "codec_chunk",
                        "launch", "route", "admit", "first output", "120.000", "GPU busy: 87.5%", "2.50"})
    CHECK_MESSAGE(text.find(s) != std::string::npos, "missing '" << s << "' in:\n" << text);
  CHECK(text.find("dropped") == std::string::npos);
}

// The server's /metrics reads the busy total while the GPU thread adds: live() must equal busy() at the
// latest end after every add (it is kept incrementally, through merges and folds).
TEST_CASE("busy_tracker's live reading equals its busy time at the latest end after every add") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> gap(0, 40), len(1, 80);
  mm::busy_tracker t(0);
  t.start(7);
  CHECK(t.live().busy == 0);
  CHECK(t.live().t0 == 7);
  mm::nanos chain_at = 7, lane_at = 7, latest = 7;
  int mismatches = 0;
  for (int i = 0; i < 2000; ++i) { // past recent_runs, so folds happen
    chain_at += gap(rng) + 5;
    const mm::nanos b = chain_at, e = chain_at + len(rng);
    chain_at = e;
    t.add(b, e);
    latest = std::max(latest, e);
    if (i % 4 == 0) { // a lane step that began earlier lands now, merging runs
      lane_at = std::max(lane_at, b - 60);
      t.add(lane_at, lane_at + 30);
      latest = std::max(latest, lane_at + 30);
      lane_at += 30;
    }
    const auto r = t.live();
    mismatches += r.busy != t.busy(latest) || r.last_end != latest;
  }
  CHECK(mismatches == 0);
  const mm::busy_tracker copy = t; // copies its reading
  CHECK(copy.live().busy == t.live().busy);
}
