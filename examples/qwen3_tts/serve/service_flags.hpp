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
         "on CUDA, the codec's sums: auto (tf32-conv where the build has CUTLASS, else tf32), tf32, cublas "
         "(float32), fp16 (fp16 operands), double, tf32-conv (tf32 with CUTLASS's convolutions) or fp16-conv (fp16 "
         "with CUTLASS's fp16 convolutions; the -conv maths in builds with CUTLASS only)")
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
               "on CUDA, run the Talker's decode products of 2 to 32 rows on the tensor-core small_gemv (the default), "
               "or on cuBLAS (--talker-no-gemv-tensor-cores)");
}

// --codec-batching: one codec step per window width or one for every width (speech_service_options::
// codec_per_width); --codec-min-batch and --codec-wait-ms: the codec's batching across time (codec_wait), on either
// backend, the wait in ms into wait_ms until set_codec_wait. The worker refuses a minimum above --max-batch.
inline void add_codec_wait_flags(CLI::App& app, pipeline::speech_service_options& so, double& wait_ms) {
  app.add_option_function<std::string>(
         "--codec-batching", [&so](const std::string& v) { so.codec_per_width = v == "per-width"; },
         "per-width (one codec step per window width, the default) or all (one step for every width)")
      ->check(CLI::IsMember({"per-width", "all"}));
  app.add_option("--codec-min-batch", so.codec_wait.min_batch,
                 "codec windows of one width a codec step waits for while the Talker has work (0: it never waits)")
      ->check(CLI::Range(0u, 4096u))
      ->capture_default_str();
  wait_ms = double(so.codec_wait.max_wait.count()) / 1000.0;
  app.add_option("--codec-wait-ms", wait_ms, "the longest a ready codec window waits for --codec-min-batch (ms)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
}

// --codec-wait-ms's wait into so.codec_wait; a minimum with a wait of 0 is refused, naming both flags.
inline void set_codec_wait(pipeline::speech_service_options& so, double wait_ms) {
  so.codec_wait.max_wait = std::chrono::microseconds(static_cast<std::int64_t>(wait_ms * 1000.0 + 0.5));
  if (so.codec_wait.min_batch > 1 && so.codec_wait.max_wait.count() == 0)
    throw std::invalid_argument("--codec-min-batch " + std::to_string(so.codec_wait.min_batch) +
                                " needs --codec-wait-ms above 0 (how long a codec window may wait for the others)");
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
