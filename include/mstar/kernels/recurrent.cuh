// Device code of <mstar/kernels/recurrent.hpp>: the gather / scatter / zero kernel and the launchers.
// Include it only from the .cu that instantiates the launchers for a model (kernels/<model>.cu);
// everyone else includes the CUDA-free .hpp. docs/kernels.md gives the design, docs/benchmarks.md the measurements.
//
// The direction (gather, scatter, zero) is a template argument. Work is a flat space of "items":
// item = one unit of g bytes of one row of one segment, segments one after another, rows of a segment
// one after another. g is chosen per segment: 16 bytes when the pool, the batch block and the row
// size allow, else the largest of 8, 4, 2, 1 bytes that they allow. A block of 256 threads takes a
// tile of 256 items, one a thread (a gather through the strided kernel: 512 items, two a thread, up to
// 8 waves; see launch_policy), so many short rows and a few huge rows both spread over the whole grid. Kernels locate items: recurrent_strided_kernel for tables whose segments have one shape and
// are evenly spaced (one segment, or one pool's layers: an 80-byte parameter and two divisions); for
// any other table the host merges segments into groups of that kind (one pool's layers) and
// recurrent_grid_kernel (2-D grid, blockIdx.y = group: groups of about one size, or a few groups),
// recurrent_map_kernel (1-D grid, each group on whole tiles, a per-tile group map) or, when the tiles
// overflow the map, recurrent_tiles_kernel (the same grid, block-uniform search) moves them (by value,
// __grid_constant__, up to max_segments = 512 groups). recurrent_table_kernel, the per-thread search
// over segments they replaced, lives on in bench/kernels/recurrent_sweep.cuh for the benchmark's comparison.
//
// What the time of a call is made of (bench/kernels/copy_floor_bench.cu measures each part): a call is
// one round of loads and stores, so its length is the chain of dependent accesses in a thread. A
// contiguous copy kernel has one (load, then store) and matches cudaMemcpyAsync, which is itself a
// kernel. Gather cannot avoid a second (the slot, then the pool row), so the kernels keep everything
// else off the chain: the strided kernel reads only parameters at fixed offsets (they go out together,
// no branch waits on one), the slot table stays in L2 (evict_last), gather's pool load is predicated
// (no branch between slot and load), and scatter issues its batch load before it tests the slot.
#pragma once

#include <mstar/kernels/recurrent.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace mstar::kernels {

// In-place mode inside a model kernel: the state row of slot `index` (a row_index entry) in segment s.
template <class T>
__host__ __device__ inline T* state_row(const recurrent_segment<T>& s, std::int32_t index) {
  return s.pool_layer + std::int64_t(index) * s.state_elems;
}

