// Whether one persistent kernel would pay for the code predictor's many small products, measured before anyone
// writes the real one. The chain of products of the predictor's 15 passes over its 5 layers (a layer: qkv 1024 ->
// 4096, o 2048 -> 1024 added to the residual, gate/up 1024 -> 2 x 3072 ending in SwiGLU, down 3072 -> 1024 added to
// the residual; bf16 weights, float32 activations and sums; 31.5 MB of weights a layer, 157 MB the five, more than
// the L2 holds, so every pass streams them from HBM), at 1, 2, 4 and 8 rows, timed three ways in one run:
//
//   graph       one kernel a product, a step's 300 launches captured in a CUDA graph (the decode step's structure)
//   graph+pdl   the same with programmatic dependent launch: each kernel asks its weight rows into L2 and then
//               waits for the one before it (as the Talker's kernels do)
//   persistent  one cooperative kernel a step: grid-wide barriers between the products, each warp asking its rows
//               of the next product into L2 just before the barrier
//
// next to the HBM floor: the weight bytes over the same run's device-to-device copy rate (bytes read and written
// by a 1 GiB cudaMemcpyAsync, best of 10). Attention, norms and sampling are left out: this measures only what
// the launches and the phase boundaries cost the weight stream. The three compute every sum in the same order,
// so their outputs must agree bit for bit; the run says so and fails (exit 1) when they do not.
//
//   build/bench/kernels/mstar_persistent_chain_bench [--passes N]    (bash bench/gpu_session.sh persistent)
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../common/graph_timing.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

constexpr int hidden = 1024, qkv_width = 4096, attn_width = 2048, inter = 3072, layers = 5;
constexpr int warps = 4; // a block
constexpr int max_rows = 8;
constexpr int unroll = 4; // 16-byte weight loads in flight a lane and weight row (as small_gemv's gemv_unroll)

enum phase : int { qkv_phase, o_phase, gate_up_phase, down_phase, phases };

struct layer_weights {
  const bf16 *qkv, *o, *gate_up, *down; // [out][in] row-major
};

struct chain {
  layer_weights layer[layers];
  float* x;   // rows x hidden: the residual
  float* q;   // rows x qkv_width (its first attn_width columns stand for the attention's output)
  float* act; // rows x inter
  int rows;
};

__device__ __host__ constexpr int outputs_of(int ph) {
  return ph == qkv_phase ? qkv_width : ph == gate_up_phase ? inter : hidden;
}
__device__ __host__ constexpr int inputs_of(int ph) {
  return ph == o_phase ? attn_width : ph == down_phase ? inter : hidden;
}

// Weight row r of product ph (for gate_up: the gate row; the up row is inter rows further).
__device__ const bf16* weight_row(const chain& c, int layer, int ph, int r) {
  const layer_weights& w = c.layer[layer];
  const bf16* base = ph == qkv_phase ? w.qkv : ph == o_phase ? w.o : ph == gate_up_phase ? w.gate_up : w.down;
  return base + std::size_t(r) * inputs_of(ph);
}

__device__ float silu(float v) { return v / (1.0f + expf(-v)); }

