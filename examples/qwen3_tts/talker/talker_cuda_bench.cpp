// qwen3tts_talker_bench: the CUDA Talker's decode step (code predictor's 15 codes, next input, Talker
// layers, codec head, code-0 choice; one CUDA graph per row count) at the real Qwen3-TTS 12 Hz sizes,
// with random bf16 weights made on the device (no checkpoint needed), next to its HBM floor: the bytes
// one step must read (weights, the predictor's 15 times, plus the KV cache) over the device-to-device
// copy rate measured in the same run.
//
//   qwen3tts_talker_bench [--model 0.6b|1.7b|both] [--mlp-1p7b 6144] [--kv 256] [--iters 200]
//                         [--rows 1,8,32,64,128] [--gemv-rows 8] [--gemv-norm 0|1] [--pdl 0|1] [--prefill-tokens 40]
//                         [--attention-chunk N] [--attention-grid N] [--gemv-tensor-cores 0|1] [--gemv-k-split N]
//                         [--gemv-norm-after N] [--sample] [--profile]
//
// --gemv-rows N: talker_cuda_limits::gemv_rows, the decode step's products of at most N rows on the
// small-rows GEMV kernel instead of cuBLAS (0: cuBLAS everywhere; default: the library's default).
// --gemv-norm 0|1: talker_cuda_limits::gemv_norm, the RMSNorms before those products done by the products
// (default: the library's default).
// --pdl 0|1: talker_cuda_limits::pdl, the Talker's own kernels launched with programmatic dependent launch
// (default: the library's default).
// --attention-chunk N: talker_cuda_limits::attention_chunk, the Talker's decode attention in shares of at least N
// tokens a block (0: the library's equal shares; the RESULT lines say "chunk N" where N > 0).
// --attention-grid N: talker_cuda_limits::attention_grid, the Talker's decode attention of many rows dealing a row's
// shares to fewer blocks, about N blocks a launch at most (the RESULT lines say "grid N" where N > 0; 0: one block a
// share; default: the library's default).
// --gemv-tensor-cores 0|1: talker_cuda_limits::gemv_tensor_cores, the small-rows products on the tensor cores (up
// to 16 rows; the RESULT lines say "tc"; default: the library's default).
// --gemv-k-split N: talker_cuda_limits::gemv_k_split, the tensor-core products of fewer tiles than SMs with a tile's
// inputs shared among N blocks (the RESULT lines say "ksplit N" where N > 1; default: the library's default).
// --gemv-norm-after N: talker_cuda_limits::gemv_norm_after_rows, the norms after the o and down projections done by
// the projections on the tensor cores, for products of at most N rows (the RESULT lines say "+after N"; 0: none;
// default: the library's default).
// --prefill-tokens N: also times the prefill step (prefill_frame: the Talker over every row's prompt, then the
// code predictor's frame 0) of N tokens a row at each row count, eager as the speech flow runs it: its GPU time,
// and the host time the call takes to return (0: not timed).
// --sample: the reference's default sampling (top-k 50, temperature 0.9, for code 0 and the predictor's
// codes) instead of greedy choices. --profile: for each row count, one replay of the fused decode graph
// between cudaProfilerStart and cudaProfilerStop and nothing timed, for a kernel profiler started with
// profiling off (ncu --profile-from-start off --graph-profiling node; bench/gpu_session.sh stage profile).
//
// Sizes: the published config.json files as issue 16 quotes them (0.6B: 28 layers, hidden 1024, MLP
// 3072, 16/8 heads of 128; 1.7B: hidden 2048, MLP 6144 by two quotes and 8192 by one, hence the flag;
// code predictor: 5 layers of hidden 1024, MLP 3072, 16/8 heads of 128, 2048 codes; codec vocabulary
// 3072; text 151936 x 2048).
#include "talker_cuda.hpp"
#include "talker_sizes.hpp"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "qwen3_tts/cuda_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using qwen3_tts::bench::check;
using qwen3_tts::bench::copy_rate;
using qwen3_tts::bench::int_list;

