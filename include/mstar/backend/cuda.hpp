// The CUDA backend: streams with priorities, events, device and pinned host memory, on one device.
// This header declares it without any CUDA header (handles are opaque pointers), so engine code
// templated on it compiles in plain C++ translation units; the definitions call the CUDA runtime and
// live in backend/cuda_impl.hpp, which exactly one translation unit of a program includes (compiled
// with cuda_runtime.h on its include path: meson's cudart_dep, or nvcc). Host-only code (the host
// backend, its tests) includes neither.
//
//   // one .cpp or .cu of the program:
//   #include <mstar/backend/cuda_impl.hpp>
//   // everywhere else:
//   #include <mstar/backend/cuda.hpp>
//   mstar::cuda_backend gpu({.device = 0});
//   auto lane = gpu.create_stream(mstar::stream_priority::high);
//
// Every call that fails throws std::runtime_error naming the CUDA call and its error string.
// Ordering checks are the host backend's: here track_region and note_access do nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "mstar/backend/backend.hpp"
#include "mstar/backend/ordering.hpp"
#include "mstar/kernels/recurrent.hpp"

namespace mstar {

struct cuda_stream {
  void* handle = nullptr; // cudaStream_t
  friend constexpr bool operator==(cuda_stream, cuda_stream) = default;
};
struct cuda_event {
  void* handle = nullptr; // cudaEvent_t
  friend constexpr bool operator==(cuda_event, cuda_event) = default;
};

struct cuda_backend_options {
  int device = 0;
};

class cuda_backend {
public:
  using stream_type = cuda_stream;
  using event_type = cuda_event;
  static constexpr bool checks_ordering = false;

  explicit cuda_backend(cuda_backend_options options = {});
  ~cuda_backend() = default;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  // high: the device's greatest priority; low: its least; normal: the default (0).
  cuda_stream create_stream(stream_priority priority = stream_priority::normal);
  void destroy_stream(cuda_stream s);
  cuda_event create_event(); // timing disabled: record and wait are cheaper
  cuda_event create_timing_event();
  // Nanoseconds from `from` to `to` (events of create_timing_event, both complete; about 0.5 us
  // resolution); nullopt while either is pending.
  std::optional<std::int64_t> elapsed_ns(cuda_event from, cuda_event to) const;
  void destroy_event(cuda_event e);
  void record(cuda_event e, cuda_stream s);
  void wait(cuda_stream s, cuda_event e);
  bool query(cuda_event e) const;
  void synchronize(cuda_event e);
  void synchronize(cuda_stream s);

  void* allocate_device(std::size_t bytes);
  void free_device(void* p) noexcept;
  void* allocate_host(std::size_t bytes); // pinned
  void free_host(void* p) noexcept;
  void zero_now(void* p, std::size_t bytes);
  void copy_to_device(void* dst, const void* src, std::size_t bytes, cuda_stream s);
  void copy_to_host(void* dst, const void* src, std::size_t bytes, cuda_stream s);
  // Device to device, on this device or from a peer's memory (unified addressing finds the source's
  // device; peer access, when enabled, makes it a direct NVLink/PCIe copy): the edge's ring copy.
  void copy_on_device(void* dst, const void* src, std::size_t bytes, cuda_stream s);
  void memset_2d(void* dst, std::size_t pitch, int value, std::size_t width, std::size_t height, cuda_stream s);

  // Zeroes `slot` in every segment of a pool on `s`: one 2D memset when the segments are evenly
  // spaced (a layer-major pool), else one per segment. No kernel, so no per-model instantiation.
  template <kernels::state_element T>
  void zero_state(kernels::segment_table<T> segments, std::int32_t slot, cuda_stream s) {
    if (segments.empty() || slot < 0) return;
    const std::size_t width = std::size_t(segments[0].state_elems) * sizeof(T);
    bool even = true;
    std::ptrdiff_t pitch = segments.size() > 1 ? segments[1].pool_layer - segments[0].pool_layer : 0;
    for (std::size_t i = 1; i < segments.size() && even; ++i)
      even = segments[i].pool_layer - segments[i - 1].pool_layer == pitch &&
             segments[i].state_elems == segments[0].state_elems;
    if (even && pitch > 0) {
      memset_2d(segments[0].pool_layer + std::int64_t(slot) * segments[0].state_elems, std::size_t(pitch) * sizeof(T),
                0, width, segments.size(), s);
      return;
    }
    for (const auto& seg : segments)
      memset_2d(seg.pool_layer + std::int64_t(slot) * seg.state_elems, std::size_t(seg.state_elems) * sizeof(T), 0,
                std::size_t(seg.state_elems) * sizeof(T), 1, s);
  }

  bool checking() const noexcept { return false; }
  region_id track_region(std::string_view, std::uint32_t) noexcept { return {}; }
  void note_access(cuda_stream, region_id, std::uint32_t) noexcept {}
  void note_accesses(cuda_stream, region_id, std::span<const std::int32_t>) noexcept {}

  int device() const noexcept { return device_; }
  // Makes this backend's device the calling thread's current device: a thread that launches kernels
  // on this backend's streams calls it first when the process uses several devices (a kernel launch
  // on a stream of another device than the current one fails; copies and event waits do not care).
  void make_current() const { use_device(); }
  // Lets this device read and write `peer`'s memory directly (NVLink/PCIe peer copies for an edge
  // between two devices). False when the pair cannot (copies then go through the host, still
  // correct); true when enabled now or before, or when both are the same device.
  bool enable_peer_access(const cuda_backend& peer);

private:
  void use_device() const;
  int device_ = 0;
  int least_priority_ = 0;
  int greatest_priority_ = 0;
};

static_assert(device_backend<cuda_backend>);
static_assert(timing_backend<cuda_backend>);

} // namespace mstar