__device__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Output r of product ph for every row, by one warp, as the Talker's small_gemv computes it: lane l takes the
// 16-byte slices l, l + 32, ... of the weight row(s), `unroll` of them loaded before the first multiply, each
// against the same 8 inputs of every row, then a butterfly sum; lane 0 writes.
template <int R>
__device__ void product_row(const chain& c, int layer, int ph, int r, int lane) {
  const int in = inputs_of(ph), slices = in / 8;
  constexpr int O = 2; // gate_up reads two weight rows; the other products use the first
  const int nw = ph == gate_up_phase ? 2 : 1;
  const uint4* w[O] = {reinterpret_cast<const uint4*>(weight_row(c, layer, ph, r)),
                       reinterpret_cast<const uint4*>(weight_row(c, layer, ph, r + (ph == gate_up_phase ? inter : 0)))};
  const float* x = ph == o_phase ? c.q : ph == down_phase ? c.act : c.x;
  const int ldx = ph == o_phase ? qkv_width : in;
  float acc[O][R] = {};
  for (int s0 = lane; s0 < slices; s0 += 32 * unroll) {
    uint4 wq[unroll][O]; // every load of the round issued before the first multiply
#pragma unroll
    for (int u = 0; u < unroll; ++u)
#pragma unroll
      for (int k = 0; k < O; ++k)
        wq[u][k] = k < nw && s0 + 32 * u < slices ? __ldcs(w[k] + s0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int s = s0 + 32 * u;
      if (s >= slices) break;
#pragma unroll
      for (int row = 0; row < R; ++row) {
        if (row >= c.rows) break;
        const float4* xp = reinterpret_cast<const float4*>(x + std::size_t(row) * ldx + std::size_t(s) * 8);
        const float4 lo = xp[0], hi = xp[1];
        const float xf[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int k = 0; k < O; ++k) {
          if (k >= nw) break;
          const auto* h = reinterpret_cast<const __nv_bfloat162*>(&wq[u][k]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(h[j]);
            acc[k][row] = fmaf(f.x, xf[2 * j], acc[k][row]);
            acc[k][row] = fmaf(f.y, xf[2 * j + 1], acc[k][row]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int row = 0; row < R; ++row) {
    if (row >= c.rows) break;
    const float a = warp_sum(acc[0][row]), b = warp_sum(acc[1][row]);
    if (lane != 0) continue;
    if (ph == qkv_phase)
      c.q[std::size_t(row) * qkv_width + r] = a;
    else if (ph == gate_up_phase)
      c.act[std::size_t(row) * inter + r] = silu(a) * b;
    else
      c.x[std::size_t(row) * hidden + r] += a;
  }
}

// Warp gw of nw takes outputs gw, gw + nw, ... of product ph.
template <int R>
__device__ void run_product(const chain& c, int layer, int ph, int gw, int nw, int lane) {
  for (int r = gw; r < outputs_of(ph); r += nw)
    product_row<R>(c, layer, ph, r, lane);
}

// The weight rows warp gw of nw will read in product ph, asked into L2 (a hint: nothing waits for it), a
// 128-byte line a request.
__device__ void prefetch_product(const chain& c, int layer, int ph, int gw, int nw, int lane) {
  const int lines = inputs_of(ph) * int(sizeof(bf16)) / 128;
  for (int r = gw; r < outputs_of(ph); r += nw)
    for (int k = 0; k < (ph == gate_up_phase ? 2 : 1); ++k) {
      const char* row = reinterpret_cast<const char*>(weight_row(c, layer, ph, r + k * inter));
      for (int l = lane; l < lines; l += 32)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + std::size_t(l) * 128));
    }
}

// One product, a warp an output row; with prefetch, the block's rows are asked into L2 before the wait for the
// kernel before it (programmatic dependent launch; without that attribute the wait returns at once).
template <int R>
__global__ void __launch_bounds__(warps * 32) product_kernel(chain c, int layer, int ph, int prefetch) {
  const int lane = threadIdx.x & 31, gw = blockIdx.x * warps + (threadIdx.x >> 5), nw = gridDim.x * warps;
  if (prefetch) prefetch_product(c, layer, ph, gw, nw, lane);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  run_product<R>(c, layer, ph, gw, nw, lane);
}

// A whole step in one cooperative launch: every product of every pass, a grid-wide barrier between products,
// the next product's rows asked into L2 just before each barrier.
template <int R>
__global__ void __launch_bounds__(warps * 32) persistent_kernel(chain c, int passes) {
  cg::grid_group grid = cg::this_grid();
  const int lane = threadIdx.x & 31, gw = blockIdx.x * warps + (threadIdx.x >> 5), nw = gridDim.x * warps;
  const int total = passes * layers * phases;
  for (int i = 0; i < total; ++i) {
    const int layer = (i / phases) % layers, ph = i % phases;
    run_product<R>(c, layer, ph, gw, nw, lane);
    if (i + 1 == total) break;
    prefetch_product(c, ((i + 1) / phases) % layers, (i + 1) % phases, gw, nw, lane);
    grid.sync();
  }
}

__global__ void fill_bf16(bf16* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint32_t h = std::uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((float(h & 0xffff) / 65535.0f - 0.5f) * 0.04f); // uniform in +-0.02
  }
}

double copy_rate(cudaStream_t s) {
  const std::size_t n = std::size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_OK(cudaMalloc(&a, n));
  CUDA_OK(cudaMalloc(&b, n));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int i = 0; i < 11; ++i) {
    CUDA_OK(cudaEventRecord(e0, s));
    CUDA_OK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
    CUDA_OK(cudaEventRecord(e1, s));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0) best = std::min(best, ms);
  }
  CUDA_OK(cudaEventDestroy(e0));
  CUDA_OK(cudaEventDestroy(e1));
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(b));
  return 2.0 * double(n) / (double(best) * 1e-3);
}

