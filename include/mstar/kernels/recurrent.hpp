// Moving recurrent state for one node step: gather pool slots into a contiguous batch, scatter the
// batch back into the slots, zero freed slots, and per-row slot addresses for a model kernel that
// reads and writes state where it lives (in-place mode).
//
// CUDA-free: host code and the host backend include this header alone. The CUDA launchers declared
// here are defined in <mstar/kernels/recurrent.cuh> and instantiated per model by one small .cu in
// kernels/ (kernels/qwen3tts.cu); the host reference implementations, with the same signatures, are
// defined here in mstar::kernels::host and are the oracle of every test.
//
// Storage (fixed by the project): a pool is layer-major, [layers][slots][state_elems] of T,
// contiguous. A segment is one (pool, layer) pair: a [slots][state_elems] block. Slot 0 is the sink
// of padding rows and is kept zero; slot skip_slot (-1) marks a row that has no state.
//
// Batch layout: [segments][rows][state_elems]: segment s owns the contiguous block
// batch[batch_offset_s .. batch_offset_s + rows * state_elems_s), row r of it at
// batch_offset_s + r * state_elems_s. So a model kernel sees, per pool and layer, a plain
// [rows][state] tensor. layout_batch() assigns the offsets, each block starting on a 16-byte
// boundary so the copy kernels take their 16-byte path.
//
// Semantics, per segment s and row r with slot = slots[r]:
//   gather:  slot > 0: batch row <- pool slot; slot == 0 (sink) or -1 (skip): batch row <- zeros
//            (the pool is not read; slot 0 is kept zero, so this equals reading it).
//   scatter: slot > 0: pool slot <- batch row; sink and skip rows write nothing.
//   zero_slots: every listed slot >= 0 <- zeros in every segment; -1 entries are ignored.
// Scatter with two rows naming the same slot > 0 is a race on the GPU (the host reference keeps
// the last row): the engine never gives one slot to two rows.
//
// Launches: one kernel launch per call, whatever the number of pools and layers in the table
// (at most max_segments); nothing is launched when rows (or count) is 0 or the table is empty.
// One launch handles one element type: a node whose pools have different element types calls
// each direction once per element type.
#pragma once

#include <mstar/model/dtype.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace mstar::kernels {

inline constexpr std::int32_t skip_slot = -1;  // row without state: gather writes zeros, scatter skips
inline constexpr std::int32_t sink_slot = 0;   // padding rows: kept zero, never written by scatter
inline constexpr std::size_t max_segments = 512; // (pool, layer) pairs in one launch (kernel-parameter table)
inline constexpr std::size_t batch_alignment = 16; // bytes; layout_batch() starts each block on it

// A state element is copied as bytes, so any trivially copyable type of 1, 2, 4, 8 or 16 bytes
// will do: float, mstar::bf16, mstar::f16 (and __nv_bfloat16, __half in CUDA code).
template <class T>
concept state_element = std::is_trivially_copyable_v<T> &&
    (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);

// One (pool, layer) of a node step.
template <class T>
struct recurrent_segment {
  T* pool_layer = nullptr;        // [slot_count][state_elems] block of this layer of the pool
  std::int64_t state_elems = 0;   // elements of state per slot
  std::int32_t slot_count = 0;    // slots in the pool, the sink (slot 0) included
  std::int64_t batch_offset = 0;  // elements from the batch start to this segment's [rows][state] block
};

template <class T>
using segment_table = std::span<const recurrent_segment<T>>;

// In-place mode: where row r of segment s lives. read is the pool row for slot > 0 and slot 0 (zeros)
// for sink and skip rows, so reading it equals what gather would have given; write is nullptr for
// sink and skip rows, which must not be written.
template <class T>
struct row_address {
  const T* read;
  T* write;
};

// In-place mode, index form: the slot to read (0 for sink and skip rows) and to write (-1: do not).
// Element offset of the state inside a segment: index * state_elems.
struct row_index {
  std::int32_t read;
  std::int32_t write;
};

