// A closed-loop load generator over the Qwen3-TTS worker: N requests with a seeded sentence-length
// distribution, at most c live at once (a request is submitted when one ends), the first `warmup`
// of them excluded from the statistics, an optional seeded share cancelled mid-stream. One call of
// run_arm is one arm: a fresh engine and worker (lane mode, codec batching) over the caller's talker
// and codec objects (their weights and CUDA graphs outlive arms).
//
//   qwen3_tts::load_options lo{.requests = 64, .concurrency = 8, .warmup = 8};
//   auto arm = qwen3_tts::run_arm(backend, talker, codec, engine_options, forward_options, lo);
//   arm.digests        // completed requests' audio digests: equal across lane modes and batchings
//   arm.audio_per_s    // audio seconds the measured requests got per wall second (whole run)
//   arm.steady_audio_per_s  // audio seconds per second while all c slots are busy (steady state)
//
// The steady-state window runs from the end of the warmup (the last warmup request's end; the first
// submit without warmup) to the last submit (the generator has no request left to issue). Inside it
// every one of the c slots holds a live request (an ending request is replaced at once), so it leaves
// out the ramp (the warmup's requests all starting together) and the drain (the last requests
// finishing at lower concurrency), which dominate the whole-run figure's noise in short runs. Its
// audio is every chunk that landed in the window, whichever request it belongs to (warmup included).
//
// Client-side latencies are taken at the flow's landed hook (the worker's main thread), the point
// where a real server would hand the chunk to the client.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <mstar/engine/engine.hpp>
#include <mstar/worker.hpp>

#include "qwen3_tts/tts_flow.hpp"

namespace qwen3_tts {

struct load_options {
  std::uint32_t requests = 64;   // measured requests
  std::uint32_t concurrency = 8; // live at once
  std::uint32_t warmup = 8;      // run first, excluded from the statistics
  double cancel_rate = 0.0;      // share of requests cancelled after a seeded number of audio chunks
  std::uint64_t seed = 1;        // the request mix (lengths, prompts, cancellations)
  std::uint32_t frames_min = 6, frames_max = 40;  // sentence length in frames (12.5 per second of audio)
  std::uint32_t prompt_min = 4, prompt_max = 16;  // prompt tokens
  mstar::lane_mode lane = mstar::lane_mode::automatic;
  // talker_prefill's batching across time (worker node_options::min_batch, max_wait): while the chain
  // has other work, a prefill step waits for this many rows or until its oldest row has waited
  // prefill_max_wait. A prefill step of a few rows costs about what one of one row costs (H200, c = 128,
  // eager prefill without the wait: 3.4-4.1 ms a step of 2-3 requests, 34-43 % of the GPU time; with
  // prefill graphs and the wait 1.6-2.4 ms, 12-21 %; lane_study.py prefill). prefill_max_wait 0: no
  // waiting.
  std::uint32_t prefill_min_batch = 8;
  std::chrono::microseconds prefill_max_wait{8000};
  bool prefill_waits() const { return prefill_min_batch > 1 && prefill_max_wait.count() > 0; }
  tts_flow_options flow{};
  bool progress = false;         // draw a progress bar on stdout (the caller decides: a terminal only)
  std::string trace;             // write the worker's Chrome trace here ("" : none)
  mstar::request_id first_id = 1;
};

struct planned_request {
  mstar::request_id id = 0;
  tts_request in{};
  bool cancel = false, warmup = false;
};

// The seeded request mix: every arm of a comparison runs exactly these. Lengths are triangular
// between the bounds (the mean of two uniform draws), like a spread of sentence lengths; a
// cancelled request is cancelled after 0 .. (its chunk count - 1) chunks.
inline std::vector<planned_request> plan_requests(const load_options& o) {
  if (o.frames_min == 0 || o.frames_max < o.frames_min || o.prompt_min == 0 || o.prompt_max < o.prompt_min)
    throw std::invalid_argument("qwen3_tts::plan_requests: frame or prompt bounds are empty or 0; give "
                                "1 <= min <= max");
  if (!(o.cancel_rate >= 0.0 && o.cancel_rate <= 1.0))
    throw std::invalid_argument("qwen3_tts::plan_requests: cancel rate " + std::to_string(o.cancel_rate) +
                                " is outside [0, 1]");
  std::mt19937_64 rng(o.seed);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return lo + static_cast<std::uint32_t>(rng() % (std::uint64_t(hi) - lo + 1));
  };
  std::vector<planned_request> out;
  const std::uint32_t n = o.warmup + o.requests;
  for (std::uint32_t i = 0; i < n; ++i) {
    planned_request p;
    p.id = o.first_id + i;
    p.warmup = i < o.warmup;
    p.in.frames = (uniform(o.frames_min, o.frames_max) + uniform(o.frames_min, o.frames_max) + 1) / 2;
    p.in.prompt_tokens = uniform(o.prompt_min, o.prompt_max);
    const double u = double(rng() >> 11) * 0x1.0p-53;
    if (u < o.cancel_rate) {
      std::uint32_t chunks = 0;
      for (std::uint32_t coded = 0; coded < p.in.frames; ++chunks)
        coded += std::min(o.flow.ramp[std::min<std::size_t>(chunks, o.flow.ramp.size() - 1)], p.in.frames - coded);
      p.cancel = true;
      p.in.cancel_after_chunks = static_cast<std::uint32_t>(rng() % chunks);
    } else {
      (void)rng();
    }
    out.push_back(p);
  }
  return out;
}

