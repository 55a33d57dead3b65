// More of the worker when things go wrong (from a second review, each failing on c8eb9a8): errors of
// two failing steps on one stream, a fatal error between admit and commit (stop() must return: the
// case exits the process with code 3 after 3 s otherwise), submits after a fatal error, a failed
// request cancelled, a fatal error inside the inbox; from a third review, more than 1024 pending
// stream errors and throwing finished/continues hooks. failure_test.cpp has the first set.
#include <doctest/doctest.h>

#include "worker/tts_flow.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace worker_test;

namespace {

template <class Flow>
using worker_of = mstar::threaded_worker<Model, mstar::host_backend, Flow>;

// Waits until the tasks before e have run (a query that throws has run them too), then checks that
// synchronize on ea gives a's error and a query on eb gives b's.
void check_two_errors(mstar::host_backend& backend, mstar::host_backend::event_type ea,
                      mstar::host_backend::event_type eb, const std::string& a, const std::string& b) {
  for (;;) {
    try {
      if (backend.query(eb)) break;
    } catch (...) {
      break;
    }
  }
  CHECK_THROWS_WITH_AS(backend.synchronize(ea), a.c_str(), std::runtime_error);
  bool b_reported = false;
  try {
    (void)backend.query(eb);
  } catch (const std::exception& e) {
    b_reported = std::string(e.what()) == b;
  }
  CHECK(b_reported);
  backend.destroy_event(ea);
  backend.destroy_event(eb);
}

} // namespace

// The host backend kept one error per stream: a second task that threw while the first task's error
// was still held was dropped, so the event recorded after the second task reported nothing once the
// first error was taken by synchronize on the first event.
TEST_CASE("Failures.host backend: a second failing task's error survives synchronize on the first one's event") {
  mstar::host_backend backend;
  auto s = backend.create_stream();
  auto ea = backend.create_event(), eb = backend.create_event();
  backend.enqueue(s, [] { throw std::runtime_error("task A failed"); });
  backend.record(ea, s);
  backend.enqueue(s, [] { throw std::runtime_error("task B failed"); });
  backend.record(eb, s);
  while (true) { // until both tasks ran (query keeps an error; synchronize takes it)
    try {
      if (backend.query(eb)) break;
    } catch (...) {
      break;
    }
  }
  CHECK_THROWS_WITH_AS((void)backend.query(ea), "task A failed", std::runtime_error);
  // Task B threw before eb was recorded: eb must report it after synchronize took A's.
  check_two_errors(backend, ea, eb, "task A failed", "task B failed");
}