// ---- CUDA launchers (defined in recurrent.cuh, instantiated per model in kernels/*.cu) --------------
// Pointers are device pointers (slots too); the table itself is host memory, passed to the kernel by
// value. stream is a cudaStream_t. They throw std::invalid_argument for a table they refuse and
// std::runtime_error when the launch fails. They cannot check slots (device memory): a slot >=
// slot_count is an out-of-bounds access, one below -1 acts as skip; the host reference refuses both.

template <state_element T>
void gather(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, T* batch, void* stream);
template <state_element T>
void scatter(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, const T* batch, void* stream);
template <state_element T>
void zero_slots(segment_table<T> table, const std::int32_t* slots, std::int32_t count, void* stream);

// ---- Batch layout and in-place tables (host code, pointer arithmetic only: works on device pointers) ----

// Assigns each segment's batch_offset for `rows` rows, blocks in table order, each starting on a
// batch_alignment boundary. Returns the batch size in elements.
template <state_element T>
std::int64_t layout_batch(std::span<recurrent_segment<T>> segments, std::int32_t rows) {
  constexpr std::int64_t align = batch_alignment >= sizeof(T) ? std::int64_t(batch_alignment / sizeof(T)) : 1;
  std::int64_t offset = 0;
  for (auto& s : segments) {
    offset = (offset + align - 1) / align * align;
    s.batch_offset = offset;
    offset += std::int64_t(rows) * s.state_elems;
  }
  return offset;
}

namespace detail {

[[noreturn]] inline void refuse(const char* where, const std::string& what) {
  throw std::invalid_argument(std::string("mstar::kernels::") + where + ": " + what);
}

// A range a segment writes (batch elements, or pool bytes), for the overlap checks.
struct extent {
  std::uint64_t begin, end;
  std::size_t segment;
};

// Two segments whose extents overlap, as (first, second); {n, n} when none. Sorted input (layout_batch
// blocks, one pool's layers) costs one pass; any other order a sort of at most max_segments entries.
inline std::pair<std::size_t, std::size_t> find_overlap(extent* e, std::size_t n) {
  if (!std::is_sorted(e, e + n, [](const extent& a, const extent& b) { return a.begin < b.begin; }))
    std::sort(e, e + n, [](const extent& a, const extent& b) { return a.begin < b.begin; });
  std::size_t widest = 0; // of e[0..i), the extent that reaches furthest
  for (std::size_t i = 1; i < n; ++i) {
    if (e[i].begin < e[widest].end) return {e[widest].segment, e[i].segment};
    if (e[i].end > e[widest].end) widest = i;
  }
  return {n, n};
}

// The one place the table rules live; the CUDA launchers and the host reference both call it.
// uses_batch: gather and scatter (each segment's [rows][state] batch block must be its own);
// writes_pools: scatter (two segments over the same pool memory would write it from two batch rows,
// a race on the GPU; gather only reads the pools and zero_slots writes the same zeros).
template <class T>
void check_table(segment_table<T> table, std::int64_t rows, bool uses_batch, const char* where,
                 bool writes_pools = false) {
  if (table.size() > max_segments)
    refuse(where, "the segment table has " + std::to_string(table.size()) + " (pool, layer) segments, more than " +
                      std::to_string(max_segments) + " fit one launch; split the node's pools into several calls");
  if (rows < 0) refuse(where, "row count " + std::to_string(rows) + " is negative");
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& s = table[i];
    const auto at = [i] { return "segment " + std::to_string(i) + ": "; }; // built only to refuse
    if (s.pool_layer == nullptr) refuse(where, at() + "pool_layer is null; point it at the pool's layer block");
    if (s.state_elems <= 0)
      refuse(where, at() + "state_elems is " + std::to_string(s.state_elems) + "; a slot holds at least one element");
    if (s.slot_count < 1)
      refuse(where, at() + "slot_count is " + std::to_string(s.slot_count) + "; a pool has at least the sink slot 0");
    if (uses_batch && s.batch_offset < 0)
      refuse(where, at() + "batch_offset is " + std::to_string(s.batch_offset) + "; use layout_batch() to assign it");
  }
  if (rows == 0 || table.size() < 2) return;
  extent e[max_segments];
  if (uses_batch) {
    for (std::size_t i = 0; i < table.size(); ++i) {
      const auto begin = std::uint64_t(table[i].batch_offset);
      e[i] = {begin, begin + std::uint64_t(rows) * std::uint64_t(table[i].state_elems), i};
    }
    if (const auto [a, b] = find_overlap(e, table.size()); a != table.size())
      refuse(where, "the batch blocks of segments " + std::to_string(a) + " and " + std::to_string(b) +
                        " overlap for " + std::to_string(rows) + " rows (offsets " +
                        std::to_string(table[a].batch_offset) + " and " + std::to_string(table[b].batch_offset) +
                        "); give each segment its own block with layout_batch(table, rows) for this row count "
                        "(a pool's own segments all have batch_offset 0)");
  }
  if (writes_pools) {
    for (std::size_t i = 0; i < table.size(); ++i) {
      const auto begin = std::uint64_t(reinterpret_cast<std::uintptr_t>(table[i].pool_layer));
      e[i] = {begin, begin + std::uint64_t(table[i].slot_count) * std::uint64_t(table[i].state_elems) * sizeof(T), i};
    }
    if (const auto [a, b] = find_overlap(e, table.size()); a != table.size())
      refuse(where, "segments " + std::to_string(a) + " and " + std::to_string(b) +
                        " overlap in pool memory ([slot_count][state_elems] from each pool_layer), so scatter would "
                        "write it from two batch rows; list each (pool, layer) once");
  }
}

