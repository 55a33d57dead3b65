// Whether one persistent kernel would pay for the code predictor's many small products, measured before anyone
// writes the real one. The chain of products of the predictor's 15 passes over its 5 layers (a layer: qkv 1024 ->
// 4096, o 2048 -> 1024 added to the residual, gate/up 1024 -> 2 x 3072 ending in SwiGLU, down 3072 -> 1024 added to
// the residual; bf16 weights, float32 activations and sums; 31.5 MB of weights a layer, 157 MB the five, more than
// the L2 holds, so every pass streams them from HBM), at 1, 2, 4 and 8 rows, timed four ways in one run:
//
//   graph       one kernel a product, a step's 300 launches captured in a CUDA graph (the decode step's structure)
//   graph+pdl   the same with programmatic dependent launch: each kernel asks its weight rows into L2 and then
//               waits for the one before it (as the Talker's kernels do)
//   persistent  one cooperative kernel a step: grid-wide barriers between the products, each warp asking its rows
//               of the next product into L2 just before the barrier
//   stream      one cooperative kernel a step, one block an SM, each block's share of the coming products' weights
//               copied into a ring of shared-memory slots by bulk asynchronous copies issued as soon as a slot
//               frees, so that the weight stream never waits for the grid's barriers (only the sums do)
//
// next to the HBM floor: the weight bytes over the same run's device-to-device copy rate (bytes read and written
// by a 1 GiB cudaMemcpyAsync, best of 10). Attention, norms and sampling are left out: this measures only what
// the launches and the phase boundaries cost the weight stream. The four compute every sum in the same order,
// so their outputs must agree bit for bit; the run says so and fails (exit 1) when they do not. Before the table,
// the parts of the stream kernel on their own: a step's grid-wide barriers alone, its weight stream alone (bulk
// copies of a whole load, 16 KB and 4 KB), and after it the stream kernel without its sums.
//
//   build/bench/kernels/mstar_persistent_chain_bench [--passes N] [--piece BYTES]  (bash bench/gpu_session.sh persistent)
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

// The 8 float32 inputs of a 16-byte weight slice, from p.
__device__ void load_x8(const float* p, float (&xf)[8]) {
  const float4 lo = reinterpret_cast<const float4*>(p)[0], hi = reinterpret_cast<const float4*>(p)[1];
  xf[0] = lo.x, xf[1] = lo.y, xf[2] = lo.z, xf[3] = lo.w, xf[4] = hi.x, xf[5] = hi.y, xf[6] = hi.z, xf[7] = hi.w;
}

// acc plus the 8 products of a slice of 8 bf16 weights and its inputs, in slice order (every way's order).
__device__ float dot8(uint4 w, const float (&xf)[8], float acc) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    acc = fmaf(f.x, xf[2 * j], acc);
    acc = fmaf(f.y, xf[2 * j + 1], acc);
  }
  return acc;
}

// Output r of product ph for one row from its sum a (and, for gate_up, the up row's sum b).
__device__ void write_output(const chain& c, int ph, int row, int r, float a, float b) {
  if (ph == qkv_phase)
    c.q[std::size_t(row) * qkv_width + r] = a;
  else if (ph == gate_up_phase)
    c.act[std::size_t(row) * inter + r] = silu(a) * b;
  else
    c.x[std::size_t(row) * hidden + r] += a;
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
        float xf[8];
        load_x8(x + std::size_t(row) * ldx + std::size_t(s) * 8, xf);
#pragma unroll
        for (int k = 0; k < O; ++k) {
          if (k >= nw) break;
          acc[k][row] = dot8(wq[u][k], xf, acc[k][row]);
        }
      }
    }
  }
