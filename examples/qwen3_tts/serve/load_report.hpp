// The figures of a closed-loop load run, as `qwen3tts loadgen` (in process) and `qwen3tts loadgen-http`
// (through the server) print them: one markdown table row per arm, so that the two, and the reference's
// bench/reference/reference_load.py, line up column for column; and the same rows as JSON.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace qwen3_tts::serve {

// One arm: c clients, each sending its next request as soon as its last one ended, n requests in all.
struct load_row {
  std::string system;            // "mstar", "mstar-http", ...
  std::string lane = "-";        // off, on, auto ("-": not applicable)
  std::uint32_t c = 0, n = 0;
  std::uint64_t ok = 0, failed = 0;
  double wall_s = 0, audio_s = 0;  // audio: seconds of audio delivered to the clients
  std::uint64_t frames = 0;        // frames the requests made, where the system reports them (0: unknown)
  std::vector<double> first, gaps; // seconds: request sent -> first audio; between audio deliveries
};

// The nearest-rank quantile (q in [0, 1]) of v; 0 when empty.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size() - 1) + 0.5))];
}

inline void print_load_header() {
  std::printf("| %-10s | %4s | %4s | %5s | %5s | %6s | %9s | %15s | %15s | %9s |\n", "system", "lane", "c", "n", "ok",
              "failed", "audio s/s", "first audio p50", "first audio p95", "gap p95");
  std::printf("| :--------- | :--- | ---: | ----: | ----: | -----: | --------: | --------------: | --------------: | "
              "--------: |\n");
}

inline void print_load_row(const load_row& r) {
  char gap[32];
  if (r.gaps.empty())
    std::snprintf(gap, sizeof gap, "%9s", "-");
  else
    std::snprintf(gap, sizeof gap, "%6.1f ms", 1e3 * quantile(r.gaps, 0.95));
  std::printf("| %-10s | %-4s | %4u | %5u | %5llu | %6llu | %9.2f | %12.1f ms | %12.1f ms | %s |\n", r.system.c_str(),
              r.lane.c_str(), r.c, r.n, static_cast<unsigned long long>(r.ok),
              static_cast<unsigned long long>(r.failed), r.wall_s > 0 ? r.audio_s / r.wall_s : 0.0,
              1e3 * quantile(r.first, 0.5), 1e3 * quantile(r.first, 0.95), gap);
  std::fflush(stdout);
}

// {"system": ..., "audio_s_per_s": ..., "first_p50_ms": ...}: the row's figures (null where there are none).
inline void write_load_json(std::ostream& o, const load_row& r) {
  auto num = [&](double v, bool have) { return have ? std::to_string(v) : std::string("null"); };
  o << "{\"system\": \"" << r.system << "\", \"lane\": \"" << r.lane << "\", \"c\": " << r.c << ", \"n\": " << r.n
    << ", \"ok\": " << r.ok << ", \"failed\": " << r.failed << ", \"wall_s\": " << num(r.wall_s, true)
    << ", \"audio_s\": " << num(r.audio_s, true) << ", \"frames\": " << r.frames
    << ", \"audio_s_per_s\": " << num(r.wall_s > 0 ? r.audio_s / r.wall_s : 0.0, r.wall_s > 0)
    << ", \"first_p50_ms\": " << num(1e3 * quantile(r.first, 0.5), !r.first.empty())
    << ", \"first_p95_ms\": " << num(1e3 * quantile(r.first, 0.95), !r.first.empty())
    << ", \"gap_p95_ms\": " << num(1e3 * quantile(r.gaps, 0.95), !r.gaps.empty()) << "}";
}

// Writes rows as a JSON array to path; throws naming the path when it cannot.
inline void write_load_json_file(const std::string& path, const std::vector<load_row>& rows) {
  std::ofstream o(path);
  o << "[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    o << (i ? ",\n " : "");
    write_load_json(o, rows[i]);
  }
  o << "]\n";
  if (!o.flush()) throw std::runtime_error("--json " + path + ": cannot write it");
}

// One lane's arms, for each c: `warmup` x c requests first (left out of the figures: CUDA graphs are captured for
// each batch size on its first use), then n (0: 4 x c, at least 16);
// each row printed as it ends. run(c, first, count, first_error) runs requests first..first+count-1 at concurrency c.
template <class RunArm>
void run_sweep(const std::vector<std::uint32_t>& cs, std::uint32_t n, std::uint32_t warmup, const std::string& lane,
               std::uint32_t& next_seed, std::vector<load_row>& rows, std::string& first_error, RunArm&& run) {
  for (const std::uint32_t c : cs) {
    const std::uint32_t count = n ? n : std::max(16u, 4 * c);
    if (warmup) {
      std::string ignored;
      run(c, next_seed, warmup * c, ignored);
      next_seed += warmup * c;
    }
    load_row row = run(c, next_seed, count, first_error);
    next_seed += count;
    row.lane = lane;
    print_load_row(row);
    rows.push_back(std::move(row));
  }
}

// The end of a load run: the JSON file when asked for, and the exit status (1 when any request failed).
inline int finish_load(const char* who, const std::vector<load_row>& rows, const std::string& json_path,
                       const std::string& first_error) {
  if (!json_path.empty()) write_load_json_file(json_path, rows);
  std::uint64_t failed = 0;
  for (const auto& r : rows)
    failed += r.failed;
  if (!failed) return 0;
  std::cerr << who << ": " << failed << " requests failed; the first: " << first_error << "\n";
  return 1;
}

} // namespace qwen3_tts::serve
