// The Qwen3-TTS-shaped model's forward functions on the CUDA backend (forward_cuda.hpp says what
// each step launches).
//
// Determinism: the bytes a client receives (frames, audio) come only from the integer kernels below
// (code_head, codec_decode), each computing one row from that row's inputs with synth.hpp's
// arithmetic, so they do not depend on the batch, the row index, the padding bucket or the stream.
// The cuBLAS GEMMs give each step the GPU cost of the real model; cuBLAS may choose another
// algorithm (or split-K) for another M, so their float results may differ from batch to batch, and
// therefore nothing reads them except the next GEMM: they end in scratch buffers.
#include "qwen3_tts/forward_cuda.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace qwen3_tts::detail {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts (CUDA): ") + what + " failed: " + cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("qwen3_tts (cuBLAS): ") + what + " failed: " + cublasGetStatusString(e));
}
#define QWEN3_CHECK(call) check((call), #call)

cudaStream_t raw(mstar::cuda_stream s) { return static_cast<cudaStream_t>(s.handle); }

constexpr std::size_t workspace_bytes = std::size_t(32) << 20;

// Deterministic non-zero values in [-scale, scale] (timing on zeros can flatter the GEMMs).
__global__ void fill_values(__nv_bfloat16* p, std::size_t n, std::uint32_t salt, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(float(std::int32_t(synth::hash32(std::uint32_t(i) ^ salt)) % 1000) * (scale / 1000.0f));
}
void fill(__nv_bfloat16* p, std::size_t n, std::uint32_t salt, float scale, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<std::size_t>((n + 255) / 256, 4096));
  fill_values<<<blocks, 256, 0, s>>>(p, n, salt, scale);
  QWEN3_CHECK(cudaGetLastError());
}

// The cost model: `layers` layers of the four GEMMs of layer_gemms(h, f), bf16 in and out, fp32
// accumulation, weights of every layer distinct (decode reads them all from HBM, as a real model does).
struct gemm_chain {
  std::vector<gemm_shape> shapes;
  std::uint32_t layers = 0;
  __nv_bfloat16* weights = nullptr;
  std::vector<std::size_t> offsets; // [layer * 4 + gemm]

  void allocate(std::uint32_t h, std::uint32_t f, std::uint32_t n_layers, std::uint32_t salt) {
    shapes = layer_gemms(h, f);
    layers = n_layers;
    std::size_t total = 0;
    for (std::uint32_t l = 0; l < layers; ++l)
      for (const auto& g : shapes) {
        offsets.push_back(total);
        total += std::size_t(g.k) * g.n;
      }
    if (total == 0) return;
    QWEN3_CHECK(cudaMalloc(&weights, total * sizeof(__nv_bfloat16)));
    fill(weights, total, salt, 1.0f / 32.0f, nullptr);
  }
  void release() noexcept {
    if (weights) cudaFree(weights);
    weights = nullptr;
  }
  // x: [m x k] input (row stride per shape); the result ends in x or y, and feeds nothing else.
  void run(cublasHandle_t blas, __nv_bfloat16* x, __nv_bfloat16* y, std::uint32_t m) const {
    if (m == 0) return;
    const float one = 1.0f, zero = 0.0f;
    for (std::uint32_t l = 0; l < layers; ++l)
      for (std::size_t g = 0; g < shapes.size(); ++g) {
        const auto& s = shapes[g];
        // Row-major y[m x n] = x[m x k] * w[k x n], as column-major y^T = w^T x^T.
        QWEN3_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(s.n), int(m), int(s.k), &one,
                                 weights + offsets[l * shapes.size() + g], CUDA_R_16BF, int(s.n), x, CUDA_R_16BF,
                                 int(s.input_stride), &zero, y, CUDA_R_16BF, int(s.n), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
        std::swap(x, y);
      }
  }
};

// ---- the Talker's kernels ----

// Outside the graph: the plan's rows into the graph's fixed inputs (row i's sampler row and the
// position of its last new token), padding rows zeroed, and the row count.
__global__ void stage_talker(const mstar::sampler_row* samplers, const std::int32_t* positions,
                             const std::int32_t* qo_indptr, std::uint32_t rows, std::uint32_t bucket,
                             mstar::sampler_row* in_rows, std::int32_t* in_pos, std::uint32_t* in_count) {
  for (std::uint32_t i = threadIdx.x; i < bucket; i += blockDim.x) {
    if (i < rows) {
      in_rows[i] = samplers[i];
      in_pos[i] = positions[qo_indptr[i + 1] - 1];
    } else {
      in_rows[i] = mstar::sampler_row{};
      in_pos[i] = 0;
    }
  }
  if (threadIdx.x == 0) *in_count = rows;
}