// Exact order statistics of a sample, in nanoseconds.
struct spread {
  std::uint64_t count = 0;
  double p50 = 0, p95 = 0, p99 = 0, max = 0, mean = 0;
};
inline spread spread_of(std::vector<mstar::metrics::nanos> v) {
  spread s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const auto rank = std::max<std::size_t>(1, std::size_t(std::ceil(q * double(v.size()))));
    return double(v[std::min(rank, v.size()) - 1]);
  };
  s.p50 = at(0.50);
  s.p95 = at(0.95);
  s.p99 = at(0.99);
  s.max = double(v.back());
  double sum = 0;
  for (auto x : v)
    sum += double(x);
  s.mean = sum / double(v.size());
  return s;
}

struct arm_result {
  std::map<mstar::request_id, tts_result> results;    // every request, warmup included
  std::map<mstar::request_id, audio_digest> digests;  // completed requests
  std::vector<planned_request> plan;
  // Measured requests only.
  std::uint64_t completed = 0, cancelled = 0, failed = 0;
  std::string first_failure; // "request <id>: <reason>" of the first measured request that failed
  // audio_s: every chunk they got, cancelled and failed requests' included; wall_s: first submit to last end.
  double wall_s = 0, audio_s = 0, audio_per_s = 0;
  // The steady-state window (see the top of the file); steady_s 0 when it is empty (too few requests
  // after the warmup: every request was submitted before the warmup ended).
  double steady_s = 0, steady_audio_s = 0, steady_audio_per_s = 0;
  spread first_audio, gap;
  // The whole run (warmup included): steps launched by the forwards, the worker's counters.
  std::uint64_t prefill_steps = 0, decode_steps = 0, codec_steps = 0, codec_rows = 0, decode_rows = 0,
                decode_padded_rows = 0;
  std::uint64_t side_steps = 0, side_steps_on_lane = 0, refusals = 0, failed_steps = 0, parked = 0;
  std::uint64_t lane_on = 0, lane_chain = 0, lane_explored = 0;
  mstar::lane_measurements lane{};
  mstar::metrics::summary summary;
  // After the run: every pool full again, no request left, every output buffer back.
  bool pools_full = false, buffers_free = false;
  std::string pools_why;
  // The split topology (split.hpp): producer steps sent over the edge, and tries that found it full.
  std::uint64_t edge_sends = 0, edge_full_waits = 0;
  double edge_send_us_mean = 0; // the Talker's GPU thread, per send (the copy's device time is not in it)
  // The copies' device time on the edge's copy stream (from its waits met to the copy's end), per send.
  double edge_copy_us_mean = 0, edge_copy_us_max = 0;
  std::uint64_t edge_copies_unmeasured = 0; // copies whose rows were all dropped before they were timed
};

