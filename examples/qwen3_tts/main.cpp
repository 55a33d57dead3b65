// qwen3tts: the Qwen3-TTS example. Its subcommands run the real model from a checkpoint folder:
//
//   qwen3tts synth --model DIR --text-ids 1,2,3 --speaker NAME --out a.wav   # text -> speech, through the worker
//   qwen3tts decode --model DIR --codes codes.json --out a.wav                # codes -> speech (the codec alone)
//   qwen3tts serve --model DIR --port 8000                                     # HTTP server (docs/serve.md)
//   qwen3tts loadgen-http --url http://127.0.0.1:8000 -c 8 -n 64 --voice ryan  # load a running server
//   qwen3tts loadgen --model DIR -c 1,4,16 --lane off,on --voice ryan          # the same load, in process
//
// Without a subcommand it is the Qwen3-TTS-shaped cost model under the worker, as a closed-loop load
// generator (the scheduling workload of the lane study):
//
//   qwen3tts                                   # default config, cuda when a device is present, else host
//   qwen3tts --backend host -n 48 -c 8 --lane auto --codec-batching per-width --json out.json
//   qwen3tts --check-identity                  # lane off/on/auto x both codec batchings: same audio
//   qwen3tts -c 8,16,32 --lane off,on,auto --codec-batching per-width,all --repeats 2 --json study.json
//
// One run is one "arm" (concurrency, lane mode, codec batching); lists of each run every combination,
// `--repeats` times, alternating the arms within each repetition. Each arm prints a row of the
// summary table (audio seconds per second, first audio p50/p95/p99, gap between audio chunks
// p50/p95, codec steps per Talker step, GPU busy fraction, host time per pass on the GPU thread,
// the Talker step's GPU time alone and with the codec beside it), and a single arm also the
// per-phase host time of the worker's threads. --json writes the same, --trace a Chrome trace (one
// arm only: with several, a note says that none is written).
//
// The config (--config, default configs/qwen3tts.yaml) is validated with mstar_config; its
// example: section sets the Talker's width and depth (CUDA) and the codec window ramp; a config that
// does not put codec_chunk on a side lane runs with the lane off. On the host backend the model
// runs at small sizes (forward.hpp's host_small) and the request mix is scaled down.
#ifdef QWEN3TTS_CUDA
#include <mstar/backend/cuda_impl.hpp> // this program's one definition of the CUDA backend

#include <cuda_runtime.h>

#include "qwen3_tts/forward_cuda.hpp"
#endif

#include <CLI/CLI.hpp>
#include <string_view>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <mstar/backend/host.hpp>
#include <mstar/model/compare.hpp>
#include <mstar/model/config.hpp>

#include "decode_cli.hpp"
#include "qwen3_tts/loadgen.hpp"
#include "qwen3_tts/split.hpp"
#include "synth_cli.hpp"
#ifdef QWEN3TTS_SERVE
#include "serve.hpp"
#endif