// The same at the worker: lane off (side steps on the chain stream), two steps in flight on it, the
// stream work of both raising (a kernel fault that leaves the outputs unwritten). The second step's
// requests must fail; when its error was dropped, those not also in the first step ended "completed"
// with bytes no task wrote.
namespace {
struct two_fault_run {
  bool useful = false; // step two held a request that step one did not
  int wrong = 0;       // requests of step two (only) that did not end failed
  std::string detail;
};
two_fault_run run_two_faults() {
  pool_hooks::reset();
  mstar::host_backend backend;
  Engine engine(backend, options(16));
  tts_flow flow;
  mstar::worker_options o;
  o.lane = mstar::lane_mode::off;
  Worker w(engine, flow, std::move(o));
  install_forwards(w, backend);
  std::atomic<bool> armed{false};
  std::atomic<int> faulted{0}; // failing steps launched (0, 1, 2)
  std::atomic<int> decodes{0};
  std::atomic<bool> second_in{false}, two_ran{false};
  std::mutex seeds_lock;
  std::set<std::uint64_t> second_seeds, first_seeds;
  // A faulting forward enqueues a throwing task instead of its work. The first (a codec step of one
  // row) then holds its stream until the second (the next decode step) enqueued its fault behind it;
  // the second holds the GPU thread until the stream ran it: both ran before step one is polled.
  auto fault = [&](const auto& ctx, bool codec) -> bool {
    if (!armed.load()) return false;
    const int k = faulted.load();
    if (k >= 2 || (k == 0) != codec) return false;
    if (k == 0 && ctx.payloads.size() != 1) return false;
    faulted.store(k + 1);
    {
      std::lock_guard g(seeds_lock);
      for (const auto& p : ctx.payloads)
        (k == 0 ? first_seeds : second_seeds).insert(p.seed);
    }
    backend.enqueue(ctx.stream, [k] { throw std::runtime_error(k == 0 ? "fault one" : "fault two"); });
    if (k == 0) {
      backend.enqueue(ctx.stream, [&second_in] {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (!second_in.load() && std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
      });
    } else {
      backend.enqueue(ctx.stream, [&two_ran] { two_ran = true; });
      second_in = true;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!two_ran.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    }
    return true;
  };
  w.forward<Decode>([&](const auto& ctx) {
    ++decodes;
    if (!fault(ctx, false)) enqueue_decode(backend, ctx);
  });
  w.forward<Codec>([&](const auto& ctx) {
    if (!fault(ctx, true)) enqueue_codec(backend, ctx);
  });
  auto input = [](mstar::request_id id) { return tts_input{id + 1, 4, id == 0 ? 400u : 40u}; };
  w.start();
  REQUIRE(w.submit(0, input(0))); // ahead of the others: its codec windows come at other times
  while (decodes.load() < 20)
    std::this_thread::yield();
  for (mstar::request_id i = 1; i < 4; ++i)
    REQUIRE(w.submit(i, input(i)));
  while (decodes.load() < 24)
    std::this_thread::yield();
  armed = true;
  w.wait_idle();
  w.stop();
  two_fault_run out;
  if (faulted.load() < 2 || !two_ran.load()) return out;
  std::lock_guard g(flow.lock);
  std::lock_guard g2(seeds_lock);
  for (const auto& [id, r] : flow.results) {
    const auto in = input(id);
    if (!second_seeds.count(in.seed) || first_seeds.count(in.seed)) continue;
    out.useful = true;
    if (r.how != mstar::request_end::failed) {
      ++out.wrong;
      out.detail += "request " + std::to_string(id) + " (in step two only) ended " +
                    (r.how == mstar::request_end::completed ? "completed" : "cancelled") + ", audio " +
                    (r.audio == reference_audio(in) ? "right" : "WRONG (never written)") + "; ";
    }
  }
  return out;
}
} // namespace

TEST_CASE("Failures.two failing steps in flight on one stream: both steps' requests fail") {
  int useful = 0, wrong = 0;
  std::string detail;
  for (int attempt = 0; attempt < 20 && useful < 3; ++attempt) {
    const auto r = run_two_faults();
    useful += r.useful;
    wrong += r.wrong;
    detail += r.detail;
  }
  INFO(useful << " useful runs; " << detail);
  REQUIRE(useful > 0);
  CHECK(wrong == 0);
}

// Docs: a fatal error ends "every request still live or queued" failed. A submit made after the
// worker stopped on its error was accepted (true) and never ended; it is refused (throws) now.
TEST_CASE("Failures.a submit after a fatal error is refused or ended, never lost") {
  pool_hooks::reset();
  mstar::host_backend backend;
  Engine engine(backend, options(4));
  throwing_key_flow flow;
  mstar::worker_options o;
  o.nodes.resize(3);
  o.nodes[codec_node].batch = mstar::batching::per_key;
  worker_of<throwing_key_flow> w(engine, flow, std::move(o));
  install_forwards(w, backend);
  w.start();
  flow.armed = true;
  REQUIRE(w.submit(1, tts_input{1, 4, 3}));
  CHECK_THROWS(w.wait_idle()); // returns once fatal() ran; the main thread then ends what it holds
  for (;;) {                   // end_all_failed has ended request 1: the main thread is done
    {
      std::lock_guard g(flow.lock);
      if (flow.results.count(1)) break;
    }
    std::this_thread::yield();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  bool accepted = false, threw = false;
  try {
    accepted = w.submit(2, tts_input{2, 4, 3});
  } catch (...) {
    threw = true;
  }
  CHECK_THROWS(w.stop());
  std::lock_guard g(flow.lock);
  INFO("submit after the fatal error: accepted " << accepted << ", threw " << threw);
  if (accepted) CHECK(flow.results.count(2) == 1); // accepted, so it must get its end hook
}

namespace {

// A host backend whose worker-side enqueue (the device time stamp after the forward) throws once armed:
// a backend call failing outside any step's catch on the GPU thread, between admit and commit (on CUDA,
// cudaEventRecord after an asynchronous fault does the same).
struct flaky_backend : mstar::host_backend {
  std::atomic<bool> arm{false}, threw{false};
  template <class F>
  void enqueue(mstar::host_stream s, F&& f) {
    if (arm.exchange(false)) {
      threw = true;
      throw std::runtime_error("injected backend failure on the GPU thread");
    }
    mstar::host_backend::enqueue(s, std::forward<F>(f));
  }
};

using FlakyEngine = mstar::engine<Model, flaky_backend>;

struct throwing_start_flow : tts_flow {
  std::atomic<bool> gate{false}, in_gate{false};
  flaky_backend* backend = nullptr;
  void start(request_state& s, mstar::request_id id, const tts_input& in) {
    tts_flow::start(s, id, in);
    if (id != 100) return;
    in_gate = true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!backend->threw.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the GPU thread's fatal() is in
    throw std::runtime_error("start hook of request 100 fails"); // that request fails: teardown
  }
};

} // namespace

// The GPU thread dies between a step's admit and its commit: the runner's flight window stays open.
// The main thread, still in its pass, tears a request down (here one whose start hook threw):
// engine::remove_request -> step_runner::settle() waited for that window forever and stop() never
// returned; the worker now abandons the open step on the way out.
TEST_CASE("Failures.a fatal error on the GPU thread between admit and commit does not hang stop()") {
  pool_hooks::reset();
  flaky_backend backend;
  FlakyEngine engine(backend, options(4));
  throwing_start_flow flow;
  flow.backend = &backend;
  mstar::threaded_worker<Model, flaky_backend, throwing_start_flow> w(engine, flow, {});
  install_forwards(w, backend);
  std::atomic<bool> want{false}, waiting{false};
  w.forward<Decode>([&](const auto& ctx) {
    if (want.exchange(false)) {
      waiting = true;
      while (!flow.in_gate.load()) // the main thread is inside request 100's start hook
        std::this_thread::yield();
      backend.arm = true; // the worker's next enqueue (its time stamp after this forward) throws
    }
    enqueue_decode(backend, ctx);
  });
  w.start();
  want = true; // request 1's first decode forward waits for request 100's start hook
  REQUIRE(w.submit(1, tts_input{1, 4, 20}));
  while (!waiting.load())
    std::this_thread::yield();
  REQUIRE(w.submit(100, tts_input{2, 4, 3}));
  try {
    w.wait_idle();
  } catch (const std::exception& e) {
    MESSAGE("wait_idle: " << e.what());
  }
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    try {
      w.stop();
    } catch (const std::exception& e) {
      MESSAGE("stop: " << e.what());
    }
    stopped = true;
  });
  for (int i = 0; i < 300 && !stopped.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!stopped.load()) {
    std::fprintf(stderr, "HANG: stop() has not returned after 3 s (main thread stuck in step_runner::settle)\n");
    std::fflush(stderr);
    std::_Exit(3);
  }
  stopper.join();
  CHECK(backend.threw.load());
}