struct bench {
  chain c{};
  std::vector<void*> owned;
  cudaStream_t s = nullptr;
  int sms = 0;

  bench() {
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    std::uint32_t seed = 1;
    for (auto& l : c.layer) {
      const bf16** parts[phases] = {&l.qkv, &l.o, &l.gate_up, &l.down};
      for (int ph = 0; ph < phases; ++ph) {
        const std::size_t n = std::size_t(outputs_of(ph)) * (ph == gate_up_phase ? 2 : 1) * inputs_of(ph);
        bf16* p = nullptr;
        CUDA_OK(cudaMalloc(&p, n * sizeof(bf16)));
        owned.push_back(p);
        fill_bf16<<<1024, 256, 0, s>>>(p, n, seed++);
        *parts[ph] = p;
      }
    }
    for (float** p : {&c.x, &c.q, &c.act}) {
      CUDA_OK(cudaMalloc(p, std::size_t(max_rows) * qkv_width * sizeof(float)));
      owned.push_back(*p);
    }
    CUDA_OK(cudaStreamSynchronize(s));
  }
  ~bench() {
    for (void* p : owned)
      cudaFree(p);
    cudaStreamDestroy(s);
  }

  static std::size_t weight_bytes(int passes) {
    std::size_t a_layer = 0;
    for (int ph = 0; ph < phases; ++ph)
      a_layer += std::size_t(outputs_of(ph)) * (ph == gate_up_phase ? 2 : 1) * inputs_of(ph) * sizeof(bf16);
    return a_layer * layers * std::size_t(passes);
  }

