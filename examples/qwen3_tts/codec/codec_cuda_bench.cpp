// qwen3tts_codec_bench: the CUDA codec decoder's step at the released 12 Hz size (8 layers of hidden 512,
// window 72, latent 1024, decoder_dim 1536, rates 8-5-4-3 after 2-2: 1920 samples a frame) with random
// weights (no checkpoint needed), for several row counts, each step one window per row: every row the
// same width (the lane's one-step-per-width batching), or widths 1, 2, 4, 8 mixed in one step (one step
// for every width). Prints, for each codec_cuda_math (the double-sum GEMM kernel, cuBLAS float32, TF32 and fp16, and
// TF32 and fp16 with CUTLASS's implicit-GEMM convolutions where the build has CUTLASS),
// the step's GPU time launched eagerly and replayed from its CUDA graph (codec_cuda_launch: padded to the rows
// bucket and to bucket x widest-window frames) side by side in the same run, the GPU time per second of audio
// of each, and the host time of the graph's first step (that step eagerly, then the capture and
// instantiation). Rows 5 and 40 fill 5/8 of their bucket, and mixed widths fill about half of bucket x 8
// frames: there the graph's replay also computes the padding.
//
//   qwen3tts_codec_bench [--rows 1,5,8,32,40,64] [--widths 1,8] [--iters 5]
//                        [--math all|double,cublas,tf32,fp16,tf32-conv,fp16-conv] [--cutlass-min-tiles N] [--profile]
//
// --math: the maths to time, a comma list of codec_math_named's names (default all six; tf32-conv and fp16-conv only
// where the build has CUTLASS, else they are left out with a line saying so; named, they fail there).
// --cutlass-min-tiles N: codec_cuda_limits::cutlass_min_tiles for tf32-conv and fp16-conv (default -1, one wave of
// the SMs; 0, every shape CUTLASS takes), named in their rows' math as "/tN". --profile: for each
// case, one eager step between cudaProfilerStart and cudaProfilerStop (after one step outside it) and nothing
// timed (the mixed widths left out), for a kernel profiler started with profiling off (ncu --profile-from-start off;
// bench/gpu_session.sh stage codec_profile).
#include "codec_cuda.hpp"
#include "codec_random.hpp"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "qwen3_tts/cuda_bench.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace qwen3_tts;
using bench::check;
using bench::int_list;