namespace {
// Tells when request 2's prefill landed (the main thread routed every step that landed before it).
struct prefill_spy_flow : tts_flow {
  std::atomic<bool> z_prefilled{false};
  bool landed(request_state& s, std::uint8_t node, const tts_payload& p) {
    if (node == prefill_node && s.in.seed == 2) z_prefilled = true;
    return tts_flow::landed(s, node, p);
  }
};
} // namespace

// A request that failed (its decode step raised) while another row of it was still out (a codec step
// on the lane) is cancelled before that row lands: it ended "cancelled", its reason dropped and the
// metrics counting it cancelled (cancel_now did not look at s.failed; stop() did the same to every
// failed request still waiting for a row). It ends failed now.
TEST_CASE("Failures.a failed request cancelled while a row is out still ends failed, with its reason") {
  pool_hooks::reset();
  mstar::host_backend backend;
  Engine engine(backend, options(4));
  prefill_spy_flow flow;
  mstar::worker_options o;
  o.lane = mstar::lane_mode::on; // the held codec step blocks the lane, never the chain
  worker_of<prefill_spy_flow> w(engine, flow, std::move(o));
  install_forwards(w, backend);
  std::atomic<bool> gate{true}, codec_launched{false}, decode_threw{false};
  w.forward<Codec>([&](const auto& ctx) {
    codec_launched = true; // on the GPU thread, before any later decode step's forward
    backend.enqueue(ctx.stream, [&gate] { // holds the lane: request 1's codec row stays out
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (gate.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    });
    enqueue_codec(backend, ctx);
  });
  w.forward<Decode>([&](const auto& ctx) {
    if (codec_launched.load() && !decode_threw.exchange(true)) throw std::runtime_error("decode raised");
    enqueue_decode(backend, ctx);
  });
  w.start();
  REQUIRE(w.submit(1, tts_input{1, 4, 20}));
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!decode_threw.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  REQUIRE(decode_threw.load());
  // Request 2's prefill runs on the chain after the failed decode step: once it landed, request 1 is
  // failed (its failed step was routed) and waits for its codec row.
  REQUIRE(w.submit(2, tts_input{2, 4, 2}));
  until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!flow.z_prefilled.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  REQUIRE(flow.z_prefilled.load());
  REQUIRE(gate.load()); // request 1's codec row is still out
  w.cancel(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  gate = false;
  w.wait_idle();
  w.stop();
  std::lock_guard g(flow.lock);
  REQUIRE(flow.results.count(1) == 1);
  INFO("how " << int(flow.results.at(1).how) << ", why '" << flow.results.at(1).why << "'");
  CHECK(flow.results.at(1).how == mstar::request_end::failed);
  CHECK(flow.results.at(1).why.find("decode raised") != std::string::npos);
  CHECK(w.request_metrics().failed() == 1);
}

namespace {
// The main thread is held in request 100's start hook; request 5's end hook throws.
struct throwing_end_flow : tts_flow {
  std::atomic<bool> gate{false}, in_gate{false};
  void start(request_state& s, mstar::request_id id, const tts_input& in) {
    if (id == 100) {
      in_gate = true;
      while (gate.load())
        std::this_thread::yield();
    }
    tts_flow::start(s, id, in);
  }
  void end(request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    tts_flow::end(s, id, how, why);
    if (id == 5) throw std::runtime_error("end hook of request 5 throws");
  }
};
} // namespace

// Issue 20, item 1: one throwing end hook stopped the whole worker: wait_idle() and stop() rethrew, the
// other requests ended failed ("the worker stopped on an error"), and after stop() recurrent slots, KV
// blocks and request indices were still held. Inside take_inbox (a cancel's end hook), the submissions
// after it in that batch were lost besides. Now the request's throw is recorded and nothing else changes.
TEST_CASE("Failures.an end hook that throws fails that request alone; the others complete and every pool is full") {
  pool_hooks::reset();
  mstar::host_backend backend;
  Engine engine(backend, options(4));
  throwing_end_flow flow;
  worker_of<throwing_end_flow> w(engine, flow, {});
  install_forwards(w, backend);
  w.start();
  std::map<mstar::request_id, mstar::request_end> told; // what each end hook is told
  SUBCASE("twelve requests, more than max_requests: some wait in the backlog") {
    for (mstar::request_id i = 1; i <= 12; ++i) {
      REQUIRE(w.submit(i, tts_input{i, 4, 6}));
      told[i] = mstar::request_end::completed;
    }
  }
  SUBCASE("a cancel's end hook throws inside take_inbox, with a submission after it in the same batch") {
    flow.gate = true;
    REQUIRE(w.submit(100, tts_input{1, 4, 2}));
    while (!flow.in_gate.load())
      std::this_thread::yield();
    REQUIRE(w.submit(5, tts_input{5, 4, 2}));
    w.cancel(5); // ends 5 from the backlog: its end hook throws
    REQUIRE(w.submit(6, tts_input{6, 4, 2}));
    flow.gate = false;
    told = {{100, mstar::request_end::completed}, {5, mstar::request_end::cancelled}, {6, mstar::request_end::completed}};
  }
  CHECK_NOTHROW(w.wait_idle());
  REQUIRE(w.submit(13, tts_input{13, 4, 3})); // the worker still takes requests
  told[13] = mstar::request_end::completed;
  CHECK_NOTHROW(w.wait_idle());
  CHECK_NOTHROW(w.stop());
  std::lock_guard g(flow.lock);
  REQUIRE(flow.results.size() == told.size());
  for (const auto& [id, how] : told) {
    CAPTURE(id);
    CHECK(flow.results.at(id).how == how); // request 5's hook was told so, then threw
  }
  CHECK(w.counters().end_hook_errors.load() == 1);
  CHECK(w.request_metrics().failed() == 1); // the throw is recorded against request 5
  std::string why;
  CHECK_MESSAGE(pools_full(engine, &why), why);
}

// The same for a throwing admit-failure handler (worker_options::on_refusal): the refused step's
// requests fail with the handler's message, the others complete, and nothing stays held after stop().
TEST_CASE("Failures.an admit-failure handler that throws fails the refused step's requests only; every pool is full") {
  pool_hooks::reset();
  mstar::host_backend backend;
  Engine engine(backend, options(4));
  tts_flow flow;
  mstar::worker_options o;
  std::atomic<int> calls{0};
  o.on_refusal = [&calls](const mstar::refusal_event& ev) -> mstar::admit_action {
    if (calls.fetch_add(1) == 0) throw std::runtime_error("on_refusal boom for " + std::string(ev.node_name));
    return mstar::admit_action::hold;
  };
  worker_of<tts_flow> w(engine, flow, std::move(o));
  install_forwards(w, backend);
  w.start();
  REQUIRE(w.submit(1, tts_input{1, 4, 3}));
  w.wait_idle(); // one request alone: the refused codec step holds request 1 only
  pool_hooks::refuse_admits = 1;
  REQUIRE(w.submit(2, tts_input{2, 4, 6}));
  CHECK_NOTHROW(w.wait_idle());
  for (mstar::request_id i = 3; i <= 12; ++i)
    REQUIRE(w.submit(i, tts_input{i, 4, 6}));
  CHECK_NOTHROW(w.wait_idle());
  CHECK_NOTHROW(w.stop());
  std::lock_guard g(flow.lock);
  REQUIRE(flow.results.size() == 12);
  CHECK(flow.results.at(1).how == mstar::request_end::completed);
  CHECK(flow.results.at(2).how == mstar::request_end::failed);
  CHECK(flow.results.at(2).why.find("on_refusal boom for codec") != std::string::npos);
  for (mstar::request_id i = 3; i <= 12; ++i) {
    CAPTURE(i);
    CHECK(flow.results.at(i).how == mstar::request_end::completed);
  }
  CHECK(calls.load() == 1);
  CHECK(w.counters().refusal_handler_errors.load() == 1);
  std::string why;
  CHECK_MESSAGE(pools_full(engine, &why), why);
}

// The host backend keeps up to max_kept_errors (1024) untaken errors per stream. It dropped the newest
// past the cap: a step whose forward enqueued >= 1024 failing tasks hid the error of the next step on
// the same stream (lane off: a side step behind a chain step), which then reported nothing once the
// first step's event was synchronized. Now the newest replaces the last kept.
TEST_CASE("Failures.host backend: a later step's error survives when an earlier step left >= 1024 errors") {
  mstar::host_backend backend;
  auto s = backend.create_stream();
  auto ea = backend.create_event(), eb = backend.create_event();
  for (int i = 0; i < 1024; ++i)
    backend.enqueue(s, [] { throw std::runtime_error("step A kernel failed"); });
  backend.record(ea, s);
  backend.enqueue(s, [] { throw std::runtime_error("step B failed"); });
  backend.record(eb, s);
  check_two_errors(backend, ea, eb, "step A kernel failed", "step B failed");
}

namespace {
struct throwing_hooks_flow : tts_flow_predicting {
  bool finished(const tts_flow::request_state& s) const {
    if (s.in.seed == 2 && tts_flow::finished(s)) throw std::runtime_error("finished boom");
    return tts_flow::finished(s);
  }
  bool continues(const tts_flow::request_state& s, std::uint8_t node, const tts_payload& p) const {
    if (s.in.seed == 3) throw std::runtime_error("continues boom");
    return tts_flow_predicting::continues(s, node, p);
  }
};
} // namespace

// A throwing finished or continues hook fails that request alone, with the reason, and the others run.
TEST_CASE("Failures.throwing finished/continues hooks fail only their request") {
  pool_hooks::reset();
  mstar::host_backend backend;
  Engine engine(backend, options(4));
  throwing_hooks_flow flow;
  mstar::threaded_worker<Model, mstar::host_backend, throwing_hooks_flow> w(engine, flow, {});
  install_forwards(w, backend);
  w.start();
  for (mstar::request_id i = 1; i <= 3; ++i)
    REQUIRE(w.submit(i, tts_input{i, 4, 8}));
  w.wait_idle();
  w.stop();
  std::lock_guard g(flow.lock);
  REQUIRE(flow.results.size() == 3);
  CHECK(flow.results.at(1).how == mstar::request_end::completed);
  CHECK(flow.results.at(2).how == mstar::request_end::failed);
  CHECK(flow.results.at(2).why.find("finished boom") != std::string::npos);
  CHECK(flow.results.at(3).how == mstar::request_end::failed);
  CHECK(flow.results.at(3).why.find("continues boom") != std::string::npos);
  CHECK(pools_full(engine));
}

namespace {

// A host backend the worker cannot enqueue host code on (as on CUDA): a step's interval then runs from
// its launch to its landing as the GPU thread saw it. The forwards still enqueue, through the base.
struct stampless_backend : mstar::host_backend {
  template <class F>
  void enqueue(mstar::host_stream, F&&) = delete;
};

} // namespace

// Lane off, the codec runs on the chain stream: a codec step launched while a decode step is in flight
// waits for it there. Its trace event must begin once the step before it on the stream has landed, or
// the two partially overlap on the stream's track and the viewer nests them wrongly.
TEST_CASE("Trace.without device time stamps, one stream's steps still nest or follow each other on its track") {
  pool_hooks::reset();
  stampless_backend backend;
  mstar::engine<Model, stampless_backend> engine(backend, options(8));
  tts_flow flow;
  mstar::worker_options o;
  o.lane = mstar::lane_mode::off;
  mstar::threaded_worker<Model, stampless_backend, tts_flow> w(engine, flow, std::move(o));
  install_forwards(w, backend);
  mstar::host_backend& base = backend;
  w.forward<Decode>([&base](const auto& ctx) {
    enqueue_decode(base, ctx);
    base.enqueue(ctx.stream, [] { std::this_thread::sleep_for(std::chrono::microseconds(300)); });
  });
  w.forward<Codec>([&base](const auto& ctx) {
    enqueue_codec(base, ctx);
    base.enqueue(ctx.stream, [] { std::this_thread::sleep_for(std::chrono::microseconds(700)); });
  });
  w.start();
  for (mstar::request_id i = 0; i < 8; ++i)
    REQUIRE(w.submit(i, tts_input{i + 1, 4, 24}));
  w.wait_idle();
  w.stop();
  // The chain stream is track 3: tid 4. One event a line, sorted by (track, begin, longer first).
  std::istringstream lines(mstar::trace::to_json(w.trace_session()));
  std::vector<std::pair<double, double>> steps;
  for (std::string line; std::getline(lines, line);) {
    double ts = 0, dur = 0;
    if (std::sscanf(line.c_str(), R"({"ph":"X","pid":0,"tid":4,"ts":%lf,"dur":%lf)", &ts, &dur) == 2)
      steps.emplace_back(ts, ts + dur);
  }
  REQUIRE(steps.size() > 20);
  std::vector<double> open; // ends of the events that contain the current one
  std::size_t partial = 0;
  for (const auto& [b, e] : steps) {
    while (!open.empty() && open.back() <= b + 1e-6) // microseconds: a nanosecond less, for ts + dur
      open.pop_back();
    if (!open.empty() && e > open.back() + 1e-6) ++partial;
    open.push_back(e);
  }
  INFO(partial << " of " << steps.size() << " chain stream events partially overlap the one before");
  CHECK(partial == 0);
}

namespace {

// stampless_backend whose query of a landed step answers late, as a cudaEventQuery made just before
// the step landed: when later work is queued on the step's stream, the query returns (not done) only
// once that work ran too, so the worker's next query, of a later step there, finds that one done.
struct late_query_backend : stampless_backend {
  mutable std::atomic<int> late{0}; // queries answered late
  bool query(mstar::host_event e) const {
    if (!mstar::host_backend::query(e)) return false;
    auto* st = e.state->stream;
    if (st == nullptr) return true;
    const auto tail = st->tail.load(std::memory_order_acquire);
    if (st->executed.load(std::memory_order_acquire) >= tail) return true;
    while (st->executed.load(std::memory_order_acquire) < tail)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    late.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
};

} // namespace

// One stream lands its steps in order: a step found landed after a step before it on its stream was
// found running (in the same poll) must not land first, or its event takes the begin of the earlier
// one and the earlier one's event shrinks to [the later one's landing, its own]: the trace shows them
// swapped and the busy union loses the time between their launches.
TEST_CASE("Trace.without device time stamps, a stream's steps land in their launch order even when a poll sees a later one done first") {
  pool_hooks::reset();
  late_query_backend backend;
  mstar::engine<Model, late_query_backend> engine(backend, options(8));
  tts_flow flow;
  mstar::worker_options o;
  o.lane = mstar::lane_mode::off;
  mstar::threaded_worker<Model, late_query_backend, tts_flow> w(engine, flow, std::move(o));
  install_forwards(w, backend);
  mstar::host_backend& base = backend;
  std::vector<std::string> launched; // GPU thread, read after stop()
  w.forward<Prefill>([&](const auto& ctx) {
    launched.emplace_back("prefill");
    enqueue_prefill(base, ctx);
  });
  w.forward<Decode>([&](const auto& ctx) {
    launched.emplace_back("decode");
    enqueue_decode(base, ctx);
    base.enqueue(ctx.stream, [] { std::this_thread::sleep_for(std::chrono::microseconds(2000)); });
  });
  w.forward<Codec>([&](const auto& ctx) {
    launched.emplace_back("codec");
    enqueue_codec(base, ctx);
    base.enqueue(ctx.stream, [] { std::this_thread::sleep_for(std::chrono::microseconds(700)); });
  });
  w.start();
  for (mstar::request_id i = 0; i < 8; ++i)
    REQUIRE(w.submit(i, tts_input{i + 1, 4, 24}));
  w.wait_idle();
  w.stop();
  // The chain stream's events (track 3: tid 4) in the order of their begin, against the launches.
  std::istringstream lines(mstar::trace::to_json(w.trace_session()));
  std::vector<std::string> shown;
  for (std::string line; std::getline(lines, line);) {
    double ts = 0, dur = 0;
    char name[32] = {};
    if (std::sscanf(line.c_str(), R"({"ph":"X","pid":0,"tid":4,"ts":%lf,"dur":%lf,"name":"%31[a-z_]")", &ts, &dur,
                    name) == 3)
      shown.emplace_back(name);
  }
  REQUIRE(shown.size() == launched.size());
  REQUIRE(backend.late.load() > 0); // a step was found running while a later one waited on its stream
  std::size_t swapped = 0;
  for (std::size_t i = 0; i < shown.size(); ++i)
    swapped += shown[i] != launched[i];
  INFO(swapped << " of " << shown.size() << " chain stream events out of their launch order");
  CHECK(swapped == 0);
  CHECK(pools_full(engine));
}