#pragma unroll
  for (int row = 0; row < R; ++row) {
    if (row >= c.rows) break;
    const float a = warp_sum(acc[0][row]), b = warp_sum(acc[1][row]);
    if (lane == 0) write_output(c, ph, row, r, a, b);
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

// The weight stream decoupled from the chain's dependencies: one block an SM, each owning the same share of every
// product's output rows (rows b * O / G up to (b + 1) * O / G), its weight rows copied into shared memory by bulk
// asynchronous copies (cp.async.bulk, completing on an mbarrier) into a ring of `stages` slots, issued as soon as a
// slot frees -- so the next products' weights stream in while this one computes and while the grid waits at its
// barrier. Weights do not depend on the activations; only the small sums wait for the grid. After each barrier the
// product's input rows are copied into shared memory (cp.async, every copy in flight at once). A warp takes the
// block's rows w, w + warps, ... (K of them at once) and sums each as product_row does (same slices a lane, same
// order, same butterfly): the same bits.
constexpr int stream_warps = 8;
int stream_piece = 0; // --piece: the stream kernels' bytes a bulk copy (0: one copy a load)

struct stream_plan {
  int grid = 0, stages = 0;
  int piece = 0; // bytes a bulk copy (a multiple of 16); 0: a load is one copy
  int skip_sums = 0; // 1: no sums (and no outputs): the step's barriers, staging and weight stream alone, timed only
  std::size_t slot_bytes = 0, x_bytes = 0; // a ring slot; the staged input rows
  std::size_t smem() const { return slot_bytes * stages + x_bytes + 8 * std::size_t(stages); }
};

// The loads of product ph: gate_up's gate rows and up rows are two loads (two slots), every other product one.
__device__ __host__ constexpr int loads_of(int ph) { return ph == gate_up_phase ? 2 : 1; }
__device__ __host__ constexpr int loads_a_layer() {
  return loads_of(qkv_phase) + loads_of(o_phase) + loads_of(gate_up_phase) + loads_of(down_phase);
}

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Load j of the step (layer-major: qkv, o, gate, up, down) into ring slot j % stages.
__device__ void issue_load(const chain& c, const stream_plan& plan, unsigned char* ring, std::uint64_t* bars,
                           int j) {
  const int in_layer = j % loads_a_layer(), layer = (j / loads_a_layer()) % layers;
  const int ph = in_layer == 0 ? qkv_phase : in_layer == 1 ? o_phase : in_layer <= 3 ? gate_up_phase : down_phase;
  const int part = in_layer == 3 ? 1 : 0; // gate_up's up rows
  const int outs = outputs_of(ph), lo = int(std::int64_t(blockIdx.x) * outs / gridDim.x),
            hi = int(std::int64_t(blockIdx.x + 1) * outs / gridDim.x);
  const std::uint32_t bytes = std::uint32_t(std::size_t(hi - lo) * inputs_of(ph) * sizeof(bf16));
  const int slot = j % plan.stages;
  const bf16* src = weight_row(c, layer, ph, lo + part * inter);
  const std::uint32_t bar = smem_addr(bars + slot), dst = smem_addr(ring + std::size_t(slot) * plan.slot_bytes);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  const std::uint32_t piece = plan.piece > 0 ? std::uint32_t(plan.piece) : bytes;
  for (std::uint32_t at = 0; at < bytes; at += piece) {
    const std::uint32_t n = bytes - at < piece ? bytes - at : piece;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     dst + at),
                 "l"(reinterpret_cast<const char*>(src) + at), "r"(n), "r"(bar)
                 : "memory");
  }
}

__device__ void wait_load(const std::uint64_t* bars, const stream_plan& plan, int j) {
  const std::uint32_t bar = smem_addr(bars + j % plan.stages), parity = std::uint32_t(j / plan.stages) & 1u;
  std::uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
}

template <int R, int K>
__global__ void __launch_bounds__(stream_warps * 32, 1) stream_kernel(chain c, int passes, stream_plan plan) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  float* xs = reinterpret_cast<float*>(smem + plan.slot_bytes * plan.stages);
  auto* bars = reinterpret_cast<std::uint64_t*>(smem + plan.slot_bytes * plan.stages + plan.x_bytes);
  cg::grid_group grid = cg::this_grid();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int total = passes * layers * phases, total_loads = passes * layers * loads_a_layer();
  int issued = 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < plan.stages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + s)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (; issued < plan.stages && issued < total_loads; ++issued)
      issue_load(c, plan, ring, bars, issued);
  }
  __syncthreads();
  int first = 0; // the first load of product i
  for (int i = 0; i < total; ++i) {
    const int ph = i % phases;
    const int in = inputs_of(ph), slices = in / 8;
    // The product's input rows, as written before the last barrier.
    const float* x = ph == o_phase ? c.q : ph == down_phase ? c.act : c.x;
    const int ldx = ph == o_phase ? qkv_width : in;
    // Every thread's 16-byte copies in flight at once (cp.async, through L2 only), then one wait.
    for (int k = threadIdx.x; k < c.rows * slices * 2; k += blockDim.x) {
      const int row = k / (slices * 2), q4 = k % (slices * 2);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(xs + std::size_t(row) * in + 4 * q4)),
                   "l"(x + std::size_t(row) * ldx + 4 * q4)
                   : "memory");
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    for (int l = 0; l < loads_of(ph); ++l)
      wait_load(bars, plan, first + l);
    const int outs = outputs_of(ph), lo = int(std::int64_t(blockIdx.x) * outs / gridDim.x),
              hi = int(std::int64_t(blockIdx.x + 1) * outs / gridDim.x);
    const unsigned char* wslot[2] = {ring + std::size_t(first % plan.stages) * plan.slot_bytes,
                                     ring + std::size_t((first + 1) % plan.stages) * plan.slot_bytes};
    const int nw = loads_of(ph);
    // K rows a warp at once (rows r0, r0 + warps, ...): each row's sum in product_row's order, the input slices
    // read once for all K, and the K butterflies independent of each other.
    for (int r0 = lo + warp; r0 < hi && !plan.skip_sums; r0 += stream_warps * K) {
      float acc[K][2][R] = {};
      for (int s = lane; s < slices; s += 32) {
        uint4 wq[K][2];
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
          for (int o = 0; o < 2; ++o) {
            const int r = r0 + k * stream_warps;
            wq[k][o] = o < nw && r < hi ? reinterpret_cast<const uint4*>(
                                              wslot[o] + std::size_t(r - lo) * in * sizeof(bf16))[s]
                                        : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
        for (int row = 0; row < R; ++row) {
          if (row >= c.rows) break;
          float xf[8];
          load_x8(xs + std::size_t(row) * in + std::size_t(s) * 8, xf);
#pragma unroll
          for (int k = 0; k < K; ++k)
#pragma unroll
            for (int o = 0; o < 2; ++o) {
              if (o >= nw) break;
              acc[k][o][row] = dot8(wq[k][o], xf, acc[k][o][row]);
            }
        }
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int r = r0 + k * stream_warps;
        if (r >= hi) break;
#pragma unroll
        for (int row = 0; row < R; ++row) {
          if (row >= c.rows) break;
          const float a = warp_sum(acc[k][0][row]), b = warp_sum(acc[k][1][row]);
          if (lane == 0) write_output(c, ph, row, r, a, b);
        }
      }
    }
    __syncthreads(); // the slots and the staged rows are read
    first += loads_of(ph);
    if (threadIdx.x == 0)
      for (; issued < first + plan.stages && issued < total_loads; ++issued)
        issue_load(c, plan, ring, bars, issued);
    if (i + 1 < total) grid.sync();
  }
}

