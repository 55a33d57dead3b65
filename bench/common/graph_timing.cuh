// How the kernel benchmarks time a GPU call, one definition for every one of them: `calls` back-to-back
// calls captured into a CUDA graph, the graph replayed between two events (2 warm-up replays, then
// the median of 7), divided by `calls`. Graph replay keeps the host's launch cost out of the GPU time.
// CUDA_OK exits with the failed call and its error, which is all a benchmark can do.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_OK(call)                                                                                   \
  do {                                                                                                  \
    const cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

namespace mstar_bench {

// Microseconds per call of f(i), i = 0 .. calls - 1. nodes_per_call, when given: the graph nodes (kernel
// launches, copies) of one call captured alone.
template <class F>
double time_per_call_us(cudaStream_t stream, int calls, F&& f, std::size_t* nodes_per_call = nullptr) {
  if (nodes_per_call != nullptr) {
    cudaGraph_t g = nullptr;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    f(0);
    CUDA_OK(cudaStreamEndCapture(stream, &g));
    CUDA_OK(cudaGraphGetNodes(g, nullptr, nodes_per_call));
    CUDA_OK(cudaGraphDestroy(g));
  }
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) f(i);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  for (int w = 0; w < 2; ++w) CUDA_OK(cudaGraphLaunch(exec, stream));
  std::vector<double> us;
  for (int r = 0; r < 7; ++r) {
    CUDA_OK(cudaEventRecord(a, stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(double(ms) * 1000.0 / calls);
  }
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

} // namespace mstar_bench
