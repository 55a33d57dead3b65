// Floors under the recurrent-state kernels on this GPU, timed exactly as mstar_recurrent_bench times
// them (a CUDA graph of N calls replayed between two events, divided by N, median of 7 replays; for
// the copies, calls rotate over buffer copies touching 3x the L2, so data comes from HBM):
//
//   A. what one graph node costs with (almost) no data: a memcpy node, a memset node, empty kernel
//      nodes with parameters of 0 B to 20 KiB and grids of 1 to 1056 blocks;
//   B. whether cudaMemcpyAsync device-to-device runs on the SMs or on a copy engine: a memcpy and a
//      copy kernel issued while another stream's kernel holds every SM's threads;
//   C. contiguous copies (no slot table) of 1 to 16 MiB each way: cudaMemcpyAsync, 16-byte thread
//      copies of 1 to 8 units a thread (one block a tile, or a grid of k x SMs blocks walking the
//      tiles), and bulk copies (cp.async.bulk global->shared->global, L lanes of N bytes a block);
//   D. the same bytes through a slot table: a minimal one-segment gather and scatter (power-of-two
//      rows, 5 kernel arguments; _gk: slots kept in L2; _se: scatter's batch load issued before the
//      slot test) against the library's launchers (default policy).
//
//   build/bench/kernels/mstar_copy_floor_bench       (bench/kernels/run_h200.sh builds and runs it)
//
// Element type bf16 for the library calls; the floors move bytes.
#include <mstar/kernels/recurrent.cuh>

#include <cuda_runtime.h>

#include "../common/graph_timing.cuh"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

MSTAR_EXTERN_RECURRENT(mstar::bf16);  // the Qwen3-TTS library's instantiation

namespace {

namespace mk = mstar::kernels;
using elem = mstar::bf16;

using mstar_bench::time_per_call_us;

int calls_for(std::size_t moved) {
  return int(std::clamp<std::size_t>((std::size_t(256) << 20) / std::max<std::size_t>(moved, 1), 5, 200));
}

// ---- kernels ---------------------------------------------------------------------------------------

__global__ void fill_kernel(std::uint32_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint32_t x = std::uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = x | 0x01010101u;  // no zero bytes
  }
}

__device__ int g_sink;

__global__ void empty_kernel() {}

template <int Bytes>
struct blob {
  unsigned char b[Bytes];
};
template <int Bytes>
__global__ void empty_param_kernel(const __grid_constant__ blob<Bytes> b) {
  if (b.b[Bytes - 1] == 123) g_sink = 1;  // reads the parameter; it is zero
}

__device__ __forceinline__ uint4 ld_nc16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 ld_volatile16(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ std::int32_t ld_slot_keep(const std::int32_t* p) {
  std::uint64_t pol;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  std::int32_t v;
  asm volatile("ld.global.nc.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(pol));
  return v;
}

__device__ __forceinline__ void st16_if(bool pred, uint4* dst, uint4 v) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.u32 [%0], {%1, %2, %3, %4};\n}"
               :
               : "l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(int(pred))
               : "memory");
}

// One block a tile of 256 units, one a thread, through a volatile load (as the library's scatter
// reads the batch): what a strong load costs against the non-coherent one.
__global__ void __launch_bounds__(256) copy_tiles_volatile(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                           std::uint64_t n) {
  const std::uint64_t i = std::uint64_t(blockIdx.x) * 256 + threadIdx.x;
  if (i < n) dst[i] = ld_volatile16(src + i);
}

// One block a tile of 256 * U units; a thread's U loads before its U stores.
template <int U>
__global__ void __launch_bounds__(256) copy_tiles(const uint4* __restrict__ src, uint4* __restrict__ dst, std::uint64_t n) {
  const std::uint64_t base = std::uint64_t(blockIdx.x) * 256 * U + threadIdx.x;
  uint4 v[U];
#pragma unroll
  for (int k = 0; k < U; ++k)
    if (base + k * 256 < n) v[k] = ld_nc16(src + base + k * 256);
#pragma unroll
  for (int k = 0; k < U; ++k)
    if (base + k * 256 < n) dst[base + k * 256] = v[k];
}

