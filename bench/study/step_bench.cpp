// GPU time of the Qwen3-TTS-shaped model's steps on the CUDA backend, through the engine:
// talker_decode (graph replay and eager), talker_prefill (one cold sample per batch: the first
// step of its shape, cuBLAS's first use and the graph's capture included; then warm, graph replay
// and eager, at 1, 4 and 8 rows of 40 tokens), codec_chunk at several window widths (all
// rows one width, and rows of mixed widths in one step), and talker_decode with a codec step
// running beside it on the lane stream. Each figure is the median (and p10/p90) of per-step CUDA
// event pairs recorded on the step's stream around the forward's launches.
//
//   qwen3tts_step_bench [layers=28] [hidden=2048] [ffn=6144] [passes=15] [predictor_layers=5]
//                       [codec_depth=8] [codec_width=1024] [rows_per_frame=16] [reps=40]
//
// Exits 77 without a CUDA device.
#include <mstar/backend/cuda_impl.hpp> // this program's one definition of the CUDA backend

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "qwen3_tts/forward_cuda.hpp"

namespace {

using Engine = mstar::engine<qwen3_tts::Model, mstar::cuda_backend>;
using prefill_step = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerPrefill>;
using decode_step = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerDecode>;
using codec_step = mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct timer { // event pairs on a stream, read after a synchronize
  std::vector<cudaEvent_t> begin, end;
  void start(mstar::cuda_stream s) {
    begin.emplace_back();
    cuda_ok(cudaEventCreate(&begin.back()), "cudaEventCreate");
    cuda_ok(cudaEventRecord(begin.back(), static_cast<cudaStream_t>(s.handle)), "cudaEventRecord");
  }
  void stop(mstar::cuda_stream s) {
    end.emplace_back();
    cuda_ok(cudaEventCreate(&end.back()), "cudaEventCreate");
    cuda_ok(cudaEventRecord(end.back(), static_cast<cudaStream_t>(s.handle)), "cudaEventRecord");
  }
  struct stats {
    double p10, p50, p90;
  };
  stats read() {
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<double> ms;
    for (std::size_t i = 0; i < begin.size(); ++i) {
      float t = 0;
      cuda_ok(cudaEventElapsedTime(&t, begin[i], end[i]), "cudaEventElapsedTime");
      ms.push_back(t);
      cudaEventDestroy(begin[i]);
      cudaEventDestroy(end[i]);
    }
    begin.clear();
    end.clear();
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms.empty() ? 0.0 : ms[std::size_t(q * double(ms.size() - 1) + 0.5)]; };
    return {at(0.1), at(0.5), at(0.9)};
  }
};

