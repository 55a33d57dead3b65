// What `qwen3tts serve` and `qwen3tts loadgen` share on their command lines: the speech service's options that
// are not about the load (the CUDA codec's launch and math, when the CUDA Talker's decode graphs are captured)
// and the codec's window ramp.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "speech_service.hpp"
#include "talker_request.hpp"

namespace qwen3_tts::serve {

// --codec-graphs / --codec-eager, --codec-math, --codec-sms, --talker-graphs-at-start / --talker-graphs-lazy and
// --talker-pdl / --talker-no-pdl, bound to so's fields (so's values are their defaults).
inline void add_cuda_flags(CLI::App& app, pipeline::speech_service_options& so) {
  app.add_flag("--codec-graphs,!--codec-eager", so.codec_graphs,
               "on CUDA, replay the codec's steps from CUDA graphs per rows bucket and window (the default), or "
               "launch them eagerly (--codec-eager)");
  app.add_option(
         "--codec-math", so.codec_math,
         "on CUDA, the codec's sums: tf32, cublas (float32), fp16 (fp16 operands), double or tf32-conv (tf32 with "
         "CUTLASS's convolutions; builds with CUTLASS only)")
      ->check(CLI::IsMember(pipeline::codec_math_names))
      ->capture_default_str();
  app.add_flag("--talker-graphs-at-start,!--talker-graphs-lazy", so.talker_graphs_at_start,
               "on CUDA, capture the Talker's decode-step graphs for every row count when the service starts (the "
               "default), or when a row count first comes to a step (--talker-graphs-lazy)");
  app.add_option("--codec-sms", so.codec_sms,
                 "on CUDA, the SMs the codec's kernels may occupy beside the Talker (a green context; 0: the whole GPU)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app.add_flag("--talker-pdl,!--talker-no-pdl", so.talker_pdl,
               "on CUDA, launch the Talker's own kernels with programmatic dependent launch (Hopper and later; the "
               "default), or ordinarily (--talker-no-pdl)");
  app.add_flag("--talker-gemv-tensor-cores,!--talker-no-gemv-tensor-cores", so.talker_gemv_tensor_cores,
               "on CUDA, run the Talker's decode products of 2 to 16 rows on the tensor-core small_gemv (the default), "
               "or on cuBLAS (--talker-no-gemv-tensor-cores)");
}

// --codec-min-batch and --codec-wait-ms: the codec's batching across time (speech_service_options::codec_wait),
// on either backend, into `wait` until set_codec_wait; --codec-batching: one codec step per window width or one for
// every width (codec_per_width). The worker refuses a minimum above --max-batch.
struct codec_wait_flags {
  int min_batch = -1;  // -1: not given
  double wait_ms = -1; // -1: not given
};

inline void add_codec_wait_flags(CLI::App& app, pipeline::speech_service_options& so, codec_wait_flags& wait) {
  app.add_option_function<std::string>(
         "--codec-batching", [&so](const std::string& v) { so.codec_per_width = v == "per-width"; },
         "per-width (one codec step per window width, the default) or all (one step for every width)")
      ->check(CLI::IsMember({"per-width", "all"}));
  app.add_option("--codec-min-batch", wait.min_batch,
                 "codec windows of one width a codec step waits for while the Talker has work (default: 8 on CUDA, "
                 "none on the host; 0: never waits)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--codec-wait-ms", wait.wait_ms,
                 "the longest a ready codec window waits for --codec-min-batch (ms, up to 1000; default: 10)")
      ->check(CLI::Range(0.0, 1000.0));
}

// The flags given, into so.codec_wait (neither: the backend's default); a minimum with a wait of 0 is refused,
// naming both flags.
inline void set_codec_wait(pipeline::speech_service_options& so, const codec_wait_flags& f) {
  if (f.min_batch < 0 && f.wait_ms < 0) return;
  pipeline::codec_wait_options w;
  w.min_batch = f.min_batch < 0 ? 8u : std::uint32_t(f.min_batch);
  w.max_wait = std::chrono::microseconds(static_cast<std::int64_t>((f.wait_ms < 0 ? 10.0 : f.wait_ms) * 1000.0 + 0.5));
  if (w.min_batch > 1 && w.max_wait.count() == 0)
    throw std::invalid_argument("--codec-min-batch " + std::to_string(w.min_batch) +
                                " needs --codec-wait-ms above 0 (how long a codec window may wait for the others)");
  so.codec_wait = w;
}

// --window's widths ("1,2,4,8": frames, the last repeating) as the service's ramp.
inline std::vector<std::uint32_t> window_ramp(const std::string& window) {
  std::vector<std::uint32_t> ramp;
  for (auto id : parse_ids(window, "--window")) {
    if (id <= 0) throw std::invalid_argument("--window: a width of 0 frames; give widths >= 1 (\"1,2,4,8\")");
    ramp.push_back(std::uint32_t(id));
  }
  return ramp;
}

} // namespace qwen3_tts::serve