namespace {

using qwen3_tts::arm_result;

struct cli_options {
  std::string config = "configs/qwen3tts.yaml";
  std::string backend = "auto";
  std::vector<int> devices{0}; // CUDA: one for every worker, or one per worker of a split config
  std::uint32_t requests = 0, warmup = ~0u;
  std::vector<std::uint32_t> concurrency;
  double cancel_rate = 0.0;
  std::uint64_t seed = 1;
  std::vector<std::string> lanes{"auto"}, batchings{"per-width"};
  std::uint32_t repeats = 1;
  double time_budget_s = 0; // per concurrency: repetitions after the first start only within it (0: no limit)
  std::uint32_t frames_min = 0, frames_max = 0;
  std::uint32_t prefill_batch = qwen3_tts::load_options{}.prefill_min_batch;
  double prefill_wait_ms = double(qwen3_tts::load_options{}.prefill_max_wait.count()) / 1000.0;
  std::string prefill_graphs = "on";
  bool check_identity = false;
  bool settle = false; // run each concurrency's first arm once, unrecorded, before its measured runs
  std::string json, trace;
  bool no_progress = false;
  std::string command;
};

struct setup {
  std::string backend, config, model, machine;
  qwen3_tts::talker_config tc;
  qwen3_tts::codec_config cc;
  mstar::engine_options eo;
  qwen3_tts::forward_options fo;
  qwen3_tts::load_options lo;
  bool side_lane = true;
  bool split = false; // codec_chunk alone on a second worker: two workers joined by an edge (split.hpp)
};

struct arm_spec {
  std::uint32_t c = 8;
  mstar::lane_mode lane = mstar::lane_mode::automatic;
  bool per_width = true;
  std::uint32_t repeat = 0;
};

// Device-side figures of an arm (CUDA timing events around each step's launches).
struct device_figures {
  bool valid = false;
  std::uint64_t decode_alone = 0, decode_beside = 0;
  double decode_alone_p50_ms = 0, decode_beside_p50_ms = 0, codec_p50_ms = 0;
  double beside_ratio = 0; // per decode bucket: median beside / median alone, weighted by beside count
  double busy = -1;        // union of step intervals over the measured span
  std::map<std::uint32_t, std::pair<double, double>> per_bucket; // rows -> (alone p50, beside p50), ms
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> per_bucket_n;
};

struct arm_report {
  arm_spec spec;
  arm_result r;
  device_figures dev;
  double started_unix_s = 0, ended_unix_s = 0; // wall clock around the run (to join with a GPU clock log)
};

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hex64(std::uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

[[maybe_unused]] double median(std::vector<double> v) { // the CUDA figures only
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

#ifdef QWEN3TTS_CUDA
void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Timing events around each step's launches, from the GPU thread; read after the worker stopped.
class cuda_timeline : public qwen3_tts::step_timeline {
public:
  explicit cuda_timeline(std::size_t capacity) : events_(2 * capacity) {
    for (auto& e : events_)
      cuda_ok(cudaEventCreate(&e), "cudaEventCreate (timeline)");
    recs_.reserve(capacity);
  }
  ~cuda_timeline() override {
    for (auto e : events_)
      cudaEventDestroy(e);
  }
  void arm(bool on) override { armed_.store(on, std::memory_order_release); }
  void begin(std::uint8_t node, void* stream, std::uint32_t rows) override {
    open_ = false;
    if (!armed_.load(std::memory_order_acquire) || recs_.size() >= events_.size() / 2) return;
    const std::size_t k = recs_.size();
    cuda_ok(cudaEventRecord(events_[2 * k], static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    recs_.push_back({node, stream, rows});
    open_ = true;
  }
  void end(std::uint8_t, void* stream) override {
    if (!open_) return;
    cuda_ok(cudaEventRecord(events_[2 * (recs_.size() - 1) + 1], static_cast<cudaStream_t>(stream)),
            "cudaEventRecord");
    open_ = false;
  }
  void reset() { recs_.clear(); }

  device_figures read(std::uint32_t bucket_of_rows(std::uint32_t, const std::vector<std::uint32_t>&),
                      const std::vector<std::uint32_t>& buckets) {
    device_figures f;
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (recs_.empty()) return f;
    struct iv {
      double b, e;
      std::uint8_t node;
      void* stream;
      std::uint32_t rows;
    };
    std::vector<iv> v;
    for (std::size_t k = 0; k < recs_.size(); ++k) {
      float b = 0, e = 0;
      cuda_ok(cudaEventElapsedTime(&b, events_[0], events_[2 * k]), "cudaEventElapsedTime");
      cuda_ok(cudaEventElapsedTime(&e, events_[0], events_[2 * k + 1]), "cudaEventElapsedTime");
      v.push_back({b, e, recs_[k].node, recs_[k].stream, recs_[k].rows});
    }
    std::vector<iv> codec;
    double lo = v.front().b, hi = v.front().e;
    for (const auto& x : v) {
      lo = std::min(lo, x.b);
      hi = std::max(hi, x.e);
      if (x.node == qwen3_tts::codec_node) codec.push_back(x);
    }
    std::sort(codec.begin(), codec.end(), [](const iv& a, const iv& b) { return a.b < b.b; });
    std::vector<double> alone, beside, cod;
    std::map<std::uint32_t, std::pair<std::vector<double>, std::vector<double>>> by;
    for (const auto& x : codec)
      cod.push_back(x.e - x.b);
    for (const auto& x : v) {
      if (x.node != qwen3_tts::decode_node) continue;
      bool overlap = false;
      // Codec steps on another stream whose interval meets this one (sorted by begin).
      auto it = std::lower_bound(codec.begin(), codec.end(), x.e, [](const iv& c, double t) { return c.b < t; });
      for (auto j = it; j != codec.begin();) {
        --j;
        if (j->stream != x.stream && j->e > x.b && j->b < x.e) {
          overlap = true;
          break;
        }
        if (x.b - j->b > 1000.0) break; // no codec step lasts a second
      }
      const double d = x.e - x.b;
      const std::uint32_t bucket = bucket_of_rows(x.rows, buckets);
      (overlap ? beside : alone).push_back(d);
      (overlap ? by[bucket].second : by[bucket].first).push_back(d);
    }
    f.valid = true;
    f.decode_alone = alone.size();
    f.decode_beside = beside.size();
    f.decode_alone_p50_ms = median(alone);
    f.decode_beside_p50_ms = median(beside);
    f.codec_p50_ms = median(cod);
    double wsum = 0, w = 0;
    for (auto& [b, p] : by) {
      f.per_bucket[b] = {median(p.first), median(p.second)};
      f.per_bucket_n[b] = {p.first.size(), p.second.size()};
      if (p.first.size() >= 3 && p.second.size() >= 3) {
        wsum += double(p.second.size()) * median(p.second) / median(p.first);
        w += double(p.second.size());
      }
    }
    f.beside_ratio = w > 0 ? wsum / w : 0;
    // Busy: the union of the intervals over [lo, hi].
    std::sort(v.begin(), v.end(), [](const iv& a, const iv& b) { return a.b < b.b; });
    double busy = 0, rb = v.front().b, re = v.front().e;
    for (const auto& x : v) {
      if (x.b <= re) {
        re = std::max(re, x.e);
      } else {
        busy += re - rb;
        rb = x.b;
        re = x.e;
      }
    }
    busy += re - rb;
    f.busy = hi > lo ? busy / (hi - lo) : -1;
    return f;
  }

private:
  struct rec {
    std::uint8_t node;
    void* stream;
    std::uint32_t rows;
  };
  std::vector<cudaEvent_t> events_;
  std::vector<rec> recs_;
  std::atomic<bool> armed_{false};
  bool open_ = false;
};
#endif

[[maybe_unused]] std::uint32_t bucket_of(std::uint32_t rows, const std::vector<std::uint32_t>& buckets) {
  return mstar::bucket_for(rows, buckets);
}

// ---- reading the figures of an arm ----
const mstar::metrics::phase_row* find_row(const mstar::metrics::summary& s, const char* thread, const char* node,
                                          const char* phase) {
  for (const auto& r : s.per_thread)
    if (r.thread == thread && r.node == node && r.phase == phase) return &r;
  return nullptr;
}
double p50_us(const mstar::metrics::summary& s, const char* thread, const char* node, const char* phase) {
  const auto* r = find_row(s, thread, node, phase);
  return r ? double(r->time.p50) / 1000.0 : 0.0;
}
double busy_of(const arm_report& a) { return a.dev.valid ? a.dev.busy : a.r.summary.gpu_busy_fraction; }
double codec_per_talker(const arm_result& r) {
  return r.decode_steps ? double(r.codec_steps) / double(r.decode_steps) : 0.0;
}

void print_header() {
  std::printf("| %4s | %4s | %-9s | %9s | %9s | %22s | %15s | %11s | %6s | %9s | %15s | %7s |\n", "c", "lane",
              "codec", "audio s/s", "steady", "first audio p50/95/99", "gap p50/95", "codec/talk", "busy", "pass p50",
              "decode alone/bes", "on lane");
  std::printf("| ---: | ---- | --------- | --------: | --------: | ---------------------: | --------------: | "
              "----------: | -----: | --------: | --------------: | ------: |\n");
}

void print_row(const arm_report& a) {
  const auto& r = a.r;
  char dec[32] = "-";
  if (a.dev.valid)
    std::snprintf(dec, sizeof dec, "%.2f/%.2f ms", a.dev.decode_alone_p50_ms, a.dev.decode_beside_p50_ms);
  const double on_lane = r.side_steps ? 100.0 * double(r.side_steps_on_lane) / double(r.side_steps) : 0.0;
  char steady[32] = "-";
  if (r.steady_s > 0) std::snprintf(steady, sizeof steady, "%.2f", r.steady_audio_per_s);
  // No sample (every measured request cancelled or failed, or none with two chunks): "-", not 0 ms.
  char first[64] = "-", gap[64] = "-";
  if (r.first_audio.count > 0)
    std::snprintf(first, sizeof first, "%6.1f/%6.1f/%6.1f ms", r.first_audio.p50 / 1e6, r.first_audio.p95 / 1e6,
                  r.first_audio.p99 / 1e6);
  if (r.gap.count > 0) std::snprintf(gap, sizeof gap, "%5.1f/%5.1f ms", r.gap.p50 / 1e6, r.gap.p95 / 1e6);
  std::printf("| %4u | %4s | %-9s | %9.2f | %9s | %22s | %15s | %11.2f | %5.1f%% | %6.1f us | %15s | %6.1f%% |\n",
              a.spec.c, a.r.edge_sends ? "split" : std::string(mstar::name_of(a.spec.lane)).c_str(), a.spec.per_width ? "per-width" : "all",
              r.audio_per_s, steady, first, gap, codec_per_talker(r), 100.0 * busy_of(a),
              p50_us(r.summary, "GPU", "talker_decode", "pass"), dec, on_lane);
}

void print_phases(const arm_result& r) {
  std::printf("\nper-phase host time (us, p50 / p95; the worker's histograms, warmup included)\n");
  std::printf("  %-6s %-15s %9s %9s %9s %9s %9s %9s\n", "thread", "node", "admit", "plan", "promote", "launch",
              "commit", "pass");
  for (const char* thread : {"GPU", "plan", "main"})
    for (const char* node : {"talker_prefill", "talker_decode", "codec_chunk"}) {
      bool any = false;
      std::string line;
      char cell[40];
      for (const char* phase : {"admit", "plan", "promote", "launch", "commit", "pass"}) {
        const auto* x = find_row(r.summary, thread, node, phase);
        if (x) {
          any = true;
          std::snprintf(cell, sizeof cell, " %4.1f/%4.1f", double(x->time.p50) / 1e3, double(x->time.p95) / 1e3);
        } else {
          std::snprintf(cell, sizeof cell, " %9s", "-");
        }
        line += cell;
      }
      if (any) std::printf("  %-6s %-15s%s\n", thread, node, line.c_str());
    }
  for (const char* phase : {"route", "teardown", "handoff"}) {
    for (const auto& x : r.summary.per_node)
      if (x.phase == phase)
        std::printf("  %-6s %-15s %s p50 %.1f us, p95 %.1f us (%llu)\n", "all", x.node.c_str(), phase,
                    double(x.time.p50) / 1e3, double(x.time.p95) / 1e3, static_cast<unsigned long long>(x.time.count));
  }
  std::printf("steps: %llu prefill, %llu decode (%.1f rows, %.1f padded), %llu codec (%.1f rows); lane: %llu of %llu "
              "codec steps on the lane; refusals %llu, parked %llu, failed steps %llu\n",
              static_cast<unsigned long long>(r.prefill_steps), static_cast<unsigned long long>(r.decode_steps),
              r.decode_steps ? double(r.decode_rows) / double(r.decode_steps) : 0.0,
              r.decode_steps ? double(r.decode_padded_rows) / double(r.decode_steps) : 0.0,
              static_cast<unsigned long long>(r.codec_steps),
              r.codec_steps ? double(r.codec_rows) / double(r.codec_steps) : 0.0,
              static_cast<unsigned long long>(r.side_steps_on_lane), static_cast<unsigned long long>(r.side_steps),
              static_cast<unsigned long long>(r.refusals), static_cast<unsigned long long>(r.parked),
              static_cast<unsigned long long>(r.failed_steps));
  std::printf("requests (measured): %llu completed, %llu cancelled, %llu failed; %.1f s of audio in %.2f s; steady "
              "state (all slots busy): %.1f s of audio in %.2f s\n",
              static_cast<unsigned long long>(r.completed), static_cast<unsigned long long>(r.cancelled),
              static_cast<unsigned long long>(r.failed), r.audio_s, r.wall_s, r.steady_audio_s, r.steady_s);
  if (r.failed != 0) std::printf("  first failure: %s\n", r.first_failure.c_str());
}

// ---- JSON ----
std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
      continue;
    }
    o += ch;
  }
  return o + "\"";
}
std::string jnum(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", std::isfinite(v) ? v : 0.0);
  return b;
}
std::string junix(double seconds) { // to the millisecond (%.6g would round to 100 s)
  char b[64];
  std::snprintf(b, sizeof b, "%.3f", seconds);
  return b;
}
std::string jspread(const qwen3_tts::spread& s) {
  if (s.count == 0) // no sample: null, not 0 ms
    return "{\"count\": 0, \"p50_ms\": null, \"p95_ms\": null, \"p99_ms\": null, \"max_ms\": null}";
  return "{\"count\": " + std::to_string(s.count) + ", \"p50_ms\": " + jnum(s.p50 / 1e6) + ", \"p95_ms\": " +
         jnum(s.p95 / 1e6) + ", \"p99_ms\": " + jnum(s.p99 / 1e6) + ", \"max_ms\": " + jnum(s.max / 1e6) + "}";
}

std::string arm_json(const arm_report& a) {
  const auto& r = a.r;
  std::ostringstream o;
  o << "{\"c\": " << a.spec.c << ", \"lane\": " << jstr(std::string(mstar::name_of(a.spec.lane)))
    << ", \"topology\": " << jstr(a.r.edge_sends ? "split" : "colocated")
    << ", \"codec_batching\": " << jstr(a.spec.per_width ? "per-width" : "all") << ", \"repeat\": " << a.spec.repeat
    << ", \"requests\": {\"completed\": " << r.completed << ", \"cancelled\": " << r.cancelled
    << ", \"failed\": " << r.failed << "}, \"audio_s\": " << jnum(r.audio_s) << ", \"wall_s\": " << jnum(r.wall_s)
    << ", \"audio_per_s\": " << jnum(r.audio_per_s) << ", \"steady_s\": " << jnum(r.steady_s)
    << ", \"steady_audio_s\": " << jnum(r.steady_audio_s) << ", \"steady_audio_per_s\": "
    << (r.steady_s > 0 ? jnum(r.steady_audio_per_s) : std::string("null"))
    << ", \"first_audio\": " << jspread(r.first_audio)
    << ", \"gap\": " << jspread(r.gap) << ", \"codec_steps_per_talker_step\": " << jnum(codec_per_talker(r))
    << ", \"gpu_busy_fraction\": " << jnum(busy_of(a)) << ", \"steps\": {\"prefill\": " << r.prefill_steps
    << ", \"decode\": " << r.decode_steps << ", \"codec\": " << r.codec_steps << ", \"codec_on_lane\": "
    << r.side_steps_on_lane << ", \"decode_rows\": " << r.decode_rows << ", \"codec_rows\": " << r.codec_rows
    << ", \"refusals\": " << r.refusals << ", \"parked\": " << r.parked << ", \"failed\": " << r.failed_steps << "}"
    << ", \"edge\": {\"sends\": " << r.edge_sends << ", \"send_host_us_mean\": " << jnum(r.edge_send_us_mean)
    << ", \"copy_device_us_mean\": " << jnum(r.edge_copy_us_mean) << ", \"copy_device_us_max\": "
    << jnum(r.edge_copy_us_max) << ", \"copies_unmeasured\": " << r.edge_copies_unmeasured
    << ", \"full_waits\": " << r.edge_full_waits << "}"
    << ", \"lane_decisions\": {\"lane\": " << r.lane_on << ", \"chain\": " << r.lane_chain << ", \"explored\": " << r.lane_explored
    << ", \"chain_alone_ms\": " << jnum(r.lane.chain_alone_ns / 1e6) << ", \"chain_beside_ms\": "
    << jnum(r.lane.chain_beside_ns / 1e6) << ", \"side_ms\": " << jnum(r.lane.side_ns / 1e6)
    << ", \"side_lane_ms\": " << jnum(r.lane.side_lane_ns / 1e6)
    << ", \"beside_per_side\": " << jnum(r.lane.beside_per_side)
    << ", \"gpu_idle_fraction\": " << jnum(r.lane.gpu_idle_fraction) << "}";
  o << ", \"device\": ";
  if (a.dev.valid) {
    o << "{\"decode_alone_p50_ms\": " << jnum(a.dev.decode_alone_p50_ms) << ", \"decode_beside_p50_ms\": "
      << jnum(a.dev.decode_beside_p50_ms) << ", \"decode_alone\": " << a.dev.decode_alone << ", \"decode_beside\": "
      << a.dev.decode_beside << ", \"beside_ratio\": " << jnum(a.dev.beside_ratio) << ", \"codec_p50_ms\": "
      << jnum(a.dev.codec_p50_ms) << ", \"busy\": " << jnum(a.dev.busy) << ", \"decode_by_bucket\": {";
    bool first = true;
    for (const auto& [b, p] : a.dev.per_bucket) {
      const auto n = a.dev.per_bucket_n.at(b);
      o << (first ? "" : ", ") << "\"" << b << "\": {\"alone_ms\": " << jnum(p.first) << ", \"beside_ms\": "
        << jnum(p.second) << ", \"alone\": " << n.first << ", \"beside\": " << n.second << "}";
      first = false;
    }
    o << "}}";
  } else {
    o << "null";
  }
  o << ", \"host_phases\": [";
  bool first = true;
  for (const auto& p : r.summary.per_thread) {
    o << (first ? "" : ", ") << "{\"thread\": " << jstr(p.thread) << ", \"node\": " << jstr(p.node)
      << ", \"phase\": " << jstr(p.phase) << ", \"count\": " << p.time.count << ", \"p50_us\": "
      << jnum(double(p.time.p50) / 1e3) << ", \"p95_us\": " << jnum(double(p.time.p95) / 1e3) << ", \"p99_us\": "
      << jnum(double(p.time.p99) / 1e3) << "}";
    first = false;
  }
  o << "], \"pools_full\": " << (r.pools_full ? "true" : "false") << ", \"started_unix_s\": " << junix(a.started_unix_s)
    << ", \"ended_unix_s\": " << junix(a.ended_unix_s) << "}";
  return o.str();
}

// ---- identity ----
// FNV-1a over (id, hash, samples) of the given requests, in id order: one line to compare runs.
std::uint64_t digest_of(const std::map<mstar::request_id, qwen3_tts::audio_digest>& d,
                        const std::set<mstar::request_id>& ids) {
  std::uint64_t h = qwen3_tts::audio_digest::offset_basis;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8)
      h = (h ^ (v & 0xff)) * qwen3_tts::audio_digest::prime;
  };
  for (auto id : ids) {
    const auto it = d.find(id);
    mix(id);
    mix(it == d.end() ? 0 : it->second.hash);
    mix(it == d.end() ? 0 : it->second.samples);
  }
  return h;
}

