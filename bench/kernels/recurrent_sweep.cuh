// The recurrent-state kernels' launch-policy sweep, kept out of the shipped header: the variants the
// benchmark compares (and tests/gpu checks byte for byte), the policy they run under, the launchers
// that honour it, and recurrent_table_kernel, the per-thread binary search over segments that the
// library's grid, tiles and map kernels replaced, kept only so that the benchmark can compare them.
//
// mstar_bench::gather / scatter / zero_slots launch under mstar_bench::tuning(): the library's own
// launchers (a model library's instantiation) under the default policy, this translation unit's
// instantiation of the same launch path under any other, and the search kernel when search is set.
#pragma once

#include <mstar/kernels/recurrent.cuh>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace mstar_bench {

namespace mk = mstar::kernels;
namespace mkd = mstar::kernels::detail;

// A policy of the library, or (search) every table that is not strided through recurrent_table_kernel.
struct swept_policy : mkd::launch_policy {
  bool search = false;
  friend constexpr bool operator==(const swept_policy&, const swept_policy&) = default;
};

constexpr swept_policy search_policy(mkd::launch_policy p) { return {p, true}; }

// The variants bench/kernels sweeps, in the order it prints them:
//   dflt   the launcher's default (strided gather 2 units   g1    one unit a thread everywhere (the
//          a thread up to 8 waves, else one unit a thread)        default before 2026-12-04)
//   u2     2 units a thread throughout                      grid  dflt, every table through recurrent_grid_kernel
//   tiles  dflt, every table through recurrent_tiles_kernel srch  dflt, every table through recurrent_table_kernel
inline constexpr swept_policy swept_policies[] = {
    {{8, 1, 1, true, mkd::general_kernel::automatic, 2}},
    {{8, 1, 1, true, mkd::general_kernel::automatic, 1}},
    {{8, 2, 2, true, mkd::general_kernel::automatic, 2}},
    {{8, 1, 1, false, mkd::general_kernel::grid, 1}},
    {{8, 1, 1, false, mkd::general_kernel::tiles, 1}},
    search_policy({8, 1, 1, false, mkd::general_kernel::automatic, 1}),
    {{8, 1, 1, false, mkd::general_kernel::map, 1}}};
inline constexpr const char* swept_policy_names[] = {"dflt", "g1", "u2", "grid", "tiles", "srch", "map"};
static_assert(std::size(swept_policies) == std::size(swept_policy_names));
static_assert(swept_policies[0] == swept_policy{}, "the sweep's first variant is the library's default policy");

// The policy the launchers below run under (the benchmark's and the GPU tests' only global).
inline swept_policy& tuning() {
  static swept_policy policy;
  return policy;
}

// ---- the per-thread search kernel ----

// The general table (pools of different row sizes or layouts): one entry a segment, by value.
struct packed_segment {
  char* pool;                      // the (pool, layer) block
  std::int64_t batch_offset;       // bytes from the batch start to this segment's block
  mkd::fast_divisor units_per_row; // row bytes >> log2_unit
  std::uint32_t log2_unit;         // 4: 16-byte accesses ... 0: bytes
};
static_assert(sizeof(packed_segment) == 32, "packed_segment is sized for the kernel parameter budget");

// Scalars first, then the first items (the search reads one contiguous array), then the segments.
template <int Cap>
struct table_params {
  char* batch;
  const std::int32_t* slots;
  std::uint64_t total_items;
  std::int32_t nseg;
  std::int32_t unused;
  std::uint64_t item_begin[Cap + 1];  // each segment's first item; item_begin[0] == 0, item_begin[nseg] == total
  packed_segment seg[Cap];
};
// Kernel parameters larger than 4 KiB need CUDA 12.1 and sm_70 or newer (the limit is 32764 bytes).
static_assert(sizeof(table_params<mk::max_segments>) <= 32764,
              "the segment table no longer fits a kernel parameter; lower max_segments in recurrent.hpp");

// General table: a thread finds its first item's segment by binary search over item_begin, then
// walks forward for its other items.
template <mkd::copy_op Op, int Threads, int Unroll, int Cap, bool Wide>
__global__ void __launch_bounds__(Threads) recurrent_table_kernel(const __grid_constant__ table_params<Cap> p) {
  const std::uint64_t first = std::uint64_t(blockIdx.x) * (Threads * Unroll) + threadIdx.x;
  if (first >= p.total_items) return;
  int s = 0;
  for (int hi = p.nseg - 1; s < hi;) {  // last segment whose first item is <= first
    const int mid = (s + hi + 1) >> 1;
    if (p.item_begin[mid] <= first)
      s = mid;
    else
      hi = mid - 1;
  }
  mkd::copy_items<Op, Threads, Unroll, Wide>(first, p.total_items, p.slots, [&](std::uint64_t i, mkd::located_unit& u) {
    while (p.item_begin[s + 1] <= i) ++s;
    const packed_segment& g = p.seg[s];
    const std::uint32_t local = std::uint32_t(i - p.item_begin[s]);
    const std::uint32_t row = mkd::fast_div(local, g.units_per_row);
    const std::uint32_t in_row = local - row * g.units_per_row.divisor;
    u.log2_unit = Wide ? 4u : g.log2_unit;
    u.row_bytes = std::uint64_t(g.units_per_row.divisor) << u.log2_unit;
    const std::uint64_t at = std::uint64_t(in_row) << u.log2_unit;
    u.batch_at = p.batch + g.batch_offset + row * u.row_bytes + at;
    u.pool_at = g.pool + at;
    return row;
  });
}

