// The CUDA backend's definitions (backend/cuda.hpp declares it). Include this header in exactly one
// translation unit of a program, built with cuda_runtime.h on its include path (meson's cudart_dep
// for a .cpp, or any .cu): a second inclusion gives duplicate-symbol link errors.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "mstar/backend/cuda.hpp"

namespace mstar {

namespace detail {
inline void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("mstar::cuda_backend: ") + call + " failed: " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}
inline cudaStream_t cuda_handle(cuda_stream s) { return static_cast<cudaStream_t>(s.handle); }
inline cudaEvent_t cuda_handle(cuda_event e) { return static_cast<cudaEvent_t>(e.handle); }
} // namespace detail

#define MSTAR_CUDA_CALL(call) ::mstar::detail::cuda_check((call), #call)

cuda_backend::cuda_backend(cuda_backend_options options) : device_(options.device) {
  int count = 0;
  MSTAR_CUDA_CALL(cudaGetDeviceCount(&count));
  if (device_ < 0 || device_ >= count)
    throw std::invalid_argument("mstar::cuda_backend: device " + std::to_string(device_) + " does not exist (" +
                                std::to_string(count) + " CUDA device(s) visible); pick 0.." +
                                std::to_string(count - 1));
  use_device();
  MSTAR_CUDA_CALL(cudaDeviceGetStreamPriorityRange(&least_priority_, &greatest_priority_));
}

void cuda_backend::use_device() const { MSTAR_CUDA_CALL(cudaSetDevice(device_)); }

bool cuda_backend::enable_peer_access(const cuda_backend& peer) {
  if (peer.device_ == device_) return true;
  int can = 0;
  MSTAR_CUDA_CALL(cudaDeviceCanAccessPeer(&can, device_, peer.device_));
  if (!can) return false;
  use_device();
  const cudaError_t r = cudaDeviceEnablePeerAccess(peer.device_, 0);
  if (r == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError(); // the sticky-free error is cleared so a later check does not see it
    return true;
  }
  MSTAR_CUDA_CALL(r);
  return true;
}

cuda_stream cuda_backend::create_stream(stream_priority priority) {
  use_device();
  int p = 0;
  if (priority == stream_priority::high) p = greatest_priority_;
  if (priority == stream_priority::low) p = least_priority_;
  cudaStream_t s = nullptr;
  MSTAR_CUDA_CALL(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, p));
  return cuda_stream{s};
}
void cuda_backend::destroy_stream(cuda_stream s) { MSTAR_CUDA_CALL(cudaStreamDestroy(detail::cuda_handle(s))); }
cuda_event cuda_backend::create_event() {
  use_device();
  cudaEvent_t e = nullptr;
  MSTAR_CUDA_CALL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return cuda_event{e};
}
cuda_event cuda_backend::create_timing_event() {
  use_device();
  cudaEvent_t e = nullptr;
  MSTAR_CUDA_CALL(cudaEventCreate(&e));
  return cuda_event{e};
}
std::optional<std::int64_t> cuda_backend::elapsed_ns(cuda_event from, cuda_event to) const {
  if (!query(from) || !query(to)) return std::nullopt;
  float ms = 0;
  MSTAR_CUDA_CALL(cudaEventElapsedTime(&ms, detail::cuda_handle(from), detail::cuda_handle(to)));
  return std::int64_t(double(ms) * 1e6);
}
void cuda_backend::destroy_event(cuda_event e) { MSTAR_CUDA_CALL(cudaEventDestroy(detail::cuda_handle(e))); }
void cuda_backend::record(cuda_event e, cuda_stream s) {
  MSTAR_CUDA_CALL(cudaEventRecord(detail::cuda_handle(e), detail::cuda_handle(s)));
}
void cuda_backend::wait(cuda_stream s, cuda_event e) {
  MSTAR_CUDA_CALL(cudaStreamWaitEvent(detail::cuda_handle(s), detail::cuda_handle(e), 0));
}
bool cuda_backend::query(cuda_event e) const {
  const cudaError_t r = cudaEventQuery(detail::cuda_handle(e));
  if (r == cudaErrorNotReady) return false;
  MSTAR_CUDA_CALL(r);
  return true;
}
void cuda_backend::synchronize(cuda_event e) { MSTAR_CUDA_CALL(cudaEventSynchronize(detail::cuda_handle(e))); }
void cuda_backend::synchronize(cuda_stream s) { MSTAR_CUDA_CALL(cudaStreamSynchronize(detail::cuda_handle(s))); }

void* cuda_backend::allocate_device(std::size_t bytes) {
  use_device();
  void* p = nullptr;
  MSTAR_CUDA_CALL(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}
void cuda_backend::free_device(void* p) noexcept {
  if (p) (void)cudaFree(p);
}
void* cuda_backend::allocate_host(std::size_t bytes) {
  use_device();
  void* p = nullptr;
  MSTAR_CUDA_CALL(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
  return p;
}
void cuda_backend::free_host(void* p) noexcept {
  if (p) (void)cudaFreeHost(p);
}
void cuda_backend::zero_now(void* p, std::size_t bytes) {
  use_device();
  MSTAR_CUDA_CALL(cudaMemset(p, 0, bytes));
  MSTAR_CUDA_CALL(cudaDeviceSynchronize());
}
void cuda_backend::copy_to_device(void* dst, const void* src, std::size_t bytes, cuda_stream s) {
  MSTAR_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, detail::cuda_handle(s)));
}
void cuda_backend::copy_to_host(void* dst, const void* src, std::size_t bytes, cuda_stream s) {
  MSTAR_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, detail::cuda_handle(s)));
}
void cuda_backend::copy_on_device(void* dst, const void* src, std::size_t bytes, cuda_stream s) {
  MSTAR_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, detail::cuda_handle(s)));
}
void cuda_backend::memset_2d(void* dst, std::size_t pitch, int value, std::size_t width, std::size_t height,
                             cuda_stream s) {
  MSTAR_CUDA_CALL(cudaMemset2DAsync(dst, pitch, value, width, height, detail::cuda_handle(s)));
}

#undef MSTAR_CUDA_CALL

} // namespace mstar
