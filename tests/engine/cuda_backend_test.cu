// The engine on the CUDA backend (compiled by nvcc; the backend's definitions come from
// cuda_backend_impl.cpp, compiled by g++): streams with priorities, events across streams, device
// memory, and a codec side step and a chain step through the Qwen3-TTS engine with a real device
// copy of their plans and a 2D-memset zero on the lane. Skipped (exit 77) without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <mstar/backend/cuda.hpp>
#include <mstar/engine/engine.hpp>

#include "qwen3_tts/model.hpp"

#include <cstdio>
#include <vector>

namespace {

bool has_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

__global__ void fill(int* p, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

__global__ void write_state(std::uint16_t* state, const std::int32_t* slots, int rows, std::int64_t elems,
                            std::int64_t layer_stride, int layers, std::uint16_t value) {
  const int r = blockIdx.x;
  if (r >= rows || slots[r] <= 0) return;
  for (int l = 0; l < layers; ++l)
    for (std::int64_t e = threadIdx.x; e < elems; e += blockDim.x)
      state[l * layer_stride + slots[r] * elems + e] = value;
}

} // namespace

TEST_CASE("CudaBackend.streams with priorities, an event across streams, copies and memsets" *
          doctest::skip(!has_gpu())) {
  mstar::cuda_backend gpu;
  auto chain = gpu.create_stream();
  auto lane = gpu.create_stream(mstar::stream_priority::high);
  auto e = gpu.create_event();
  CHECK(gpu.query(e));
  constexpr int n = 1 << 20;
  auto* d = static_cast<int*>(gpu.allocate_device(n * sizeof(int)));
  auto* h = static_cast<int*>(gpu.allocate_host(n * sizeof(int)));
  fill<<<n / 256, 256, 0, static_cast<cudaStream_t>(chain.handle)>>>(d, n, 7);
  gpu.record(e, chain);
  gpu.wait(lane, e);
  gpu.memset_2d(d, 64 * sizeof(int), 0, 4 * sizeof(int), 8, lane); // zero 4 ints of 8 rows of 64
  gpu.copy_to_host(h, d, n * sizeof(int), lane);
  gpu.synchronize(lane);
  CHECK(gpu.query(e));
  int zeros = 0, sevens = 0;
  for (int i = 0; i < n; ++i)
    (h[i] == 0 ? zeros : sevens) += (h[i] == 0 || h[i] == 7) ? 1 : 0;
  CHECK(zeros == 32);
  CHECK(sevens == n - 32);
  gpu.free_host(h);
  gpu.free_device(d);
  gpu.destroy_event(e);
  gpu.destroy_stream(lane);
  gpu.destroy_stream(chain);
}

TEST_CASE("CudaBackend.a codec side step and a staged chain step through the Qwen3-TTS engine" *
          doctest::skip(!has_gpu())) {
  mstar::cuda_backend gpu;
  mstar::engine<qwen3_tts::Model, mstar::cuda_backend> engine(gpu);
  auto chain = gpu.create_stream();
  auto lane = gpu.create_stream(mstar::stream_priority::high);
  engine.set_side_stream<qwen3_tts::CodecChunk>(lane);
  auto& pool = engine.resource<qwen3_tts::CodecState>();
  std::vector<mstar::row> rows;
  for (int i = 0; i < 16; ++i)
    rows.push_back({*engine.add_request(i)});

  // A codec window: the plan's slot array is on the device; a kernel writes each row's state there.
  const auto out =
      engine.run(mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>{rows, 32}, lane, [&](const auto& ctx) {
        const auto& p = ctx.template plan<qwen3_tts::CodecState>();
        write_state<<<p.bucket, 256, 0, static_cast<cudaStream_t>(ctx.stream.handle)>>>(
            reinterpret_cast<std::uint16_t*>(pool.state(0, 0)), p.slots, static_cast<int>(p.rows),
            static_cast<std::int64_t>(pool.state_elements()),
            static_cast<std::int64_t>(pool.slots() * pool.state_elements()), static_cast<int>(pool.layers()), 0x3f80);
      });
  REQUIRE(out);
  gpu.synchronize(lane);
  const auto slot = pool.find(rows[3].request, 0)->slot;
  std::vector<std::uint16_t> back(pool.state_elements());
  cudaMemcpy(back.data(), pool.state(7, slot), back.size() * 2, cudaMemcpyDeviceToHost);
  CHECK(back.front() == 0x3f80);
  CHECK(back.back() == 0x3f80);
  cudaMemcpy(back.data(), pool.state(7, 0), back.size() * 2, cudaMemcpyDeviceToHost);
  CHECK(back.front() == 0); // the sink: padding rows were not written

  // Teardown on the lane: the 2D memset zeroes the slot in all 8 layers.
  REQUIRE(engine.remove_request(rows[3].request, chain));
  gpu.synchronize(lane);
  for (std::uint32_t l = 0; l < pool.layers(); ++l) {
    cudaMemcpy(back.data(), pool.state(l, slot), back.size() * 2, cudaMemcpyDeviceToHost);
    CHECK(back.front() == 0);
    CHECK(back.back() == 0);
  }
  cudaMemcpy(back.data(), pool.state(0, pool.find(rows[4].request, 0)->slot), back.size() * 2, cudaMemcpyDeviceToHost);
  CHECK(back.front() == 0x3f80); // a neighbour keeps its state

  // A chain step staged on the "plan thread" and promoted.
  rows.erase(rows.begin() + 3);
  using Decode = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerDecode>;
  auto noop = [](const auto&) {};
  REQUIRE(engine.run(Decode{rows}, chain, noop));
  REQUIRE(engine.runner().pre_plan(Decode{rows}, chain));
  const auto promoted = engine.run(Decode{rows}, chain, noop);
  REQUIRE(promoted);
  CHECK(promoted.promoted);
  gpu.synchronize(chain);
  std::vector<std::int32_t> kv_lens(rows.size());
  cudaMemcpy(kv_lens.data(), engine.resource<qwen3_tts::Attention>().current_plan().kv_lens, kv_lens.size() * 4,
             cudaMemcpyDeviceToHost);
  for (auto v : kv_lens)
    CHECK(v == 2);
  for (const auto& r : rows)
    engine.remove_request(r.request, chain);
  gpu.synchronize(chain);
  gpu.synchronize(lane);
  for (const auto& st : engine.stats())
    CHECK(st.free == st.capacity);
}

int main(int argc, char** argv) {
  const bool gpu = has_gpu();
  if (!gpu) std::printf("no CUDA device: engine GPU tests skipped\n");
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  return gpu ? 0 : 77;
}