namespace detail {

enum class copy_op : std::int32_t { gather, scatter, zero };

// Fast division by a divisor fixed at launch (CUTLASS's FastDivmod): exact for n < 2^31 and
// divisors below 2^31. Divisor 1 has multiplier 0, and the quotient is then n itself: computed
// without a branch, so no parameter read waits on another.
struct fast_divisor {
  std::uint32_t divisor;
  std::uint32_t multiplier;
  std::uint32_t shift;
};

inline fast_divisor make_fast_divisor(std::uint32_t d) {
  if (d == 1) return {1, 0, 0};
  std::uint32_t log2 = 0;
  while ((std::uint64_t(1) << log2) < d) ++log2;  // ceil(log2(d))
  const std::uint32_t p = 31 + log2;
  return {d, std::uint32_t(((std::uint64_t(1) << p) + d - 1) / d), p - 32};
}

__device__ __forceinline__ std::uint32_t fast_div(std::uint32_t n, const fast_divisor& d) {
  return (__umulhi(n, d.multiplier) >> d.shift) + (d.multiplier == 0 ? n : 0u);
}

// A strided table: every segment has the same row size and unit, and segment s sits at
// pool + s * pool_stride and at batch + s * batch_stride (one segment; or one pool's layers, which
// are layer-major, with layout_batch's blocks). The common case, in 80 bytes of parameter: an item's
// segment, row and unit come from two divisions, with no table to search.
struct strided_params {
  char* batch;
  const std::int32_t* slots;
  char* pool;                  // segment 0
  std::int64_t pool_stride;    // bytes from one segment's pool block to the next
  std::int64_t batch_stride;   // bytes from one segment's batch block to the next
  std::uint64_t total_items;   // < 2^31
  fast_divisor segment_items;  // rows * units_per_row
  fast_divisor units_per_row;
  std::uint32_t log2_unit;
};

// Tables that are not strided. The host merges the table into groups (runs of segments of one
// shape, evenly spaced in the pool and in the batch: one pool's layers), one grid_entry a group, and
// lays the groups on the grid in one of two ways, both block-uniform (a block's group is the same for
// all its threads, so its parameter reads are warp-uniform and shared by the blocks of an SM):
//  - 2-D grid (recurrent_grid_kernel): blockIdx.y is the group, blockIdx.x the tile in it; no search,
//    every field read at an address fixed before the first load, as in the strided kernel; blocks
//    past their group's tiles exit at once, so it is taken when groups have about the same size.
//  - 1-D grid of tiles (recurrent_tiles_kernel): each group starts on a tile; a block finds its group
//    by a binary search over tile_begin (log2(groups) dependent reads, the same for all its threads
//    and hot in the constant cache). No block is empty.
// Measured (docs/benchmarks.md): cutting groups into many entries to fill the 2-D grid was slower (every
// SM then reads many distinct entries; each is a constant-cache miss in the chain).
struct grid_entry {
  char* pool;                 // the group's first segment in the pool
  std::int64_t batch_offset;  // bytes from the batch start to the group's first segment block
  std::uint32_t pool_stride;  // bytes from one segment of the group to the next, in the pool
  std::uint32_t batch_stride; // ... and in the batch
  std::uint32_t items;        // items in the group, < 2^31
  std::uint32_t segment_div;  // rows * units_per_row: the items of one segment of the group
  std::uint32_t segment_mul;
  std::uint32_t unit_div;     // units_per_row
  std::uint32_t unit_mul;
  std::uint32_t shifts;       // segment_div's shift | unit_div's shift << 8 | log2_unit << 16
};
static_assert(sizeof(grid_entry) == 48, "grid_entry is sized for the kernel parameter budget");

template <int Cap>
struct grid_params {
  char* batch;
  const std::int32_t* slots;
  grid_entry e[Cap];
};
static_assert(sizeof(grid_params<max_segments>) <= 32764,
              "the group table no longer fits a kernel parameter; lower max_segments in recurrent.hpp");

template <int Cap>
struct tiles_params {
  char* batch;
  const std::int32_t* slots;
  std::int32_t ngroups;
  std::uint32_t tile_begin[Cap + 1];  // each group's first tile; tile_begin[ngroups] is the grid size
  grid_entry e[Cap];
};
static_assert(sizeof(tiles_params<max_segments>) <= 32764,
              "the group table no longer fits a kernel parameter; lower max_segments in recurrent.hpp");

// recurrent_map_kernel: a 1-D grid of tiles as in the tiles kernel, but a block reads its group from a
// per-tile map in the parameter (one read at an address fixed by blockIdx.x) instead of searching
// tile_begin, then its entry and its group's first tile: two dependent parameter reads whatever the
// number of groups, against log2(groups) + 1. Taken when the grid's tiles fit the map (up to 4096
// tiles for 64 groups, 16 MiB moved one way in 16-byte units; 2560 for 512), else the tiles kernel.
template <int Cap, int MapCap>
struct map_params {
  char* batch;
  const std::int32_t* slots;
  std::uint32_t tile_begin[Cap];
  grid_entry e[Cap];
  std::uint16_t group_of[MapCap];  // each tile's group
};
inline constexpr int map_tiles_step = 256;    // map_params<64, ...> for small steps (a small parameter)
inline constexpr int map_tiles_small = 4096;  // map_params<64, ...>
inline constexpr int map_tiles_large = 2560;  // map_params<max_segments, ...>
static_assert(sizeof(map_params<int(max_segments), map_tiles_large>) <= 32764,
              "the tile map no longer fits a kernel parameter; lower map_tiles_large");

// The slot table is loaded with an L2 evict_last policy (createpolicy, sm_80+): it is a few KiB,
// gather and then scatter of the same step read it, and every pool address waits on it, so a miss to
// HBM there lengthens the whole call (measured: 0.1 to 0.9 us from 8 to 32 MiB moved). The state keeps
// the default policy (evicting it first was measured slower) and skips L1 (read once); slots go
// through L1 (a row's threads share them).
__device__ __forceinline__ std::uint64_t keep_in_l2_policy() {
  std::uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

// Read-only for the kernel's lifetime (slots, and the side a direction reads, never alias what it
// writes), so the non-coherent path is valid.
__device__ __forceinline__ std::int32_t load_slot(const std::int32_t* src, std::uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  std::int32_t v;
  asm volatile("ld.global.nc.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(v) : "l"(src), "l"(pol));
  return v;
#else
  (void)pol;
  return __ldg(src);
#endif
}

// Gather's pool load under a predicate (zeros when it is off), with no branch: its address is
// complete when the slot arrives, and nothing else is read between the slot and it.
__device__ __forceinline__ uint4 load16_if(bool pred, const char* src) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(src), "r"(int(pred)));
  return v;
}

// Scatter's batch load: issued before the slot test that decides whether it is stored. A plain load
// whose value only a slot > 0 row stores is moved by ptxas behind that test (it exits the thread
// first), which puts the slot's latency in front of the batch load; a volatile load is never made
// conditional. It is served by L2 like the load it replaces (the batch is read once; no L1 reuse).
__device__ __forceinline__ uint4 load16_unconditional(const char* src) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src)
               : "memory");
  return v;
}

// A store under a predicate.
__device__ __forceinline__ void store16_if(bool pred, char* dst, uint4 v) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p st.global.v4.u32 [%0], {%1, %2, %3, %4};\n}"
               :
               : "l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(int(pred))
               : "memory");
}

__device__ __forceinline__ uint4 load_unit(const char* src, std::uint32_t log2_unit) {
  switch (log2_unit) {
  case 4: return *reinterpret_cast<const uint4*>(src);
  case 3: {
    const uint2 x = *reinterpret_cast<const uint2*>(src);
    return make_uint4(x.x, x.y, 0, 0);
  }
  case 2: return make_uint4(*reinterpret_cast<const std::uint32_t*>(src), 0, 0, 0);
  case 1: return make_uint4(*reinterpret_cast<const std::uint16_t*>(src), 0, 0, 0);
  default: return make_uint4(*reinterpret_cast<const std::uint8_t*>(src), 0, 0, 0);
  }
}