// A grid of fewer blocks walking the tiles.
template <int U>
__global__ void __launch_bounds__(1024) copy_stride(const uint4* __restrict__ src, uint4* __restrict__ dst, std::uint64_t n) {
  const std::uint64_t step = std::uint64_t(gridDim.x) * blockDim.x * U;
  for (std::uint64_t base = std::uint64_t(blockIdx.x) * blockDim.x * U + threadIdx.x; base < n; base += step) {
    uint4 v[U];
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (base + k * blockDim.x < n) v[k] = ld_nc16(src + base + k * blockDim.x);
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (base + k * blockDim.x < n) dst[base + k * blockDim.x] = v[k];
  }
}

// Each lane: one bulk copy global->shared of lane_bytes, wait on its mbarrier, one bulk copy back.
__global__ void __launch_bounds__(64) copy_bulk(const char* src, char* dst, std::uint64_t bytes, std::uint32_t lane_bytes) {
  extern __shared__ __align__(128) unsigned char stage[];
  __shared__ __align__(8) std::uint64_t bar[64];
  const std::uint64_t off = (std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) * lane_bytes;
  if (off >= bytes) return;
  const std::uint32_t n = std::uint32_t(bytes - off < lane_bytes ? bytes - off : lane_bytes);
  const auto mbar = static_cast<std::uint32_t>(__cvta_generic_to_shared(&bar[threadIdx.x]));
  const auto buf = static_cast<std::uint32_t>(__cvta_generic_to_shared(stage)) + threadIdx.x * lane_bytes;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mbar) : "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mbar), "r"(n) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(buf),
               "l"(src + off), "r"(n), "r"(mbar)
               : "memory");
  for (std::uint32_t done = 0; done == 0;)
    asm volatile("{\n .reg .pred ready;\n mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], 0;\n"
                 " selp.u32 %0, 1, 0, ready;\n}"
                 : "=r"(done)
                 : "r"(mbar)
                 : "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + off), "r"(buf), "r"(n)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Minimal one-segment gather / scatter: rows of 2^log2_upr 16-byte units, slots > 0 only matter.
__global__ void __launch_bounds__(256) min_gather(const uint4* __restrict__ pool, uint4* __restrict__ batch,
                                                  const std::int32_t* __restrict__ slots, std::uint32_t log2_upr,
                                                  std::uint32_t items) {
  const std::uint32_t i = blockIdx.x * 256 + threadIdx.x;
  if (i >= items) return;
  const std::uint32_t row = i >> log2_upr;
  const std::int32_t slot = __ldg(slots + row);
  uint4 v = make_uint4(0, 0, 0, 0);
  if (slot > 0) v = ld_nc16(pool + (std::uint64_t(slot) << log2_upr) + (i & ((1u << log2_upr) - 1)));
  batch[i] = v;
}
// min_gather with the slot table kept in L2 (evict_last), as the library loads it.
__global__ void __launch_bounds__(256) min_gather_keep(const uint4* __restrict__ pool, uint4* __restrict__ batch,
                                                       const std::int32_t* __restrict__ slots, std::uint32_t log2_upr,
                                                       std::uint32_t items) {
  const std::uint32_t i = blockIdx.x * 256 + threadIdx.x;
  if (i >= items) return;
  const std::uint32_t row = i >> log2_upr;
  const std::int32_t slot = ld_slot_keep(slots + row);
  uint4 v = make_uint4(0, 0, 0, 0);
  if (slot > 0) v = ld_nc16(pool + (std::uint64_t(slot) << log2_upr) + (i & ((1u << log2_upr) - 1)));
  batch[i] = v;
}
// min_scatter with the batch load issued before the slot test (volatile, stored under a predicate)
// and the slots kept in L2, as the library does it. In min_scatter ptxas moves the batch load behind
// the slot test.
__global__ void __launch_bounds__(256) min_scatter_early(uint4* __restrict__ pool, const uint4* __restrict__ batch,
                                                         const std::int32_t* __restrict__ slots, std::uint32_t log2_upr,
                                                         std::uint32_t items) {
  const std::uint32_t i = blockIdx.x * 256 + threadIdx.x;
  if (i >= items) return;
  const std::int32_t slot = ld_slot_keep(slots + (i >> log2_upr));
  const uint4 v = ld_volatile16(batch + i);
  st16_if(slot > 0, pool + (std::uint64_t(slot) << log2_upr) + (i & ((1u << log2_upr) - 1)), v);
}
__global__ void __launch_bounds__(256) min_scatter(uint4* __restrict__ pool, const uint4* __restrict__ batch,
                                                   const std::int32_t* __restrict__ slots, std::uint32_t log2_upr,
                                                   std::uint32_t items) {
  const std::uint32_t i = blockIdx.x * 256 + threadIdx.x;
  if (i >= items) return;
  const std::int32_t slot = __ldg(slots + (i >> log2_upr));
  const uint4 v = ld_nc16(batch + i);
  if (slot > 0) pool[(std::uint64_t(slot) << log2_upr) + (i & ((1u << log2_upr) - 1))] = v;
}

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// ---- buffers ---------------------------------------------------------------------------------------

void* dev_random(std::size_t bytes, std::uint32_t seed) {
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, bytes));
  fill_kernel<<<1024, 256>>>(static_cast<std::uint32_t*>(p), bytes / 4, seed);
  CUDA_OK(cudaGetLastError());
  return p;
}