// The sampling head: block = row, warp = codebook. Each lane sums the weights of 64 codes, a warp
// scan gives the prefix sums (integers: exact in any order), the lane whose range holds the target
// finds the code. The same code as synth::sample_code's serial loop.
__global__ void __launch_bounds__(512) code_head(const mstar::sampler_row* in_rows, const std::int32_t* in_pos,
                                                 const std::uint32_t* in_count, frame* out) {
  constexpr std::uint32_t per_lane = synth::vocab / 32;
  const std::uint32_t row = blockIdx.x, c = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= *in_count) return;
  const mstar::sampler_row r = in_rows[row];
  const std::uint32_t pos = static_cast<std::uint32_t>(in_pos[row]);
  const std::uint32_t first = lane * per_lane;
  std::uint32_t sum = 0;
  for (std::uint32_t k = first; k < first + per_lane; ++k)
    sum += synth::code_weight(c, pos, k);
  std::uint32_t inclusive = sum;
  for (std::uint32_t o = 1; o < 32; o <<= 1) {
    const std::uint32_t v = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  const std::uint32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
  const std::uint32_t target = synth::code_target(synth::code_draw(r, c), total);
  const std::uint32_t exclusive = inclusive - sum;
  const bool mine = target >= exclusive && target < inclusive;
  std::uint32_t found = 0;
  if (mine) {
    std::uint32_t acc = exclusive;
    for (std::uint32_t k = first; k < first + per_lane; ++k) {
      acc += synth::code_weight(c, pos, k);
      if (target < acc) {
        found = k;
        break;
      }
    }
  }
  const unsigned owner = __ffs(__ballot_sync(0xffffffffu, mine)) - 1;
  const std::uint32_t code = __shfl_sync(0xffffffffu, found, owner);
  if (lane == 0) out[row].code[c] = static_cast<std::uint16_t>(code);
}

// ---- the codec's kernel ----

// Block = row, thread = word j of every channel. Frames in order; layer by layer (a barrier between
// layers, since layer l reads other threads' words of layer l - 1); the frame's samples off the last
// layer. Padding rows and empty windows return at once (the whole block).
__global__ void __launch_bounds__(1024) codec_decode(std::uint16_t* batch, std::size_t layer_stride,
                                                     const codec_row* rows, const frame* frames,
                                                     const std::uint8_t* has_state, std::uint32_t n_rows,
                                                     std::int16_t* audio) {
  using namespace synth;
  const std::uint32_t r = blockIdx.x, j = threadIdx.x;
  if (r >= n_rows) return;
  const codec_row row = rows[r];
  if (row.width == 0) return;
  std::uint16_t* const state = batch + std::size_t(r) * layer_elems;
  if (!has_state[r])
    for (std::uint32_t l = 0; l < codec_layers; ++l)
      for (std::uint32_t c = 0; c < codec_channels; ++c)
        state[l * layer_stride + c * codec_width + j] = 0;
  __syncthreads();
  for (std::uint32_t f = 0; f < row.width; ++f) {
    const frame fr = frames[row.frame_offset + f];
    for (std::uint32_t l = 0; l < codec_layers; ++l) {
      std::uint16_t* const s = state + l * layer_stride;
      const std::uint16_t* const p = state + (l == 0 ? 0 : (l - 1) * layer_stride);
      for (std::uint32_t c = 0; c < codec_channels; ++c) {
        const std::uint32_t in = l == 0 ? codec_input(fr.code[c], c, j)
                                        : codec_mix(p[c * codec_width + codec_tap(l, j)],
                                                    p[((c + 1) % codec_channels) * codec_width + j]);
        s[c * codec_width + j] = codec_update(s[c * codec_width + j], in, l);
      }
      __syncthreads();
    }
    const std::uint16_t* const last = state + (codec_layers - 1) * layer_stride;
    for (std::uint32_t t = j; t < synth::samples_per_frame; t += blockDim.x) {
      std::int32_t sum = 0;
      for (std::uint32_t c = 0; c < codec_channels; ++c)
        sum += audio_term(last[c * codec_width + audio_tap(t, c)]);
      audio[std::size_t(row.frame_offset + f) * synth::samples_per_frame + t] = audio_sample(sum);
    }
    __syncthreads();
  }
}

