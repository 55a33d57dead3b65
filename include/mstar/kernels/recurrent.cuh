// Device code of <mstar/kernels/recurrent.hpp>: the gather / scatter / zero kernel and the launchers.
// Include it only from the .cu that instantiates the launchers for a model (kernels/<model>.cu);
// everyone else includes the CUDA-free .hpp. docs/kernels.md gives the design and the measurements.
//
// One kernel does all three directions. Its work is a flat space of "items": item = one unit of
// g bytes of one row of one segment, segments one after another, rows of a segment one after another.
// g is chosen per segment: 16 bytes when the pool, the batch block and the row size allow, else the
// largest of 8, 4, 2, 1 bytes that they allow. A block takes contiguous tiles of Threads * Unroll
// items; a thread finds its first item's segment by binary search over the segments' first items
// and then walks forward, so many short rows and a few huge rows both spread over the whole grid.
// The segment table travels by value as the kernel's parameter (__grid_constant__, no copy, no
// device buffer, no allocation): up to max_segments = 512 segments, 40 bytes each.
#pragma once

#include <mstar/kernels/recurrent.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>

namespace mstar::kernels {

// In-place mode inside a model kernel: the state row of slot `index` (a row_index entry) in segment s.
template <class T>
__host__ __device__ inline T* state_row(const recurrent_segment<T>& s, std::int32_t index) {
  return s.pool_layer + std::int64_t(index) * s.state_elems;
}

namespace detail {

enum class copy_op : std::int32_t { gather, scatter, zero };

// A segment as the kernel needs it: byte pointers and the unit size resolved on the host.
struct packed_segment {
  char* pool;                  // the (pool, layer) block
  std::int64_t batch_offset;   // bytes from the batch start to this segment's block
  std::uint64_t item_begin;    // this segment's first item in the launch's item space
  std::uint32_t units_per_row; // row bytes >> log2_unit
  std::uint32_t multiplier;    // n / units_per_row == __umulhi(n, multiplier) >> shift, n < 2^31 (0: divisor 1)
  std::uint32_t shift;
  std::uint32_t log2_unit;     // 4: 16-byte accesses ... 0: bytes
};
static_assert(sizeof(packed_segment) == 40, "packed_segment is sized for the kernel parameter budget");

template <int Cap>
struct copy_params {
  packed_segment seg[Cap];
  char* batch;
  const std::int32_t* slots;
  std::uint64_t total_items;
  std::int32_t nseg;
  copy_op op;
  std::uint32_t hints;  // hint_bits
};
// Kernel parameters larger than 4 KiB need CUDA 12.1 and sm_70 or newer (the limit is 32764 bytes).
static_assert(sizeof(copy_params<max_segments>) <= 32764,
              "the segment table no longer fits a kernel parameter; lower max_segments in recurrent.hpp");

// CUTLASS's FastDivmod: exact for n < 2^31 and divisors below 2^31.
inline void make_fast_divmod(std::uint32_t d, std::uint32_t& multiplier, std::uint32_t& shift) {
  if (d == 1) {
    multiplier = 0;
    shift = 0;
    return;
  }
  std::uint32_t log2 = 0;
  while ((std::uint64_t(1) << log2) < d) ++log2;  // ceil(log2(d))
  const std::uint32_t p = 31 + log2;
  multiplier = std::uint32_t(((std::uint64_t(1) << p) + d - 1) / d);
  shift = p - 32;
}

__device__ __forceinline__ std::uint32_t fast_div(std::uint32_t n, const packed_segment& s) {
  return s.multiplier ? (__umulhi(n, s.multiplier) >> s.shift) : n;
}

// L2 policies for the loads (createpolicy, sm_80+). hint_keep_slots (default on): the slot table is
// kept (evict_last): it is a few KiB, gather and then scatter of the same step read it, and every
// pool address waits on it, so a miss to HBM there adds a memory latency to the call.
// hint_stream_reads (default off, measured slower): state read once (gather's pool rows, scatter's
// batch) evicted first. Stores keep the default policy: the batch gather writes is what the model
// kernel reads next, and the pool rows scatter writes are what the next step gathers. Slot and 16-byte
// state loads take the non-coherent path; the state skips L1 (read once), the slots do not (a row's
// threads share them).
enum hint_bits : std::uint32_t { hint_keep_slots = 1, hint_stream_reads = 2 };

__device__ __forceinline__ std::uint64_t l2_policy(int kind) {  // 0 normal, 1 evict_last, 2 evict_first
  std::uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (kind == 1)
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else if (kind == 2)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  else
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
#else
  (void)kind;
#endif
  return pol;
}

// Read-only for the kernel's lifetime (slots, and the side a direction reads, never alias what it
// writes), so the non-coherent path is valid.
__device__ __forceinline__ std::int32_t load_slot(const std::int32_t* src, std::uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  std::int32_t v;
  asm("ld.global.nc.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(v) : "l"(src), "l"(pol));
  return v;
#else
  (void)pol;
  return __ldg(src);
#endif
}

__device__ __forceinline__ uint4 load16(const char* src, std::uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(src), "l"(pol));
  return v;
#else
  (void)pol;
  return __ldg(reinterpret_cast<const uint4*>(src));
#endif
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

// One item as a thread holds it between locating it and storing it: four registers, the addresses
// are rebuilt from the segment table (constant bank) where they are used.
struct located_unit {
  std::int32_t seg;      // -1 past the end of the item space
  std::uint32_t row;     // row of the batch (index into slots)
  std::uint32_t in_row;  // unit within the row
  std::int32_t slot;     // in flight from locate() until first used
};

// A thread handles Unroll items of a tile per pass (Threads apart, so a warp's accesses are
// contiguous). Tiles go to blocks grid-stride and each pass locates the thread's items of its next
// tile and issues their slot loads before storing the current tile, so with a capped grid the slot
// latency overlaps the data movement instead of adding to it. Within a pass: pool (gather) or batch
// (scatter) loads of all items, then the next tile's slots, then the stores: no load waits on one it
// does not need. Wide: every segment moves 16-byte units (decided on the host), no width switch.
template <int Threads, int Unroll, int Cap, bool Wide>
__global__ void __launch_bounds__(Threads) recurrent_copy_kernel(const __grid_constant__ copy_params<Cap> p) {
  constexpr std::uint64_t tile_items = std::uint64_t(Threads) * Unroll;
  std::uint64_t tile = blockIdx.x;
  if (tile * tile_items >= p.total_items) return;
  const std::uint64_t pol_slot = l2_policy((p.hints & hint_keep_slots) ? 1 : 0);
  const std::uint64_t pol_read = l2_policy((p.hints & hint_stream_reads) ? 2 : 0);
  int s = 0;  // segment of the last located item; items only move forward

  const auto locate = [&](std::uint64_t t, located_unit (&u)[Unroll]) {
    const std::uint64_t first = t * tile_items + threadIdx.x;
    if (first < p.total_items) {
      int hi = p.nseg - 1;
      while (s < hi) {  // last segment whose first item is <= first
        const int mid = (s + hi + 1) >> 1;
        if (p.seg[mid].item_begin <= first)
          s = mid;
        else
          hi = mid - 1;
      }
    }
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      const std::uint64_t i = first + std::uint64_t(k) * Threads;
      u[k].seg = -1;
      u[k].slot = skip_slot;
      if (i < p.total_items) {
        while (s + 1 < p.nseg && p.seg[s + 1].item_begin <= i) ++s;
        const packed_segment& g = p.seg[s];
        const std::uint32_t local = std::uint32_t(i - g.item_begin);
        u[k].seg = s;
        u[k].row = fast_div(local, g);
        u[k].in_row = local - u[k].row * g.units_per_row;
        u[k].slot = load_slot(p.slots + u[k].row, pol_slot);
      }
    }
  };
  const auto log2_of = [&](const packed_segment& g) { return Wide ? 4u : g.log2_unit; };
  const auto row_bytes = [&](const packed_segment& g) { return std::uint64_t(g.units_per_row) << log2_of(g); };
  const auto batch_at = [&](const located_unit& u) {
    const packed_segment& g = p.seg[u.seg];
    return p.batch + g.batch_offset + u.row * row_bytes(g) + (std::uint64_t(u.in_row) << log2_of(g));
  };
  const auto pool_at = [&](const located_unit& u) {
    const packed_segment& g = p.seg[u.seg];
    return g.pool + std::uint64_t(u.slot) * row_bytes(g) + (std::uint64_t(u.in_row) << log2_of(g));
  };

  located_unit cur[Unroll];
  locate(tile, cur);
  for (;;) {
    uint4 v[Unroll];
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      v[k] = make_uint4(0, 0, 0, 0);
      const char* src = nullptr;
      if (p.op == copy_op::gather && cur[k].seg >= 0 && cur[k].slot > 0)
        src = pool_at(cur[k]);
      else if (p.op == copy_op::scatter && cur[k].seg >= 0)
        src = batch_at(cur[k]);
      if (src != nullptr) v[k] = Wide ? load16(src, pol_read) : load_unit(src, p.seg[cur[k].seg].log2_unit);
    }

    const std::uint64_t next = tile + gridDim.x;
    const bool more = next * tile_items < p.total_items;
    located_unit nxt[Unroll];
    if (more) locate(next, nxt);

#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      if (cur[k].seg < 0) continue;
      char* dst = nullptr;
      if (p.op == copy_op::gather)
        dst = batch_at(cur[k]);
      else if (cur[k].slot > 0 || (p.op == copy_op::zero && cur[k].slot == sink_slot))
        dst = pool_at(cur[k]);
      if (dst != nullptr) store_unit(dst, v[k], log2_of(p.seg[cur[k].seg]));
    }
    if (!more) break;
    tile = next;
#pragma unroll
    for (int k = 0; k < Unroll; ++k) cur[k] = nxt[k];
  }
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

// Launch policy (256 threads a block). Up to `unroll_from_waves` waves of resident threads (2048 a
// SM) a thread moves `small_unroll` units a pass, beyond it `unroll` (1, 2 or 4); blocks_per_sm > 0
// caps the grid at SMs x blocks_per_sm blocks walking the tiles (slots of the next tile prefetched),
// 0 gives one block per tile. hints: hint_bits for the loads' L2 policies.
// Defaults: the best of the sweep in bench/kernels (H200, 2026-12-02, HBM-resident, us per call,
// gather / scatter; "keep" = one unit a thread, slots evict_last; "plain" = the same without L2
// policies; u2keep = 2 units a thread, slots evict_last):
//   moved     plain        keep         u2keep       hint (both policies)  memcpy
//   8 MiB     4.39/4.48    4.19/4.23    4.28/4.27    4.28/4.29             3.52   (1024 x 4 KiB)
//   32 MiB    11.86/11.79  10.94/10.85  10.97/10.83  11.23/11.15           9.70   (1024 x 16 KiB)
//   128 MiB   37.07/37.42  36.97/36.70  36.03/35.87  38.52/38.29           33.69  (1024 x 64 KiB)
//   2 GiB     519.2/531.7  518.8/532.0  515.9/531.2  547.7/555.9           794.0
// Evicting the streamed state first was slower everywhere, 4 units a thread and capped grids too
// (docs/kernels.md has the whole sweep). So: slots evict_last, one unit a thread up to 8 waves (about
// 64 MiB moved), 2 units a thread beyond, one block a tile.
// The benchmark changes them through tuning() to run that sweep.
struct launch_policy {
  int unroll_from_waves = 8;
  int small_unroll = 1;
  int unroll = 2;
  int blocks_per_sm = 0;
  std::uint32_t hints = hint_keep_slots;
};
// The variants bench/kernels sweeps (and tests/gpu checks byte for byte), in the order it prints them:
//   plain  u1 below 8 waves, u4 beyond, no L2 policies (the kernel of commit 34d888f, restructured)
//   keep   as plain, slots evict_last          hint  as plain, both policies
//   u2/u4  2 or 4 units a pass throughout, both policies
//   u1p8/u2p6/u4p4  as u1/u2/u4, grid capped at 8/6/4 blocks a SM, both policies
//   u2keep u2 with the slot policy only
inline constexpr launch_policy swept_policies[] = {
    {8, 1, 4, 0, 0u}, {8, 1, 4, 0, hint_keep_slots}, {8, 1, 4, 0, hint_keep_slots | hint_stream_reads},
    {8, 2, 2, 0, hint_keep_slots | hint_stream_reads}, {8, 4, 4, 0, hint_keep_slots | hint_stream_reads},
    {8, 1, 1, 8, hint_keep_slots | hint_stream_reads}, {8, 2, 2, 6, hint_keep_slots | hint_stream_reads},
    {8, 4, 4, 4, hint_keep_slots | hint_stream_reads}, {8, 2, 2, 0, hint_keep_slots}};
inline constexpr const char* swept_policy_names[] = {"plain", "keep", "hint", "u2", "u4", "u1p8", "u2p6", "u4p4", "u2keep"};
static_assert(std::size(swept_policies) == std::size(swept_policy_names));

inline launch_policy& tuning() {
  static launch_policy policy;
  return policy;
}

template <int Unroll, int Cap, bool Wide>
void launch_unrolled(const copy_params<Cap>& p, std::uint64_t sms, int blocks_per_sm, cudaStream_t stream) {
  constexpr int threads = 256;
  const std::uint64_t tiles = (p.total_items + threads * Unroll - 1) / (threads * Unroll);
  const std::uint64_t cap = blocks_per_sm > 0 ? sms * std::uint64_t(blocks_per_sm) : tiles;
  const std::uint64_t blocks = tiles < cap ? tiles : cap;
  recurrent_copy_kernel<threads, Unroll, Cap, Wide><<<dim3(unsigned(blocks)), dim3(threads), 0, stream>>>(p);
}

template <int Cap, bool Wide>
void launch_width(const copy_params<Cap>& p, int unroll, std::uint64_t sms, int blocks_per_sm, cudaStream_t stream) {
  if (unroll <= 1)
    launch_unrolled<1, Cap, Wide>(p, sms, blocks_per_sm, stream);
  else if (unroll == 2)
    launch_unrolled<2, Cap, Wide>(p, sms, blocks_per_sm, stream);
  else
    launch_unrolled<4, Cap, Wide>(p, sms, blocks_per_sm, stream);
}

template <int Cap>
void launch_params(copy_params<Cap>& p, bool wide, cudaStream_t stream) {
  const launch_policy policy = tuning();
  const std::uint64_t sms = std::uint64_t(sm_count());
  p.hints = policy.hints;
  const int unroll =
      p.total_items <= std::uint64_t(policy.unroll_from_waves) * sms * 2048 ? policy.small_unroll : policy.unroll;
  if (wide)
    launch_width<Cap, true>(p, unroll, sms, policy.blocks_per_sm, stream);
  else
    launch_width<Cap, false>(p, unroll, sms, policy.blocks_per_sm, stream);
}

template <int Cap, class T>
void fill_and_launch(copy_op op, segment_table<T> table, const std::int32_t* slots, std::int32_t rows, char* batch,
                     cudaStream_t stream, const char* where) {
  copy_params<Cap> p;
  p.batch = batch;
  p.slots = slots;
  p.nseg = std::int32_t(table.size());
  p.op = op;
  std::uint64_t items = 0;
  bool wide = true;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& s = table[i];
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
    packed_segment& g = p.seg[i];
    g.pool = pool;
    g.batch_offset = batch_offset;
    g.item_begin = items;
    g.units_per_row = std::uint32_t(units);
    make_fast_divmod(g.units_per_row, g.multiplier, g.shift);
    g.log2_unit = log2_unit;
    wide = wide && log2_unit == 4;
    items += seg_items;
  }
  p.total_items = items;
  launch_params(p, wide, stream);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("mstar::kernels::") + where + ": kernel launch failed: " +
                             cudaGetErrorString(e));
}