// The steady-state window of a run and the audio that landed in it: from the last warmup request's
// end (`first_submit` without warmup) to `last_submit`; empty (0 s) when it does not begin before it ends.
struct steady_figures {
  double seconds = 0, audio_s = 0;
};
inline steady_figures steady_window(const std::map<mstar::request_id, tts_result>& results,
                                    const std::vector<planned_request>& plan,
                                    const std::map<mstar::request_id, std::size_t>& index,
                                    mstar::metrics::nanos first_submit, mstar::metrics::nanos last_submit) {
  mstar::metrics::nanos begin = first_submit;
  bool warmup = false;
  for (const auto& [id, r] : results)
    if (plan[index.at(id)].warmup) {
      begin = warmup ? std::max(begin, r.ended) : r.ended;
      warmup = true;
    }
  steady_figures f;
  if (first_submit < 0 || last_submit <= begin) return f;
  std::uint64_t frames = 0;
  for (const auto& [id, r] : results)
    for (const auto& ch : r.chunk_log)
      if (ch.at > begin && ch.at <= last_submit) frames += ch.frames;
  f.seconds = double(last_submit - begin) * 1e-9;
  f.audio_s = double(frames) / frames_per_second;
  return f;
}

// An arm's request plan (into out.plan) and each id's place in it.
inline std::map<mstar::request_id, std::size_t> begin_arm(arm_result& out, const load_options& lo,
                                                          const mstar::engine_options& eo) {
  if (lo.concurrency == 0) throw std::invalid_argument("qwen3_tts::run_arm: concurrency is 0; use at least 1");
  if (lo.concurrency > eo.max_requests)
    throw std::invalid_argument("qwen3_tts::run_arm: concurrency " + std::to_string(lo.concurrency) +
                                " is above engine_options.max_requests " + std::to_string(eo.max_requests));
  out.plan = plan_requests(lo);
  std::map<mstar::request_id, std::size_t> index;
  for (std::size_t i = 0; i < out.plan.size(); ++i)
    index[out.plan[i].id] = i;
  return index;
}

// The client's side of an arm: ended requests and cancel points, from the workers' main threads.
struct client_events {
  std::mutex m;
  std::condition_variable cv;
  std::deque<mstar::request_id> ended, to_cancel;
  void end(mstar::request_id id) {
    std::lock_guard g(m);
    ended.push_back(id);
    cv.notify_one();
  }
  void cancel_point(mstar::request_id id) {
    std::lock_guard g(m);
    to_cancel.push_back(id);
    cv.notify_one();
  }
};
struct client_clock {
  mstar::metrics::nanos measure_begin = -1, first_submit = -1, last_submit = -1;
};