std::string arm_name(const arm_spec& s) {
  return "c=" + std::to_string(s.c) + " lane " + std::string(mstar::name_of(s.lane)) + ", codec " +
         (s.per_width ? "per-width" : "all");
}

// ---- running ----
// `backend`: the Talker's device (every worker's, colocated); `codec_backend`: the codec worker's device in
// the split topology (the same object when both share one).
template <class Backend>
int run_all(Backend& backend, Backend& codec_backend, setup& st, const cli_options& cli, std::vector<arm_spec> specs) {
  const auto current = [](Backend& b) { // a model's cuBLAS handle and graphs belong to the current device
    if constexpr (requires { b.make_current(); }) b.make_current();
  };
  current(codec_backend);
  qwen3_tts::codec<Backend> codec(codec_backend, st.cc);
  current(backend);
  qwen3_tts::talker<Backend> talker(backend, st.tc);
  std::unique_ptr<qwen3_tts::step_timeline> timeline;
#ifdef QWEN3TTS_CUDA
  if constexpr (std::is_same_v<Backend, mstar::cuda_backend>) {
    const auto warm = backend.create_stream();
    std::vector<std::uint32_t> buckets = st.fo.decode_buckets;
    talker.capture(buckets, warm); // every decode graph before the first arm
    backend.synchronize(warm);
    timeline = std::make_unique<cuda_timeline>(65536);
  }
#endif
  const bool tty = isatty(STDOUT_FILENO) && !cli.no_progress;
  std::vector<arm_report> reports;
  print_header();
  // --time-budget: a repetition (every arm of one concurrency once) after the first starts only when
  // the time spent on that concurrency plus its longest repetition so far stays within the budget.
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  std::uint32_t cur_c = 0, cur_rep = 0;
  bool skip = false;
  clock::time_point c_begin{}, rep_begin{};
  double longest_rep = 0;
  // One arm's load options and engine options.
  const auto arm_options = [&](const arm_spec& spec) {
    auto lo = st.lo;
    lo.concurrency = spec.c;
    lo.lane = st.side_lane ? spec.lane : mstar::lane_mode::off;
    lo.flow.codec_per_width = spec.per_width;
    lo.progress = tty;
    if (cli.requests == 0) lo.requests = st.backend == "cuda" ? 8 * spec.c : std::max(128u, 8 * spec.c);
    if (cli.warmup == ~0u) lo.warmup = spec.c;
    lo.trace = specs.size() == 1 ? cli.trace : std::string();
    auto eo = st.eo;
    eo.max_requests = std::max(eo.max_requests, spec.c + 4);
    return std::pair{lo, eo};
  };
  // One arm on the topology the config asks for.
  const auto run_one = [&](const qwen3_tts::load_options& lo, const mstar::engine_options& eo) {
    if (st.split) return qwen3_tts::run_split_arm(backend, codec_backend, talker, codec, eo, st.fo, lo);
    return qwen3_tts::run_arm(backend, talker, codec, eo, st.fo, lo, timeline.get());
  };
  for (const auto& spec : specs) {
    if (reports.empty() || spec.c != cur_c) {
      if (cli.settle) {
        // --settle: the first arm of a concurrency once, unrecorded. On the H200 the first arm a
        // process ran had its Talker decode step take 0.91-0.92 of the later arms' time (2.37 against
        // 2.58 ms at 128 rows) in every study of 2026-12-04 without it (lane_study.py first-arm; cause
        // not located), so that arm was measured on a faster GPU. With it: 0.998-1.001.
        auto [lo, eo] = arm_options(spec);
        lo.trace.clear();
        std::printf("c=%u: settling run (%s, not recorded)\n", spec.c, arm_name(spec).c_str());
        std::fflush(stdout);
        const auto r = run_one(lo, eo);
        if (r.failed || r.failed_steps) {
          std::fprintf(stderr, "qwen3tts: FAILED: the settling run of c=%u: %llu requests and %llu steps failed\n",
                       spec.c, static_cast<unsigned long long>(r.failed),
                       static_cast<unsigned long long>(r.failed_steps));
          return 1;
        }
      }
      cur_c = spec.c;
      cur_rep = spec.repeat;
      skip = false;
      c_begin = rep_begin = clock::now();
      longest_rep = 0;
    } else if (spec.repeat != cur_rep) {
      const auto now = clock::now();
      longest_rep = std::max(longest_rep, secs(now - rep_begin));
      cur_rep = spec.repeat;
      rep_begin = now;
      if (!skip && cli.time_budget_s > 0 && secs(now - c_begin) + longest_rep > cli.time_budget_s) {
        skip = true;
        std::printf("c=%u: repetitions %u.. skipped: %.1f s spent + %.1f s for one more > the time budget %.1f s\n",
                    spec.c, spec.repeat + 1, secs(now - c_begin), longest_rep, cli.time_budget_s);
      }
    }
    if (skip) continue;
    auto [lo, eo] = arm_options(spec);
    arm_report a;
    a.spec = spec;
#ifdef QWEN3TTS_CUDA
    if (auto* t = dynamic_cast<cuda_timeline*>(timeline.get())) t->reset();
#endif
    a.started_unix_s = unix_seconds();
    a.r = run_one(lo, eo);
    a.ended_unix_s = unix_seconds();
#ifdef QWEN3TTS_CUDA
    if (auto* t = dynamic_cast<cuda_timeline*>(timeline.get())) a.dev = t->read(bucket_of, st.fo.decode_buckets);
#endif
    print_row(a);
    std::fflush(stdout);
    reports.push_back(std::move(a));
  }
  if (reports.size() == 1) print_phases(reports.front().r);
  for (const auto& a : reports)
    if (a.r.edge_sends)
      std::printf("%s: edge: %llu sends (one per Talker step), host time %.2f us a send (mean), copy time on the "
                  "device %.2f us mean / %.2f us max (%llu copies unmeasured), %llu tries found the ring full\n",
                  arm_name(a.spec).c_str(), static_cast<unsigned long long>(a.r.edge_sends), a.r.edge_send_us_mean,
                  a.r.edge_copy_us_mean, a.r.edge_copy_us_max,
                  static_cast<unsigned long long>(a.r.edge_copies_unmeasured),
                  static_cast<unsigned long long>(a.r.edge_full_waits));

  // Checks every run makes: nothing failed, every pool and buffer back.
  int rc = 0;
  for (const auto& a : reports) {
    if (a.r.failed || a.r.failed_steps) {
      std::fprintf(stderr, "qwen3tts: FAILED: %s: %llu requests and %llu steps failed\n", arm_name(a.spec).c_str(),
                   static_cast<unsigned long long>(a.r.failed), static_cast<unsigned long long>(a.r.failed_steps));
      rc = 1;
    }
    if (!a.r.pools_full || !a.r.buffers_free) {
      std::fprintf(stderr, "qwen3tts: FAILED: %s: resources not all back after the run: %s%s\n",
                   arm_name(a.spec).c_str(), a.r.pools_why.c_str(), a.r.buffers_free ? "" : "output buffers held");
      rc = 1;
    }
  }

  // Byte identity: every request not planned for cancellation completed in every arm with the same
  // audio; a planned-cancelled request that completed anyway matches too.
  std::string identity_json = "null";
  {
    std::set<mstar::request_id> kept;
    for (const auto& p : reports.front().r.plan)
      if (!p.cancel) kept.insert(p.id);
    bool same_plan = true;
    for (const auto& a : reports)
      same_plan = same_plan && a.r.plan.size() == reports.front().r.plan.size();
    std::vector<std::string> diffs;
    for (const auto& a : reports) {
      const arm_report* ref = nullptr; // the first arm with the same request mix (the same concurrency)
      for (const auto& b : reports)
        if (b.r.plan.size() == a.r.plan.size()) {
          ref = &b;
          break;
        }
      for (auto id : [&] {
             std::set<mstar::request_id> k;
             for (const auto& p : a.r.plan)
               if (!p.cancel) k.insert(p.id);
             return k;
           }())
        if (!a.r.digests.contains(id))
          diffs.push_back("request " + std::to_string(id) + " did not complete under " + arm_name(a.spec));
      for (const auto& [id, d] : a.r.digests) {
        const auto it = ref->r.digests.find(id);
        if (it != ref->r.digests.end() && !(it->second == d))
          diffs.push_back("request " + std::to_string(id) + ": audio hash " + hex64(it->second.hash) + " (" +
                          std::to_string(it->second.samples) + " samples) under " + arm_name(ref->spec) + ", " +
                          hex64(d.hash) + " (" + std::to_string(d.samples) + " samples) under " + arm_name(a.spec));
      }
    }
    const auto all = digest_of(reports.front().r.digests, kept);
    if (cli.check_identity || reports.size() > 1) {
      std::printf("\naudio digest (requests not cancelled): %s over %zu requests, %s\n", hex64(all).c_str(), kept.size(),
                  diffs.empty() ? "byte-identical in every arm" : "DIFFERENT between arms");
    } else {
      std::printf("\naudio digest (requests not cancelled): %s over %zu requests\n", hex64(all).c_str(), kept.size());
    }
    if (!diffs.empty()) {
      std::fprintf(stderr, "\nqwen3tts: BYTE-IDENTITY BROKEN: %zu differences between arms:\n", diffs.size());
      for (std::size_t i = 0; i < std::min<std::size_t>(diffs.size(), 20); ++i)
        std::fprintf(stderr, "  %s\n", diffs[i].c_str());
      rc = 2;
    }
    identity_json = "{\"digest\": " + jstr(hex64(all)) + ", \"requests\": " + std::to_string(kept.size()) +
                    ", \"identical\": " + (diffs.empty() ? "true" : "false") + ", \"same_plan\": " +
                    (same_plan ? "true" : "false") + "}";
  }

  if (!cli.json.empty()) {
    std::ofstream f(cli.json);
    if (!f) {
      std::fprintf(stderr, "qwen3tts: cannot write %s\n", cli.json.c_str());
      return 1;
    }
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    f << "{\"command\": " << jstr(cli.command) << ", \"date\": " << jstr(date) << ", \"backend\": "
      << jstr(st.backend) << ", \"machine\": " << jstr(st.machine) << ", \"config\": " << jstr(st.config)
      << ", \"model\": " << jstr(st.model) << ", \"talker\": {\"hidden\": " << st.tc.hidden << ", \"ffn\": "
      << st.tc.ffn << ", \"layers\": " << st.tc.layers << ", \"decode_graphs\": " << (st.tc.graphs ? "true" : "false")
      << ", \"prefill_graphs\": " << (st.tc.prefill_graphs ? "true" : "false") << "}, \"ramp\": [";
    for (std::size_t i = 0; i < st.lo.flow.ramp.size(); ++i)
      f << (i ? ", " : "") << st.lo.flow.ramp[i];
    f << "], \"frames\": [" << st.lo.frames_min << ", " << st.lo.frames_max << "], \"prefill_batching\": {\"waits\": "
      << (st.lo.prefill_waits() ? "true" : "false") << ", \"min_batch\": " << st.lo.prefill_min_batch << ", \"max_wait_ms\": "
      << jnum(double(st.lo.prefill_max_wait.count()) / 1000.0) << "}, \"cancel_rate\": "
      << jnum(st.lo.cancel_rate) << ", \"identity\": " << identity_json << ", \"arms\": [\n";
    for (std::size_t i = 0; i < reports.size(); ++i)
      f << "  " << arm_json(reports[i]) << (i + 1 < reports.size() ? ",\n" : "\n");
    f << "]}\n";
    f.close(); // a full disk shows here: a cut file must not pass for the run's figures
    if (!f) {
      std::fprintf(stderr, "qwen3tts: cannot write %s in full (a full disk or an I/O error)\n", cli.json.c_str());
      return 1;
    }
  }
  if (!cli.trace.empty() && specs.size() == 1) std::printf("trace: %s\n", cli.trace.c_str());
  return rc;
}