__device__ __forceinline__ void store_unit(char* dst, uint4 v, std::uint32_t log2_unit) {
  switch (log2_unit) {
  case 4: *reinterpret_cast<uint4*>(dst) = v; break;
  case 3: *reinterpret_cast<uint2*>(dst) = make_uint2(v.x, v.y); break;
  case 2: *reinterpret_cast<std::uint32_t*>(dst) = v.x; break;
  case 1: *reinterpret_cast<std::uint16_t*>(dst) = std::uint16_t(v.x); break;
  default: *reinterpret_cast<std::uint8_t*>(dst) = std::uint8_t(v.x); break;
  }
}

// One item between locating it and storing it.
struct located_unit {
  char* batch_at;          // the item in the batch
  char* pool_at;           // the item in slot 0 of the pool; slot s adds s * row_bytes
  std::uint64_t row_bytes;
  std::uint32_t log2_unit;
  std::int32_t slot;
};

// The body both kernels share. A thread handles Unroll items, Threads apart (a warp's accesses are
// contiguous): it locates them and loads their slots (scatter: and their batch units, which do not
// depend on the slot), then (gather) loads the pool rows, then stores. locate(i, u) fills u's
// addresses and returns the item's row. Wide: every segment moves 16-byte units (decided on the
// host), no width switch.
template <copy_op Op, int Threads, int Unroll, bool Wide, class Locate>
__device__ __forceinline__ void copy_items(std::uint64_t first, std::uint64_t total, const std::int32_t* slots,
                                           Locate&& locate) {
  const std::uint64_t pol_slot = keep_in_l2_policy();
  const auto live = [&](int k) { return k == 0 || first + std::uint64_t(k) * Threads < total; };
  located_unit u[Unroll];
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    u[k].slot = skip_slot;
    if (live(k)) u[k].slot = load_slot(slots + locate(first + std::uint64_t(k) * Threads, u[k]), pol_slot);
  }
  uint4 v[Unroll];
  if constexpr (Op == copy_op::scatter) {
#pragma unroll
    for (int k = 0; k < Unroll; ++k)
      v[k] = !live(k) ? make_uint4(0, 0, 0, 0)
             : Wide   ? load16_unconditional(u[k].batch_at)
                      : load_unit(u[k].batch_at, u[k].log2_unit);
  }
  if constexpr (Op == copy_op::gather) {
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {  // sink and skip rows read as zeros
      const char* src = u[k].pool_at + std::int64_t(u[k].slot) * std::int64_t(u[k].row_bytes);
      if (Wide) {
        v[k] = load16_if(live(k) && u[k].slot > 0, src);
      } else {
        v[k] = make_uint4(0, 0, 0, 0);
        if (live(k) && u[k].slot > 0) v[k] = load_unit(src, u[k].log2_unit);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    if (!live(k)) continue;
    char* const pool_row = u[k].pool_at + std::int64_t(u[k].slot) * std::int64_t(u[k].row_bytes);
    if constexpr (Op == copy_op::gather) {
      if (Wide)
        *reinterpret_cast<uint4*>(u[k].batch_at) = v[k];
      else
        store_unit(u[k].batch_at, v[k], u[k].log2_unit);
    } else if constexpr (Op == copy_op::scatter) {
      if (Wide)
        store16_if(u[k].slot > 0, pool_row, v[k]);
      else if (u[k].slot > 0)
        store_unit(pool_row, v[k], u[k].log2_unit);
    } else {  // zero: every listed slot >= 0, the sink included
      if (Wide)
        store16_if(u[k].slot >= 0, pool_row, make_uint4(0, 0, 0, 0));
      else if (u[k].slot >= 0)
        store_unit(pool_row, make_uint4(0, 0, 0, 0), u[k].log2_unit);
    }
  }
}

// Strided table: segment, row and unit of an item from two divisions; every parameter it reads is at
// a fixed offset, so the reads go out together and the slot load waits on one round of them.
template <copy_op Op, int Threads, int Unroll, bool Wide>
__global__ void __launch_bounds__(Threads) recurrent_strided_kernel(const __grid_constant__ strided_params p) {
  const std::uint64_t first = std::uint64_t(blockIdx.x) * (Threads * Unroll) + threadIdx.x;
  if (first >= p.total_items) return;
  copy_items<Op, Threads, Unroll, Wide>(first, p.total_items, p.slots, [&](std::uint64_t i, located_unit& u) {
    const std::uint32_t n = std::uint32_t(i);  // total_items < 2^31
    const std::uint32_t s = fast_div(n, p.segment_items);
    const std::uint32_t local = n - s * p.segment_items.divisor;
    const std::uint32_t row = fast_div(local, p.units_per_row);
    const std::uint32_t in_row = local - row * p.units_per_row.divisor;
    u.log2_unit = Wide ? 4u : p.log2_unit;
    u.row_bytes = std::uint64_t(p.units_per_row.divisor) << u.log2_unit;
    const std::uint64_t at = std::uint64_t(in_row) << u.log2_unit;
    u.batch_at = p.batch + std::int64_t(s) * p.batch_stride + row * u.row_bytes + at;
    u.pool_at = p.pool + std::int64_t(s) * p.pool_stride + at;
    return row;
  });
}

// One group of a grid_entry table: the items of block tile `tile` of it (the block's threads).
template <copy_op Op, int Threads, int Unroll, bool Wide>
__device__ __forceinline__ void copy_entry(const grid_entry& e, std::uint32_t tile, char* batch,
                                           const std::int32_t* slots) {
  const std::uint32_t first = tile * std::uint32_t(Threads * Unroll) + threadIdx.x;
  if (first >= e.items) return;
  copy_items<Op, Threads, Unroll, Wide>(first, e.items, slots, [&](std::uint64_t i, located_unit& u) {
    const std::uint32_t n = std::uint32_t(i);  // item within the group, < 2^31
    const std::uint32_t s = fast_div(n, fast_divisor{e.segment_div, e.segment_mul, e.shifts & 0xffu});
    const std::uint32_t local = n - s * e.segment_div;
    const std::uint32_t row = fast_div(local, fast_divisor{e.unit_div, e.unit_mul, (e.shifts >> 8) & 0xffu});
    const std::uint32_t in_row = local - row * e.unit_div;
    u.log2_unit = Wide ? 4u : (e.shifts >> 16);
    u.row_bytes = std::uint64_t(e.unit_div) << u.log2_unit;
    const std::uint64_t at = std::uint64_t(in_row) << u.log2_unit;
    u.batch_at = batch + e.batch_offset + std::uint64_t(s) * e.batch_stride + row * u.row_bytes + at;
    u.pool_at = e.pool + std::uint64_t(s) * e.pool_stride + at;
    return row;
  });
}

// 2-D grid over a table's entries (see grid_entry): blockIdx.y is the entry, blockIdx.x the tile in it.
template <copy_op Op, int Threads, int Unroll, int Cap, bool Wide>
__global__ void __launch_bounds__(Threads) recurrent_grid_kernel(const __grid_constant__ grid_params<Cap> p) {
  copy_entry<Op, Threads, Unroll, Wide>(p.e[blockIdx.y], blockIdx.x, p.batch, p.slots);
}

// 1-D grid of tiles over whole groups (see tiles_params): the block's group by a uniform search.
template <copy_op Op, int Threads, int Unroll, int Cap, bool Wide>
__global__ void __launch_bounds__(Threads) recurrent_tiles_kernel(const __grid_constant__ tiles_params<Cap> p) {
  int g = 0;
  for (int hi = p.ngroups - 1; g < hi;) {  // last group whose first tile is <= blockIdx.x
    const int mid = (g + hi + 1) >> 1;
    if (p.tile_begin[mid] <= blockIdx.x)
      g = mid;
    else
      hi = mid - 1;
  }
  copy_entry<Op, Threads, Unroll, Wide>(p.e[g], blockIdx.x - p.tile_begin[g], p.batch, p.slots);
}

// Many groups (see map_params): the block's group from the per-tile map. The group comes from a load,
// so ptxas reads the entry's fields with register-indexed LDC, each warp through the MIO queue (Nsight
// Compute: mio_throttle + short_scoreboard about a third of the stall cycles); reading the entry once
// a block into shared memory instead measured slower (the barrier took their place), and so did
// reading it at immediate offsets through the uniform datapath (a ladder of block-uniform branches);
// docs/benchmarks.md.
template <copy_op Op, int Threads, int Unroll, int Cap, int MapCap, bool Wide>
__global__ void __launch_bounds__(Threads) recurrent_map_kernel(const __grid_constant__ map_params<Cap, MapCap> p) {
  const std::uint32_t g = p.group_of[blockIdx.x];
  copy_entry<Op, Threads, Unroll, Wide>(p.e[g], blockIdx.x - p.tile_begin[g], p.batch, p.slots);
}

inline int sm_count() {
  static std::atomic<int> cache[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  if (device >= 0 && device < 64) {
    if (const int n = cache[device].load(std::memory_order_relaxed); n > 0) return n;
  }
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) n = 132;
  if (device >= 0 && device < 64) cache[device].store(n, std::memory_order_relaxed);
  return n;
}

// Launch policy (256 threads a block, one block a tile). Up to `unroll_from_waves` waves of resident
// threads (2048 a SM) a thread moves `small_unroll` units, beyond it `unroll` (1 or 2). strided:
// strided tables take recurrent_strided_kernel (off: every table takes the general kernel).
// Default: one unit a thread at every size (but gather_small_unroll below), chosen by the sweep in
// bench/kernels (H200, 2026-12-03, HBM-resident, us per call, gather / scatter; docs/benchmarks.md has
// the whole sweep):
//   rows x row      moved     u1              u1, 2 beyond 8 waves   u2 throughout   memcpy
//   1024 x 4 KiB    8 MiB     3.95 / 3.63     3.94 / 3.65            3.84 / 3.96     3.51
//   64 x 1 MiB      128 MiB   35.33 / 34.45   36.82 / 34.99          36.78 / 34.97   33.67
//   1024 x 1 MiB    2 GiB     531.8 / 523.3   555.2 / 525.8          555.3 / 525.4   792.7
// Up to 64 MiB a call is one round of accesses: two units a thread lengthen each thread's chain
// (scatter 9-22% slower from 2 to 8 MiB, gather within 3% either way); beyond, they were 1-4% slower. Capped
// grids walking the tiles, 4 units a thread, evicting the state from L2 first and bulk copies through
// shared memory (cp.async.bulk) were all measured slower. The launchers run under the default policy;
// bench/kernels/recurrent_sweep.cuh runs them under others for its sweep (and tests/gpu for its checks).
// The kernel of tables that are not strided: automatic (launch_grouped says which), or one of three
// forced (the benchmark and the tests): grid, tiles, map (recurrent_map_kernel where the tiles fit its
// map, else tiles).
enum class general_kernel : std::int32_t { automatic, grid, tiles, map };
struct launch_policy {
  int unroll_from_waves = 8;
  int small_unroll = 1;
  int unroll = 1;
  bool strided = true;  // strided tables take recurrent_strided_kernel
  general_kernel general = general_kernel::automatic;
  // small_unroll for gather through the strided kernel (scatter, zero and the other kernels take
  // small_unroll). 2: in the same H200 call (2026-12-04, two alternated runs each) it took one pool's
  // gather at 8 MiB from 0.85-0.90 of memcpy to 0.90-0.92 (8 x 4 KiB layers: 0.85 to 0.91), while two
  // units a thread in the grid and tiles kernels lost 0.02-0.03 (2 pools 0.87 to 0.85, 3 x 100 x 512 B
  // 0.90 to 0.88): so only the strided kernel takes it.
  int gather_small_unroll = 2;
  friend constexpr bool operator==(const launch_policy&, const launch_policy&) = default;
};
constexpr int copy_threads = 256;

inline int unroll_for(std::uint64_t total_items, copy_op op, const launch_policy& policy, bool strided_kernel = false) {
  const int small = op == copy_op::gather && strided_kernel ? policy.gather_small_unroll : policy.small_unroll;
  return total_items <= std::uint64_t(policy.unroll_from_waves) * std::uint64_t(sm_count()) * 2048 ? small
                                                                                                 : policy.unroll;
}

inline dim3 grid_for(std::uint64_t total_items, int unroll) {
  const std::uint64_t tile = std::uint64_t(copy_threads) * std::uint64_t(unroll);
  return dim3(unsigned((total_items + tile - 1) / tile));
}

template <copy_op Op, int Unroll, bool Wide>
void launch_strided(const strided_params& p, cudaStream_t stream) {
  recurrent_strided_kernel<Op, copy_threads, Unroll, Wide><<<grid_for(p.total_items, Unroll), copy_threads, 0, stream>>>(p);
}

// Runtime direction, unroll and width to template arguments, at one place.
template <class Launch>
void dispatch(copy_op op, int unroll, bool wide, Launch&& launch) {
  const auto by_width = [&](auto op_tag, auto unroll_tag) {
    if (wide)
      launch(op_tag, unroll_tag, std::true_type{});
    else
      launch(op_tag, unroll_tag, std::false_type{});
  };
  const auto by_unroll = [&](auto op_tag) {
    if (unroll <= 1)
      by_width(op_tag, std::integral_constant<int, 1>{});
    else
      by_width(op_tag, std::integral_constant<int, 2>{});
  };
  switch (op) {
  case copy_op::gather: by_unroll(std::integral_constant<copy_op, copy_op::gather>{}); break;
  case copy_op::scatter: by_unroll(std::integral_constant<copy_op, copy_op::scatter>{}); break;
  case copy_op::zero: by_unroll(std::integral_constant<copy_op, copy_op::zero>{}); break;
  }
}

// One segment as the host resolves it: byte addresses and the widest unit they all allow.
struct resolved_segment {
  char* pool;
  std::int64_t batch_offset;  // bytes
  std::uint64_t units_per_row;
  std::uint32_t log2_unit;
};

template <class T>
resolved_segment resolve(copy_op op, const recurrent_segment<T>& s, const char* batch, std::int32_t rows, std::size_t i,
                         const char* where) {
  const std::uint64_t row_bytes = std::uint64_t(s.state_elems) * sizeof(T);
  char* const pool = reinterpret_cast<char*>(s.pool_layer);
  const std::int64_t batch_offset = op == copy_op::zero ? 0 : s.batch_offset * std::int64_t(sizeof(T));
  const std::uint64_t batch_at = op == copy_op::zero ? 0 : reinterpret_cast<std::uintptr_t>(batch + batch_offset);
  const std::uint64_t joint = reinterpret_cast<std::uintptr_t>(pool) | row_bytes | batch_at;
  std::uint32_t log2_unit = 4;
  while (log2_unit > 0 && (joint & ((std::uint64_t(1) << log2_unit) - 1)) != 0) --log2_unit;
  const std::uint64_t units = row_bytes >> log2_unit;
  const std::uint64_t seg_items = units * std::uint64_t(rows);
  if (seg_items >= (std::uint64_t(1) << 31))
    refuse(where, "segment " + std::to_string(i) + " moves " + std::to_string(seg_items) + " units of " +
                      std::to_string(1u << log2_unit) + " bytes in one launch, over the kernel's 2^31 per segment; " +
                      "align its rows to 16 bytes or split the rows over several calls");
  return {pool, batch_offset, units, log2_unit};
}

// A table is strided when every segment has the first one's unit and row size and the segments are
// evenly spaced in the pool and in the batch, and the whole launch stays under 2^31 items.
inline bool fill_strided(const resolved_segment* seg, std::size_t n, std::int32_t rows, strided_params& p) {
  if (n == 0) return false;
  const std::int64_t pool_stride = n > 1 ? seg[1].pool - seg[0].pool : 0;
  const std::int64_t batch_stride = n > 1 ? seg[1].batch_offset - seg[0].batch_offset : 0;
  for (std::size_t i = 1; i < n; ++i)
    if (seg[i].units_per_row != seg[0].units_per_row || seg[i].log2_unit != seg[0].log2_unit ||
        seg[i].pool - seg[0].pool != std::int64_t(i) * pool_stride ||
        seg[i].batch_offset - seg[0].batch_offset != std::int64_t(i) * batch_stride)
      return false;
  const std::uint64_t segment_items = seg[0].units_per_row * std::uint64_t(rows);
  if (segment_items * n >= (std::uint64_t(1) << 31)) return false;
  p.pool = seg[0].pool;
  p.batch += seg[0].batch_offset;
  p.pool_stride = pool_stride;
  p.batch_stride = batch_stride;
  p.total_items = segment_items * n;
  p.segment_items = make_fast_divisor(std::uint32_t(segment_items));
  p.units_per_row = make_fast_divisor(std::uint32_t(seg[0].units_per_row));
  p.log2_unit = seg[0].log2_unit;
  return true;
}

// A group (see grid_entry): segments [first, first + count) of one shape, evenly spaced.
struct segment_group {
  std::size_t first;
  std::uint64_t count;
  std::uint64_t items;  // count * rows * units_per_row, < 2^31
  std::uint64_t tiles;
};

// Merges the table into groups: a segment joins the group before it when it has the group's row size
// and unit, sits one pool stride and one batch stride after the group's last segment (strides of 0 to
// 2^32 - 1 bytes), and the group stays under 2^31 items. Returns the number of groups.
inline std::size_t group_segments(const resolved_segment* seg, std::size_t n, std::int32_t rows, std::uint64_t tile,
                                  segment_group* out) {
  std::size_t g = 0;
  for (std::size_t i = 0; i < n;) {
    const std::uint64_t seg_items = seg[i].units_per_row * std::uint64_t(rows);
    std::size_t j = i + 1;
    if (j < n) {
      const std::int64_t ps = seg[j].pool - seg[i].pool, bs = seg[j].batch_offset - seg[i].batch_offset;
      const bool fits = ps >= 0 && ps < (std::int64_t(1) << 32) && bs >= 0 && bs < (std::int64_t(1) << 32);
      while (fits && j < n && seg[j].units_per_row == seg[i].units_per_row && seg[j].log2_unit == seg[i].log2_unit &&
             seg[j].pool - seg[i].pool == std::int64_t(j - i) * ps &&
             seg[j].batch_offset - seg[i].batch_offset == std::int64_t(j - i) * bs &&
             seg_items * (j - i + 1) < (std::uint64_t(1) << 31))
        ++j;
    }
    const std::uint64_t items = seg_items * (j - i);
    out[g++] = {i, j - i, items, (items + tile - 1) / tile};
    i = j;
  }
  return g;
}

// One entry a group.
inline void fill_group_entries(const resolved_segment* seg, const segment_group* grp, std::size_t ng,
                               std::int32_t rows, grid_entry* out) {
  for (std::size_t g = 0; g < ng; ++g) {
    const resolved_segment& s0 = seg[grp[g].first];
    const resolved_segment& s1 = seg[grp[g].first + (grp[g].count > 1 ? 1 : 0)];
    const fast_divisor sd = make_fast_divisor(std::uint32_t(s0.units_per_row * std::uint64_t(rows)));
    const fast_divisor ud = make_fast_divisor(std::uint32_t(s0.units_per_row));
    out[g] = {s0.pool,
              s0.batch_offset,
              std::uint32_t(s1.pool - s0.pool),
              std::uint32_t(s1.batch_offset - s0.batch_offset),
              std::uint32_t(grp[g].items),
              sd.divisor,
              sd.multiplier,
              ud.divisor,
              ud.multiplier,
              sd.shift | (ud.shift << 8) | (s0.log2_unit << 16)};
  }
}

template <copy_op Op, int Unroll, int Cap, bool Wide>
void launch_grid_kernel(const grid_params<Cap>& p, dim3 grid, cudaStream_t stream) {
  recurrent_grid_kernel<Op, copy_threads, Unroll, Cap, Wide><<<grid, copy_threads, 0, stream>>>(p);
}

template <int Cap>
void launch_grid(copy_op op, const resolved_segment* seg, const segment_group* grp, std::size_t ng,
                 std::uint64_t most_tiles, std::int32_t rows, char* batch, const std::int32_t* slots, int unroll,
                 bool wide, cudaStream_t stream) {
  grid_params<Cap> p;
  p.batch = batch;
  p.slots = slots;
  fill_group_entries(seg, grp, ng, rows, p.e);
  const dim3 grid{unsigned(most_tiles), unsigned(ng), 1u};
  dispatch(op, unroll, wide, [&](auto op_tag, auto unroll_tag, auto wide_tag) {
    launch_grid_kernel<decltype(op_tag)::value, decltype(unroll_tag)::value, Cap, decltype(wide_tag)::value>(p, grid,
                                                                                                            stream);
  });
}

template <copy_op Op, int Unroll, int Cap, bool Wide>
void launch_tiles_kernel(const tiles_params<Cap>& p, unsigned blocks, cudaStream_t stream) {
  recurrent_tiles_kernel<Op, copy_threads, Unroll, Cap, Wide><<<blocks, copy_threads, 0, stream>>>(p);
}

// Lays the groups on a 1-D grid of tiles (the tiles and map kernels): each group's first tile into
// tile_begin, each tile's group into group_of when given. Returns the tiles.
inline std::uint32_t lay_tiles(const segment_group* grp, std::size_t ng, std::uint32_t* tile_begin,
                               std::uint16_t* group_of = nullptr) {
  std::uint32_t at = 0;
  for (std::size_t g = 0; g < ng; ++g) {
    tile_begin[g] = at;
    if (group_of != nullptr) std::fill_n(group_of + at, grp[g].tiles, std::uint16_t(g));
    at += std::uint32_t(grp[g].tiles);
  }
  return at;
}

template <int Cap>
void launch_tiles(copy_op op, const resolved_segment* seg, const segment_group* grp, std::size_t ng,
                  std::int32_t rows, char* batch, const std::int32_t* slots, int unroll, bool wide,
                  cudaStream_t stream) {
  tiles_params<Cap> p;
  p.batch = batch;
  p.slots = slots;
  p.ngroups = std::int32_t(ng);
  const std::uint32_t at = lay_tiles(grp, ng, p.tile_begin);
  p.tile_begin[ng] = at;
  fill_group_entries(seg, grp, ng, rows, p.e);
  dispatch(op, unroll, wide, [&](auto op_tag, auto unroll_tag, auto wide_tag) {
    launch_tiles_kernel<decltype(op_tag)::value, decltype(unroll_tag)::value, Cap, decltype(wide_tag)::value>(
        p, unsigned(at), stream);
  });
}

template <copy_op Op, int Unroll, int Cap, int MapCap, bool Wide>
void launch_map_kernel(const map_params<Cap, MapCap>& p, unsigned blocks, cudaStream_t stream) {
  recurrent_map_kernel<Op, copy_threads, Unroll, Cap, MapCap, Wide><<<blocks, copy_threads, 0, stream>>>(p);
}

template <int Cap, int MapCap>
void launch_map(copy_op op, const resolved_segment* seg, const segment_group* grp, std::size_t ng, std::int32_t rows,
                char* batch, const std::int32_t* slots, int unroll, bool wide, cudaStream_t stream) {
  thread_local map_params<Cap, MapCap> p;  // up to 32 KiB: static, not on the stack
  p.batch = batch;
  p.slots = slots;
  const std::uint32_t at = lay_tiles(grp, ng, p.tile_begin, p.group_of);
  fill_group_entries(seg, grp, ng, rows, p.e);
  dispatch(op, unroll, wide, [&](auto op_tag, auto unroll_tag, auto wide_tag) {
    launch_map_kernel<decltype(op_tag)::value, decltype(unroll_tag)::value, Cap, MapCap, decltype(wide_tag)::value>(
        p, at, stream);
  });
}

// A table that is not strided: merged into groups, then the 2-D grid, the map kernel or the tiles
// kernel (see grid_entry, map_params; the automatic choice is explained inside).
inline void launch_grouped(copy_op op, const launch_policy& policy, const resolved_segment* seg, std::size_t n,
                           char* batch, const std::int32_t* slots, std::int32_t rows, bool wide, cudaStream_t stream) {
  const general_kernel kind = policy.general;
  thread_local segment_group grp[max_segments];
  std::uint64_t total_units = 0;
  for (std::size_t i = 0; i < n; ++i) total_units += seg[i].units_per_row * std::uint64_t(rows);
  const int unroll = unroll_for(total_units, op, policy);
  const std::uint64_t tile = std::uint64_t(copy_threads) * std::uint64_t(unroll);
  const std::size_t ng = group_segments(seg, n, rows, tile, grp);
  std::uint64_t tiles = 0, most = 1;
  for (std::size_t g = 0; g < ng; ++g) {
    tiles += grp[g].tiles;
    most = std::max(most, grp[g].tiles);
  }
  const std::uint64_t idle = most * ng - tiles;
  const bool map_fits = (ng <= 64 && tiles <= std::uint64_t(map_tiles_small)) || tiles <= std::uint64_t(map_tiles_large);
  // automatic (H200, 2026-12-04, docs/benchmarks.md): the 2-D grid when at most 1/16 of its blocks would
  // be empty, or for up to 4 groups up to 2048 tiles (8 MiB moved one way; 2 pools of 4 and 12 KiB
  // rows at 8 MiB moved: 0.91 / 0.97 of memcpy against 0.88 / 0.93 for the map kernel; 4 pools 0.88 /
  // 0.93 against 0.87 / 0.93; at 32 MiB the map kernel won, 0.93-0.94 against 0.90-0.92); else the map
  // kernel where the tiles fit its map (8 pools at 8 MiB 0.88 / 0.94 against 0.84 / 0.89 for the tiles
  // kernel, 96 pools 0.83 / 0.88 against 0.81 / 0.84); else the tiles kernel.
  const bool few = ng <= 4 && tiles <= 2048;
  if (kind == general_kernel::map || (kind == general_kernel::automatic && !few && idle * 16 > tiles)) {
    if (ng <= 64 && tiles <= std::uint64_t(map_tiles_step))
      return launch_map<64, map_tiles_step>(op, seg, grp, ng, rows, batch, slots, unroll, wide, stream);
    if (ng <= 64 && tiles <= std::uint64_t(map_tiles_small))
      return launch_map<64, map_tiles_small>(op, seg, grp, ng, rows, batch, slots, unroll, wide, stream);
    if (map_fits)
      return launch_map<int(max_segments), map_tiles_large>(op, seg, grp, ng, rows, batch, slots, unroll, wide,
                                                            stream);
  }
  const bool grid = kind == general_kernel::grid ||
                    (kind == general_kernel::automatic && (idle * 16 <= tiles || few)) ||
                    tiles >= (std::uint64_t(1) << 31);  // the tiles kernel's grid is 1-D, tile_begin 32-bit
  if (grid) {
    if (ng <= 8)
      launch_grid<8>(op, seg, grp, ng, most, rows, batch, slots, unroll, wide, stream);
    else if (ng <= 64)
      launch_grid<64>(op, seg, grp, ng, most, rows, batch, slots, unroll, wide, stream);
    else
      launch_grid<int(max_segments)>(op, seg, grp, ng, most, rows, batch, slots, unroll, wide, stream);
  } else if (ng <= 8) {
    launch_tiles<8>(op, seg, grp, ng, rows, batch, slots, unroll, wide, stream);
  } else if (ng <= 64) {
    launch_tiles<64>(op, seg, grp, ng, rows, batch, slots, unroll, wide, stream);
  } else {
    launch_tiles<int(max_segments)>(op, seg, grp, ng, rows, batch, slots, unroll, wide, stream);
  }
}

// Resolves every segment of the table into seg; true when all of them move 16-byte units.
template <class T>
bool resolve_table(copy_op op, segment_table<T> table, const char* batch, std::int32_t rows, resolved_segment* seg,
                   const char* where) {
  bool wide = true;
  for (std::size_t i = 0; i < table.size(); ++i) {
    seg[i] = resolve(op, table[i], batch, rows, i, where);
    wide = wide && seg[i].log2_unit == 4;
  }
  return wide;
}

// Launches the table through recurrent_strided_kernel when it is strided and the policy lets strided
// tables take it; false (nothing launched) otherwise.
inline bool launch_if_strided(copy_op op, const launch_policy& policy, const resolved_segment* seg, std::size_t n,
                              char* batch, const std::int32_t* slots, std::int32_t rows, bool wide,
                              cudaStream_t stream) {
  strided_params sp{};
  sp.batch = batch;
  sp.slots = slots;
  if (!policy.strided || !fill_strided(seg, n, rows, sp)) return false;
  dispatch(op, unroll_for(sp.total_items, op, policy, true), wide, [&](auto op_tag, auto unroll_tag, auto wide_tag) {
    launch_strided<decltype(op_tag)::value, decltype(unroll_tag)::value, decltype(wide_tag)::value>(sp, stream);
  });
  return true;
}

inline void check_launched(const char* where) {
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("mstar::kernels::") + where + ": kernel launch failed: " +
                             cudaGetErrorString(e));
}