// The pointers a call needs: none when it moves nothing (rows == 0 or an empty table), else the slot
// table and, for gather and scatter, the batch. The launchers and the host reference both call it.
template <class T>
void check_pointers(segment_table<T> table, const std::int32_t* slots, std::int64_t rows, const void* batch,
                    bool uses_batch, const char* where) {
  if (rows == 0 || table.empty()) return;
  if (slots == nullptr)
    refuse(where, "slots is null with " + std::to_string(rows) +
                      " rows; pass the slot table (device memory for the CUDA launchers)");
  if (uses_batch && batch == nullptr)
    refuse(where, "batch is null; pass the batch buffer (device memory for the CUDA launchers)");
}

template <class T>
void check_slot(const recurrent_segment<T>& s, std::int32_t slot, std::int64_t row, const char* where) {
  if (slot < skip_slot || slot >= s.slot_count)
    throw std::out_of_range(std::string("mstar::kernels::") + where + ": row " + std::to_string(row) + " names slot " +
                            std::to_string(slot) + ", outside the pool's slots 0.." +
                            std::to_string(s.slot_count - 1) + " (and -1 for skip)");
}

// Every slot against every segment, before anything is written (a refusal leaves the outputs as they
// were). The smallest pool bounds them all; the host reference calls it, the launchers cannot (their
// slots are in device memory).
template <class T>
void check_slots(segment_table<T> table, const std::int32_t* slots, std::int64_t rows, const char* where) {
  if (rows == 0 || table.empty()) return;
  const recurrent_segment<T>* smallest = &table[0];
  for (const auto& s : table)
    if (s.slot_count < smallest->slot_count) smallest = &s;
  for (std::int64_t r = 0; r < rows; ++r)
    check_slot(*smallest, slots[r], r, where);
}

} // namespace detail