// The one dispatch point from the table size to the parameter capacity: a small table keeps the
// kernel parameter (and its upload at launch) small.
template <class T>
void launch_copy(copy_op op, segment_table<T> table, const std::int32_t* slots, std::int32_t rows, char* batch,
                 void* stream, const char* where) {
  if (rows == 0 || table.empty()) return;
  if (slots == nullptr) refuse(where, "slots is null with " + std::to_string(rows) + " rows; pass the device slot table");
  if (op != copy_op::zero && batch == nullptr) refuse(where, "batch is null; pass the device batch buffer");
  const auto st = static_cast<cudaStream_t>(stream);
  if (table.size() <= 8)
    fill_and_launch<8>(op, table, slots, rows, batch, st, where);
  else if (table.size() <= 64)
    fill_and_launch<64>(op, table, slots, rows, batch, st, where);
  else
    fill_and_launch<int(max_segments)>(op, table, slots, rows, batch, st, where);
}

} // namespace detail

template <state_element T>
void gather(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, T* batch, void* stream) {
  detail::check_table(table, rows, true, "gather");
  detail::launch_copy(detail::copy_op::gather, table, slots, rows, reinterpret_cast<char*>(batch), stream, "gather");
}

template <state_element T>
void scatter(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, const T* batch, void* stream) {
  detail::check_table(table, rows, true, "scatter");
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
// header only for detail::tuning(), such as the benchmark).
#define MSTAR_EXTERN_RECURRENT(T)                                                                               \
  extern template void mstar::kernels::gather<T>(mstar::kernels::segment_table<T>, const std::int32_t*,          \
                                                 std::int32_t, T*, void*);                                      \
  extern template void mstar::kernels::scatter<T>(mstar::kernels::segment_table<T>, const std::int32_t*,         \
                                                  std::int32_t, const T*, void*);                               \
  extern template void mstar::kernels::zero_slots<T>(mstar::kernels::segment_table<T>, const std::int32_t*,      \
                                                     std::int32_t, void*)