// The closed loop: at most lo.concurrency live, a request submitted when one ends, cancels at the
// cancel points; then wait_idle and stop. `client` is a started threaded_worker or worker_set
// (submit(id, tts_request), cancel, wait_idle, stop).
template <class Client>
client_clock drive_clients(Client& client, const std::vector<planned_request>& plan, const load_options& lo,
                           step_timeline* timeline, client_events& ev) {
  std::size_t next = 0, done = 0;
  std::uint32_t live = 0;
  client_clock k;
  auto last_bar = std::chrono::steady_clock::now();
  auto bar = [&](bool final) {
    if (!lo.progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_bar < std::chrono::milliseconds(100)) return;
    last_bar = now;
    const int width = 40;
    const int filled = int(double(done) / double(plan.size()) * width);
    std::printf("\r  [%.*s%*s] %zu/%zu requests", filled, "########################################", width - filled, "",
                done, plan.size());
    if (final) std::printf("\r%*s\r", width + 40, "");
    std::fflush(stdout);
  };
  try {
    while (done < plan.size()) {
      while (live < lo.concurrency && next < plan.size()) {
        auto in = plan[next].in;
        in.submitted = mstar::metrics::now_ns();
        if (k.first_submit < 0) k.first_submit = in.submitted;
        k.last_submit = in.submitted;
        if (!plan[next].warmup && k.measure_begin < 0) {
          k.measure_begin = in.submitted;
          if (timeline) timeline->arm(true);
        }
        if (!plan[next].cancel) in.cancel_after_chunks = ~0u;
        client.submit(plan[next].id, in);
        ++live;
        ++next;
      }
      std::deque<mstar::request_id> e, c;
      {
        std::unique_lock g(ev.m);
        ev.cv.wait_for(g, std::chrono::milliseconds(50), [&] { return !ev.ended.empty() || !ev.to_cancel.empty(); });
        e.swap(ev.ended);
        c.swap(ev.to_cancel);
      }
      for (auto id : c)
        client.cancel(id);
      live -= static_cast<std::uint32_t>(e.size());
      done += e.size();
      bar(false);
    }
    client.wait_idle();
  } catch (...) {
    client.stop();
    throw;
  }
  client.stop();
  if (timeline) timeline->arm(false);
  bar(true);
  return k;
}

// The arm's figures from its requests' results.
inline void tally(arm_result& out, std::map<mstar::request_id, tts_result> results,
                  const std::map<mstar::request_id, std::size_t>& index, const client_clock& k) {
  const auto& plan = out.plan;
  out.results = std::move(results);
  mstar::metrics::nanos measure_end = k.measure_begin;
  std::vector<mstar::metrics::nanos> first, gaps;
  for (const auto& [id, r] : out.results) {
    if (r.how == mstar::request_end::completed) out.digests[id] = r.digest;
    if (plan[index.at(id)].warmup) continue;
    measure_end = std::max(measure_end, r.ended);
    // Every chunk the request got, whatever its end (a cancelled one's too, as the steady figure).
    for (const auto& ch : r.chunk_log)
      out.audio_s += double(ch.frames) / frames_per_second;
    if (r.how == mstar::request_end::completed) {
      ++out.completed;
      if (r.first_audio >= 0) first.push_back(r.first_audio - r.submitted);
      gaps.insert(gaps.end(), r.gaps.begin(), r.gaps.end());
    } else if (r.how == mstar::request_end::cancelled) {
      ++out.cancelled;
    } else {
      if (out.failed++ == 0) out.first_failure = "request " + std::to_string(id) + ": " + r.why;
    }
  }
  out.wall_s = k.measure_begin < 0 ? 0.0 : double(measure_end - k.measure_begin) * 1e-9;
  out.audio_per_s = out.wall_s > 0 ? out.audio_s / out.wall_s : 0.0;
  const auto steady = steady_window(out.results, plan, index, k.first_submit, k.last_submit);
  out.steady_s = steady.seconds;
  out.steady_audio_s = steady.audio_s;
  out.steady_audio_per_s = steady.seconds > 0 ? steady.audio_s / steady.seconds : 0.0;
  out.first_audio = spread_of(std::move(first));
  out.gap = spread_of(std::move(gaps));
}

// After the run: every pool of the engine full again and no request left in its table (what is not
// is added to out.pools_why).
template <class Engine>
bool check_pools(arm_result& out, Engine& engine) {
  bool full = true;
  for (const auto& st : engine.stats())
    if (st.free != st.capacity) {
      full = false;
      out.pools_why += std::string(st.key) + " has " + std::to_string(st.free) + " of " +
                       std::to_string(st.capacity) + " free; ";
    }
  if (engine.requests().live() != 0) {
    full = false;
    out.pools_why += std::to_string(engine.requests().live()) + " requests still in the table";
  }
  return full;
}