struct blas_handle {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  blas_handle() {
    QWEN3_CHECK(cublasCreate(&handle));
    QWEN3_CHECK(cudaMalloc(&workspace, workspace_bytes));
  }
  ~blas_handle() {
    if (handle) cublasDestroy(handle);
    if (workspace) cudaFree(workspace);
  }
  blas_handle(const blas_handle&) = delete;
  blas_handle& operator=(const blas_handle&) = delete;
  // cublasSetStream resets the workspace to cuBLAS's own pool: set ours again (graph capture needs it).
  void on(cudaStream_t s) {
    QWEN3_CHECK(cublasSetStream(handle, s));
    QWEN3_CHECK(cublasSetWorkspace(handle, workspace, workspace_bytes));
  }
};

template <class T>
T* device_alloc(std::size_t n) {
  void* p = nullptr;
  QWEN3_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

} // namespace

// ---------------------------------------------------------------------------------------------------
// The Talker

struct talker_impl<mstar::cuda_backend>::state {
  state(mstar::cuda_backend& b, talker_config c) : backend(&b), cfg(c), fence(b) {}
  ~state() {
    fence.drain();
    for (auto* cache : {&graphs, &prefill_graphs})
      for (auto& [key, exec] : *cache)
        cudaGraphExecDestroy(exec);
    if (capture_stream) cudaStreamDestroy(capture_stream);
    main.release();
    predictor.release();
    for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(in_rows),
                    static_cast<void*>(in_pos), static_cast<void*>(in_count), static_cast<void*>(out_frames)})
      if (p) cudaFree(p);
  }

  // Everything a step launches after the staging kernel; captured into a graph for decode.
  void enqueue(cudaStream_t s, std::uint32_t m, std::uint32_t bucket) {
    blas.on(s);
    fill(x, std::size_t(m) * cfg.hidden, m, 1.0f, s);
    main.run(blas.handle, x, y, m);
    for (std::uint32_t p = 0; p < cfg.predictor_passes; ++p)
      predictor.run(blas.handle, x, y, bucket);
    code_head<<<bucket, 32 * synth::codebooks, 0, s>>>(in_rows, in_pos, in_count, out_frames);
    QWEN3_CHECK(cudaGetLastError());
  }

  // The graph key of a prefill step: (M of its Talker GEMMs, its rows) rounded up to the sizes graphs
  // are captured for, as graph_for keys them.
  static std::uint64_t prefill_graph_key(const talker_inputs& in, const talker_config& cfg) {
    const std::uint32_t m = prefill_token_bucket(in.tokens, cfg.max_tokens);
    const std::uint32_t rows = prefill_row_bucket(std::max(in.rows, 1u), cfg.max_bucket);
    return std::uint64_t(m) << 32 | rows;
  }

  // The graph of enqueue(m, bucket), captured on a private stream at its first use and kept:
  // talker_decode's per bucket (m = bucket), talker_prefill's per (token bucket, row bucket).
  cudaGraphExec_t graph_for(std::map<std::uint64_t, cudaGraphExec_t>& cache, std::uint32_t m, std::uint32_t bucket,
                            const char* what) {
    const std::uint64_t key = std::uint64_t(m) << 32 | bucket;
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    if (!capture_stream) QWEN3_CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking));
    QWEN3_CHECK(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      enqueue(capture_stream, m, bucket);
    } catch (...) {
      cudaStreamEndCapture(capture_stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    QWEN3_CHECK(cudaStreamEndCapture(capture_stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const auto e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(e, what);
    cache.emplace(key, exec);
    return exec;
  }

  mstar::cuda_backend* backend;
  talker_config cfg;
  stream_fence<mstar::cuda_backend> fence;
  blas_handle blas;
  gemm_chain main, predictor;
  __nv_bfloat16 *x = nullptr, *y = nullptr; // activations [max_tokens x widest]
  // The graphs' fixed inputs and output.
  mstar::sampler_row* in_rows = nullptr;
  std::int32_t* in_pos = nullptr;
  std::uint32_t* in_count = nullptr;
  frame* out_frames = nullptr;
  cudaStream_t capture_stream = nullptr;
  std::map<std::uint64_t, cudaGraphExec_t> graphs, prefill_graphs; // talker_decode's, talker_prefill's
};

talker_impl<mstar::cuda_backend>::talker_impl(mstar::cuda_backend& b, talker_config cfg) {
  cfg.check();
  QWEN3_CHECK(cudaSetDevice(b.device()));
  s_ = std::make_unique<state>(b, cfg);
  auto& s = *s_;
  s.main.allocate(cfg.hidden, cfg.ffn, cfg.layers, 0x1000u);
  s.predictor.allocate(cfg.predictor_hidden, cfg.predictor_ffn, cfg.predictor_layers, 0x2000u);
  const std::size_t widest = 2 * std::max({cfg.hidden, cfg.ffn, cfg.predictor_hidden, cfg.predictor_ffn});
  s.x = device_alloc<__nv_bfloat16>(std::size_t(cfg.max_tokens) * widest);
  s.y = device_alloc<__nv_bfloat16>(std::size_t(cfg.max_tokens) * widest);
  s.in_rows = device_alloc<mstar::sampler_row>(cfg.max_bucket);
  s.in_pos = device_alloc<std::int32_t>(cfg.max_bucket);
  s.in_count = device_alloc<std::uint32_t>(1);
  s.out_frames = device_alloc<frame>(cfg.max_bucket);
  QWEN3_CHECK(cudaMemset(s.in_count, 0, sizeof(std::uint32_t)));
  QWEN3_CHECK(cudaDeviceSynchronize()); // the weights are filled before any step's stream uses them
}

talker_impl<mstar::cuda_backend>::~talker_impl() = default;

void talker_impl<mstar::cuda_backend>::forward(mstar::cuda_stream stream, const talker_inputs& in,
                                               std::span<frame> out, talker_phase phase) {
  auto& s = *s_;
  check_talker_call(in, out.size(), s.cfg);
  s.fence.enter(stream);
  const cudaStream_t st = raw(stream);
  stage_talker<<<1, 256, 0, st>>>(in.samplers, in.positions, in.qo_indptr, in.rows, in.bucket, s.in_rows, s.in_pos,
                                  s.in_count);
  QWEN3_CHECK(cudaGetLastError());
  const bool prefill = phase == talker_phase::prefill;
  const std::uint64_t key = prefill ? state::prefill_graph_key(in, s.cfg) : 0;
  if (!prefill && s.cfg.graphs) {
    QWEN3_CHECK(cudaGraphLaunch(s.graph_for(s.graphs, in.bucket, in.bucket, "cudaGraphInstantiate (talker_decode)"),
                                st));
  } else if (prefill && s.cfg.prefill_graphs &&
             (s.prefill_graphs.size() < s.cfg.max_prefill_graphs || s.prefill_graphs.contains(key))) {
    QWEN3_CHECK(cudaGraphLaunch(s.graph_for(s.prefill_graphs, std::uint32_t(key >> 32), std::uint32_t(key),
                                            "cudaGraphInstantiate (talker_prefill)"),
                                st));
  } else { // eager; a prefill past a full graph cache too
    s.enqueue(st, prefill ? std::max(in.tokens, 1u) : in.bucket, in.bucket);
  }
  if (in.rows)
    QWEN3_CHECK(cudaMemcpyAsync(out.data(), s.out_frames, in.rows * sizeof(frame), cudaMemcpyDeviceToHost, st));
}

void talker_impl<mstar::cuda_backend>::capture(std::span<const std::uint32_t> buckets, mstar::cuda_stream) {
  for (auto b : buckets) {
    if (b == 0 || b > s_->cfg.max_bucket)
      throw std::invalid_argument("qwen3_tts::talker::capture: bucket " + std::to_string(b) + " is outside 1.." +
                                  std::to_string(s_->cfg.max_bucket) + " (talker_config max_bucket)");
    s_->graph_for(s_->graphs, b, b, "cudaGraphInstantiate (talker_decode)");
  }
}

std::size_t talker_impl<mstar::cuda_backend>::graphs() const { return s_->graphs.size(); }
std::size_t talker_impl<mstar::cuda_backend>::prefill_graphs() const { return s_->prefill_graphs.size(); }
const talker_config& talker_impl<mstar::cuda_backend>::config() const { return s_->cfg; }

// ---------------------------------------------------------------------------------------------------
// The codec

struct codec_impl<mstar::cuda_backend>::state {
  state(mstar::cuda_backend& b, codec_config c)
      : backend(&b), cfg(c), fence(b), staging(b, c.staging, codec_staging_bytes(c)) {}
  ~state() {
    fence.drain();
    cost.release();
    for (void* p : device_in)
      cudaFree(p);
    for (void* p : {static_cast<void*>(batch), static_cast<void*>(audio), static_cast<void*>(x), static_cast<void*>(y)})
      if (p) cudaFree(p);
  }

  mstar::cuda_backend* backend;
  codec_config cfg;
  stream_fence<mstar::cuda_backend> fence;
  staging_ring<mstar::cuda_backend> staging; // pinned
  std::vector<unsigned char*> device_in;     // one per staging buffer
  blas_handle blas;
  gemm_chain cost;
  std::uint16_t* batch = nullptr; // [layers][bucket][16 * 1024]
  std::int16_t* audio = nullptr;  // [max_frames * 1920]
  __nv_bfloat16 *x = nullptr, *y = nullptr;
};

codec_impl<mstar::cuda_backend>::codec_impl(mstar::cuda_backend& b, codec_config cfg) {
  cfg.check();
  QWEN3_CHECK(cudaSetDevice(b.device()));
  s_ = std::make_unique<state>(b, cfg);
  auto& s = *s_;
  for (std::uint32_t i = 0; i < cfg.staging; ++i)
    s.device_in.push_back(device_alloc<unsigned char>(codec_staging_bytes(cfg)));
  s.batch = device_alloc<std::uint16_t>(std::size_t(cfg.max_bucket) * synth::codec_layers * synth::layer_elems);
  s.audio = device_alloc<std::int16_t>(std::size_t(cfg.max_frames) * synth::samples_per_frame);
  if (cfg.depth > 0) {
    // depth square GEMMs: one "layer" of layer_gemms would be four; use the width for h and f/2.
    s.cost.shapes = {{cfg.width, cfg.width, cfg.width}};
    s.cost.layers = cfg.depth;
    std::size_t total = 0;
    for (std::uint32_t l = 0; l < cfg.depth; ++l) {
      s.cost.offsets.push_back(total);
      total += std::size_t(cfg.width) * cfg.width;
    }
    s.cost.weights = device_alloc<__nv_bfloat16>(total);
    fill(s.cost.weights, total, 0x3000u, 1.0f / 32.0f, nullptr);
    const std::size_t act = std::size_t(cfg.max_frames) * cfg.rows_per_frame * cfg.width;
    s.x = device_alloc<__nv_bfloat16>(act);
    s.y = device_alloc<__nv_bfloat16>(act);
    fill(s.x, act, 0x4000u, 1.0f, nullptr);
  }
  QWEN3_CHECK(cudaDeviceSynchronize());
}

codec_impl<mstar::cuda_backend>::~codec_impl() = default;

void codec_impl<mstar::cuda_backend>::forward(mstar::cuda_stream stream, const codec_inputs& in,
                                              std::span<const codec_window> windows, std::span<std::int16_t> audio) {
  auto& s = *s_;
  const std::uint32_t frames = check_codec_call(in, windows, audio.size(), s.cfg);
  s.fence.enter(stream);
  const cudaStream_t st = raw(stream);
  const std::uint32_t slot = s.staging.acquire();
  pack_codec_inputs(s.staging.host(slot), windows, in.bucket, s.cfg.max_bucket);
  const std::size_t row_bytes = std::size_t(s.cfg.max_bucket) * sizeof(codec_row);
  QWEN3_CHECK(cudaMemcpyAsync(s.device_in[slot], s.staging.host(slot), row_bytes + std::size_t(frames) * sizeof(frame),
                              cudaMemcpyHostToDevice, st));
  const auto* rows = reinterpret_cast<const codec_row*>(s.device_in[slot]);
  const auto* fr = reinterpret_cast<const frame*>(s.device_in[slot] + row_bytes);

  mstar::kernels::recurrent_segment<mstar::bf16> table[synth::codec_layers];
  std::copy(in.segments.begin(), in.segments.end(), table);
  mstar::kernels::layout_batch(std::span<mstar::kernels::recurrent_segment<mstar::bf16>>(table),
                               static_cast<std::int32_t>(in.bucket));
  const mstar::kernels::segment_table<mstar::bf16> t(table, synth::codec_layers);
  auto* batch = reinterpret_cast<mstar::bf16*>(s.batch);
  mstar::kernels::gather(t, in.slots, static_cast<std::int32_t>(in.bucket), batch, st);
  codec_decode<<<in.bucket, 1024, 0, st>>>(s.batch, std::size_t(in.bucket) * synth::layer_elems, rows, fr,
                                           in.has_state, in.rows, s.audio);
  QWEN3_CHECK(cudaGetLastError());
  if (s.cfg.depth > 0 && frames > 0) {
    s.blas.on(st);
    s.cost.run(s.blas.handle, s.x, s.y, frames * s.cfg.rows_per_frame);
  }
  mstar::kernels::scatter(t, in.slots, static_cast<std::int32_t>(in.bucket), static_cast<const mstar::bf16*>(batch), st);
  if (frames)
    QWEN3_CHECK(cudaMemcpyAsync(audio.data(), s.audio, std::size_t(frames) * synth::samples_per_frame * sizeof(std::int16_t),
                                cudaMemcpyDeviceToHost, st));
  s.staging.release(slot, stream); // the buffers of this slot are free once the step has run
}

const codec_config& codec_impl<mstar::cuda_backend>::config() const { return s_->cfg; }

} // namespace qwen3_tts::detail