template <class T>
void launch_copy(copy_op op, segment_table<T> table, const std::int32_t* slots, std::int32_t rows, char* batch,
                 void* stream, const char* where, const launch_policy& policy = {}) {
  check_pointers(table, slots, rows, batch, op != copy_op::zero, where);
  if (rows == 0 || table.empty()) return;
  thread_local resolved_segment seg[max_segments];  // host scratch, 16 KiB: static, not on the stack
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = resolve_table(op, table, batch, rows, seg, where);
  if (!launch_if_strided(op, policy, seg, table.size(), batch, slots, rows, wide, s))
    launch_grouped(op, policy, seg, table.size(), batch, slots, rows, wide, s);
  check_launched(where);
}

} // namespace detail

template <state_element T>
void gather(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, T* batch, void* stream) {
  detail::check_table(table, rows, true, "gather");
  detail::launch_copy(detail::copy_op::gather, table, slots, rows, reinterpret_cast<char*>(batch), stream, "gather");
}

template <state_element T>
void scatter(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, const T* batch, void* stream) {
  detail::check_table(table, rows, true, "scatter", true);
  detail::launch_copy(detail::copy_op::scatter, table, slots, rows,
                      const_cast<char*>(reinterpret_cast<const char*>(batch)), stream, "scatter");
}

