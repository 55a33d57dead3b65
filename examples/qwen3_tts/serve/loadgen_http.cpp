// `qwen3tts loadgen-http`: a closed-loop load generator against a running `qwen3tts serve`. c clients, each
// sending its next streaming PCM request as soon as the last one ended, n requests in all; figures as a client
// sees them (first audio: from sending the request to its first body byte; gap: between body reads, which TCP
// may split or merge, so they bound the server's chunk gaps rather than equal them).
#include "serve.hpp"

#include <CLI/CLI.hpp>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace qwen3_tts::serve {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size() - 1) + 0.5))];
}

struct tally {
  std::mutex lock;
  std::vector<double> first, gaps;
  std::uint64_t bytes = 0, ok = 0, failed = 0;
  std::string first_error;
};

} // namespace

int loadgen_http_main(int argc, char** argv) {
  CLI::App app{"qwen3tts loadgen-http: closed-loop streaming clients against `qwen3tts serve`; prints audio seconds "
               "per second, first audio p50/p95 and the gap p95 between audio reads"};
  std::string url, text = "Hello there, this is a test of the speech server.", voice, instructions;
  std::uint32_t c = 4, n = 32, max_frames = 0;
  std::uint64_t seed = 1;
  app.add_option("--url", url, "the server, e.g. http://127.0.0.1:8000")->required();
  app.add_option("-c,--concurrency", c, "clients at once")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("-n,--requests", n, "requests in all")->check(CLI::Range(1u, 1000000u))->capture_default_str();
  app.add_option("--text", text, "the input of every request")->capture_default_str();
  app.add_option("--voice", voice, "voice (CustomVoice checkpoints)");
  app.add_option("--instructions", instructions, "instructions (VoiceDesign checkpoints)");
  app.add_option("--max-frames", max_frames, "frames at most per request (0: the server's bound)");
  app.add_option("--seed", seed, "request i gets seed + i")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    int rate = 24000;
    {
      httplib::Client probe(url);
      auto h = probe.Get("/health");
      if (!h || h->status != 200)
        throw std::runtime_error("GET " + url + "/health failed (" +
                                 (h ? "HTTP " + std::to_string(h->status) : httplib::to_string(h.error())) +
                                 "); is `qwen3tts serve` running there?");
      const auto j = nlohmann::json::parse(h->body);
      rate = j.value("sample_rate", rate);
    }
    tally t;
    std::atomic<std::uint32_t> next{0};
    const auto t0 = clock_type::now();
    std::vector<std::thread> clients;
    for (std::uint32_t k = 0; k < c; ++k)
      clients.emplace_back([&] {
        httplib::Client cli(url);
        cli.set_read_timeout(600, 0);
        for (std::uint32_t i; (i = next.fetch_add(1)) < n;) {
          nlohmann::json body = {{"model", "qwen3-tts"},
                                 {"input", text},
                                 {"stream", true},
                                 {"response_format", "pcm"},
                                 {"seed", seed + i}};
          if (!voice.empty()) body["voice"] = voice;
          if (!instructions.empty()) body["instructions"] = instructions;
          if (max_frames) body["max_frames"] = max_frames;
          std::vector<double> gaps;
          double first = -1;
          std::uint64_t bytes = 0;
          httplib::Request req;
          req.method = "POST";
          req.path = "/v1/audio/speech";
          req.set_header("Content-Type", "application/json");
          req.body = body.dump();
          const auto sent = clock_type::now();
          auto last = sent;
          req.content_receiver = [&](const char*, std::size_t len, std::uint64_t, std::uint64_t) {
            const auto now = clock_type::now();
            if (first < 0)
              first = seconds_between(sent, now);
            else
              gaps.push_back(seconds_between(last, now));
            last = now;
            bytes += len;
            return true;
          };
          auto res = cli.send(req);
          std::lock_guard g(t.lock);
          if (res && res->status == 200) {
            ++t.ok;
            t.bytes += bytes;
            if (first >= 0) t.first.push_back(first);
            t.gaps.insert(t.gaps.end(), gaps.begin(), gaps.end());
          } else {
            ++t.failed;
            if (t.first_error.empty())
              t.first_error = res ? "HTTP " + std::to_string(res->status) + ": " + res->body
                                  : "no answer: " + httplib::to_string(res.error());
          }
        }
      });
    for (auto& th : clients)
      th.join();
    const double wall = seconds_between(t0, clock_type::now());
    const double audio = double(t.bytes) / 2.0 / double(rate);
    std::printf("| %4s | %6s | %6s | %6s | %9s | %16s | %16s | %11s |\n", "c", "n", "ok", "failed", "audio s/s",
                "first audio p50", "first audio p95", "gap p95");
    std::printf(
        "| ---: | -----: | -----: | -----: | --------: | ---------------: | ---------------: | ----------: |\n");
    std::printf("| %4u | %6u | %6llu | %6llu | %9.2f | %13.1f ms | %13.1f ms | %8.1f ms |\n", c, n,
                (unsigned long long)t.ok, (unsigned long long)t.failed, wall > 0 ? audio / wall : 0.0,
                1e3 * quantile(t.first, 0.5), 1e3 * quantile(t.first, 0.95), 1e3 * quantile(t.gaps, 0.95));
    std::printf("%.2f s of audio in %.2f s\n", audio, wall);
    if (t.failed) {
      std::cerr << "qwen3tts loadgen-http: " << t.failed << " requests failed; the first: " << t.first_error << "\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts loadgen-http: " << e.what() << "\n";
    return 1;
  }
}

} // namespace qwen3_tts::serve