int main(int argc, char** argv) try {
  std::vector<int> rows_list = {1, 5, 8, 32, 40, 64}, widths = {1, 8};
  int iters = 5, cutlass_min_tiles = -1;
  bool profile = false;
  std::vector<codec_cuda_math> maths = {codec_cuda_math::double_sums, codec_cuda_math::cublas_f32,
                                        codec_cuda_math::cublas_tf32, codec_cuda_math::cublas_fp16};
  if (codec_cutlass_available()) {
    maths.push_back(codec_cuda_math::cutlass_tf32);
    maths.push_back(codec_cuda_math::cutlass_fp16);
  } else {
    std::printf("CUTLASS TF32 and fp16 conv left out: this build has no CUTLASS (bash scripts/cutlass.sh, then "
                "rebuild)\n");
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument("option " + a + " needs a value");
    if (a == "--rows")
      rows_list = int_list(argv[++i]);
    else if (a == "--widths")
      widths = int_list(argv[++i]);
    else if (a == "--iters")
      iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--cutlass-min-tiles")
      cutlass_min_tiles = std::atoi(argv[++i]);
    else if (a == "--math") {
      const std::string m = argv[++i];
      if (m != "all") {
        maths.clear();
        std::size_t from = 0;
        while (from <= m.size()) { // a comma list of codec_math_named's names
          const std::size_t comma = std::min(m.find(',', from), m.size());
          maths.push_back(codec_math_named(m.substr(from, comma - from)));
          from = comma + 1;
        }
      }
    } else
      throw std::invalid_argument("unknown option " + a +
                                  " (--rows, --widths, --iters, --math, --cutlass-min-tiles, --profile)");
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: bench skipped\n");
    return 77;
  }
  const codec_config config = released_codec_config();
  const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  const int max_window = std::max(8, *std::max_element(widths.begin(), widths.end()));
  const codec_weights weights = load_codec_weights(config, random_codec_tensor);
  const std::size_t spf = std::size_t(config.samples_per_frame()), state_floats = make_codec_state_layout(config).total;
  float *states = nullptr, *audio = nullptr;
  check(cudaMalloc(&states, std::size_t(max_rows) * state_floats * sizeof(float)), "cudaMalloc states");
  check(cudaMalloc(&audio, std::size_t(max_rows) * max_window * spf * sizeof(float)), "cudaMalloc audio");
  std::vector<std::int32_t> codes(std::size_t(max_window) * config.num_quantizers);
  for (std::size_t i = 0; i < codes.size(); ++i)
    codes[i] = std::int32_t((i * 2654435761u) % std::uint32_t(config.codebook_size));
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");

  // width 0 stands for the mixed step: row r takes 1, 2, 4, 8 frames by r % 4.
  std::vector<int> cases = widths;
  if (!profile) cases.push_back(0);
  // Every math's decoder first, then each case timed under each math in turn, so that the maths of a case are
  // measured side by side (a math measured whole before the others ran 6-9 % faster at one row in one run, whichever
  // it was: docs/benchmarks.md).
  std::vector<std::unique_ptr<codec_cuda>> gpus;
  std::vector<std::string> labels;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  for (const auto math : maths) {
    gpus.push_back(std::make_unique<codec_cuda>(config, weights,
                                                codec_cuda_limits{max_rows, max_window, 0, cutlass_min_tiles}, math));
    labels.push_back(std::string(codec_math_label(math)) + (cutlass_convolutions(math) && cutlass_min_tiles >= 0
                                                                ? "/t" + std::to_string(cutlass_min_tiles)
                                                                : ""));
    const codec_cuda& gpu = *gpus.back();
    std::printf("device: %s; %s; weights %.1f MB, scratch %.1f MB, state %.2f MB a request\n", prop.name,
                labels.back().c_str(), double(gpu.weight_bytes()) / 1e6, double(gpu.scratch_bytes()) / 1e6,
                double(gpu.state_layout().bytes()) / 1e6);
  }
  for (int rows : rows_list)
    for (int width : cases)
      for (std::size_t m = 0; m < gpus.size(); ++m) {
        codec_cuda& gpu = *gpus[m];
        const char* math_name = labels[m].c_str();
        check(cudaMemset(states, 0, std::size_t(rows) * state_floats * sizeof(float)), "cudaMemset states");
        std::vector<codec_cuda::row> step;
        std::size_t frames = 0;
        for (int r = 0; r < rows; ++r) {
          const int w = width > 0 ? width : 1 << (r % 4);
          step.push_back({states + std::size_t(r) * state_floats, std::span(codes).first(std::size_t(w) * 16),
                          audio + std::size_t(r) * max_window * spf});
          frames += std::size_t(w);
        }
        if (profile) {
          gpu.decode_step(step, codec_cuda_launch::eager);
          gpu.synchronize();
          check(cudaProfilerStart(), "cudaProfilerStart");
          gpu.decode_step(step, codec_cuda_launch::eager);
          gpu.synchronize();
          check(cudaProfilerStop(), "cudaProfilerStop");
          std::printf("PROFILED %s rows %d widths %s: one eager step\n", math_name, rows,
                      width > 0 ? std::to_string(width).c_str() : "1,2,4,8");
          continue;
        }
        // The mean GPU time of `iters` steps under `launch`, after one step that is not timed.
        auto time_steps = [&](codec_cuda_launch launch) {
          gpu.decode_step(step, launch);
          gpu.synchronize();
          check(cudaEventRecord(e0, gpu.stream()), "cudaEventRecord");
          for (int i = 0; i < iters; ++i)
            gpu.decode_step(step, launch);
          check(cudaEventRecord(e1, gpu.stream()), "cudaEventRecord");
          check(cudaEventSynchronize(e1), "cudaEventSynchronize");
          float ms = 0;
          check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
          return double(ms) / iters;
        };
        const double eager_ms = time_steps(codec_cuda_launch::eager);
        const std::size_t graphs_before = gpu.graphs();
        const auto t0 = std::chrono::steady_clock::now();
        gpu.decode_step(step, codec_cuda_launch::graph); // a new key: its step eagerly, then its capture
        gpu.synchronize();
        const double first_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const double graph_ms = time_steps(codec_cuda_launch::graph);
        const double audio_s = double(frames * spf) / config.output_sample_rate;
        const int widest = width > 0 ? width : 1 << std::min(rows - 1, 3);
        std::printf("RESULT %-11s rows %3d  widths %-7s  eager %9.3f ms  graph %9.3f ms (%5.2fx)  GPU s per audio s "
                    "%8.4f eager, %8.4f graph  (%zu frames; graph %d x %d frames, first step %s%.1f ms)\n",
                    math_name, rows, width > 0 ? std::to_string(width).c_str() : "1,2,4,8", eager_ms, graph_ms,
                    eager_ms / graph_ms, eager_ms / 1e3 / audio_s, graph_ms / 1e3 / audio_s, frames,
                    gpu.bucket_of(rows), widest, gpu.graphs() > graphs_before ? "with capture " : "", first_ms);
      }
  cudaFree(states);
  cudaFree(audio);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "qwen3tts_codec_bench: %s\n", e.what());
  return 1;
}
