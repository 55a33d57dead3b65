// `qwen3tts loadgen-http`: a closed-loop load generator against a running `qwen3tts serve`. c clients, each
// sending its next streaming PCM request as soon as the last one ended, n requests in all; figures as a client
// sees them (first audio: from sending the request to its first body byte; gap: between body reads, which TCP
// may split or merge, so they bound the server's chunk gaps rather than equal them).
#include "serve.hpp"
#include "load_report.hpp"

#include <CLI/CLI.hpp>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
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

constexpr std::size_t max_error_body = 4096; // bytes of a refusal's body kept for its message

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct http_load {
  std::string url, text, voice, instructions;
  std::uint32_t max_frames = 0;
  std::uint64_t seed = 1;
  int rate = 24000;
};

// c clients, requests first..first+n-1 (request i gets seed + i); the first failure's text in `first_error`.
load_row run_http_arm(const http_load& l, std::uint32_t c, std::uint32_t first, std::uint32_t n,
                      std::string& first_error) {
  load_row row;
  row.system = "mstar-http";
  row.c = c;
  row.n = n;
  std::mutex lock;
  std::uint64_t bytes_all = 0;
  std::atomic<std::uint32_t> next{0};
  const auto t0 = clock_type::now();
  std::vector<std::thread> clients;
  for (std::uint32_t k = 0; k < c; ++k)
    clients.emplace_back([&] {
      httplib::Client cli(l.url);
      cli.set_read_timeout(600, 0);
      // One connection per client, as HTTP clients of a speech API keep theirs: a new connection per request
      // makes c connects at once at every wave, beyond the server's listen backlog.
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true); // the request's header and body go out at once, not after a delayed ACK
      for (std::uint32_t i; (i = next.fetch_add(1)) < n;) {
        nlohmann::json body = {{"model", "qwen3-tts"},
                               {"input", l.text},
                               {"stream", true},
                               {"response_format", "pcm"},
                               {"seed", l.seed + first + i}};
        if (!l.voice.empty()) body["voice"] = l.voice;
        if (!l.instructions.empty()) body["instructions"] = l.instructions;
        if (l.max_frames) body["max_frames"] = l.max_frames;
        std::vector<double> gaps;
        double first_audio = -1;
        std::uint64_t bytes = 0;
        int status = 0;
        std::string error_body; // a refusal's first bytes: the server's message, kept for the failure line
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/audio/speech";
        req.set_header("Content-Type", "application/json");
        req.body = body.dump();
        const auto sent = clock_type::now();
        auto last = sent;
        req.response_handler = [&](const httplib::Response& r) {
          status = r.status;
          return true;
        };
        // The receiver takes the body (res->body stays empty): audio is timed, anything but a 200 is kept.
        req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
          if (status != 200) {
            error_body.append(data, std::min(len, max_error_body - std::min(max_error_body, error_body.size())));
            return true;
          }
          const auto now = clock_type::now();
          if (first_audio < 0)
            first_audio = seconds_between(sent, now);
          else
            gaps.push_back(seconds_between(last, now));
          last = now;
          bytes += len;
          return true;
        };
        auto res = cli.send(req);
        std::lock_guard g(lock);
        if (res && res->status == 200) {
          ++row.ok;
          bytes_all += bytes;
          if (first_audio >= 0) row.first.push_back(first_audio);
          row.gaps.insert(row.gaps.end(), gaps.begin(), gaps.end());
        } else {
          ++row.failed;
          while (!error_body.empty() && std::isspace(static_cast<unsigned char>(error_body.back())))
            error_body.pop_back();
          if (first_error.empty())
            first_error = res ? "HTTP " + std::to_string(res->status) + ": " + error_body
                              : "no answer: " + httplib::to_string(res.error());
        }
      }
    });
  for (auto& th : clients)
    th.join();
  row.wall_s = seconds_between(t0, clock_type::now());
  row.audio_s = double(bytes_all) / 2.0 / double(l.rate);
  return row;
}

} // namespace

int loadgen_http_main(int argc, char** argv) {
  CLI::App app{"qwen3tts loadgen-http: closed-loop streaming clients against `qwen3tts serve`; prints audio seconds "
               "per second, first audio p50/p95 and the gap p95 between audio reads",
               "qwen3tts loadgen-http"};
  http_load l;
  l.text = "Hello there, this is a test of the speech server.";
  std::vector<std::uint32_t> cs = {4};
  std::uint32_t n = 0, warmup = 0;
  std::string json_path;
  app.add_option("--url", l.url, "the server, e.g. http://127.0.0.1:8000")->required();
  app.add_option("-c,--concurrency", cs, "clients at once; a list runs each")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("-n,--requests", n, "requests per concurrency (0: 4 x c, at least 16)")
      ->check(CLI::Range(0u, 1000000u))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "waves of c requests sent first at each c, left out of the figures")
      ->capture_default_str();
  app.add_option("--text", l.text, "the input of every request")->capture_default_str();
  app.add_option("--voice", l.voice,
                 "voice (CustomVoice checkpoints; default: the first of the voices the server's /health lists, "
                 "unless --instructions is given)");
  app.add_option("--instructions", l.instructions, "instructions (VoiceDesign checkpoints)");
  app.add_option("--max-frames", l.max_frames, "frames at most per request (0: the server's bound)");
  app.add_option("--seed", l.seed, "request i gets seed + i")->capture_default_str();
  app.add_option("--json", json_path, "also write the rows as a JSON array here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2; // CLI11's own codes (106 for a missing option, ...); --help is 0
  }

  try {
    std::string lane = "-";
    {
      httplib::Client probe(l.url);
      auto h = probe.Get("/health");
      if (!h || h->status != 200)
        throw std::runtime_error("GET " + l.url + "/health failed (" +
                                 (h ? "HTTP " + std::to_string(h->status) : httplib::to_string(h.error())) +
                                 "); is `qwen3tts serve` running there?");
      const auto j = nlohmann::json::parse(h->body);
      l.rate = j.value("sample_rate", l.rate);
      lane = j.value("lane", lane);
      if (auto v = j.find("voices"); l.voice.empty() && l.instructions.empty() && v != j.end() && v->is_array() &&
                                     !v->empty() && v->front().is_string()) {
        l.voice = v->front().get<std::string>();
        std::printf("voice: %s (the first the server lists; --voice chooses)\n", l.voice.c_str());
      }
    }
    std::vector<load_row> rows;
    std::string first_error;
    std::uint32_t next_seed = 0;
    print_load_header();
    run_sweep(cs, n, warmup, lane, next_seed, rows, first_error,
              [&](std::uint32_t c, std::uint32_t first, std::uint32_t count, std::string& error) {
                return run_http_arm(l, c, first, count, error);
              });
    return finish_load("qwen3tts loadgen-http", rows, json_path, first_error);
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts loadgen-http: " << e.what() << "\n";
    return 1;
  }
}

} // namespace qwen3_tts::serve