// Pointer form, [segments][rows]: out[s * slots.size() + r].
template <state_element T>
void build_row_addresses(segment_table<T> table, std::span<const std::int32_t> slots, std::span<row_address<T>> out) {
  detail::check_table(table, std::int64_t(slots.size()), false, "build_row_addresses");
  if (out.size() != table.size() * slots.size())
    detail::refuse("build_row_addresses", "out holds " + std::to_string(out.size()) + " entries, the table needs " +
                                              std::to_string(table.size() * slots.size()) + " (segments x rows)");
  detail::check_slots(table, slots.data(), std::int64_t(slots.size()), "build_row_addresses");
  for (std::size_t s = 0; s < table.size(); ++s) {
    const auto& seg = table[s];
    for (std::size_t r = 0; r < slots.size(); ++r) {
      const std::int32_t slot = slots[r];
      T* const row = seg.pool_layer + (slot > 0 ? std::int64_t(slot) * seg.state_elems : 0);
      out[s * slots.size() + r] = row_address<T>{row, slot > 0 ? row : nullptr};
    }
  }
}

// Index form, one entry per row (the same for every segment).
inline void build_row_indices(std::span<const std::int32_t> slots, std::span<row_index> out) {
  if (out.size() != slots.size())
    detail::refuse("build_row_indices", "out holds " + std::to_string(out.size()) + " entries for " +
                                            std::to_string(slots.size()) + " rows; give it one per row");
  for (std::size_t r = 0; r < slots.size(); ++r) {
    if (slots[r] < skip_slot)
      detail::refuse("build_row_indices", "row " + std::to_string(r) + " names slot " + std::to_string(slots[r]) +
                                              "; slots are >= 0, or -1 for skip");
    out[r] = row_index{slots[r] > 0 ? slots[r] : sink_slot, slots[r] > 0 ? slots[r] : skip_slot};
  }
}

// ---- Host reference: same signatures, host pointers; the host backend runs these, tests compare with them ----
namespace host {

template <state_element T>
void gather(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, T* batch, void* /*stream*/) {
  detail::check_table(table, rows, true, "host::gather");
  detail::check_pointers(table, slots, rows, batch, true, "host::gather");
  detail::check_slots(table, slots, rows, "host::gather");
  for (const auto& s : table) {
    const std::size_t row_bytes = std::size_t(s.state_elems) * sizeof(T);
    for (std::int32_t r = 0; r < rows; ++r) {
      T* const dst = batch + s.batch_offset + std::int64_t(r) * s.state_elems;
      if (slots[r] > 0)
        std::memcpy(dst, s.pool_layer + std::int64_t(slots[r]) * s.state_elems, row_bytes);
      else
        std::memset(static_cast<void*>(dst), 0, row_bytes);
    }
  }
}

template <state_element T>
void scatter(segment_table<T> table, const std::int32_t* slots, std::int32_t rows, const T* batch, void* /*stream*/) {
  detail::check_table(table, rows, true, "host::scatter", true);
  detail::check_pointers(table, slots, rows, batch, true, "host::scatter");
  detail::check_slots(table, slots, rows, "host::scatter");
  for (const auto& s : table) {
    const std::size_t row_bytes = std::size_t(s.state_elems) * sizeof(T);
    for (std::int32_t r = 0; r < rows; ++r) {
      if (slots[r] > 0)
        std::memcpy(s.pool_layer + std::int64_t(slots[r]) * s.state_elems,
                    batch + s.batch_offset + std::int64_t(r) * s.state_elems, row_bytes);
    }
  }
}

template <state_element T>
void zero_slots(segment_table<T> table, const std::int32_t* slots, std::int32_t count, void* /*stream*/) {
  detail::check_table(table, count, false, "host::zero_slots");
  detail::check_pointers(table, slots, count, nullptr, false, "host::zero_slots");
  detail::check_slots(table, slots, count, "host::zero_slots");
  for (const auto& s : table) {
    const std::size_t row_bytes = std::size_t(s.state_elems) * sizeof(T);
    for (std::int32_t i = 0; i < count; ++i) {
      if (slots[i] >= 0)
        std::memset(static_cast<void*>(s.pool_layer + std::int64_t(slots[i]) * s.state_elems), 0, row_bytes);
    }
  }
}

} // namespace host
} // namespace mstar::kernels
