// `qwen3tts loadgen`: the closed loop of `loadgen-http`, in process. The checkpoint is loaded once; for each
// lane mode one speech_service runs, and for each concurrency c, c client threads each send their next request
// as soon as the last one ended. Every request speaks the same text with its own seed.
// First audio runs from submit to the first codec window's audio, gaps between consecutive windows: the
// figures the server's clients see, less HTTP.
#include "serve.hpp"
#include "load_report.hpp"
#include "service_flags.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codec_checkpoint.hpp"
#include "speech_model.hpp"
#include "speech_service.hpp"
#include "talker_checkpoint.hpp"
#include "talker_request.hpp"
#include "text_request.hpp"
#include "tokenizer.hpp"

namespace qwen3_tts::serve {
namespace {

using service = pipeline::speech_service<pipeline::host_speech>;

mstar::lane_mode lane_mode_of(const std::string& s) {
  if (s == "off") return mstar::lane_mode::off;
  if (s == "on") return mstar::lane_mode::on;
  return mstar::lane_mode::automatic;
}

// Requests first..first+n-1 through svc by c client threads, each sending its next request when its last one
// ended (the closed loop of loadgen-http, whose clients are threads too: a request's prompt is built on its
// client's thread in submit, as a server's handler threads build theirs); request i samples with seed
// mix(seed + i, 1), as the server does for a body with "seed": seed + i.
load_row run_arm(service& svc, const pipeline::speech_request& base, std::uint64_t seed, std::uint32_t c,
                 std::uint32_t first, std::uint32_t n, int rate, std::string& first_error) {
  load_row row;
  // The codec's launch and math, and when the Talker's graphs are captured, in the name where they are not the
  // service's defaults: -eager, -cublas, -double, -lazygraphs, -nopdl, -notc, -codec<N>sm, -all (--codec-batching all)
  // and the codec's wait (--codec-min-batch N --codec-wait-ms M: -cwait<N>x<M>ms).
  row.system = "mstar";
  const pipeline::speech_service_options defaults;
  if (svc.on_cuda() && svc.options().codec_graphs != defaults.codec_graphs)
    row.system += svc.options().codec_graphs ? "-graphs" : "-eager";
  if (svc.on_cuda() && svc.options().codec_math != defaults.codec_math) row.system += "-" + svc.options().codec_math;
  if (svc.on_cuda() && svc.options().talker_graphs_at_start != defaults.talker_graphs_at_start)
    row.system += svc.options().talker_graphs_at_start ? "-pregraphs" : "-lazygraphs";
  if (svc.on_cuda() && svc.options().talker_pdl != defaults.talker_pdl)
    row.system += svc.options().talker_pdl ? "-pdl" : "-nopdl";
  if (svc.on_cuda() && svc.options().talker_gemv_tensor_cores != defaults.talker_gemv_tensor_cores)
    row.system += svc.options().talker_gemv_tensor_cores ? "-tc" : "-notc";
  if (svc.on_cuda() && svc.options().codec_sms != defaults.codec_sms)
    row.system += "-codec" + std::to_string(svc.options().codec_sms) + "sm";
  if (!svc.options().codec_per_width) row.system += "-all";
  if (const auto& w = svc.options().codec_wait; w.min_batch > 1)
    row.system += "-cwait" + std::to_string(w.min_batch) + "x" + std::to_string(w.max_wait.count() / 1000) + "ms";
  row.c = c;
  row.n = n;
  std::mutex lock;
  std::uint64_t samples = 0;
  std::atomic<std::uint32_t> next{0};
  const auto started = mstar::metrics::now_ns();
  std::vector<std::thread> clients;
  for (std::uint32_t k = 0; k < c; ++k)
    clients.emplace_back([&] {
      std::mutex mine;
      std::condition_variable cv;
      for (std::uint32_t i; (i = next.fetch_add(1)) < n;) {
        pipeline::speech_request r = base;
        r.seed = mstar::mix_seed(seed + first + i, 1);
        bool done = false;
        pipeline::speech_callbacks cb;
        cb.on_end = [&](const pipeline::speech_result& x) { // the worker's main thread: records, never waits
          {
            std::lock_guard g(lock);
            if (x.how == mstar::request_end::completed) {
              ++row.ok;
              samples += x.samples;
              row.frames += x.frames;
              if (x.first_audio >= 0) row.first.push_back(1e-9 * double(x.first_audio - x.submitted));
              for (const auto gap : x.gaps)
                row.gaps.push_back(1e-9 * double(gap));
            } else {
              ++row.failed;
              if (first_error.empty()) first_error = x.why.empty() ? "ended without completing" : x.why;
            }
          }
          std::lock_guard g(mine);
          done = true;
          cv.notify_one();
        };
        svc.submit(std::move(r), std::move(cb));
        std::unique_lock g(mine);
        cv.wait(g, [&] { return done; });
      }
    });
  for (auto& t : clients)
    t.join();
  row.wall_s = 1e-9 * double(mstar::metrics::now_ns() - started);
  row.audio_s = double(samples) / double(rate);
  return row;
}

} // namespace

int loadgen_main(int argc, char** argv) {
  CLI::App app{"qwen3tts loadgen: closed-loop requests in process on a checkpoint (no HTTP); prints the columns of "
               "`qwen3tts loadgen-http`: audio seconds per second, first audio p50/p95, the gap p95 between audio "
               "windows",
               "qwen3tts loadgen"};
  std::string model_dir, text = "Hello there, this is a test of the speech server.", voice, instructions;
  std::string language = "auto", device = "auto", window = "1,2,4,8", json_path, trace_path;
  std::vector<std::uint32_t> cs = {1, 4, 16};
  std::vector<std::string> lanes = {"on"};
  std::uint32_t n = 0, warmup = 0, max_frames = 0, max_batch = 0;
  std::uint64_t seed = 1;
  pipeline::speech_service_options so; // the CUDA flags' fields here, the rest once the checkpoint is read
  app.add_option("--model", model_dir, "checkpoint folder in the official layout")->required();
  app.add_option("-c,--concurrency", cs, "clients at once; a list runs each")
      ->delimiter(',')
      ->check(CLI::Range(1u, pipeline::host_speech::codec_slots - 1))
      ->capture_default_str();
  app.add_option("--lane", lanes, "the codec's side lane: off, on, auto; a list runs each")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "on", "auto"}))
      ->capture_default_str();
  app.add_option("-n,--requests", n, "requests per arm (0: 4 x c, at least 16)")->capture_default_str();
  app.add_option("--warmup", warmup, "waves of c requests sent first at each c, left out of the figures")
      ->capture_default_str();
  app.add_option("--text", text, "the input of every request")->capture_default_str();
  app.add_option("--voice", voice, "voice (CustomVoice checkpoints)");
  app.add_option("--instructions", instructions, "instructions (VoiceDesign checkpoints)");
  app.add_option("--language", language, "auto or a language of the checkpoint")->capture_default_str();
  app.add_option("--max-frames", max_frames, "frames at most per request, 12.5 a second (0: generation_config.json "
                                             "max_new_tokens - 1)")
      ->check(CLI::Range(0u, 8191u))
      ->capture_default_str();
  app.add_option("--max-batch", max_batch, "rows of a step at most (0: the largest c)")->capture_default_str();
  app.add_option("--device", device, "host, cuda or auto")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  add_cuda_flags(app, so);
  double codec_wait_ms = 0;
  add_codec_wait_flags(app, so, codec_wait_ms);
  app.add_option("--window", window, "the codec's window widths in frames, the last repeating")
      ->capture_default_str();
  app.add_option("--seed", seed, "request i gets seed + i")->capture_default_str();
  app.add_option("--json", json_path, "also write the rows as a JSON array here");
  app.add_option("--trace", trace_path, "write a Chrome trace of the worker (threads, streams, each step's GPU "
                                        "interval) here; one lane only (bench/reference/trace_summary.py reads it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2; // CLI11's own codes (106 for a missing option, ...); --help is 0
  }

  try {
    // The voice and the language against config.json before any weight is read: a mismatch exits 2, as a
    // command line that does not parse.
    if (const auto refusal = check_voice_and_language(read_talker_config(model_dir), voice, !instructions.empty(),
                                                      language, client_options)) {
      std::cerr << "qwen3tts loadgen: " << refusal->message << "\n";
      return 2;
    }
    const talker_host talker = load_talker(model_dir);
    const codec_decoder codec = load_codec_decoder(model_dir);
    const text_tokenizer tok = text_tokenizer::from_folder(model_dir);
    request_parts parts = pipeline::templated_parts(tok, text, instructions);
    parts.speaker = voice;
    parts.language = language;
    pipeline::speech_request base;
    base.prompt = make_prompt(model_dir, talker.config(), parts);

    const std::uint32_t widest = *std::max_element(cs.begin(), cs.end());
    so.sampling = sampling_from(model_dir);
    base.max_frames = max_frames ? max_frames : std::uint32_t(so.sampling.max_frames);
    so.max_live = widest;
    so.max_batch = max_batch ? std::min(max_batch, widest) : widest;
    so.device = device;
    so.ramp = window_ramp(window);
    set_codec_wait(so, codec_wait_ms);
    const int rate = codec.config().output_sample_rate;
    if (!trace_path.empty()) {
      if (lanes.size() != 1)
        throw std::invalid_argument("--trace: one trace per run, and " + std::to_string(lanes.size()) +
                                    " lanes were given; give one --lane");
      so.trace_events = std::size_t(1) << 20;
    }

    std::vector<load_row> rows;
    std::string first_error;
    std::uint32_t next_seed = 0;
    for (const auto& lane : lanes) {
      so.lane = lane_mode_of(lane);
      service svc(talker, codec, so);
      if (rows.empty()) {
        std::printf("qwen3tts loadgen: %s on %s, %u frames a request at most, max batch %u\n", model_dir.c_str(),
                    svc.on_cuda() ? ("cuda, codec " + so.codec_math + (so.codec_graphs ? " from graphs" : " eager")).c_str()
                                  : "host",
                    base.max_frames, so.max_batch);
        print_load_header();
      }
      run_sweep(cs, n, warmup, lane, next_seed, rows, first_error,
                [&](std::uint32_t c, std::uint32_t first, std::uint32_t count, std::string& error) {
                  return run_arm(svc, base, seed, c, first, count, rate, error);
                });
      if (!trace_path.empty()) svc.write_trace(trace_path);
    }
    return finish_load("qwen3tts loadgen", rows, json_path, first_error);
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts loadgen: " << e.what() << "\n";
    return 1;
  }
}

} // namespace qwen3_tts::serve
