// qwen3tts_beside_bench: what the codec on its side lane costs the Talker. The CUDA Talker's decode step (0.6B,
// random weights, one CUDA graph per row count) timed alone, then timed while the CUDA codec decodes on a second
// stream: before each decode step one codec step of the same rows (window `--width` frames, random weights at
// the released size) is enqueued on the codec's stream, so the codec always has work queued beside the Talker
// (its steps take longer than the Talker's). Prints the medians and their ratio, the lane's cost to the chain
// (the target is at most 1.15x), with the Talker's stream at the default priority and then at the device's
// greatest (talker_cuda_limits::high_priority), the codec's at the default. --codec-sms: for each count, the codec's
// stream confined to that many SMs (codec_cuda_limits::sm_count, a green context; 0: the whole GPU), the Talker's
// on the whole GPU.
//
//   qwen3tts_beside_bench [--rows 1,8,32,64] [--width 4] [--iters 50]
//                         [--codec-math auto|cublas|tf32|fp16|double|tf32-conv|fp16-conv] [--codec-sms 0,32,64]
//
// --codec-math: the codec's sums (codec_math_named); the default, auto, is the service's (qwen3tts serve, synth and
// loadgen), so the figures are the lane's cost as served.
#include "codec_cuda.hpp"
#include "codec_random.hpp"
#include "talker_cuda.hpp"
#include "talker_sizes.hpp"

#include <cuda_runtime.h>

#include "qwen3_tts/cuda_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

using namespace qwen3_tts;
using bench::check;
using bench::int_list;
using bench::median;

int main(int argc, char** argv) try {
  std::vector<int> rows_list = {1, 8, 32, 64};
  int width = 4, iters = 50;
  std::string math = "auto"; // the service's default codec math
  std::vector<int> sms_list = {0};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("option " + a + " needs a value");
    if (a == "--rows")
      rows_list = int_list(argv[++i]);
    else if (a == "--width")
      width = std::max(1, std::atoi(argv[++i]));
    else if (a == "--iters")
      iters = std::max(3, std::atoi(argv[++i]));
    else if (a == "--codec-math")
      math = argv[++i];
    else if (a == "--codec-sms")
      sms_list = int_list(argv[++i], 0); // 0: the whole GPU
    else
      throw std::invalid_argument("unknown option " + a + " (--rows, --width, --iters, --codec-math, --codec-sms)");
  }
  const codec_cuda_math codec_math = codec_math_named(math);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: bench skipped\n");
    return 77;
  }
  const int max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  constexpr int kv = 256; // tokens a row holds, as qwen3tts_talker_bench
  talker_cuda_limits lim;
  lim.max_rows = max_rows;
  lim.block_tokens = 16;
  lim.kv_blocks = max_rows * ((kv + lim.block_tokens - 1) / lim.block_tokens);
  lim.max_pages = lim.kv_blocks;
  lim.max_prefill_tokens = 2 * max_rows;
  const codec_config config = released_codec_config();
  const codec_weights codec_w = load_codec_weights(config, random_codec_tensor);
  const std::size_t spf = std::size_t(config.samples_per_frame()), state_floats = make_codec_state_layout(config).total;
  float *states = nullptr, *audio = nullptr;
  check(cudaMalloc(&states, std::size_t(max_rows) * state_floats * sizeof(float)), "cudaMalloc states");
  check(cudaMalloc(&audio, std::size_t(max_rows) * width * spf * sizeof(float)), "cudaMalloc audio");
  check(cudaMemset(states, 0, std::size_t(max_rows) * state_floats * sizeof(float)), "cudaMemset states");
  std::vector<std::int32_t> codes(std::size_t(width) * config.num_quantizers);
  for (std::size_t i = 0; i < codes.size(); ++i)
    codes[i] = std::int32_t((i * 2654435761u) % std::uint32_t(config.codebook_size));

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device %s; Talker 0.6B decode step (graph, %d KV tokens a row) alone and with the codec (%s, %d-frame "
              "windows, the same rows) decoding on its own stream; median of %d steps\n",
              prop.name, kv, (math + " = " + codec_math_label(codec_math)).c_str(), width, iters);
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  for (const int sms : sms_list) {
    codec_cuda codec(config, codec_w, {max_rows, width, sms}, codec_math);
    const std::string sm_label = sms > 0 ? std::to_string(codec.sm_count()) + " SMs" : "all SMs";
    for (const bool high : {false, true}) {
      lim.high_priority = high;
      talker_cuda talker(released_talker_dims(false), lim);
      talker.random_weights(1234);
      for (const int rows : rows_list) {
        kv_block_pool pool(lim.kv_blocks, lim.block_tokens);
        std::vector<row_pages> pages(static_cast<std::size_t>(rows));
        std::vector<row_pages*> ptrs;
        for (auto& p : pages)
          ptrs.push_back(&p);
        std::vector<int> history(static_cast<std::size_t>(rows), kv - 1), one(static_cast<std::size_t>(rows), 1);
        (void)pool.plan(ptrs, history);
        const step_tables tables = pool.plan(ptrs, one);
        std::vector<std::int32_t> text(static_cast<std::size_t>(rows), 1000);
        talker.set_decode_inputs(tables.view(), text);
        std::vector<codec_cuda::row> codec_rows;
        for (int r = 0; r < rows; ++r)
          codec_rows.push_back({states + std::size_t(r) * state_floats, codes, audio + std::size_t(r) * width * spf});

        auto time_steps = [&](bool beside) {
          std::vector<float> ms(static_cast<std::size_t>(iters));
          for (int i = 0; i < iters; ++i) {
            if (beside) codec.decode_step(codec_rows); // queued on the codec's stream ahead of the step
            check(cudaEventRecord(e0, talker.stream()), "cudaEventRecord");
            talker.decode(rows);
            check(cudaEventRecord(e1, talker.stream()), "cudaEventRecord");
            check(cudaEventSynchronize(e1), "decode step");
            check(cudaEventElapsedTime(&ms[std::size_t(i)], e0, e1), "cudaEventElapsedTime");
          }
          codec.synchronize();
          return median(ms);
        };
        for (int i = 0; i < 3; ++i) { // graph capture, cuBLAS and lazy kernel loading out of the figures
          talker.decode(rows);
          codec.decode_step(codec_rows);
        }
        check(cudaDeviceSynchronize(), "warm-up");
        const double alone = time_steps(false), beside = time_steps(true), again = time_steps(false);
        std::printf("RESULT %-7s codec on %-7s rows %3d  decode alone %7.3f ms (again %7.3f)  beside the codec %7.3f ms"
                    "  x%.2f\n",
                    high ? "high" : "default", sm_label.c_str(), rows, alone, again, beside,
                    beside / std::min(alone, again));
      }
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(states);
  cudaFree(audio);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "qwen3tts_beside_bench: %s\n", e.what());
  return 1;
}
