// The CUDA recurrent-state kernels against the host reference: random data (no zero bytes), outputs
// poisoned before every run, every byte of the batch and of every pool compared, over row counts
// 1..1024, odd state sizes, misaligned bases, sink and skipped rows, up to hundreds of segments and
// rows of MiB. MSTAR_GPU_QUICK=1 keeps a reduced set (for compute-sanitizer).
#include "../kernels/recurrent_cases.hpp"
#include "gpu_test.hpp"

#include "../../bench/kernels/recurrent_sweep.cuh"  // the benchmark's policies, and launchers that honour them

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

// The launchers come from the Qwen3-TTS library and recurrent_instantiate.cu; this file only needs
// the launch-policy knobs of the .cuh.
MSTAR_EXTERN_RECURRENT(float);
MSTAR_EXTERN_RECURRENT(double);
MSTAR_EXTERN_RECURRENT(std::uint8_t);
MSTAR_EXTERN_RECURRENT(mstar::f16);
MSTAR_EXTERN_RECURRENT(mstar::bf16);
MSTAR_EXTERN_RECURRENT(__half);
MSTAR_EXTERN_RECURRENT(__nv_bfloat16);

namespace {

namespace mk = mstar::kernels;
namespace mt = mstar::test;

bool quick() {
  const char* v = std::getenv("MSTAR_GPU_QUICK");
  return v != nullptr && v[0] == '1';
}

template <class T>
struct device_buffer {
  T* ptr = nullptr;
  std::size_t size = 0;
  explicit device_buffer(std::size_t n) : size(n) {
    MSTAR_CUDA_REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(ptr); }
  // The kernels run on a cudaStreamNonBlocking stream, which does not wait for the legacy default
  // stream that cudaMemcpy and cudaMemset use: cudaMemset returns before it has run, and a cudaMemcpy
  // from pageable memory may return before its DMA lands. On an idle GPU they were done before the
  // kernel started; beside other processes on the same GPU the kernel could read the buffer first
  // (issue 20: the suite failed here only when meson ran other GPU tests at the same time). Each fill
  // therefore waits until it is on the device.
  void upload(std::span<const T> h) {
    REQUIRE(h.size() == size);
    MSTAR_CUDA_REQUIRE(cudaMemcpy(ptr, h.data(), h.size_bytes(), cudaMemcpyHostToDevice));
    MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> h(size);
    MSTAR_CUDA_REQUIRE(cudaMemcpy(h.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() {
    MSTAR_CUDA_REQUIRE(cudaMemset(ptr, mt::poison_byte, std::max<std::size_t>(size, 1) * sizeof(T)));
    MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
  }
};

// One case run three ways (gather, scatter, zero_slots) on the device and on the host reference,
// everything compared byte for byte after each.
template <class T>
void check_case(std::mt19937_64& rng, const mt::recurrent_case& c, cudaStream_t stream) {
  CAPTURE(c.rows);
  CAPTURE(c.misalign);
  CAPTURE(c.segments());
  auto host_pools = mt::random_pools<T>(c, rng);
  std::vector<std::unique_ptr<device_buffer<T>>> dev_pools;
  std::vector<T*> host_bases, dev_bases;
  for (auto& p : host_pools) {
    dev_pools.push_back(std::make_unique<device_buffer<T>>(p.size()));
    dev_pools.back()->upload(p);
    host_bases.push_back(p.data());
    dev_bases.push_back(dev_pools.back()->ptr);
  }
  std::vector<mk::recurrent_segment<T>> host_table, dev_table;
  const std::int64_t batch_elems = c.table<T>(host_bases, host_table);
  c.table<T>(dev_bases, dev_table);
  device_buffer<std::int32_t> dev_slots(c.slots.size()), dev_freed(c.freed.size());
  dev_slots.upload(c.slots);
  dev_freed.upload(c.freed);
  std::vector<T> host_batch(static_cast<std::size_t>(batch_elems));
  device_buffer<T> dev_batch(static_cast<std::size_t>(batch_elems));

  const auto pools_match = [&] {
    MSTAR_CUDA_REQUIRE(cudaStreamSynchronize(stream));
    MSTAR_CUDA_REQUIRE(cudaGetLastError());
    for (std::size_t p = 0; p < host_pools.size(); ++p)
      if (!mt::same_bytes<T>(dev_pools[p]->download(), host_pools[p])) return false;
    return true;
  };

  // gather: the batch is the output
  mt::poison<T>(host_batch);
  dev_batch.poison();
  mk::host::gather<T>(host_table, c.slots.data(), c.rows, host_batch.data() + c.misalign, nullptr);
  mstar_bench::gather<T>(dev_table, dev_slots.ptr, c.rows, dev_batch.ptr + c.misalign, stream);
  CHECK(pools_match());
  CHECK(mt::same_bytes<T>(dev_batch.download(), host_batch));

  // scatter: the pools are the output; a fresh random batch is the input
  mt::fill_random<T>(host_batch, rng);
  dev_batch.upload(host_batch);
  mk::host::scatter<T>(host_table, c.slots.data(), c.rows, host_batch.data() + c.misalign, nullptr);
  mstar_bench::scatter<T>(dev_table, dev_slots.ptr, c.rows, dev_batch.ptr + c.misalign, stream);
  CHECK(pools_match());

  // zero_slots: the pools again
  mk::host::zero_slots<T>(host_table, c.freed.data(), std::int32_t(c.freed.size()), nullptr);
  mstar_bench::zero_slots<T>(dev_table, dev_freed.ptr, std::int32_t(c.freed.size()), stream);
  CHECK(pools_match());
}

struct stream_guard {
  cudaStream_t s = nullptr;
  stream_guard() { MSTAR_CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~stream_guard() { cudaStreamDestroy(s); }
};

std::vector<std::int32_t> row_counts() {
  if (quick()) return {1, 7, 257};
  return {1, 2, 3, 5, 31, 64, 100, 255, 256, 257, 513, 1000, 1024};
}

} // namespace

TEST_CASE_TEMPLATE("gather, scatter and zero_slots on the GPU match the host reference byte for byte" *
                       doctest::skip(!mt::has_gpu()),
                   T, float, mstar::bf16, mstar::f16, __nv_bfloat16, __half, std::uint8_t, double) {
  std::mt19937_64 rng(2024 + sizeof(T));
  stream_guard stream;
  for (const std::int32_t rows : row_counts()) {
    const std::int64_t cap = rows > 256 ? 200 : 1200;
    for (const std::int64_t misalign : {0, 1}) {
      // one pool of 16-byte rows, one of odd rows, one of a single element: every access width in one launch
      const std::int64_t vec = std::int64_t(16 / std::min<std::size_t>(16, sizeof(T))) * (1 + std::int64_t(rng() % 8));
      mt::recurrent_case c = mt::make_case(rng, rows,
                                           {{1 + int(rng() % 4), vec}, {2, 1 + std::int64_t(rng() % cap)}, {1, 1}},
                                           misalign);
      check_case<T>(rng, c, stream.s);
      // one pool of layers of one shape: the strided kernel, at this type's widths
      check_case<T>(rng, mt::make_case(rng, rows, {{1 + int(rng() % 3), 1 + std::int64_t(rng() % cap)}}, misalign),
                    stream.s);
    }
  }
}

TEST_CASE("hundreds of (pool, layer) segments move in one call and match the host reference" *
          doctest::skip(!mt::has_gpu())) {
  std::mt19937_64 rng(77);
  stream_guard stream;
  for (const std::int32_t rows : {3, 100}) {
    // 9, 64 and 310 segments: every table capacity the launcher picks between
    check_case<mstar::bf16>(rng, mt::make_case(rng, rows, {{5, 64}, {4, 7}}, 0), stream.s);
    check_case<mstar::bf16>(rng, mt::make_case(rng, rows, {{40, 128}, {24, 3}}, 1), stream.s);
    check_case<mstar::bf16>(rng, mt::make_case(rng, rows, {{60, 5}, {50, 16}, {200, 3}}, 0), stream.s);
  }
}

// Tables that are not strided: merged into groups (runs of one pool's layers); the 2-D grid gives each
// group a row of blocks (blocks past a group's tiles exit), the map and tiles kernels lay whole groups
// on a 1-D grid (the block's group from a per-tile map, or by a search). Each table below takes a
// different corner of those plans, under each general kernel (automatic, 2-D grid, tiles, per-thread
// search, map: the three map sizes, and the tiles kernel when the tiles overflow the map).
TEST_CASE("tables of many segments of mixed sizes on every general kernel match the host reference" *
          doctest::skip(!mt::has_gpu())) {
  std::mt19937_64 rng(91);
  stream_guard stream;
  const mstar_bench::swept_policy saved = mstar_bench::tuning();
  using mk::detail::general_kernel;
  // search: the per-thread search kernel the others replaced (bench/kernels/recurrent_sweep.cuh)
  for (const auto& forced : {std::pair{general_kernel::automatic, false}, std::pair{general_kernel::grid, false},
                             std::pair{general_kernel::tiles, false}, std::pair{general_kernel::automatic, true},
                             std::pair{general_kernel::map, false}}) {
    const general_kernel kind = forced.first;
    const bool search = forced.second;
    CAPTURE(int(kind));
    CAPTURE(search);
    mstar_bench::tuning().general = kind;
    mstar_bench::tuning().search = search;
    for (const std::int32_t rows : quick() ? std::vector<std::int32_t>{1, 33} : std::vector<std::int32_t>{1, 33, 300}) {
      // one large group and two small ones: the large one is cut into many entries, the last one partial
      check_case<float>(rng, mt::make_case(rng, rows, {{1, 8192}, {1, 4}, {1, 5}}, 0), stream.s);
      // 16-byte pools of 1 to 4 KiB rows at unrelated addresses: one group each, every entry partial
      std::vector<mt::pool_shape> mixed;
      for (int p = 0; p < 40; ++p) mixed.push_back({1, std::int64_t(256) * (1 + p % 4) + (p % 5 == 0 ? 4 : 0)});
      check_case<float>(rng, mt::make_case(rng, rows, mixed, 0), stream.s);
      // the same misaligned (every access width, no 16-byte variant), with layers of two pools merged in groups
      mixed.push_back({7, 300});
      mixed.push_back({3, 1});
      check_case<mstar::bf16>(rng, mt::make_case(rng, rows, mixed, 1), stream.s);
      // max_segments groups of one segment each: the largest grid table
      std::vector<mt::pool_shape> singles;
      for (std::size_t p = 0; p < mk::max_segments; ++p) singles.push_back({1, 1 + std::int64_t(rng() % 40)});
      check_case<std::uint8_t>(rng, mt::make_case(rng, rows, singles, 0), stream.s);
      // 4 groups (the 2-D grid under automatic) and 11 groups (the map kernel)
      check_case<float>(rng, mt::make_case(rng, rows, {{1, 1000}, {2, 64}, {1, 4}, {3, 260}}, 0), stream.s);
      std::vector<mt::pool_shape> eleven;
      for (int p = 0; p < 11; ++p) eleven.push_back({1 + p % 2, 100 + 37 * std::int64_t(p)});
      check_case<mstar::bf16>(rng, mt::make_case(rng, rows, eleven, 0), stream.s);
      // groups whose items fill whole tiles exactly (256 items of 16 bytes a tile)
      check_case<float>(rng, mt::make_case(rng, 256, {{2, 4}, {3, 1024}, {1, 8}}, 0), stream.s);
    }
  }
  mstar_bench::tuning() = saved;
}

// The map kernel's capacities at their edges (16-byte units, 256 a tile): up to 64 groups, the 256-tile
// map for small steps and the 4096-tile map, then the tiles kernel; from 65 groups the 2560-tile map,
// then the tiles kernel. Pools of 1024 and 3072 or 3076 floats are two groups (their units differ);
// 65 pools of 64 and 68 floats in turn are 65 groups.
TEST_CASE("the map kernel at the edges of its map sizes matches the host reference" * doctest::skip(!mt::has_gpu())) {
  std::mt19937_64 rng(113);
  stream_guard stream;
  const mstar_bench::swept_policy saved = mstar_bench::tuning();
  std::vector<mt::pool_shape> many;
  for (int p = 0; p < 65; ++p) many.push_back({1, p % 2 == 0 ? 64 : 68});
  for (const auto kind : {mk::detail::general_kernel::map, mk::detail::general_kernel::automatic}) {
    CAPTURE(int(kind));
    mstar_bench::tuning() = mstar_bench::swept_policy{};
    mstar_bench::tuning().general = kind;
    for (const std::int32_t rows : {63, 64, 65}) // 252, 256, 260 tiles: the 256-tile map, then 4096
      check_case<float>(rng, mt::make_case(rng, rows, {{1, 1024}, {1, 3072}}, 0), stream.s);
    if (!quick()) {
      for (const std::int32_t rows : {1023, 1024}) // 4092 and 4096 tiles: the 4096-tile map
        check_case<float>(rng, mt::make_case(rng, rows, {{1, 1024}, {1, 3072}}, 0), stream.s);
      check_case<float>(rng, mt::make_case(rng, 1024, {{1, 1024}, {1, 3076}}, 0), stream.s); // 4100: tiles kernel
    }
    check_case<float>(rng, mt::make_case(rng, 16, many, 0), stream.s);   // 65 groups, 97 tiles: 2560-tile map
    check_case<float>(rng, mt::make_case(rng, 600, many, 0), stream.s);  // 2534 tiles: 2560-tile map
    check_case<float>(rng, mt::make_case(rng, 620, many, 0), stream.s);  // 2631 tiles: tiles kernel
  }
  mstar_bench::tuning() = saved;
}

TEST_CASE("rows of a MiB and more, aligned or not, match the host reference" * doctest::skip(!mt::has_gpu())) {
  std::mt19937_64 rng(31);
  stream_guard stream;
  const std::int64_t mib = 1 << 20;
  check_case<float>(rng, mt::make_case(rng, 1, {{1, mib / 4}}, 0, 0, 0), stream.s);
  if (quick()) return;
  check_case<float>(rng, mt::make_case(rng, 1, {{2, mib / 4 + 3}}, 1, 0, 0), stream.s);
  check_case<mstar::bf16>(rng, mt::make_case(rng, 4, {{2, mib + 1}}, 0), stream.s);
  check_case<std::uint8_t>(rng, mt::make_case(rng, 3, {{1, 3 * mib + 5}}, 3), stream.s);
  check_case<float>(rng, mt::make_case(rng, 1024, {{1, 2048}, {1, 5}}, 0), stream.s);
}

TEST_CASE("every launch policy the benchmark sweeps matches the host reference, through both kernels" *
          doctest::skip(!mt::has_gpu())) {
  std::mt19937_64 rng(55);
  stream_guard stream;
  // The swept variants, plus two units a thread from the first item through every kernel.
  std::vector<mstar_bench::swept_policy> policies(std::begin(mstar_bench::swept_policies),
                                                  std::end(mstar_bench::swept_policies));
  policies.push_back({{0, 1, 2, true}});
  policies.push_back({{0, 1, 2, true, mk::detail::general_kernel::automatic, 2}});
  policies.push_back({{0, 1, 2, false}});
  policies.push_back({{0, 1, 2, false, mk::detail::general_kernel::grid}});
  policies.push_back({{0, 1, 2, false, mk::detail::general_kernel::tiles}});
  policies.push_back(mstar_bench::search_policy({0, 1, 2, false}));
  policies.push_back({{0, 1, 2, false, mk::detail::general_kernel::map}});
  const mstar_bench::swept_policy saved = mstar_bench::tuning();
  for (std::size_t v = 0; v < policies.size(); ++v) {
    CAPTURE(v);
    mstar_bench::tuning() = policies[v];
    // pools of different row sizes: the general table (16-byte units, then every width in one launch)
    check_case<float>(rng, mt::make_case(rng, quick() ? 100 : 1000, {{2, 1024}, {1, 4}}, 0), stream.s);
    check_case<float>(rng, mt::make_case(rng, quick() ? 40 : 300, {{3, 1028}, {2, 1024}}, 0), stream.s);
    check_case<std::uint8_t>(rng, mt::make_case(rng, quick() ? 60 : 300, {{2, 4096}, {1, 37}, {1, 1}}, 1), stream.s);
    // one pool of several layers, and one segment: strided tables (16-byte units, odd units, misaligned)
    check_case<float>(rng, mt::make_case(rng, quick() ? 20 : 100, {{5, 4100}}, 0), stream.s);
    check_case<std::uint8_t>(rng, mt::make_case(rng, quick() ? 30 : 257, {{3, 37}}, 0), stream.s);
    check_case<mstar::bf16>(rng, mt::make_case(rng, quick() ? 30 : 257, {{1, 333}}, 1), stream.s);
    if (!quick()) check_case<float>(rng, mt::make_case(rng, 256, {{1, 16384}}, 0), stream.s);  // 16 MiB, unroll 2
  }
  mstar_bench::tuning() = saved;
}

TEST_CASE("each direction of a node step is one kernel launch whatever the number of pools and layers" *
          doctest::skip(!mt::has_gpu())) {
  std::mt19937_64 rng(3);
  stream_guard stream;
  for (const int layers : {1, 8, 100}) {
    mt::recurrent_case c = mt::make_case(rng, 64, {{layers, 256}, {layers, 33}, {1, 8}}, 0);
    std::vector<device_buffer<mstar::bf16>*> pools;
    std::vector<mstar::bf16*> bases;
    for (std::size_t p = 0; p < c.pools.size(); ++p) {
      pools.push_back(new device_buffer<mstar::bf16>(std::size_t(c.pool_elems(p))));
      bases.push_back(pools.back()->ptr);
    }
    std::vector<mk::recurrent_segment<mstar::bf16>> table;
    device_buffer<mstar::bf16> batch(static_cast<std::size_t>(c.table<mstar::bf16>(bases, table)));
    device_buffer<std::int32_t> slots(c.slots.size());
    slots.upload(c.slots);
    for (int direction = 0; direction < 3; ++direction) {
      cudaGraph_t graph = nullptr;
      MSTAR_CUDA_REQUIRE(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
      if (direction == 0) mk::gather<mstar::bf16>(table, slots.ptr, c.rows, batch.ptr, stream.s);
      if (direction == 1) mk::scatter<mstar::bf16>(table, slots.ptr, c.rows, batch.ptr, stream.s);
      if (direction == 2) mk::zero_slots<mstar::bf16>(table, slots.ptr, c.rows, stream.s);
      MSTAR_CUDA_REQUIRE(cudaStreamEndCapture(stream.s, &graph));
      std::size_t nodes = 0;
      MSTAR_CUDA_REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes));
      CAPTURE(layers);
      CAPTURE(direction);
      CHECK(nodes == 1);
      cudaGraphDestroy(graph);
    }
    for (auto* p : pools) delete p;
  }
}

TEST_CASE("an empty step launches nothing and a table too large for one launch is refused before launching" *
          doctest::skip(!mt::has_gpu())) {
  stream_guard stream;
  device_buffer<float> pool(64), batch(64);
  std::vector<mk::recurrent_segment<float>> table(1, {pool.ptr, 4, 16, 0});
  cudaGraph_t graph = nullptr;
  MSTAR_CUDA_REQUIRE(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
  mk::gather<float>(table, nullptr, 0, batch.ptr, stream.s);
  MSTAR_CUDA_REQUIRE(cudaStreamEndCapture(stream.s, &graph));
  std::size_t nodes = 7;
  MSTAR_CUDA_REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(nodes == 0);
  cudaGraphDestroy(graph);

  std::vector<mk::recurrent_segment<float>> big(mk::max_segments + 1, {pool.ptr, 1, 16, 0});
  device_buffer<std::int32_t> slots(1);
  CHECK_THROWS_AS(mk::gather<float>(big, slots.ptr, 1, batch.ptr, stream.s), std::invalid_argument);
  CHECK_THROWS_AS(mk::scatter<float>(table, nullptr, 1, batch.ptr, stream.s), std::invalid_argument);
  // A pool's own table (every batch_offset 0) overlaps in the batch; two segments over one pool race in scatter.
  device_buffer<float> layers(2 * 64);
  std::vector<mk::recurrent_segment<float>> own = {{layers.ptr, 4, 16, 0}, {layers.ptr + 64, 4, 16, 0}};
  CHECK_THROWS_WITH_AS(mk::gather<float>(own, slots.ptr, 1, batch.ptr, stream.s), doctest::Contains("layout_batch"),
                       std::invalid_argument);
  std::vector<mk::recurrent_segment<float>> twice = {{pool.ptr, 4, 16, 0}, {pool.ptr, 4, 16, 4}};
  CHECK_THROWS_AS(mk::scatter<float>(twice, slots.ptr, 1, batch.ptr, stream.s), std::invalid_argument);
  const std::int32_t one = 1;
  slots.upload(std::span<const std::int32_t>(&one, 1));
  CHECK_NOTHROW(mk::gather<float>(twice, slots.ptr, 1, batch.ptr, stream.s));
  MSTAR_CUDA_REQUIRE(cudaStreamSynchronize(stream.s));
}