bool cuda_device_present() {
#ifdef QWEN3TTS_CUDA
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
#else
  return false;
#endif
}

mstar::lane_mode lane_of(const std::string& s) {
  if (s == "off") return mstar::lane_mode::off;
  if (s == "on") return mstar::lane_mode::on;
  if (s == "auto") return mstar::lane_mode::automatic;
  throw CLI::ValidationError("--lane", "'" + s + "' is not a lane mode; use off, on or auto");
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "synth") return qwen3_tts::pipeline::synth_main(argc - 1, argv + 1);
  if (argc > 1 && std::string_view(argv[1]) == "decode") return qwen3_tts::decode_main(argc - 1, argv + 1);
#ifdef QWEN3TTS_SERVE
  if (argc > 1 && std::string_view(argv[1]) == "serve") return qwen3_tts::serve::serve_main(argc - 1, argv + 1);
  if (argc > 1 && std::string_view(argv[1]) == "loadgen-http")
    return qwen3_tts::serve::loadgen_http_main(argc - 1, argv + 1);
  if (argc > 1 && std::string_view(argv[1]) == "loadgen") return qwen3_tts::serve::loadgen_main(argc - 1, argv + 1);
#endif
#ifdef QWEN3TTS_SERVE
  const char *serve_names = ", serve, loadgen-http, loadgen",
             *serve_lines = "  serve          an HTTP server with OpenAI's POST /v1/audio/speech (docs/serve.md)\n"
                            "  loadgen-http   closed-loop streaming clients against a running server\n"
                            "  loadgen        the same closed loop in process, no HTTP\n";