// One step's buffers: a pool of rows+1 slots of row_bytes, a batch of rows, slots a random permutation.
struct step_set {
  void* pool = nullptr;
  void* batch = nullptr;
  std::int32_t* slots = nullptr;
  std::vector<mk::recurrent_segment<elem>> table;
  step_set(std::int32_t rows, std::size_t row_bytes, std::mt19937_64& rng) {
    pool = dev_random((std::size_t(rows) + 1) * row_bytes, std::uint32_t(rng()));
    batch = dev_random(std::size_t(rows) * row_bytes, std::uint32_t(rng()));
    std::vector<std::int32_t> h(static_cast<std::size_t>(rows));
    std::iota(h.begin(), h.end(), 1);
    std::shuffle(h.begin(), h.end(), rng);
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&slots), h.size() * 4));
    CUDA_OK(cudaMemcpy(slots, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    const std::int64_t state = std::int64_t(row_bytes / sizeof(elem));
    table.push_back({static_cast<elem*>(pool), state, rows + 1, 0});
  }
  step_set(const step_set&) = delete;
  step_set& operator=(const step_set&) = delete;
  ~step_set() {
    cudaFree(pool);
    cudaFree(batch);
    cudaFree(slots);
  }
};

struct pair_set {
  void* src = nullptr;
  void* dst = nullptr;
  explicit pair_set(std::size_t bytes, std::uint32_t seed) : src(dev_random(bytes, seed)), dst(dev_random(bytes, seed + 1)) {}
  pair_set(const pair_set&) = delete;
  pair_set& operator=(const pair_set&) = delete;
  ~pair_set() {
    cudaFree(src);
    cudaFree(dst);
  }
};

} // namespace