template <mkd::copy_op Op, int Unroll, int Cap, bool Wide>
void launch_table(const table_params<Cap>& p, cudaStream_t stream) {
  recurrent_table_kernel<Op, mkd::copy_threads, Unroll, Cap, Wide>
      <<<mkd::grid_for(p.total_items, Unroll), mkd::copy_threads, 0, stream>>>(p);
}

template <int Cap>
void launch_search(mkd::copy_op op, const mkd::launch_policy& policy, const mkd::resolved_segment* seg, std::size_t n,
                   char* batch, const std::int32_t* slots, std::int32_t rows, bool wide, cudaStream_t stream) {
  table_params<Cap> p;
  p.batch = batch;
  p.slots = slots;
  p.nseg = std::int32_t(n);
  p.unused = 0;
  std::uint64_t items = 0;
  for (std::size_t i = 0; i < n; ++i) {
    p.item_begin[i] = items;
    p.seg[i] = {seg[i].pool, seg[i].batch_offset, mkd::make_fast_divisor(std::uint32_t(seg[i].units_per_row)),
                seg[i].log2_unit};
    items += seg[i].units_per_row * std::uint64_t(rows);
  }
  p.item_begin[n] = items;
  p.total_items = items;
  mkd::dispatch(op, mkd::unroll_for(items, op, policy), wide, [&](auto op_tag, auto unroll_tag, auto wide_tag) {
    launch_table<decltype(op_tag)::value, decltype(unroll_tag)::value, Cap, decltype(wide_tag)::value>(p, stream);
  });
}

// ---- launchers under tuning() ----

template <class T>
void launch_swept(mkd::copy_op op, mk::segment_table<T> table, const std::int32_t* slots, std::int32_t rows,
                  char* batch, void* stream, const char* where) {
  const swept_policy& policy = tuning();
  if (!policy.search) return mkd::launch_copy(op, table, slots, rows, batch, stream, where, policy);
  mkd::check_pointers(table, slots, rows, batch, op != mkd::copy_op::zero, where);
  if (rows == 0 || table.empty()) return;
  thread_local mkd::resolved_segment seg[mk::max_segments];
  const auto s = static_cast<cudaStream_t>(stream);
  const std::size_t n = table.size();
  const bool wide = mkd::resolve_table(op, table, batch, rows, seg, where);
  if (mkd::launch_if_strided(op, policy, seg, n, batch, slots, rows, wide, s)) {
  } else if (n <= 8) {
    launch_search<8>(op, policy, seg, n, batch, slots, rows, wide, s);
  } else if (n <= 64) {
    launch_search<64>(op, policy, seg, n, batch, slots, rows, wide, s);
  } else {
    launch_search<int(mk::max_segments)>(op, policy, seg, n, batch, slots, rows, wide, s);
  }
  mkd::check_launched(where);
}

template <mk::state_element T>
void gather(mk::segment_table<T> table, const std::int32_t* slots, std::int32_t rows, T* batch, void* stream) {
  if (tuning() == swept_policy{}) return mk::gather<T>(table, slots, rows, batch, stream);
  mkd::check_table(table, rows, true, "gather");
  launch_swept(mkd::copy_op::gather, table, slots, rows, reinterpret_cast<char*>(batch), stream, "gather");
}

template <mk::state_element T>
void scatter(mk::segment_table<T> table, const std::int32_t* slots, std::int32_t rows, const T* batch, void* stream) {
  if (tuning() == swept_policy{}) return mk::scatter<T>(table, slots, rows, batch, stream);
  mkd::check_table(table, rows, true, "scatter", true);
  launch_swept(mkd::copy_op::scatter, table, slots, rows, const_cast<char*>(reinterpret_cast<const char*>(batch)),
               stream, "scatter");
}

template <mk::state_element T>
void zero_slots(mk::segment_table<T> table, const std::int32_t* slots, std::int32_t count, void* stream) {
  if (tuning() == swept_policy{}) return mk::zero_slots<T>(table, slots, count, stream);
  mkd::check_table(table, count, false, "zero_slots");
  launch_swept(mkd::copy_op::zero, table, slots, count, nullptr, stream, "zero_slots");
}

} // namespace mstar_bench