// talker_decode's padding buckets for the worker: forward_options' sorted, and max_batch above them.
inline std::vector<std::uint32_t> decode_buckets(const forward_options& fo, const mstar::engine_options& eo) {
  auto buckets = fo.decode_buckets;
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  if (!buckets.empty() && buckets.back() < eo.max_batch) buckets.push_back(eo.max_batch);
  return buckets;
}

// One arm. `timeline` (optional) is armed from the first measured submit to the end.
template <class Backend>
arm_result run_arm(Backend& backend, talker<Backend>& tk, codec<Backend>& cd, const mstar::engine_options& eo,
                   const forward_options& fo, const load_options& lo, step_timeline* timeline = nullptr,
                   mstar::worker_options wo = {}) {
  using Worker = mstar::threaded_worker<Model, Backend, tts_flow>;
  arm_result out;
  const auto index = begin_arm(out, lo, eo);
  const auto& plan = out.plan;

  mstar::engine<Model, Backend> engine(backend, eo);
  tts_flow flow(lo.flow);
  tts_forwards<Backend> fwd(backend, tk, cd, fo);
  fwd.timeline = timeline;
  wo.lane = lo.lane;
  wo.nodes.resize(Model::descriptor.nodes.size());
  wo.nodes[codec_node].batch = mstar::batching::per_key; // the flow's batch_key picks per width or all
  if (lo.prefill_waits()) {
    wo.nodes[prefill_node].min_batch = lo.prefill_min_batch; // above max_batch: the worker refuses it, saying so
    wo.nodes[prefill_node].max_wait = lo.prefill_max_wait;
  }
  // Decode steps carry their CUDA-graph bucket (padded by the worker, so a staged step promotes only
  // into a step of its bucket). A step above the largest graph runs padded to max_batch.
  wo.nodes[decode_node].buckets = decode_buckets(fo, eo);
  if (lo.trace.empty()) wo.trace_events = 0;
  Worker worker(engine, flow, wo);
  fwd.install(worker);

  client_events ev;
  flow.on_end = [&](mstar::request_id id) { ev.end(id); };
  flow.on_cancel_point = [&](mstar::request_id id) { ev.cancel_point(id); };
  worker.start();
  const auto clock = drive_clients(worker, plan, lo, timeline, ev);
  tally(out, std::move(flow.results()), index, clock);
  out.prefill_steps = fwd.prefill_steps;
  out.decode_steps = fwd.decode_steps;
  out.codec_steps = fwd.codec_steps;
  out.codec_rows = fwd.codec_rows;
  out.decode_rows = fwd.decode_rows;
  out.decode_padded_rows = fwd.decode_padded_rows;
  const auto& k = worker.counters();
  out.side_steps = k.side_steps.load();
  out.side_steps_on_lane = k.side_steps_on_lane.load();
  out.refusals = k.refusals.load();
  out.failed_steps = k.failed_steps.load();
  out.parked = k.parked.load();
  out.lane_on = worker.lane_decisions().decisions_on_lane();
  out.lane_chain = worker.lane_decisions().decisions_on_chain();
  out.lane_explored = worker.lane_decisions().decisions_explored();
  out.lane = worker.lane_decisions().measurements();
  out.summary = worker.summary();
  if (!lo.trace.empty()) {
    worker.write_trace(lo.trace);
    if (const auto dropped = worker.trace_session().dropped(); dropped != 0)
      std::fprintf(stderr,
                   "qwen3tts: note: the trace's buffers (%zu events a thread) filled, so the last %llu events are "
                   "not in %s; trace a shorter run (fewer requests, -n)\n",
                   wo.trace_events, static_cast<unsigned long long>(dropped), lo.trace.c_str());
  }
  out.buffers_free = fwd.buffers_free();
  out.pools_full = check_pools(out, engine);
  return out;
}

} // namespace qwen3_tts