int main() {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
  cudaStream_t stream, side;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::mt19937_64 rng(7);
  const std::size_t l2 = std::size_t(prop.l2CacheSize);
  const auto sets_for = [&](std::size_t footprint) {
    return std::clamp<std::size_t>((3 * l2 + footprint - 1) / footprint, 1, 64);
  };
  const auto round_calls = [](int calls, std::size_t k) { return int((std::size_t(calls) + k - 1) / k * k); };

  // ---- A: one graph node, almost no data (L2-hot, one buffer) ----
  std::printf("\n== A. per-node floor, L2-hot, graph of 200 nodes (us per node) ==\n");
  {
    pair_set b(1 << 20, 1);
    step_set st(1, 4096, rng);
    const auto row = [](const char* what, double us) { std::printf("  %-52s %6.2f\n", what, us); };
    row("cudaMemcpyAsync D2D 16 B", time_per_call_us(stream, 200, [&](int) {
          CUDA_OK(cudaMemcpyAsync(b.dst, b.src, 16, cudaMemcpyDeviceToDevice, stream));
        }));
    row("cudaMemcpyAsync D2D 4 KiB", time_per_call_us(stream, 200, [&](int) {
          CUDA_OK(cudaMemcpyAsync(b.dst, b.src, 4096, cudaMemcpyDeviceToDevice, stream));
        }));
    row("cudaMemsetAsync 16 B", time_per_call_us(stream, 200, [&](int) { CUDA_OK(cudaMemsetAsync(b.dst, 0, 16, stream)); }));
    row("empty kernel <<<1, 32>>>, no parameter", time_per_call_us(stream, 200, [&](int) { empty_kernel<<<1, 32, 0, stream>>>(); }));
    row("empty kernel <<<1, 32>>>, 352 B parameter (table of 8)", time_per_call_us(stream, 200, [&](int) {
          empty_param_kernel<352><<<1, 32, 0, stream>>>(blob<352>{});
        }));
    row("empty kernel <<<1, 32>>>, 2.6 KiB parameter (table of 64)", time_per_call_us(stream, 200, [&](int) {
          empty_param_kernel<2592><<<1, 32, 0, stream>>>(blob<2592>{});
        }));
    row("empty kernel <<<1, 32>>>, 20.5 KiB parameter (table of 512)", time_per_call_us(stream, 200, [&](int) {
          empty_param_kernel<20512><<<1, 32, 0, stream>>>(blob<20512>{});
        }));
    row("empty kernel <<<1024, 256>>>", time_per_call_us(stream, 200, [&](int) { empty_kernel<<<1024, 256, 0, stream>>>(); }));
    row("empty kernel <<<SMs x 8, 256>>>", time_per_call_us(stream, 200, [&](int) { empty_kernel<<<sms * 8, 256, 0, stream>>>(); }));
    row("empty kernel <<<SMs, 1024>>>", time_per_call_us(stream, 200, [&](int) { empty_kernel<<<sms, 1024, 0, stream>>>(); }));
    row("copy kernel 4 KiB <<<1, 256>>>, 1 unit a thread", time_per_call_us(stream, 200, [&](int) {
          copy_tiles<1><<<1, 256, 0, stream>>>(static_cast<const uint4*>(b.src), static_cast<uint4*>(b.dst), 256);
        }));
    row("min_gather 1 x 4 KiB <<<1, 256>>>", time_per_call_us(stream, 200, [&](int) {
          min_gather<<<1, 256, 0, stream>>>(static_cast<const uint4*>(st.pool), static_cast<uint4*>(st.batch), st.slots, 8, 256);
        }));
    row("library gather 1 x 4 KiB (default policy)", time_per_call_us(stream, 200, [&](int) {
          mk::gather<elem>(st.table, st.slots, 1, static_cast<elem*>(st.batch), stream);
        }));
    row("library scatter 1 x 4 KiB (default policy)", time_per_call_us(stream, 200, [&](int) {
          mk::scatter<elem>(st.table, st.slots, 1, static_cast<const elem*>(st.batch), stream);
        }));
  }

  // ---- B: does the memcpy need the SMs? ----
  std::printf("\n== B. cudaMemcpyAsync D2D 4 MiB while another stream's kernel holds every SM's 2048 threads ==\n");
  {
    pair_set b(4 << 20, 3);
    CUDA_OK(cudaDeviceSynchronize());
    cudaEvent_t e[6];
    for (auto& x : e) CUDA_OK(cudaEventCreate(&x));
    const long long cycles = 4'000'000;  // about 2 ms at 2 GHz
    CUDA_OK(cudaEventRecord(e[0], side));
    spin_kernel<<<sms * 2, 1024, 0, side>>>(cycles);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventRecord(e[1], side));
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(300)) {
    }
    CUDA_OK(cudaEventRecord(e[2], stream));
    CUDA_OK(cudaMemcpyAsync(b.dst, b.src, 4 << 20, cudaMemcpyDeviceToDevice, stream));
    CUDA_OK(cudaEventRecord(e[3], stream));
    copy_tiles<1><<<(4 << 20) / 16 / 256, 256, 0, stream>>>(static_cast<const uint4*>(b.src), static_cast<uint4*>(b.dst),
                                                           (4 << 20) / 16);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaEventRecord(e[4], stream));
    CUDA_OK(cudaDeviceSynchronize());
    float spin = 0, cpy = 0, kern = 0, cpy_end = 0;
    CUDA_OK(cudaEventElapsedTime(&spin, e[0], e[1]));
    CUDA_OK(cudaEventElapsedTime(&cpy, e[2], e[3]));
    CUDA_OK(cudaEventElapsedTime(&kern, e[3], e[4]));
    CUDA_OK(cudaEventElapsedTime(&cpy_end, e[0], e[3]));
    std::printf("  spin kernel %.1f us; memcpy %.1f us (done %.1f us after the spin began); copy kernel after it %.1f us\n",
                spin * 1e3, cpy * 1e3, cpy_end * 1e3, kern * 1e3);
    std::printf("  -> the memcpy %s\n", cpy_end < spin * 0.9f ? "finished while every SM was held: it runs on a copy engine"
                                                                : "waited for the SMs: it runs as a kernel");
    for (auto& x : e) CUDA_OK(cudaEventDestroy(x));
  }

  // ---- C: contiguous copies, HBM-resident ----
  std::printf("\n== C. contiguous copy, HBM-resident (us per call; moved = read + written) ==\n");
  struct variant {
    const char* name;
    int kind;  // 0 memcpy, 1 tiles, 2 stride, 3 bulk, 4 tiles with volatile loads
    int unroll, blocks_per_sm, threads;
    std::uint32_t lane_bytes;
  };
  const std::vector<variant> variants = {
      {"memcpy", 0, 0, 0, 0, 0},     {"u1", 1, 1, 0, 256, 0},        {"u1vol", 4, 1, 0, 256, 0},        {"u2", 1, 2, 0, 256, 0},
      {"u4", 1, 4, 0, 256, 0},       {"u8", 1, 8, 0, 256, 0},        {"s8x256u1", 2, 1, 8, 256, 0},
      {"s4x512u1", 2, 1, 4, 512, 0}, {"s1x1024u2", 2, 2, 1, 1024, 0}, {"b32x256", 3, 0, 0, 32, 256},
      {"b32x1k", 3, 0, 0, 32, 1024}, {"b8x4k", 3, 0, 0, 8, 4096},    {"b2x16k", 3, 0, 0, 2, 16384},
      {"b1x32k", 3, 0, 0, 1, 32768}};
  std::printf("%9s", "moved");
  for (const auto& v : variants) std::printf(" %9s", v.name);
  std::printf("\n");
  std::vector<double> c8(variants.size(), 0);
  for (const std::size_t bytes : {std::size_t(4) << 10, std::size_t(1) << 20, std::size_t(4) << 20, std::size_t(16) << 20}) {
    const std::size_t k = sets_for(2 * bytes);
    std::vector<std::unique_ptr<pair_set>> sets;
    for (std::size_t i = 0; i < k; ++i) sets.push_back(std::make_unique<pair_set>(bytes, std::uint32_t(rng())));
    const int calls = round_calls(calls_for(2 * bytes), k);
    const std::uint64_t n = bytes / 16;
    std::printf("%7.2fMiB", double(2 * bytes) / (1 << 20));
    for (std::size_t vi = 0; vi < variants.size(); ++vi) {
      const variant& v = variants[vi];
      const double t = time_per_call_us(stream, calls, [&](int i) {
        pair_set& s = *sets[std::size_t(i) % k];
        const auto* src = static_cast<const uint4*>(s.src);
        auto* dst = static_cast<uint4*>(s.dst);
        switch (v.kind) {
        case 0: CUDA_OK(cudaMemcpyAsync(s.dst, s.src, bytes, cudaMemcpyDeviceToDevice, stream)); break;
        case 1: {
          const unsigned blocks = unsigned((n + 256 * v.unroll - 1) / (256 * v.unroll));
          if (v.unroll == 1) copy_tiles<1><<<blocks, 256, 0, stream>>>(src, dst, n);
          if (v.unroll == 2) copy_tiles<2><<<blocks, 256, 0, stream>>>(src, dst, n);
          if (v.unroll == 4) copy_tiles<4><<<blocks, 256, 0, stream>>>(src, dst, n);
          if (v.unroll == 8) copy_tiles<8><<<blocks, 256, 0, stream>>>(src, dst, n);
          break;
        }
        case 2: {
          const std::uint64_t tiles = (n + std::uint64_t(v.threads) * v.unroll - 1) / (std::uint64_t(v.threads) * v.unroll);
          const unsigned blocks = unsigned(std::min<std::uint64_t>(tiles, std::uint64_t(sms) * v.blocks_per_sm));
          if (v.unroll == 1) copy_stride<1><<<blocks, v.threads, 0, stream>>>(src, dst, n);
          if (v.unroll == 2) copy_stride<2><<<blocks, v.threads, 0, stream>>>(src, dst, n);
          if (v.unroll == 4) copy_stride<4><<<blocks, v.threads, 0, stream>>>(src, dst, n);
          break;
        }
        case 4: copy_tiles_volatile<<<unsigned((n + 255) / 256), 256, 0, stream>>>(src, dst, n); break;
        default: {
          const std::uint64_t per_block = std::uint64_t(v.threads) * v.lane_bytes;
          const unsigned blocks = unsigned((bytes + per_block - 1) / per_block);
          copy_bulk<<<blocks, v.threads, per_block, stream>>>(static_cast<const char*>(s.src), static_cast<char*>(s.dst),
                                                              bytes, v.lane_bytes);
        }
        }
      });
      if (bytes == (std::size_t(4) << 20)) c8[vi] = t;
      std::printf(" %9.2f", t);
    }
    std::printf("\n");
  }
  std::printf("%9s", "cpy/x 8M");
  for (std::size_t vi = 0; vi < variants.size(); ++vi) std::printf(" %9.3f", c8[0] / c8[vi]);
  std::printf("\n");
  // The bulk copy's bytes, checked once (the library's bulk path is checked by tests/gpu).
  {
    pair_set s(1 << 20, 99);
    copy_bulk<<<(1 << 20) / (32 * 1024), 32, 32 * 1024, stream>>>(static_cast<const char*>(s.src), static_cast<char*>(s.dst),
                                                                  1 << 20, 1024);
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<unsigned char> a(1 << 20), b(1 << 20);
    CUDA_OK(cudaMemcpy(a.data(), s.src, a.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(b.data(), s.dst, b.size(), cudaMemcpyDeviceToHost));
    std::printf("  bulk copy of 1 MiB checked: %s\n", a == b ? "bytes equal" : "MISMATCH");
  }

  // ---- D: through a slot table, HBM-resident ----
  std::printf("\n== D. one pool of one layer through a slot table, HBM-resident (us per call) ==\n");
  std::printf("%6s %8s %9s | %7s | %7s %7s %7s %7s | %7s %7s | %7s %7s\n", "rows", "row", "moved", "memcpy", "min_g",
              "min_gk", "min_s", "min_se", "lib_g", "lib_s", "cpy/lg", "cpy/ls");
  struct shape {
    std::int32_t rows;
    std::size_t row_bytes;
  };
  for (const shape sh : {shape{1, 4 << 10}, shape{1, 1 << 20}, shape{1024, 4 << 10}, shape{16, 256 << 10}, shape{4, 1 << 20},
                         shape{1024, 16 << 10}, shape{16, 1 << 20}}) {
    const std::size_t one_way = std::size_t(sh.rows) * sh.row_bytes;
    const std::size_t k = sets_for((2 * std::size_t(sh.rows) + 1) * sh.row_bytes);
    std::vector<std::unique_ptr<step_set>> sets;
    for (std::size_t i = 0; i < k; ++i) sets.push_back(std::make_unique<step_set>(sh.rows, sh.row_bytes, rng));
    const int calls = round_calls(calls_for(2 * one_way), k);
    std::uint32_t log2_upr = 0;
    while ((std::size_t(16) << log2_upr) < sh.row_bytes) ++log2_upr;
    const std::uint32_t items = std::uint32_t(one_way / 16);
    const unsigned blocks = (items + 255) / 256;
    const double m = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      CUDA_OK(cudaMemcpyAsync(s.pool, s.batch, one_way, cudaMemcpyDeviceToDevice, stream));
    });
    const double mg = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      min_gather<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(s.pool), static_cast<uint4*>(s.batch), s.slots, log2_upr, items);
    });
    const double ms = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      min_scatter<<<blocks, 256, 0, stream>>>(static_cast<uint4*>(s.pool), static_cast<const uint4*>(s.batch), s.slots, log2_upr, items);
    });
    const double mgk = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      min_gather_keep<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(s.pool), static_cast<uint4*>(s.batch), s.slots,
                                                  log2_upr, items);
    });
    const double mse = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      min_scatter_early<<<blocks, 256, 0, stream>>>(static_cast<uint4*>(s.pool), static_cast<const uint4*>(s.batch),
                                                    s.slots, log2_upr, items);
    });
    const double lg = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      mk::gather<elem>(s.table, s.slots, sh.rows, static_cast<elem*>(s.batch), stream);
    });
    const double ls = time_per_call_us(stream, calls, [&](int i) {
      step_set& s = *sets[std::size_t(i) % k];
      mk::scatter<elem>(s.table, s.slots, sh.rows, static_cast<const elem*>(s.batch), stream);
    });
    std::printf("%6d %5zuKiB %7.2fMiB | %7.2f | %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f | %7.3f %7.3f\n", sh.rows,
                sh.row_bytes >> 10, double(2 * one_way) / (1 << 20), m, mg, mgk, ms, mse, lg, ls, m / lg, m / ls);
  }
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaStreamDestroy(side));
  return 0;
}
