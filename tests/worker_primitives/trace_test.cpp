// The Chrome trace writer: the file parses as strict JSON (and with python3's json, when python3 is
// there), names every track, holds events of the recording threads and of both streams, escapes any
// name, keeps microsecond units, and drops and counts events past a buffer's capacity.
#include "json_mini.hpp"

#include <mstar/worker/trace.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

namespace {

namespace mt = mstar::trace;
namespace js = mstar::test::json;

const js::value& events_of(const js::value& doc) {
  REQUIRE(doc.type == js::value::kind::object);
  const js::value& ev = doc.at("traceEvents");
  REQUIRE(ev.type == js::value::kind::array);
  return ev;
}

std::string temp_path(const char* stem) {
  return (std::filesystem::temp_directory_path() / (std::string(stem) + "-" + std::to_string(::getpid()) + ".json"))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

TEST_CASE("a trace of three threads and two streams parses as JSON, names every track and has events on each") {
  mt::session t(0, "worker 0");
  const mt::track_id main_track = t.add_track("main"), gpu = t.add_track("GPU"), plan = t.add_track("plan");
  const mt::track_id chain = t.add_track("chain stream"), lane = t.add_track("lane stream");
  const mt::name_id decode = t.intern("talker_decode"), codec = t.intern("codec_chunk"), rows = t.intern("rows");
  const mt::name_id admit = t.intern("admit"), stage = t.intern("stage"), ingest = t.intern("ingest");
  const mt::name_id launch = t.intern("launch"), cancel = t.intern("cancel"), cat = t.intern("step");
  mt::buffer& main_buf = t.add_buffer(64);
  mt::buffer& gpu_buf = t.add_buffer(1024);
  mt::buffer& plan_buf = t.add_buffer(1024);

  // The GPU thread records its own phases and, as steps land, the streams' work; the plan thread
  // stages concurrently; write_json may run while they record.
  std::thread gpu_thread([&] {
    for (int step = 0; step < 100; ++step) {
      {
        auto s = gpu_buf.scope(gpu, launch, {rows, 128});
        const auto a0 = mstar::metrics::now_ns();
        gpu_buf.complete(gpu, admit, a0, mstar::metrics::now_ns());
      }
      // Stream work as the GPU thread learns it from events: one chain step per 10 us, the lane's
      // step beside it every other step.
      const auto t0 = t.epoch() + step * 10'000;
      gpu_buf.complete(chain, decode, t0 + 200, t0 + 5'000, {rows, 128}, {}, cat);
      if (step % 2 == 0) gpu_buf.complete(lane, codec, t0 + 300, t0 + 2'000, {rows, 16}, {}, cat);
    }
  });
  std::thread plan_thread([&] {
    for (int step = 0; step < 100; ++step) {
      auto s = plan_buf.scope(plan, stage);
    }
  });
  const std::string live = mt::to_json(t); // concurrent with the recording threads
  main_buf.complete(main_track, ingest, t.epoch() + 10, t.epoch() + 20);
  main_buf.instant(main_track, cancel, t.epoch() + 30);
  gpu_thread.join();
  plan_thread.join();
  CHECK_NOTHROW(js::parse(live));

  const std::string path = temp_path("mstar-trace-test");
  mt::write_json(path, t);
  const js::value doc = js::parse(slurp(path));
  CHECK(doc.at("displayTimeUnit").text == "ns");
  CHECK(doc.at("otherData").at("dropped_events").number == 0);

  std::map<long long, std::string> thread_names;
  std::map<long long, int> complete_per_tid;
  std::map<long long, std::vector<std::pair<long long, long long>>> spans_per_tid; // [begin, end) in ns
  std::string process_name;
  int instants = 0;
  for (const js::value& e : events_of(doc).items) {
    REQUIRE(e.type == js::value::kind::object);
    const std::string ph = e.at("ph").text;
    CHECK(e.at("pid").number == 0);
    const auto tid = static_cast<long long>(e.at("tid").number);
    if (ph == "M") {
      const std::string name = e.at("name").text;
      if (name == "thread_name") thread_names[tid] = e.at("args").at("name").text;
      if (name == "process_name") process_name = e.at("args").at("name").text;
      continue;
    }
    REQUIRE(e.at("ts").type == js::value::kind::number);
    CHECK(e.at("ts").number >= 0);
    if (ph == "X") {
      REQUIRE(e.at("dur").type == js::value::kind::number);
      CHECK(e.at("dur").number >= 0);
      ++complete_per_tid[tid];
      const long long b = std::llround(e.at("ts").number * 1000), d = std::llround(e.at("dur").number * 1000);
      spans_per_tid[tid].push_back({b, b + d});
    } else {
      CHECK(ph == "i");
      ++instants;
    }
  }
  CHECK(process_name == "worker 0");
  const std::set<std::string> want{"main", "GPU", "plan", "chain stream", "lane stream"};
  std::set<std::string> named;
  for (const auto& entry : thread_names) {
    named.insert(entry.second);
    INFO("track " << entry.second);
    CHECK(complete_per_tid[entry.first] > 0);
  }
  CHECK(named == want);
  CHECK(complete_per_tid[t.tid(chain)] == 100);
  CHECK(complete_per_tid[t.tid(lane)] == 50);
  CHECK(complete_per_tid[t.tid(gpu)] == 200);
  CHECK(complete_per_tid[t.tid(plan)] == 100);
  CHECK(instants == 1);
  // The viewer nests "X" events of one track by time: two of them must nest or not overlap.
  for (auto& [tid, spans] : spans_per_tid) {
    std::stable_sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<long long> open_ends;
    int partial_overlaps = 0;
    for (const auto& [b, e] : spans) {
      while (!open_ends.empty() && open_ends.back() <= b)
        open_ends.pop_back();
      if (!open_ends.empty() && e > open_ends.back()) ++partial_overlaps;
      open_ends.push_back(e);
    }
    CHECK(partial_overlaps == 0);
  }

  // An independent parser agrees, when python3 is on this machine.
  if (std::system("python3 -c pass >/dev/null 2>&1") == 0) {
    const std::string cmd = "python3 -c \"import json,sys; d=json.load(open(sys.argv[1], encoding='utf-8')); "
                            "sys.exit(0 if len(d['traceEvents']) > 0 else 1)\" " +
                            path;
    CHECK(std::system(cmd.c_str()) == 0);
  } else {
    MESSAGE("python3 not found: checked with the strict C++ reader only");
  }
  std::filesystem::remove(path);
}

TEST_CASE("names with quotes, backslashes, control characters and non-ASCII text come back unchanged") {
  mt::session t(3, "worker \"three\"");
  const std::string tricky = "a \"quoted\" \\ name\n\twith\x01 control";
  const std::string unicode = "codec \xE2\x80\x94 \xC3\xBC \xF0\x9F\x8E\xB5";
  const mt::track_id track = t.add_track("lane \\ stream");
  mt::buffer& b = t.add_buffer(8);
  b.complete(track, t.intern(tricky), t.epoch(), t.epoch() + 1, {t.intern("key \"k\""), -7});
  b.complete(track, t.intern(unicode), t.epoch(), t.epoch() + 1);
  b.complete(track, t.intern("bad \xFF byte \xC0\xAF"), t.epoch(), t.epoch() + 1);

  const js::value doc = js::parse(mt::to_json(t));
  std::set<std::string> names;
  bool arg_found = false, process_found = false, track_found = false;
  for (const js::value& e : events_of(doc).items) {
    if (e.at("ph").text == "X") {
      names.insert(e.at("name").text);
      if (const js::value* args = e.find("args")) arg_found |= args->at("key \"k\"").number == -7;
    } else if (e.at("name").text == "process_name") {
      process_found = e.at("args").at("name").text == "worker \"three\"";
    } else if (e.at("name").text == "thread_name") {
      track_found = e.at("args").at("name").text == "lane \\ stream";
    }
  }
  CHECK(names.count(tricky) == 1);
  CHECK(names.count(unicode) == 1);
  // Invalid UTF-8 becomes U+FFFD per bad byte, so the file stays valid UTF-8.
  CHECK(names.count("bad \xEF\xBF\xBD byte \xEF\xBF\xBD\xEF\xBF\xBD") == 1);
  CHECK(arg_found);
  CHECK(process_found);
  CHECK(track_found);
}

TEST_CASE("ts and dur are microseconds from the epoch with nanosecond decimals") {
  mt::session t(0, "w", /*epoch=*/1'000'000);
  const mt::track_id track = t.add_track("GPU");
  mt::buffer& b = t.add_buffer(4);
  b.complete(track, t.intern("step"), 1'000'000 + 1'234'567, 1'000'000 + 1'234'567 + 2'000);
  b.complete(track, t.intern("early"), 999'500, 1'000'000); // before the epoch: negative ts is allowed
  const std::string text = mt::to_json(t);
  CHECK(text.find("\"ts\":1234.567,\"dur\":2.000") != std::string::npos);
  CHECK(text.find("\"ts\":-0.500,\"dur\":0.500") != std::string::npos);
  const js::value doc = js::parse(text);
  for (const js::value& e : events_of(doc).items)
    if (e.at("ph").text == "X" && e.at("name").text == "step") CHECK(e.at("ts").number == doctest::Approx(1234.567));
}

TEST_CASE("events past a buffer's capacity are dropped and counted, and the file reports the count") {
  mt::session t(0, "w");
  const mt::track_id track = t.add_track("GPU");
  const mt::name_id n = t.intern("step");
  mt::buffer& b = t.add_buffer(10);
  for (int i = 0; i < 25; ++i)
    b.complete(track, n, t.epoch() + i, t.epoch() + i + 1);
  CHECK(b.size() == 10);
  CHECK(b.dropped() == 15);
  CHECK(t.dropped() == 15);
  const js::value doc = js::parse(mt::to_json(t));
  CHECK(doc.at("otherData").at("dropped_events").number == 15);
  int x = 0;
  for (const js::value& e : events_of(doc).items)
    x += e.at("ph").text == "X";
  CHECK(x == 10);
}

TEST_CASE("two workers in one file get their own pids, distinct tids and one shared time origin") {
  mt::session w0(0, "worker 0", 5'000), w1(1, "worker 1", 1'000);
  const mt::track_id g0 = w0.add_track("GPU"), g1 = w1.add_track("GPU");
  w0.add_buffer(2).complete(g0, w0.intern("a"), 6'000, 7'000);
  w1.add_buffer(2).complete(g1, w1.intern("b"), 6'000, 7'000);
  CHECK(w0.tid(g0) != w1.tid(g1));
  const mt::session* both[] = {&w0, &w1};
  std::map<std::string, std::pair<double, double>> seen; // name -> (pid, ts)
  const js::value doc = js::parse(mt::to_json(std::span<const mt::session* const>(both)));
  for (const js::value& e : events_of(doc).items)
    if (e.at("ph").text == "X") seen[e.at("name").text] = {e.at("pid").number, e.at("ts").number};
  CHECK(seen["a"].first == 0);
  CHECK(seen["b"].first == 1);
  CHECK(seen["a"].second == doctest::Approx(5.0)); // both relative to the earlier epoch, 1000 ns
  CHECK(seen["b"].second == doctest::Approx(5.0));
}

TEST_CASE("nested events on one track are written parent first, so the viewer nests them") {
  mt::session t(0, "w");
  const mt::track_id track = t.add_track("GPU");
  mt::buffer& b = t.add_buffer(4);
  // Recorded child first, as a scoped child closes before its parent.
  b.complete(track, t.intern("child"), t.epoch() + 100, t.epoch() + 200);
  b.complete(track, t.intern("parent"), t.epoch() + 100, t.epoch() + 900);
  std::vector<std::string> order;
  const js::value doc = js::parse(mt::to_json(t));
  for (const js::value& e : events_of(doc).items)
    if (e.at("ph").text == "X") order.push_back(e.at("name").text);
  CHECK(order == std::vector<std::string>{"parent", "child"});
}

TEST_CASE("writing a trace where the directory does not exist fails, naming the path") {
  mt::session t(0, "w");
  const std::string path = "/nonexistent-mstar-dir/run.trace.json";
  try {
    mt::write_json(path, t);
    FAIL("write_json reported success");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}

TEST_CASE("the strict JSON reader used above refuses malformed text") {
  for (const char* bad : {"{\"a\":1,}", "[1 2]", "\"raw\ncontrol\"", "{\"a\":01}", "[\"\\ud800\"]", "{} x"})
    CHECK_THROWS_AS(js::parse(bad), std::runtime_error);
  CHECK(js::parse("{\"a\":[1,-2.5e3,true,null,\"\\u00fc\\ud83c\\udfb5\"]}").at("a").items.size() == 5);
}