void bench_model(const char* name, const qwen3_tts::talker_cuda_dims& dims, const std::vector<int>& row_counts, int kv,
                 int iters, double rate, bool sample, bool profile, const qwen3_tts::talker_cuda_limits& knobs,
                 int prefill_tokens) {
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  qwen3_tts::talker_cuda_limits lim;
  lim.gemv_rows = knobs.gemv_rows;
  lim.gemv_norm = knobs.gemv_norm;
  lim.pdl = knobs.pdl;
  lim.attention_chunk = knobs.attention_chunk;
  lim.attention_grid = knobs.attention_grid;
  lim.gemv_tensor_cores = knobs.gemv_tensor_cores;
  lim.gemv_k_split = knobs.gemv_k_split;
  lim.gemv_norm_after_rows = knobs.gemv_norm_after_rows;
  const int gemv_rows = knobs.gemv_rows;
  const std::string norm_pdl =
      std::string(knobs.gemv_tensor_cores ? " tc" : "") +
      (knobs.gemv_k_split > 1 ? " ksplit " + std::to_string(knobs.gemv_k_split) : std::string()) +
      (knobs.gemv_tensor_cores && knobs.gemv_norm_after_rows > 0
           ? "+after " + std::to_string(knobs.gemv_norm_after_rows)
           : std::string()) +
      (knobs.gemv_norm ? (knobs.pdl ? "+norm+pdl" : "+norm") : (knobs.pdl ? "+pdl" : ""));
  lim.max_rows = max_rows;
  lim.block_tokens = 16;
  const int pages_per_row = (std::max(kv, prefill_tokens) + lim.block_tokens - 1) / lim.block_tokens;
  lim.kv_blocks = max_rows * pages_per_row;
  lim.max_pages = lim.kv_blocks;
  lim.max_prefill_tokens = max_rows * std::max(2, prefill_tokens);
  qwen3_tts::talker_cuda model(dims, lim);
  model.random_weights(1234);
  if (sample) model.set_sampling(qwen3_tts::talker_sampling{});
  const auto& T = dims.talker;
  const auto& P = dims.predictor;
  std::printf("%s: weights %.2f GB on the device; one decode step reads %.2f GB of weights (predictor x%d)\n", name,
              double(model.weight_bytes()) / 1e9, double(model.decode_weight_bytes()) / 1e9, dims.code_groups - 1);
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  for (int rows : row_counts) {
    // Each row holds kv - 1 tokens, and the step appends one.
    qwen3_tts::kv_block_pool pool(lim.kv_blocks, lim.block_tokens);
    std::vector<qwen3_tts::row_pages> pages(static_cast<std::size_t>(rows));
    std::vector<qwen3_tts::row_pages*> ptrs;
    for (auto& p : pages)
      ptrs.push_back(&p);
    std::vector<int> history(static_cast<std::size_t>(rows), kv - 1), one(static_cast<std::size_t>(rows), 1);
    (void)pool.plan(ptrs, history);
    const qwen3_tts::step_tables tables = pool.plan(ptrs, one);
    const qwen3_tts::step_plan plan = tables.view();
    std::vector<std::int32_t> text(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r)
      text[std::size_t(r)] = 1000 + 37 * r;
    model.set_decode_inputs(plan, text);
    if (profile) {
      model.set_fused_decode(true);
      model.decode(rows); // captures the graph
      check(cudaStreamSynchronize(model.stream()), "the captured decode step");
      check(cudaProfilerStart(), "cudaProfilerStart");
      model.decode(rows);
      check(cudaStreamSynchronize(model.stream()), "the profiled decode step");
      check(cudaProfilerStop(), "cudaProfilerStop");
      std::printf("PROFILED %s rows %d: one fused decode step, %zu graph nodes\n", name, rows, model.graph_nodes(rows));
      continue;
    }
    // Both attention variants: qk-norm/RoPE/append and attention as two launches a layer, or fused.
    for (const bool fused : {false, true}) {
      model.set_fused_decode(fused);
      model.decode(rows); // captures the graph
      for (int i = 0; i < 5; ++i)
        model.decode(rows);
      check(cudaStreamSynchronize(model.stream()), "warm-up decode steps");
      std::vector<float> ms(static_cast<std::size_t>(iters));
      for (int i = 0; i < iters; ++i) {
        check(cudaEventRecord(e0, model.stream()), "cudaEventRecord");
        model.decode(rows);
        check(cudaEventRecord(e1, model.stream()), "cudaEventRecord");
        check(cudaEventSynchronize(e1), "decode step");
        check(cudaEventElapsedTime(&ms[std::size_t(i)], e0, e1), "cudaEventElapsedTime");
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      const double kv_bytes = double(T.layers) * rows * kv * T.kv_heads * T.head_dim * 2.0 * 2.0 +
                              double(P.layers) * rows * dims.code_groups * P.kv_heads * P.head_dim * 2.0 * 2.0;
      const double bytes = double(model.decode_weight_bytes()) + kv_bytes;
      const double floor_ms = bytes / rate * 1e3;
      const std::string chunk = (lim.attention_chunk > 0 ? " chunk " + std::to_string(lim.attention_chunk) : "") +
                                (lim.attention_grid > 0 ? " grid " + std::to_string(lim.attention_grid) : "");
      std::printf("RESULT %-5s %-5s gemv %d%s%s rows %4d  step %8.3f ms (min %8.3f)  floor %7.3f ms  x%5.2f  %9.1f "
                  "frames/s  %zu nodes\n",
                  name, fused ? "fused" : "split", gemv_rows, norm_pdl.c_str(), chunk.c_str(), rows, median,
                  double(ms.front()), floor_ms, median / floor_ms, rows / (median * 1e-3), model.graph_nodes(rows));
    }
    if (prefill_tokens > 0) {
      // Fresh pages for the prompts; every replay writes the same KV positions.
      qwen3_tts::kv_block_pool prompt_pool(lim.kv_blocks, lim.block_tokens);
      std::vector<qwen3_tts::row_pages> prompt_pages(static_cast<std::size_t>(rows));
      std::vector<qwen3_tts::row_pages*> prompt_ptrs;
      for (auto& p : prompt_pages)
        prompt_ptrs.push_back(&p);
      const std::vector<int> lens(static_cast<std::size_t>(rows), prefill_tokens);
      const qwen3_tts::step_tables prompt = prompt_pool.plan(prompt_ptrs, lens);
      std::vector<float> embeds(std::size_t(rows) * prefill_tokens * T.hidden);
      for (std::size_t i = 0; i < embeds.size(); ++i)
        embeds[i] = 0.02f * float(int((i * 2654435761u) % 1001) - 500) / 500.0f;
      const int n = std::max(5, std::min(iters, 20));
      std::vector<float> gpu_ms, host_ms;
      for (int i = 0; i < n + 2; ++i) {
        check(cudaEventRecord(e0, model.stream()), "cudaEventRecord");
        const auto t0 = std::chrono::steady_clock::now();
        model.prefill_frame(embeds, prompt.view());
        const auto t1 = std::chrono::steady_clock::now();
        check(cudaEventRecord(e1, model.stream()), "cudaEventRecord");
        check(cudaEventSynchronize(e1), "prefill step");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (i < 2) continue; // warm-up
        gpu_ms.push_back(ms);
        host_ms.push_back(float(std::chrono::duration<double, std::milli>(t1 - t0).count()));
      }
      std::sort(gpu_ms.begin(), gpu_ms.end());
      std::sort(host_ms.begin(), host_ms.end());
      std::printf("RESULT %-5s prefill gemv %d%s rows %4d x %3d tokens  GPU %8.3f ms (min %8.3f)  host %7.3f ms  "
                  "%9.1f tokens/ms\n",
                  name, gemv_rows, norm_pdl.c_str(), rows, prefill_tokens, double(gpu_ms[gpu_ms.size() / 2]),
                  double(gpu_ms.front()), double(host_ms[host_ms.size() / 2]),
                  rows * prefill_tokens / double(gpu_ms[gpu_ms.size() / 2]));
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

} // namespace

int main(int argc, char** argv) {
  std::string which = "both";
  int mlp = 6144, kv = 256, iters = 200;
  qwen3_tts::talker_cuda_limits knobs; // gemv_rows, gemv_norm, pdl: the library's defaults unless given
  bool sample = false, profile = false;
  int prefill_tokens = 0;
  std::vector<int> rows = {1, 8, 32, 64, 128};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model")
      which = value();
    else if (a == "--mlp-1p7b")
      mlp = std::stoi(value());
    else if (a == "--kv")
      kv = std::stoi(value());
    else if (a == "--iters")
      iters = std::stoi(value());
    else if (a == "--rows")
      rows = int_list(value());
    else if (a == "--gemv-rows")
      knobs.gemv_rows = std::stoi(value());
    else if (a == "--gemv-norm")
      knobs.gemv_norm = std::stoi(value()) != 0;
    else if (a == "--pdl")
      knobs.pdl = std::stoi(value()) != 0;
    else if (a == "--gemv-tensor-cores")
      knobs.gemv_tensor_cores = std::stoi(value()) != 0;
    else if (a == "--gemv-norm-after")
      knobs.gemv_norm_after_rows = std::stoi(value());
    else if (a == "--gemv-k-split")
      knobs.gemv_k_split = std::stoi(value());
    else if (a == "--attention-chunk")
      knobs.attention_chunk = std::stoi(value());
    else if (a == "--attention-grid")
      knobs.attention_grid = std::stoi(value());
    else if (a == "--prefill-tokens")
      prefill_tokens = std::stoi(value());
    else if (a == "--sample")
      sample = true;
    else if (a == "--profile")
      profile = true;
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of talker_cuda_bench.cpp)\n", a.c_str());
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: bench skipped\n");
    return 77;
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t s;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    const double rate = copy_rate(s);
    cudaStreamDestroy(s);
    std::printf("device %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
                prop.multiProcessorCount, rate / 1e9);
    std::printf("%s; ", sample ? "sampling (top-k 50, temperature 0.9)" : "greedy");
    std::printf("decode step = 15 code-predictor passes + text row + Talker + codec head + code-0 choice, %d KV "
                "tokens a row, median of %d graph replays\n",
                kv, iters);
    if (knobs.gemv_rows > 0)
      std::printf("products of at most %d rows on small_gemv, larger ones on cuBLAS (--gemv-rows %d)\n",
                  knobs.gemv_rows, knobs.gemv_rows);
    else
      std::printf("every product on cuBLAS (--gemv-rows 0)\n");
    using qwen3_tts::released_talker_dims;
    if (which == "0.6b" || which == "both")
      bench_model("0.6B", released_talker_dims(false, mlp), rows, kv, iters, rate, sample, profile, knobs,
                  prefill_tokens);
    if (which == "1.7b" || which == "both")
      bench_model("1.7B", released_talker_dims(true, mlp), rows, kv, iters, rate, sample, profile, knobs,
                  prefill_tokens);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qwen3tts_talker_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