#else
  const char *serve_names = "", *serve_lines = "  (serve, loadgen-http and loadgen: left out of this build, which "
                                               "found no cpp-httplib or no text tokenizer)\n";
#endif
  // Anything but an option first is a subcommand this program does not have (CLI11 would call it an
  // unexpected argument, with its own exit code).
  if (argc > 1 && argv[1][0] != '-') {
    std::fprintf(stderr,
                 "qwen3tts: \"%s\" is not a subcommand; the subcommands are synth, decode%s, or none (the cost "
                 "model); see qwen3tts --help\n",
                 argv[1], serve_names);
    return 2;
  }
  cli_options cli;
  for (int i = 0; i < argc; ++i)
    cli.command += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{std::string("qwen3tts: the Qwen3-TTS example. Subcommands (qwen3tts SUBCOMMAND --help for each):\n"
                           "  synth          text -> speech with a real checkpoint, through the worker\n"
                           "  decode         codec frames (synth --dump-codes) -> speech, the codec alone\n") +
                   serve_lines +
                   "Without a subcommand (the options below): the Qwen3-TTS-shaped cost model under the mstar worker, "
                   "a closed-loop load generator (docs/example.md)",
               "qwen3tts"};
  app.add_option("--config", cli.config, "model config (configs/*.yaml), validated before use")->capture_default_str();
  app.add_option("--backend", cli.backend, "host, cuda, or auto (cuda when a device is present)")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  app.add_option("--devices", cli.devices,
                 "CUDA devices: one index for every worker, or one per worker of a split config (0,1: the Talker's "
                 "worker on device 0, the codec's on device 1, with peer access between them)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_option("-n,--requests", cli.requests, "measured requests per arm (0: 8 x c on cuda, max(128, 8 x c) on host)");
  app.add_option("-c,--concurrency", cli.concurrency, "live requests at once; a list runs each")->delimiter(',');
  app.add_option("--warmup", cli.warmup, "requests run first and left out of the statistics (default: c)");
  app.add_option("--cancel-rate", cli.cancel_rate, "share of requests cancelled after a seeded number of chunks")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", cli.seed, "seed of the request mix")->capture_default_str();
  app.add_option("--lane", cli.lanes, "off, on, auto; a list runs each")->delimiter(',')->capture_default_str();
  app.add_option("--codec-batching", cli.batchings, "per-width (one codec step per window width) or all (one step "
                                                    "for every width); a list runs each")
      ->delimiter(',')
      ->check(CLI::IsMember({"per-width", "all"}))
      ->capture_default_str();
  app.add_option("--repeats", cli.repeats, "runs of every arm, alternating the arms")->check(CLI::Range(1u, 100u));
  app.add_option("--time-budget", cli.time_budget_s,
                 "seconds per concurrency: a repetition after the first starts only when the time spent on that "
                 "concurrency plus its longest repetition so far stays within it (0: no limit)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--frames-min", cli.frames_min, "shortest sentence in frames (12.5 per second; default by backend)");
  app.add_option("--frames-max", cli.frames_max, "longest sentence in frames");
  app.add_option("--prefill-batch", cli.prefill_batch,
                 "rows a prefill step waits for while the chain has other work (0 or 1: none)")
      ->capture_default_str();
  app.add_option("--prefill-wait-ms", cli.prefill_wait_ms,
                 "the longest a prefill row waits for --prefill-batch rows (0: no waiting)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  app.add_option("--prefill-graphs", cli.prefill_graphs,
                 "CUDA: replay talker_prefill from a graph per size (on) or launch its kernels one by one (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_flag("--check-identity", cli.check_identity,
               "run lane off, on and auto with both codec batchings and compare every request's audio hash");
  app.add_option("--json", cli.json, "write the summary as JSON here");
  app.add_option("--trace", cli.trace, "write a Chrome trace (chrome://tracing, Perfetto) here; one arm only");
  app.add_flag("--no-progress", cli.no_progress, "no progress bar even on a terminal");
  app.add_flag("--settle", cli.settle,
               "run each concurrency's first arm once, unrecorded, before its measured runs (on the H200 a "
               "process's first arm ran its decode step in 0.91-0.92 of the later ones' time)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2; // CLI11's own codes (106, 109, ...) would read as crashes; --help is 0
  }

  try {
    setup st;
    // The config: validated, then what it sets.
    auto loaded = mstar::load_model(cli.config);
    if (!loaded.ok()) {
      std::fprintf(stderr, "qwen3tts: the config %s was refused:\n", cli.config.c_str());
      for (const auto& e : loaded.errors())
        std::fprintf(stderr, "  %s\n", e.message.c_str());
      return 2;
    }
    const auto& m = loaded.model();
    st.config = cli.config;
    st.model = std::string(m.desc.name);
    for (const char* need : {"talker_prefill", "talker_decode", "codec_chunk"}) {
      bool found = false;
      for (const auto& n : m.desc.nodes)
        found = found || n.name == need;
      if (!found) {
        std::fprintf(stderr,
                     "qwen3tts: the config %s has no node '%s'; this program runs the Qwen3-TTS-shaped model "
                     "(talker_prefill, talker_decode, codec_chunk): give a configs/qwen3tts*.yaml\n",
                     cli.config.c_str(), need);
        return 2;
      }
    }
    st.side_lane = false;
    std::uint32_t slots = 0;
    for (const auto& l : m.verdict.lanes)
      if (m.desc.nodes[l.node].name == "codec_chunk") st.side_lane = l.lane == mstar::lane::side;
    for (const auto& r : m.desc.resources)
      if (r.key == "codec_state") slots = r.slots;
    // The split topology: two workers, the Talker's nodes on the first and codec_chunk alone on the second.
    st.split = m.desc.workers.size() == 2 && m.desc.workers[1].groups.size() == 1 && [&] {
      for (const auto& g : m.desc.groups)
        if (g.name == m.desc.workers[1].groups[0]) return g.nodes.size() == 1 && g.nodes[0] == "codec_chunk";
      return false;
    }();
    if (st.split)
      std::printf("note: %s puts codec_chunk alone on worker %s: two workers in this process (%s, %s), the "
                  "Talker's frames over an edge; lane modes do not apply\n",
                  cli.config.c_str(), std::string(m.desc.workers[1].name).c_str(),
                  std::string(m.desc.workers[0].name).c_str(), std::string(m.desc.workers[1].name).c_str());
    else if (!st.side_lane)
      std::printf("note: %s runs codec_chunk on a chain (no side lane): every arm runs with the lane off\n",
                  cli.config.c_str());
    // What the file sets beyond those two (and its name) is not applied: the engine runs the compiled
    // model. The applied fields are copied onto the compiled side, so only the rest differs.
    auto compiled = st.split ? qwen3_tts::SplitModel::descriptor : qwen3_tts::Model::descriptor;
    compiled.name = m.desc.name;
    for (auto& r : compiled.resources)
      if (r.key == "codec_state") r.slots = slots;
    for (auto& g : compiled.groups)
      for (const auto& f : m.desc.groups)
        if (f.name == g.name) g.side_stream = f.side_stream;
    for (const auto& d : mstar::differences(m.desc, compiled, "the config", "the compiled model"))
      std::printf("note: not applied (this program runs the compiled model's geometry): %s\n", d.c_str());

    // The backend and its sizes.
    const bool device = cuda_device_present();
    st.backend = cli.backend == "auto" ? (device ? "cuda" : "host") : cli.backend;
    if (st.backend == "cuda" && !device) {
#ifdef QWEN3TTS_CUDA
      std::fprintf(stderr, "qwen3tts: --backend cuda, but no CUDA device is visible; use --backend host or auto\n");
#else
      std::fprintf(stderr, "qwen3tts: --backend cuda, but this build has no CUDA (configure with -Dgpu=enabled)\n");
#endif
      return 2;
    }
    const bool gpu = st.backend == "cuda";
    if (cli.concurrency.empty()) cli.concurrency = {gpu ? 64u : 8u};
    std::uint32_t widest_c = *std::max_element(cli.concurrency.begin(), cli.concurrency.end());
    const std::uint32_t max_c = (slots ? slots - 1 : 256) < 256 ? slots - 1 : 256;
    if (widest_c == 0 || widest_c > max_c) {
      std::fprintf(stderr, "qwen3tts: concurrency %u is outside 1..%u (codec_state has %u slots, one is the sink)\n",
                   widest_c, max_c, slots);
      return 2;
    }
    if (auto ramp = m.example_numbers("codec_window_ramp")) {
      st.lo.flow.ramp.clear();
      for (double w : *ramp) {
        if (w < 1 || w > 64) {
          std::fprintf(stderr, "qwen3tts: %s: codec_window_ramp width %g is outside 1..64\n", cli.config.c_str(), w);
          return 2;
        }
        st.lo.flow.ramp.push_back(static_cast<std::uint32_t>(w));
      }
    }
    const std::uint32_t widest_w = *std::max_element(st.lo.flow.ramp.begin(), st.lo.flow.ramp.end());
    std::uint32_t max_batch = 8;
    while (max_batch < widest_c)
      max_batch *= 2;
    st.eo.max_batch = max_batch;
    st.eo.max_labels = 1;
    st.eo.sampler_seed = 7;
    if (gpu) {
      st.tc = qwen3_tts::talker_config{};
      if (auto h = m.example_number("talker_hidden")) {
        st.tc.hidden = static_cast<std::uint32_t>(*h);
        st.tc.ffn = 3 * st.tc.hidden;
      }
      if (auto l = m.example_number("talker_layers")) st.tc.layers = static_cast<std::uint32_t>(*l);
      st.cc = qwen3_tts::codec_config{};
      st.lo.frames_min = 25; // 2 to 12 s of audio
      st.lo.frames_max = 150;
      st.lo.prompt_min = 16;
      st.lo.prompt_max = 64;
      for (std::uint32_t b : {1u, 2u, 4u, 8u, 16u, 24u, 32u, 48u, 64u, 96u, 128u, 160u, 192u, 256u})
        if (b <= max_batch) st.fo.decode_buckets.push_back(b);
    } else {
      st.tc = qwen3_tts::talker_config::host_small();
      st.cc = qwen3_tts::codec_config::host_small();
      st.lo.frames_min = 6;
      st.lo.frames_max = 40;
      st.lo.prompt_min = 4;
      st.lo.prompt_max = 16;
    }
    st.eo.max_tokens = std::max<std::uint32_t>(st.lo.prompt_max * max_batch, max_batch);
    st.tc.max_bucket = max_batch;
    st.tc.max_tokens = st.eo.max_tokens;
    st.tc.prefill_graphs = gpu && cli.prefill_graphs == "on";
    st.cc.max_bucket = max_batch;
    st.cc.max_frames = max_batch * widest_w;
    st.fo.max_batch = max_batch;
    st.fo.max_window = widest_w;
    st.fo.buffers = 2 * mstar::worker_options{}.step_records + 2;
    if (cli.frames_min) st.lo.frames_min = cli.frames_min;
    if (cli.frames_max) st.lo.frames_max = cli.frames_max;
    st.lo.frames_max = std::max(st.lo.frames_max, st.lo.frames_min);
    st.lo.requests = cli.requests;
    st.lo.warmup = cli.warmup == ~0u ? 0 : cli.warmup;
    st.lo.cancel_rate = cli.cancel_rate;
    st.lo.seed = cli.seed;
    st.lo.prefill_min_batch = cli.prefill_batch;
    st.lo.prefill_max_wait = std::chrono::microseconds(std::llround(std::ceil(cli.prefill_wait_ms * 1000.0)));
    if (st.lo.prefill_waits() && st.lo.prefill_min_batch > max_batch) {
      std::fprintf(stderr,
                   "qwen3tts: --prefill-batch %u is above the largest step, %u rows (the smallest power of two >= 8 "
                   "and >= the largest -c); give at most %u\n",
                   st.lo.prefill_min_batch, max_batch, max_batch);
      return 2;
    }

    // The arms.
    std::vector<arm_spec> specs;
    std::vector<std::string> lanes = cli.lanes, batchings = cli.batchings;
    if (cli.check_identity) {
      lanes = {"off", "on", "auto"};
      batchings = {"per-width", "all"};
    }
    for (auto c : cli.concurrency)
      for (std::uint32_t rep = 0; rep < cli.repeats; ++rep)
        for (const auto& b : batchings)
          for (const auto& l : lanes)
            specs.push_back({c, lane_of(l), b == "per-width", rep});
    if (!cli.trace.empty() && specs.size() > 1)
      std::fprintf(stderr,
                   "qwen3tts: note: --trace is for one arm and %zu arms run, so no trace is written; give one -c, "
                   "--lane and --codec-batching (and no --repeats or --check-identity)\n",
                   specs.size());

    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    st.machine = std::string(host) + ", " + std::to_string(std::thread::hardware_concurrency()) + " CPUs";
    std::printf("qwen3tts: %s backend, config %s (model %s), ramp", st.backend.c_str(), cli.config.c_str(),
                st.model.c_str());
    for (auto w : st.lo.flow.ramp)
      std::printf(" %u", w);
    std::printf(", sentences %u-%u frames, cancel rate %.2f, seed %llu, prefill waits for %u rows up to %.1f ms\n",
                st.lo.frames_min, st.lo.frames_max, st.lo.cancel_rate, static_cast<unsigned long long>(st.lo.seed),
                st.lo.prefill_min_batch, double(st.lo.prefill_max_wait.count()) / 1000.0);
    if (cli.devices.empty() || cli.devices.size() > 2 || (cli.devices.size() == 2 && !st.split)) {
      std::fprintf(stderr,
                   "qwen3tts: --devices takes one device for every worker, or two for a split config (the Talker's "
                   "worker's, then the codec's); %s has %s\n",
                   cli.config.c_str(), st.split ? "two workers" : "one worker: give one device");
      return 2;
    }
    const int talker_device = cli.devices.front(), codec_device = cli.devices.back();
    if (!gpu && (talker_device != 0 || codec_device != 0)) {
      std::fprintf(stderr, "qwen3tts: --devices applies to the cuda backend; the host backend runs every worker over "
                           "one backend (leave --devices out)\n");
      return 2;
    }
#ifdef QWEN3TTS_CUDA
    if (gpu) {
      int count = 0;
      cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      for (int d : {talker_device, codec_device})
        if (d >= count) {
          std::fprintf(stderr, "qwen3tts: --devices names device %d; this machine has %d (0..%d)\n", d, count,
                       count - 1);
          return 2;
        }
      cudaDeviceProp p{};
      cuda_ok(cudaGetDeviceProperties(&p, talker_device), "cudaGetDeviceProperties");
      st.machine += ", " + std::string(p.name);
      std::printf("device: %s; Talker hidden %u x %u layers (+ predictor %u x %u layers x %u passes), codec %u x %u "
                  "x depth %u\n",
                  p.name, st.tc.hidden, st.tc.layers, st.tc.predictor_hidden, st.tc.predictor_layers,
                  st.tc.predictor_passes, st.cc.width, st.cc.rows_per_frame, st.cc.depth);
      mstar::cuda_backend backend({.device = talker_device});
      if (codec_device == talker_device) return run_all(backend, backend, st, cli, specs);
      mstar::cuda_backend codec_backend({.device = codec_device});
      const bool peer = codec_backend.enable_peer_access(backend) && backend.enable_peer_access(codec_backend);
      st.machine += ", workers on devices " + std::to_string(talker_device) + " and " + std::to_string(codec_device);
      std::printf("split over two devices: the Talker's worker on device %d, the codec's on device %d, %s\n",
                  talker_device, codec_device,
                  peer ? "peer access on (the edge's copy is a direct device-to-device copy)"
                       : "no peer access between them (the edge's copy goes through the host)");
      return run_all(backend, codec_backend, st, cli, specs);
    }
#endif
    std::printf("host backend: small sizes (talker_config/codec_config::host_small); GPU busy = the streams' busy "
                "share\n");
    mstar::host_backend backend(mstar::host_backend_options{.check_ordering = false});
    return run_all(backend, backend, st, cli, specs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qwen3tts: %s\n", e.what());
    return 1;
  }
}