void print(const char* what, std::uint32_t rows, const char* detail, timer::stats s) {
  std::printf("| %-34s | %4u | %-18s | %8.3f | %8.3f | %8.3f |\n", what, rows, detail, s.p50, s.p10, s.p90);
}

} // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 77;
  }
  std::map<std::string, std::uint32_t> arg = {{"layers", 28}, {"hidden", 2048}, {"ffn", 6144},
                                              {"passes", 15}, {"predictor_layers", 5}, {"codec_depth", 8},
                                              {"codec_width", 1024}, {"rows_per_frame", 16}, {"reps", 40}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos || !arg.contains(a.substr(0, eq))) {
      std::fprintf(stderr, "unknown argument %s; use key=value with a key of:", argv[i]);
      for (const auto& [k, v] : arg)
        std::fprintf(stderr, " %s", k.c_str());
      std::fprintf(stderr, "\n");
      return 2;
    }
    arg[a.substr(0, eq)] = std::uint32_t(std::strtoul(a.c_str() + eq + 1, nullptr, 10));
  }
  qwen3_tts::talker_config tc;
  tc.layers = arg["layers"];
  tc.hidden = arg["hidden"];
  tc.ffn = arg["ffn"];
  tc.predictor_passes = arg["passes"];
  tc.predictor_layers = arg["predictor_layers"];
  qwen3_tts::codec_config cc;
  cc.depth = arg["codec_depth"];
  cc.width = arg["codec_width"];
  cc.rows_per_frame = arg["rows_per_frame"];
  const std::uint32_t reps = std::max(arg["reps"], 3u);

  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("talker: %u layers, hidden %u, ffn %u; predictor %u layers x %u passes (hidden %u, ffn %u); codec: "
              "%u GEMMs of %u, %u rows per frame\n",
              tc.layers, tc.hidden, tc.ffn, tc.predictor_layers, tc.predictor_passes, tc.predictor_hidden,
              tc.predictor_ffn, cc.depth, cc.width, cc.rows_per_frame);

  mstar::cuda_backend gpu;
  auto chain = gpu.create_stream();
  auto lane = gpu.create_stream(mstar::stream_priority::high);
  qwen3_tts::talker<mstar::cuda_backend> talker(gpu, tc);
  auto eager_cfg = tc;
  eager_cfg.graphs = false;
  eager_cfg.prefill_graphs = false;
  qwen3_tts::talker<mstar::cuda_backend> eager(gpu, eager_cfg);
  qwen3_tts::codec<mstar::cuda_backend> codec(gpu, cc);

  auto* frames_out = static_cast<qwen3_tts::frame*>(gpu.allocate_host(256 * sizeof(qwen3_tts::frame)));
  auto* audio = static_cast<std::int16_t*>(gpu.allocate_host(std::size_t(cc.max_frames) * 1920 * 2));
  std::vector<qwen3_tts::frame> source(64);
  for (std::uint32_t k = 0; k < source.size(); ++k)
    source[k] = qwen3_tts::synth::sample_frame(mstar::sampler_row{99, k, 0, 1, 1}, k);

  std::printf("\n| step | rows | detail | p50 ms | p10 ms | p90 ms |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const std::uint32_t rows_n : {8u, 64u, 128u}) {
    mstar::engine_options eo;
    eo.max_batch = 256;
    eo.max_tokens = 8192;
    eo.max_requests = 512;
    Engine engine(gpu, eo);
    engine.set_side_stream<qwen3_tts::CodecChunk>(lane);
    std::vector<mstar::row> rows;
    for (std::uint32_t i = 0; i < rows_n; ++i)
      rows.push_back({*engine.add_request(i + 1), 32});
    timer t;
    if (!engine.run(prefill_step{rows}, chain, [&](const auto& ctx) {
          t.start(chain);
          talker.prefill(ctx, std::span(frames_out, rows_n));
          t.stop(chain);
        }))
      return 1;
    const auto prefill = t.read();
    for (auto& r : rows)
      r.tokens = 1;
    const std::uint32_t b[] = {rows_n};
    talker.capture(b, chain);
    auto decode = [&](qwen3_tts::talker<mstar::cuda_backend>& tk, bool timed) {
      if (!engine.run(decode_step{rows, rows_n}, chain, [&](const auto& ctx) {
            if (timed) t.start(chain);
            tk.decode(ctx, std::span(frames_out, rows_n));
            if (timed) t.stop(chain);
          }))
        std::exit(1);
    };
    for (std::uint32_t i = 0; i < 5; ++i)
      decode(talker, false);
    gpu.synchronize(chain);
    for (std::uint32_t i = 0; i < reps; ++i)
      decode(talker, true);
    const auto graph = t.read();
    for (std::uint32_t i = 0; i < 3; ++i)
      decode(eager, false);
    gpu.synchronize(chain);
    for (std::uint32_t i = 0; i < reps; ++i)
      decode(eager, true);
    const auto eager_t = t.read();

    auto codec_run = [&](std::span<const std::uint32_t> widths, mstar::cuda_stream s, timer* tm) {
      std::vector<qwen3_tts::codec_window> windows;
      for (std::uint32_t i = 0; i < rows_n; ++i)
        windows.push_back({source.data(), widths[i % widths.size()]});
      if (!engine.run(codec_step{rows, rows_n}, s, [&](const auto& ctx) {
            if (tm) tm->start(s);
            codec.chunk(ctx, windows, std::span(audio, qwen3_tts::audio_samples(windows)));
            if (tm) tm->stop(s);
          }))
        std::exit(1);
    };
    std::map<std::string, timer::stats> codec_t;
    const std::vector<std::pair<std::string, std::vector<std::uint32_t>>> shapes = {
        {"width 1", {1}}, {"width 4", {4}}, {"width 8", {8}}, {"widths 1,2,4,8 mixed", {1, 2, 4, 8}}};
    for (const auto& [name, widths] : shapes) {
      for (std::uint32_t i = 0; i < 3; ++i)
        codec_run(widths, lane, nullptr);
      gpu.synchronize(lane);
      for (std::uint32_t i = 0; i < reps; ++i) {
        codec_run(widths, lane, &t);
        gpu.synchronize(lane); // one codec step in flight at a time, as on the lane
      }
      codec_t[name] = t.read();
    }
    // Beside: a codec window of width 4 on the lane, launched just before each decode step.
    const std::uint32_t w4[] = {4};
    timer lane_t;
    for (std::uint32_t i = 0; i < reps; ++i) {
      codec_run(w4, lane, &lane_t);
      decode(talker, true);
      gpu.synchronize(lane);
    }
    const auto beside = t.read();
    const auto beside_codec = lane_t.read();

    print("talker_prefill, 32 tokens per row", rows_n, "cold, one sample", prefill);
    print("talker_decode", rows_n, "graph replay", graph);
    print("talker_decode", rows_n, "eager (no graph)", eager_t);
    for (const auto& [name, widths] : shapes)
      print("codec_chunk (lane, alone)", rows_n, name.c_str(), codec_t[name]);
    print("talker_decode, codec beside it", rows_n, "graph, width 4", beside);
    print("codec_chunk beside talker_decode", rows_n, "width 4", beside_codec);
    std::fflush(stdout);
    for (const auto& r : rows)
      engine.remove_request(r.request, chain);
    gpu.synchronize(chain);
    gpu.synchronize(lane);
  }
  // talker_prefill, warm: fresh requests for every step (a prefill is a request's first step), the
  // graph replay (talker_config::prefill_graphs) against the same launches one by one. The event pair
  // spans the forward's launches, so a step whose launches take the host longer than the GPU's work
  // shows the host's time.
  {
    mstar::engine_options eo;
    eo.max_batch = 256;
    eo.max_tokens = 8192;
    eo.max_requests = 512;
    Engine engine(gpu, eo);
    std::uint64_t next_id = 1;
    for (const std::uint32_t rows_n : {1u, 4u, 8u}) {
      auto prefill = [&](qwen3_tts::talker<mstar::cuda_backend>& tk, timer* tm) {
        std::vector<mstar::row> rows;
        for (std::uint32_t i = 0; i < rows_n; ++i)
          rows.push_back({*engine.add_request(next_id++), 40});
        if (!engine.run(prefill_step{rows}, chain, [&](const auto& ctx) {
              if (tm) tm->start(chain);
              tk.prefill(ctx, std::span(frames_out, rows_n));
              if (tm) tm->stop(chain);
            }))
          std::exit(1);
        gpu.synchronize(chain); // one step at a time: its launches start on an idle GPU
        for (const auto& r : rows)
          engine.remove_request(r.request, chain);
      };
      timer graph_t, eager_t;
      for (std::uint32_t i = 0; i < 3; ++i) {
        prefill(talker, nullptr);
        prefill(eager, nullptr);
      }
      for (std::uint32_t i = 0; i < reps; ++i) {
        prefill(talker, &graph_t);
        prefill(eager, &eager_t);
      }
      print("talker_prefill, 40 tokens per row", rows_n, "graph replay", graph_t.read());
      print("talker_prefill, 40 tokens per row", rows_n, "eager (no graph)", eager_t.read());
    }
    std::fflush(stdout);
  }
  gpu.free_host(audio);
  gpu.free_host(frames_out);
  std::printf("\ngraphs captured: %zu decode, %zu prefill\n", talker.graphs(), talker.prefill_graphs());
  return 0;
}