template <state_element T>
void zero_slots(segment_table<T> table, const std::int32_t* slots, std::int32_t count, void* stream) {
  detail::check_table(table, count, false, "zero_slots");
  detail::launch_copy(detail::copy_op::zero, table, slots, count, nullptr, stream, "zero_slots");
}

} // namespace mstar::kernels

// Instantiates the launchers for one element type; kernels/<model>.cu uses it once per type of the
// model's pools.
#define MSTAR_INSTANTIATE_RECURRENT(T)                                                                          \
  template void mstar::kernels::gather<T>(mstar::kernels::segment_table<T>, const std::int32_t*, std::int32_t, T*, \
                                          void*);                                                               \
  template void mstar::kernels::scatter<T>(mstar::kernels::segment_table<T>, const std::int32_t*, std::int32_t,   \
                                           const T*, void*);                                                    \
  template void mstar::kernels::zero_slots<T>(mstar::kernels::segment_table<T>, const std::int32_t*, std::int32_t, \
                                              void*)

// Declares that a launcher instantiation lives in a model's library (for a .cu that includes this
// header for its detail pieces but calls the library's launchers, such as the benchmarks).
#define MSTAR_EXTERN_RECURRENT(T)                                                                               \
  extern template void mstar::kernels::gather<T>(mstar::kernels::segment_table<T>, const std::int32_t*,          \
                                                 std::int32_t, T*, void*);                                      \
  extern template void mstar::kernels::scatter<T>(mstar::kernels::segment_table<T>, const std::int32_t*,         \
                                                  std::int32_t, const T*, void*);                               \
  extern template void mstar::kernels::zero_slots<T>(mstar::kernels::segment_table<T>, const std::int32_t*,      \
                                                     std::int32_t, void*)