// Nothing but the stream kernel's weight stream: every load of a step through the ring, each slot reissued as soon
// as its copy lands (no barrier, no sums): the bandwidth the bulk copies reach on their own.
__global__ void __launch_bounds__(stream_warps * 32, 1) weights_only_kernel(chain c, int passes, stream_plan plan) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  auto* bars = reinterpret_cast<std::uint64_t*>(smem + plan.slot_bytes * plan.stages + plan.x_bytes);
  if (threadIdx.x != 0) return;
  const int total_loads = passes * layers * loads_a_layer();
  for (int s = 0; s < plan.stages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + s)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  int issued = 0;
  for (; issued < plan.stages && issued < total_loads; ++issued)
    issue_load(c, plan, ring, bars, issued);
  for (int j = 0; j < total_loads; ++j) {
    wait_load(bars, plan, j);
    if (issued < total_loads) issue_load(c, plan, ring, bars, issued++);
  }
}

// Nothing but the grid-wide barriers of a step: what each costs on its own.
__global__ void __launch_bounds__(stream_warps * 32, 1) barriers_kernel(int barriers) {
  cg::grid_group grid = cg::this_grid();
  for (int i = 0; i < barriers; ++i)
    grid.sync();
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
  std::vector<double> bare_us; // the stream kernel without its sums, a row count at a time
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

  // The stream kernel's plan at R rows: one block an SM, a slot the largest share of one load, as many slots (2 to
  // 4) as the shared memory left by the staged input rows holds; grid 0 when two do not fit.
  template <int R, int K>
  stream_plan plan_stream() const {
    stream_plan p;
    p.grid = sms;
    for (int ph = 0; ph < phases; ++ph) {
      const std::size_t rows = (std::size_t(outputs_of(ph)) + sms - 1) / sms;
      p.slot_bytes = std::max(p.slot_bytes, rows * inputs_of(ph) * sizeof(bf16));
      p.x_bytes = std::max(p.x_bytes, std::size_t(R) * inputs_of(ph) * sizeof(float));
    }
    int optin = 0;
    CUDA_OK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    for (p.stages = 4; p.stages >= 2 && p.smem() > std::size_t(optin); --p.stages) {
    }
    if (p.stages < 2) return stream_plan{};
    CUDA_OK(cudaFuncSetAttribute(stream_kernel<R, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem())));
    int per_sm = 0;
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, stream_kernel<R, K>, stream_warps * 32, p.smem()));
    if (per_sm < 1) return stream_plan{};
    p.piece = stream_piece;
    return p;
  }

  template <int R, int K>
  void launch_stream(int passes, stream_plan plan) {
    chain arg = c;
    void* args[] = {&arg, &passes, &plan};
    CUDA_OK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(stream_kernel<R, K>), dim3(unsigned(plan.grid)),
                                        dim3(stream_warps * 32), args, plan.smem(), s));
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

  // One row count: the four ways' outputs after one step from the same residual, then their times; the
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

    const stream_plan plan = plan_stream<R, 1>(), plan4 = plan_stream<R, 4>();
    if (plan.grid > 0) {
      reset(rows);
      launch_stream<R, 1>(passes, plan);
      equal = same(plain, result(rows)) && equal;
    }
    if (plan4.grid > 0) {
      reset(rows);
      launch_stream<R, 4>(passes, plan4);
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
    const double t_stream = plan.grid > 0 ? time_us([&] { launch_stream<R, 1>(passes, plan); }) : 0.0;
    const double t_stream4 = plan4.grid > 0 ? time_us([&] { launch_stream<R, 4>(passes, plan4); }) : 0.0;
    if (plan.grid > 0) {
      stream_plan bare = plan;
      bare.skip_sums = 1;
      bare_us.push_back(time_us([&] { launch_stream<R, 1>(passes, bare); }));
    }
    for (int k = 0; k < 2; ++k) {
      CUDA_OK(cudaGraphExecDestroy(exec[k]));
      CUDA_OK(cudaGraphDestroy(graph[k]));
    }
    std::printf("| %4d | %9.1f | %9.1f | %10.1f | %8.1f | %8.1f | %8.1f | %5.2f | %5.2f | %5.2f | %5.2f | %5.2f | %5.2f "
                "| %2d x %d SMs | %d x %zu KB | %s |\n",
                rows, t_graph, t_pdl, t_persistent, t_stream, t_stream4, floor_us, t_graph / floor_us, t_pdl / floor_us,
                t_persistent / floor_us, t_stream / floor_us, t_stream4 / floor_us, t_stream4 / t_graph, grid / sms,
                sms, plan.stages, plan.slot_bytes >> 10, equal ? "yes" : "NO");
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
    } else if (a == "--piece" && i + 1 < argc) {
      stream_piece = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "mstar_persistent_chain_bench: unknown argument %s; use --passes N (default 15), --piece BYTES "
                   "(default 0)\n",
                   a.c_str());
      return 2;
    }
  }
  if (stream_piece < 0 || stream_piece % 16 != 0) {
    std::fprintf(stderr, "mstar_persistent_chain_bench: --piece %d; give 0 or a positive multiple of 16\n",
                 stream_piece);
    return 2;
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
  // The barriers alone: a step's count of them (one between products) in one cooperative launch.
  const int barriers = passes * layers * phases - 1;
  const double t_barriers = b.time_us([&] {
    int n = barriers;
    void* args[] = {&n};
    CUDA_OK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(barriers_kernel), dim3(unsigned(b.sms)),
                                        dim3(stream_warps * 32), args, 0, b.s));
  });
  std::printf("%d grid-wide barriers alone, one block an SM: %.1f us, %.2f us each\n", barriers, t_barriers,
              t_barriers / barriers);
  for (const int piece : {0, 16384, 4096})
  for (stream_plan plan : {b.plan_stream<1, 1>(), b.plan_stream<8, 1>()}) {
    if (plan.grid == 0) continue;
    plan.piece = piece;
    CUDA_OK(cudaFuncSetAttribute(weights_only_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem())));
    const double t = b.time_us([&] {
      chain arg = b.c;
      int n = passes;
      stream_plan p = plan;
      void* args[] = {&arg, &n, &p};
      CUDA_OK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(weights_only_kernel), dim3(unsigned(p.grid)),
                                          dim3(stream_warps * 32), args, p.smem(), b.s));
    });
    std::printf("the stream's weights alone, %d slots of %zu KB, copies of %d KB: %.1f us, %.2f x the floor, "
                "%.0f GB/s\n",
                plan.stages, plan.slot_bytes >> 10, piece > 0 ? piece >> 10 : int(plan.slot_bytes >> 10), t,
                t / floor_us, double(bytes) / (t * 1e-6) / 1e9);
  }
  std::printf("| rows | graph us | +pdl us | persistent | stream us | stream x4 us | floor us | graph/floor | pdl/floor "
              "| pers/floor | stream/floor | x4/floor | x4/graph | blocks | ring | same bits |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| --- |\n");
  bool ok = b.run<1>(1, passes, floor_us);
  ok = b.run<2>(2, passes, floor_us) && ok;
  ok = b.run<4>(4, passes, floor_us) && ok;
  ok = b.run<8>(8, passes, floor_us) && ok;
  std::printf("the stream kernel without its sums (barriers, staged inputs, weights), 1 / 2 / 4 / 8 rows:");
  for (double t : b.bare_us)
    std::printf(" %.1f us", t);
  std::printf("\n");
  if (!ok) std::printf("FAIL: the ways' outputs differ\n");
  return ok ? 0 : 1;
}
