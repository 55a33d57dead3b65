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

// A thread handles Unroll items of a tile per pass, in phases so that nothing waits on a load it
// does not need: locate all items (parameter reads and arithmetic only), load all their slots (and,
// for scatter, the batch data, which does not depend on the slot), load the pool data, store.
// Tiles go to blocks grid-stride, so a thread's items only move forward and the segment search
// walks on from where it was.
template <int Threads, int Unroll, int Cap>
__global__ void __launch_bounds__(Threads) recurrent_copy_kernel(const __grid_constant__ copy_params<Cap> p) {
  constexpr std::uint64_t tile_items = std::uint64_t(Threads) * Unroll;
  int s = 0;
  for (std::uint64_t tile = blockIdx.x; tile * tile_items < p.total_items; tile += gridDim.x) {
    const std::uint64_t first = tile * tile_items + threadIdx.x;
    int hi = p.nseg - 1;
    while (s < hi) {  // last segment whose first item is <= first
      const int mid = (s + hi + 1) >> 1;
      if (p.seg[mid].item_begin <= first)
        s = mid;
      else
        hi = mid - 1;
    }

    int seg[Unroll];
    std::uint32_t row[Unroll];
    std::uint64_t in_row[Unroll];
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      const std::uint64_t i = first + std::uint64_t(k) * Threads;
      seg[k] = -1;
      row[k] = 0;
      in_row[k] = 0;
      if (i < p.total_items) {
        while (s + 1 < p.nseg && p.seg[s + 1].item_begin <= i) ++s;
        const packed_segment& g = p.seg[s];
        const std::uint32_t local = std::uint32_t(i - g.item_begin);
        seg[k] = s;
        row[k] = fast_div(local, g);
        in_row[k] = std::uint64_t(local - row[k] * g.units_per_row) << g.log2_unit;
      }
    }

    std::int32_t slot[Unroll];
    uint4 v[Unroll];
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      slot[k] = seg[k] >= 0 ? p.slots[row[k]] : skip_slot;
      v[k] = make_uint4(0, 0, 0, 0);
      if (p.op == copy_op::scatter && seg[k] >= 0) {
        const packed_segment& g = p.seg[seg[k]];
        const std::uint64_t row_bytes = std::uint64_t(g.units_per_row) << g.log2_unit;
        v[k] = load_unit(p.batch + g.batch_offset + row[k] * row_bytes + in_row[k], g.log2_unit);
      }
    }

    if (p.op == copy_op::gather) {
#pragma unroll
      for (int k = 0; k < Unroll; ++k)
        if (slot[k] > 0) {
          const packed_segment& g = p.seg[seg[k]];
          const std::uint64_t row_bytes = std::uint64_t(g.units_per_row) << g.log2_unit;
          v[k] = load_unit(g.pool + std::uint64_t(slot[k]) * row_bytes + in_row[k], g.log2_unit);
        }
    }

#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      if (seg[k] < 0) continue;
      const packed_segment& g = p.seg[seg[k]];
      const std::uint64_t row_bytes = std::uint64_t(g.units_per_row) << g.log2_unit;
      if (p.op == copy_op::gather)
        store_unit(p.batch + g.batch_offset + row[k] * row_bytes + in_row[k], v[k], g.log2_unit);
      else if (slot[k] > 0 || (p.op == copy_op::zero && slot[k] == sink_slot))
        store_unit(g.pool + std::uint64_t(slot[k]) * row_bytes + in_row[k], v[k], g.log2_unit);
    }
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

// Launch policy (256 threads a block). Up to `unroll_from_waves` waves of resident threads (2048
// a SM) a thread moves one unit and a block one tile: small steps are latency-bound and want every
// load issued at once. Beyond it a thread moves 4 units (4 x 16 bytes in flight); blocks_per_sm > 0
// caps the grid at SMs x blocks_per_sm blocks walking the tiles, 0 gives one block per tile.
// The defaults are the fastest of the sweep in bench/kernels (H200, 2026-12-02, gather, HBM-resident,
// us per call; u1 = one unit a thread throughout, u4 = 4 units, p4 = grid capped at 4 blocks a SM):
//   moved     u1      u4      u4p4    memcpy
//   8 MiB     4.31    4.74    4.74    3.52
//   32 MiB    11.20   11.81   11.58   9.71
//   128 MiB   35.69   36.26   38.07   33.71
//   2 GiB     530.8   520.4   560.3   791.7
// and in the full table u1 lost at 128 MiB when rows were many (1024 x 64 KiB: 39.7 against 36.8 for
// u4), so one unit a thread up to 8 waves (about 64 MiB moved), 4 units and one block a tile beyond.
// The benchmark changes them through tuning() to run that sweep.
struct launch_policy {
  int unroll_from_waves = 8;
  int blocks_per_sm = 0;
};
inline launch_policy& tuning() {
  static launch_policy policy;
  return policy;
}

template <int Cap>
void launch_params(const copy_params<Cap>& p, cudaStream_t stream) {
  constexpr int threads = 256;
  constexpr int unroll = 4;
  const launch_policy policy = tuning();
  const std::uint64_t sms = std::uint64_t(sm_count());
  if (p.total_items <= std::uint64_t(policy.unroll_from_waves) * sms * 2048) {
    const std::uint64_t blocks = (p.total_items + threads - 1) / threads;
    recurrent_copy_kernel<threads, 1, Cap><<<dim3(unsigned(blocks)), dim3(threads), 0, stream>>>(p);
  } else {
    const std::uint64_t tiles = (p.total_items + threads * unroll - 1) / (threads * unroll);
    const std::uint64_t cap = policy.blocks_per_sm > 0 ? sms * std::uint64_t(policy.blocks_per_sm) : tiles;
    const std::uint64_t blocks = tiles < cap ? tiles : cap;
    recurrent_copy_kernel<threads, unroll, Cap><<<dim3(unsigned(blocks)), dim3(threads), 0, stream>>>(p);
  }
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
    items += seg_items;
  }
  p.total_items = items;
  launch_params(p, stream);
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