  // The same starting residual for every way of running.
  void reset(int rows) {
    std::vector<float> x(std::size_t(rows) * hidden);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = float(int(i * 37 % 101) - 50) / 50.0f;
    CUDA_OK(cudaMemcpyAsync(c.x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
  }
  std::vector<float> result(int rows) {
    std::vector<float> x(std::size_t(rows) * hidden);
    CUDA_OK(cudaMemcpyAsync(x.data(), c.x, x.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    return x;
  }

  template <int R>
  void launch_chain(int passes, bool pdl) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    for (int p = 0; p < passes; ++p)
      for (int layer = 0; layer < layers; ++layer)
        for (int ph = 0; ph < phases; ++ph) {
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(unsigned((outputs_of(ph) + warps - 1) / warps));
          cfg.blockDim = dim3(warps * 32);
          cfg.stream = s;
          cfg.attrs = pdl ? &attr : nullptr;
          cfg.numAttrs = pdl ? 1 : 0;
          CUDA_OK(cudaLaunchKernelEx(&cfg, product_kernel<R>, c, layer, ph, int(pdl)));
        }
  }

  template <int R>
  int persistent_grid() const {
    int per_sm = 0;
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<R>, warps * 32, 0));
    return per_sm * sms;
  }

  template <int R>
  void launch_persistent(int passes, int grid) {
    chain arg = c;
    void* args[] = {&arg, &passes};
    CUDA_OK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel<R>), dim3(unsigned(grid)),
                                        dim3(warps * 32), args, 0, s));
  }

  // Microseconds a step: median of 7 after 2 warm-ups, each timed between two events.
  template <class F>
  double time_us(F&& step) {
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    for (int w = 0; w < 2; ++w)
      step();
    std::vector<double> us;
    for (int r = 0; r < 7; ++r) {
      CUDA_OK(cudaEventRecord(a, s));
      step();
      CUDA_OK(cudaEventRecord(b, s));
      CUDA_OK(cudaEventSynchronize(b));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, a, b));
      us.push_back(double(ms) * 1000.0);
    }
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventDestroy(a));
    CUDA_OK(cudaEventDestroy(b));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

  // One row count: the three ways' outputs after one step from the same residual, then their times; the
  // persistent kernel at 1, 2, 4 and the most blocks an SM holds, the fastest shown.
  template <int R>
  bool run(int rows, int passes, double floor_us) {
    c.rows = rows;
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    reset(rows);
    launch_chain<R>(passes, false);
    const auto plain = result(rows);
    reset(rows);
    launch_chain<R>(passes, true);
    bool equal = same(plain, result(rows));
    const int most = persistent_grid<R>();
    std::vector<int> grids;
    for (int per_sm : {1, 2, 4})
      if (per_sm * sms < most) grids.push_back(per_sm * sms);
    grids.push_back(most);
    for (int g : grids) {
      reset(rows);
      launch_persistent<R>(passes, g);
      equal = same(plain, result(rows)) && equal;
    }

    cudaGraph_t graph[2] = {};
    cudaGraphExec_t exec[2] = {};
    for (int k = 0; k < 2; ++k) {
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      launch_chain<R>(passes, k == 1);
      CUDA_OK(cudaStreamEndCapture(s, &graph[k]));
      CUDA_OK(cudaGraphInstantiate(&exec[k], graph[k], 0));
    }
    const double t_graph = time_us([&] { CUDA_OK(cudaGraphLaunch(exec[0], s)); });
    const double t_pdl = time_us([&] { CUDA_OK(cudaGraphLaunch(exec[1], s)); });
    double t_persistent = 1e30;
    int grid = 0;
    for (int g : grids) {
      const double t = time_us([&] { launch_persistent<R>(passes, g); });
      if (t < t_persistent) {
        t_persistent = t;
        grid = g;
      }
    }
    for (int k = 0; k < 2; ++k) {
      CUDA_OK(cudaGraphExecDestroy(exec[k]));
      CUDA_OK(cudaGraphDestroy(graph[k]));
    }
    std::printf("| %4d | %9.1f | %9.1f | %10.1f | %8.1f | %5.2f | %5.2f | %5.2f | %5.2f | %2d x %d SMs | %s |\n", rows,
                t_graph, t_pdl, t_persistent, floor_us, t_graph / floor_us, t_pdl / floor_us, t_persistent / floor_us,
                t_persistent / t_pdl, grid / sms, sms, equal ? "yes" : "NO");
    return equal;
  }
};

} // namespace

int main(int argc, char** argv) {
  int passes = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--passes" && i + 1 < argc) {
      passes = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "mstar_persistent_chain_bench: unknown argument %s; use --passes N (default 15)\n",
                   a.c_str());
      return 2;
    }
  }
  if (passes < 1) {
    std::fprintf(stderr, "mstar_persistent_chain_bench: --passes %d; give 1 or more\n", passes);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "mstar_persistent_chain_bench: no CUDA device\n");
    return 77;
  }
  int cooperative = 0;
  CUDA_OK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
  if (!cooperative) {
    std::fprintf(stderr, "mstar_persistent_chain_bench: this device has no cooperative launch\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  bench b;
  const double rate = copy_rate(b.s);
  const std::size_t bytes = bench::weight_bytes(passes);
  const double floor_us = double(bytes) / rate * 1e6;
  std::printf("%s, %d SMs, L2 %d MB; D2D copy rate %.0f GB/s; %d passes x %d layers: %.1f MB of weights a step\n",
              prop.name, b.sms, prop.l2CacheSize >> 20, rate / 1e9, passes, layers, double(bytes) / 1e6);
  std::printf("| rows | graph us | +pdl us | persistent | floor us | graph/floor | pdl/floor | pers/floor | pers/pdl | "
              "blocks | same bits |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  bool ok = b.run<1>(1, passes, floor_us);
  ok = b.run<2>(2, passes, floor_us) && ok;
  ok = b.run<4>(4, passes, floor_us) && ok;
  ok = b.run<8>(8, passes, floor_us) && ok;
  if (!ok) std::printf("FAIL: the three ways' outputs differ\n");
  return ok ? 0 : 1;
}
