// Recurrent-state kernels on the GPU: achieved bandwidth of gather and scatter (bytes read plus bytes
// written) against cudaMemcpyAsync device-to-device of the same bytes measured in the same run, over
// rows x bytes-per-row from 1 x 4 KiB to 1024 x 1 MiB and for steps of several layers and pools; GPU
// time per launch of small node steps; and kernel launches per call, counted as the nodes of a
// captured graph. bench/kernels/copy_floor_bench.cu measures the floors under these figures.
//
//   build/bench/kernels/mstar_recurrent_bench            (bench/kernels/run_h200.sh builds and runs it)
//
// Timing: each measurement captures N back-to-back calls into a CUDA graph, replays it between two
// events, and divides by N (graph replay keeps host launch cost out of GPU time); the median of 7
// replays is reported, after 2 warm-up replays. In the bandwidth table the calls rotate over enough
// copies of the step's buffers (pools, batch, slot table) to fill 3x the L2, so state comes from HBM
// as in a real step, for the kernels and for memcpy alike (both read and write the same number of
// bytes per call; the kernels also read the slot table, which they keep in L2); the small-step table
// runs on one copy (L2-hot). Element type bf16.
#include <mstar/kernels/recurrent.cuh>

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "../common/graph_timing.cuh"
#include "recurrent_sweep.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

MSTAR_EXTERN_RECURRENT(mstar::bf16);  // measure the Qwen3-TTS library's instantiation

namespace {

namespace mk = mstar::kernels;
using elem = mstar::bf16;

using mstar_bench::time_per_call_us;

__global__ void fill_kernel(std::uint8_t* p, std::size_t bytes, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < bytes; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    p[i] = std::uint8_t(1 + x % 255);  // no zero bytes
  }
}

void fill_random(void* dev, std::size_t bytes, std::mt19937_64& rng) {
  fill_kernel<<<1024, 256>>>(static_cast<std::uint8_t*>(dev), bytes, rng());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
}

int calls_for(std::size_t moved) { return int(std::clamp<std::size_t>((std::size_t(256) << 20) / std::max<std::size_t>(moved, 1), 5, 200)); }

struct pool_shape {
  int layers;
  std::size_t row_bytes;
};

// A node step: pools of layers of rows of row_bytes each, slots a random permutation. copy_dst (steps
// of several segments only) is where the memcpy baseline writes; one segment's memcpy writes the pool.
struct step {
  std::vector<mk::recurrent_segment<elem>> table;
  std::vector<void*> pools;
  elem* batch = nullptr;
  void* copy_dst = nullptr;
  std::int32_t* slots = nullptr;
  std::int32_t rows = 0;
  std::size_t moved_one_way = 0;  // bytes of state the step moves in one direction

  step(const std::vector<pool_shape>& shapes, std::int32_t rows_, std::mt19937_64& rng) : rows(rows_) {
    const std::int32_t slot_count = rows + 1;
    for (const pool_shape& ps : shapes) {
      const std::int64_t state = std::int64_t(ps.row_bytes / sizeof(elem));
      void* pool = nullptr;
      const std::size_t bytes = std::size_t(ps.layers) * std::size_t(slot_count) * ps.row_bytes;
      CUDA_OK(cudaMalloc(&pool, bytes));
      fill_random(pool, bytes, rng);
      pools.push_back(pool);
      for (int l = 0; l < ps.layers; ++l)
        table.push_back({static_cast<elem*>(pool) + std::int64_t(l) * slot_count * state, state, slot_count, 0});
      moved_one_way += std::size_t(ps.layers) * std::size_t(rows) * ps.row_bytes;
    }
    const std::int64_t batch_elems = mk::layout_batch<elem>(table, rows);
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&batch), std::size_t(batch_elems) * sizeof(elem)));
    fill_random(batch, std::size_t(batch_elems) * sizeof(elem), rng);
    if (table.size() > 1) {
      CUDA_OK(cudaMalloc(&copy_dst, moved_one_way));
      fill_random(copy_dst, moved_one_way, rng);
    }
    std::vector<std::int32_t> h(static_cast<std::size_t>(rows));
    std::iota(h.begin(), h.end(), 1);
    std::shuffle(h.begin(), h.end(), rng);
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&slots), h.size() * sizeof(std::int32_t)));
    CUDA_OK(cudaMemcpy(slots, h.data(), h.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  }
  step(int npools, int layers, std::int32_t rows_, std::size_t row_bytes, std::mt19937_64& rng)
      : step(std::vector<pool_shape>(std::size_t(npools), pool_shape{layers, row_bytes}), rows_, rng) {}
  step(const step&) = delete;
  step& operator=(const step&) = delete;
  ~step() {
    for (void* p : pools) cudaFree(p);
    cudaFree(batch);
    cudaFree(copy_dst);
    cudaFree(slots);
  }
  // The baseline: one cudaMemcpyAsync of the bytes the step moves one way.
  void memcpy_baseline(cudaStream_t stream) const {
    CUDA_OK(cudaMemcpyAsync(copy_dst != nullptr ? copy_dst : pools[0], batch, moved_one_way, cudaMemcpyDeviceToDevice,
                            stream));
  }
};


// Copies of a step so that rotating over them touches 3x the L2.
std::vector<std::unique_ptr<step>> sets_of(const std::vector<pool_shape>& shapes, std::int32_t rows, std::size_t l2,
                                           std::mt19937_64& rng) {
  std::size_t footprint = 0;  // pools, batch and (several segments) the memcpy destination
  for (const pool_shape& ps : shapes) footprint += std::size_t(ps.layers) * (2 * std::size_t(rows) + 1) * ps.row_bytes;
  if (shapes.size() > 1 || shapes[0].layers > 1)
    for (const pool_shape& ps : shapes) footprint += std::size_t(ps.layers) * std::size_t(rows) * ps.row_bytes;
  const std::size_t k = std::clamp<std::size_t>((3 * l2 + footprint - 1) / footprint, 1, 64);
  std::vector<std::unique_ptr<step>> sets;
  for (std::size_t i = 0; i < k; ++i) sets.push_back(std::make_unique<step>(shapes, rows, rng));
  return sets;
}

// The tables of the several-pools section.
struct multi_case {
  const char* name;
  std::vector<pool_shape> shapes;
  std::int32_t rows;
};

std::vector<multi_case> multi_cases() {
  std::vector<multi_case> multi = {
      {"1: 8 x 4 KiB (strided)", {{8, 4 << 10}}, 128},
      {"1: 32 x 2 KiB (strided)", {{32, 2 << 10}}, 64},
      {"1: 8 x 4 KiB (strided)", {{8, 4 << 10}}, 512},
      {"2: 4 x 4 KiB, 4 x 12 KiB (table)", {{4, 4 << 10}, {4, 12 << 10}}, 64},
      {"2: 4 x 4 KiB, 4 x 12 KiB (table)", {{4, 4 << 10}, {4, 12 << 10}}, 256},
      {"3: 100 x 512 B each (table)", {{100, 512}, {100, 512}, {100, 512}}, 32},
      {"4: 2 x 2|6|10|14 KiB (table)", {{2, 2 << 10}, {2, 6 << 10}, {2, 10 << 10}, {2, 14 << 10}}, 64},
      {"4: 2 x 2|6|10|14 KiB (table)", {{2, 2 << 10}, {2, 6 << 10}, {2, 10 << 10}, {2, 14 << 10}}, 256},
      {"8: 1 x 4 KiB, 1 x 12 KiB alt. (table)",
       {{1, 4 << 10}, {1, 12 << 10}, {1, 4 << 10}, {1, 12 << 10}, {1, 4 << 10}, {1, 12 << 10}, {1, 4 << 10}, {1, 12 << 10}},
       64},
      {"96: 1 x 1|2|3|4 KiB (table)", std::vector<pool_shape>(), 20}};
  for (multi_case& mc : multi)
    if (mc.shapes.empty())  // 96 pools of one layer, rows of 1 to 4 KiB in turn: 96 groups
      for (int p = 0; p < 96; ++p) mc.shapes.push_back({1, std::size_t(1 + p % 4) << 10});
  return multi;
}

// The general kernels the several-pools section also forces, and their names.
struct forced {
  mk::detail::general_kernel kind;
  bool search;  // the per-thread search kernel (recurrent_sweep.cuh) instead of kind
  int units;    // a thread, below launch_policy::unroll_from_waves
};
constexpr forced forced_kernels[] = {
    {mk::detail::general_kernel::grid, false, 1},     {mk::detail::general_kernel::tiles, false, 1},
    {mk::detail::general_kernel::automatic, true, 1}, {mk::detail::general_kernel::map, false, 1},
    {mk::detail::general_kernel::grid, false, 2},     {mk::detail::general_kernel::map, false, 2}};
constexpr const char* forced_names[] = {"grid", "tiles", "srch", "map", "grid2", "map2"};

// MSTAR_BENCH_PROFILE (see main).
int profile_tables(cudaStream_t stream, std::mt19937_64& rng, std::size_t l2, const std::string& wanted) {
  std::vector<std::string> names;
  for (std::size_t at = 0; at <= wanted.size();) {
    const std::size_t semicolon = std::min(wanted.find(';', at), wanted.size()); // names hold commas
    if (semicolon > at) names.push_back(wanted.substr(at, semicolon - at));
    at = semicolon + 1;
  }
  int profiled = 0;
  for (const multi_case& mc : multi_cases()) {
    const std::string label = std::string(mc.name) + " @" + std::to_string(mc.rows);  // rows: the names repeat
    const auto wanted_here = [&](const std::string& n) { return label.find(n) != std::string::npos; };
    if (std::none_of(names.begin(), names.end(), wanted_here)) continue;
    auto sets = sets_of(mc.shapes, mc.rows, l2, rng);
    const auto once = [&](const char* variant, mstar_bench::swept_policy policy) {
      const mstar_bench::swept_policy saved = mstar_bench::tuning();
      mstar_bench::tuning() = policy;
      for (int dir = 0; dir < 2; ++dir) {
        const auto call = [&](step& s) {
          if (dir == 0)
            mstar_bench::gather<elem>(s.table, s.slots, s.rows, s.batch, stream);
          else
            mstar_bench::scatter<elem>(s.table, s.slots, s.rows, s.batch, stream);
        };
        for (int pass = 0; pass < 2; ++pass)  // warm-up: every copy, twice; copy 0 was touched k - 1 calls ago
          for (auto& s : sets) call(*s);
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaProfilerStart());
        call(*sets[0]);
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaProfilerStop());
        std::printf("profiled %d: %s | %s %s\n", profiled++, label.c_str(), variant, dir == 0 ? "gather" : "scatter");
      }
      mstar_bench::tuning() = saved;
    };
    once("default", mstar_bench::swept_policy{});
    if (mc.shapes.size() < 2) continue;  // one pool: the strided kernel only
    for (std::size_t f = 0; f < std::size(forced_kernels); ++f) {
      mstar_bench::swept_policy p{};
      p.general = forced_kernels[f].kind;
      p.search = forced_kernels[f].search;
      p.small_unroll = forced_kernels[f].units;
      once(forced_names[f], p);
    }
  }
  std::fflush(stdout);
  return profiled > 0 ? 0 : 2;
}
} // namespace

int main() {
  int device = 0;
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::mt19937_64 rng(42);

  int fails = 0;
  const std::size_t l2 = std::size_t(prop.l2CacheSize);
  const auto make_sets_of = [&](const std::vector<pool_shape>& shapes, std::int32_t rows) {
    return sets_of(shapes, rows, l2, rng);
  };
  const auto make_sets = [&](int npools, int layers, std::int32_t rows, std::size_t row_bytes) {
    return make_sets_of(std::vector<pool_shape>(std::size_t(npools), pool_shape{layers, row_bytes}), rows);
  };
  const auto round_calls = [](int calls, std::size_t k) { return int((std::size_t(calls) + k - 1) / k * k); };

  // Launch-policy sweep: every variant of mstar_bench::swept_policies, gather and scatter, HBM-resident.
  // MSTAR_BENCH_SWEEP=0 skips it; MSTAR_BENCH_POLICY=<index> runs the tables below under that variant,
  // =auto under the sweep's best (highest worst ratio to memcpy from 8 MiB moved, with one 1 MiB row
  // >= 0.6 and 1 x 4 KiB <= 3 us); unset, under the launcher's default.
  const char* sweep_env = std::getenv("MSTAR_BENCH_SWEEP");
  // MSTAR_BENCH_PROFILE=<name>[;<name>...]: only the tables of the several-pools section whose name
  // and rows ("<name> @<rows>", as in "8 x 4 KiB (strided) @128") contain one of them, each gather and scatter (default, then every general kernel forced) launched
  // once between cudaProfilerStart and cudaProfilerStop after a warm-up over all copies, for Nsight
  // Compute with --profile-from-start off (bench/kernels/profile_h200.sh); nothing else runs.
  const char* profile_env = std::getenv("MSTAR_BENCH_PROFILE");
  if (profile_env != nullptr && profile_env[0] != 0) return profile_tables(stream, rng, l2, profile_env);
  const char* policy_env = std::getenv("MSTAR_BENCH_POLICY");
  const bool sweep = sweep_env == nullptr || sweep_env[0] != '0';
  constexpr std::size_t nvar = std::size(mstar_bench::swept_policies);
  if (sweep) {
    std::printf("\n== launch-policy sweep, HBM-resident (us per call; g = gather, s = scatter; memcpy same bytes) ==\n");
    std::printf("%6s %8s %8s   ", "rows", "row", "moved");
    for (std::size_t v = 0; v < nvar; ++v) std::printf(" %7s", mstar_bench::swept_policy_names[v]);
    std::printf(" | %7s\n", "memcpy");
    struct policy_case {
      std::int32_t rows;
      std::size_t row_bytes;
    };
    std::vector<double> worst_big(nvar, 1e9), one_row(nvar, 1e9), tiny(nvar, 0);
    for (const policy_case pc :
         {policy_case{1, 4 << 10}, policy_case{1, 1 << 20}, policy_case{1024, 4 << 10}, policy_case{16, 256 << 10},
          policy_case{4, 1 << 20}, policy_case{1024, 16 << 10}, policy_case{64, 256 << 10}, policy_case{16, 1 << 20},
          policy_case{1024, 64 << 10}, policy_case{64, 1 << 20}, policy_case{1024, 1 << 20}}) {
      auto sets = make_sets(1, 1, pc.rows, pc.row_bytes);
      const std::size_t k = sets.size();
      const std::size_t moved = 2 * sets[0]->moved_one_way;
      const int calls = round_calls(calls_for(moved), k);
      std::vector<double> tg(nvar), ts(nvar);
      for (std::size_t v = 0; v < nvar; ++v) {
        mstar_bench::tuning() = mstar_bench::swept_policies[v];
        tg[v] = time_per_call_us(stream, calls, [&](int i) {
          step& s = *sets[std::size_t(i) % k];
          mstar_bench::gather<elem>(s.table, s.slots, s.rows, s.batch, stream);
        });
        ts[v] = time_per_call_us(stream, calls, [&](int i) {
          step& s = *sets[std::size_t(i) % k];
          mstar_bench::scatter<elem>(s.table, s.slots, s.rows, s.batch, stream);
        });
      }
      mstar_bench::tuning() = mstar_bench::swept_policy{};
      const double m = time_per_call_us(stream, calls, [&](int i) {
        step& s = *sets[std::size_t(i) % k];
        s.memcpy_baseline(stream);
      });
      for (int dir = 0; dir < 2; ++dir) {
        const std::vector<double>& t = dir == 0 ? tg : ts;
        std::printf("%6d %5zuKiB %6.2fMiB %c ", pc.rows, pc.row_bytes >> 10, double(moved) / (1 << 20), dir ? 's' : 'g');
        for (std::size_t v = 0; v < nvar; ++v) std::printf(" %7.2f", t[v]);
        std::printf(" | %7.2f\n", m);
        for (std::size_t v = 0; v < nvar; ++v) {
          if (moved >= (std::size_t(8) << 20)) worst_big[v] = std::min(worst_big[v], m / t[v]);
          if (pc.rows == 1 && pc.row_bytes >= (std::size_t(1) << 20)) one_row[v] = std::min(one_row[v], m / t[v]);
          if (moved <= (std::size_t(64) << 10)) tiny[v] = std::max(tiny[v], t[v]);
        }
      }
    }
    std::printf("%-26s", "worst g|s/cpy from 8 MiB");
    for (std::size_t v = 0; v < nvar; ++v) std::printf(" %7.3f", worst_big[v]);
    std::printf("\n%-26s", "worst g|s/cpy 1 x 1 MiB");
    for (std::size_t v = 0; v < nvar; ++v) std::printf(" %7.3f", one_row[v]);
    std::printf("\n%-26s", "slowest us 1 x 4 KiB");
    for (std::size_t v = 0; v < nvar; ++v) std::printf(" %7.2f", tiny[v]);
    std::printf("\n");
    if (policy_env != nullptr && std::string(policy_env) == "auto") {
      std::size_t best = nvar;
      for (std::size_t v = 0; v < nvar; ++v)
        if (one_row[v] >= 0.6 && tiny[v] <= 3.0 && (best == nvar || worst_big[v] > worst_big[best])) best = v;
      if (best < nvar) {
        mstar_bench::tuning() = mstar_bench::swept_policies[best];
        std::printf("tables below run under the sweep's best: %s\n", mstar_bench::swept_policy_names[best]);
      }
    }
  }
  if (policy_env != nullptr && std::string(policy_env) != "auto") {
    const std::size_t v = std::size_t(std::atoi(policy_env));
    if (v < nvar) {
      mstar_bench::tuning() = mstar_bench::swept_policies[v];
      std::printf("tables below run under policy %s\n", mstar_bench::swept_policy_names[v]);
    }
  }

  std::printf("\n== bandwidth, one pool of one layer, HBM-resident (moved = bytes read + bytes written) ==\n");
  std::printf("%6s %9s %10s | %9s %8s | %9s %8s | %9s %8s | %6s %6s %5s\n", "rows", "row", "moved", "gather_us",
              "GB/s", "scatter", "GB/s", "memcpy", "GB/s", "g/cpy", "s/cpy", "lnch");
  for (const std::int32_t rows : {1, 4, 16, 64, 256, 1024}) {
    for (const std::size_t row_bytes : {std::size_t(4) << 10, std::size_t(16) << 10, std::size_t(64) << 10,
                                        std::size_t(256) << 10, std::size_t(1) << 20}) {
      auto sets = make_sets(1, 1, rows, row_bytes);
      const std::size_t k = sets.size();
      const std::size_t moved = 2 * sets[0]->moved_one_way;
      const int calls = round_calls(calls_for(moved), k);
      std::size_t gnodes = 0, snodes = 0;
      const double g = time_per_call_us(stream, calls, [&](int i) {
        step& s = *sets[std::size_t(i) % k];
        mstar_bench::gather<elem>(s.table, s.slots, s.rows, s.batch, stream);
      }, &gnodes);
      const double sc = time_per_call_us(stream, calls, [&](int i) {
        step& s = *sets[std::size_t(i) % k];
        mstar_bench::scatter<elem>(s.table, s.slots, s.rows, s.batch, stream);
      }, &snodes);
      const double m = time_per_call_us(stream, calls, [&](int i) {
        step& s = *sets[std::size_t(i) % k];
        s.memcpy_baseline(stream);
      });
      const auto gbps = [&](double us) { return double(moved) / (us * 1e3); };
      const double rg = m / g, rs = m / sc;
      const bool big = moved >= (std::size_t(8) << 20);
      const bool one_big_row = rows == 1 && row_bytes >= (std::size_t(1) << 20);
      const bool small = moved <= (std::size_t(64) << 10);
      const bool ok = (!big || std::min(rg, rs) >= 0.90) && (!one_big_row || std::min(rg, rs) >= 0.6) &&
                      (!small || std::max(g, sc) <= 3.0) && gnodes == 1 && snodes == 1;
      fails += ok ? 0 : 1;
      std::printf("%6d %6zuKiB %8.2fMiB | %9.2f %8.0f | %9.2f %8.0f | %9.2f %8.0f | %6.2f %6.2f %2zu/%zu %s\n", rows,
                  row_bytes >> 10, double(moved) / (1 << 20), g, gbps(g), sc, gbps(sc), m, gbps(m), rg, rs, gnodes,
                  snodes, ok ? "" : "<- below target");
    }
  }

  std::printf("\n== bandwidth, several layers or pools, HBM-resident (memcpy: one copy of the same bytes) ==\n");
  // General tables (pools of different shapes or at unrelated addresses) are also timed through each
  // general kernel forced: the 2-D grid, the tiles kernel (block-uniform search) and the per-thread
  // search kernel the first two replace, the map kernel, and the 2-D grid and map kernels with two
  // units a thread (columns: gather and scatter us, then g/cpy and s/cpy).
  std::printf("%-34s %5s %10s | %9s %9s %9s | %6s %6s %5s | %-23s | %-23s | %-23s | %-23s | %-23s | %-23s\n",
              "pools: layers x row", "rows", "moved", "gather_us", "scatter", "memcpy", "g/cpy", "s/cpy", "lnch",
              "grid g s g/c s/c", "tiles g s g/c s/c", "srch g s g/c s/c", "map g s g/c s/c", "grid2 g s g/c s/c",
              "map2 g s g/c s/c");
  for (const multi_case& mc : multi_cases()) {
    auto sets = make_sets_of(mc.shapes, mc.rows);
    const std::size_t k = sets.size();
    const std::size_t moved = 2 * sets[0]->moved_one_way;
    const int calls = round_calls(calls_for(moved), k);
    std::size_t gnodes = 0, snodes = 0;
    const double g = time_per_call_us(stream, calls, [&](int i) {
      step& s = *sets[std::size_t(i) % k];
      mstar_bench::gather<elem>(s.table, s.slots, s.rows, s.batch, stream);
    }, &gnodes);
    const double sc = time_per_call_us(stream, calls, [&](int i) {
      step& s = *sets[std::size_t(i) % k];
      mstar_bench::scatter<elem>(s.table, s.slots, s.rows, s.batch, stream);
    }, &snodes);
    const double m = time_per_call_us(stream, calls, [&](int i) { sets[std::size_t(i) % k]->memcpy_baseline(stream); });
    const double rg = m / g, rs = m / sc;
    const bool ok = (moved < (std::size_t(8) << 20) || std::min(rg, rs) >= 0.90) && gnodes == 1 && snodes == 1;
    fails += ok ? 0 : 1;
    std::printf("%-34s %5d %8.2fMiB | %9.2f %9.2f %9.2f | %6.2f %6.2f %2zu/%zu", mc.name, mc.rows,
                double(moved) / (1 << 20), g, sc, m, rg, rs, gnodes, snodes);
    for (const auto [kind, search, units] : forced_kernels) {
      if (mc.shapes.size() < 2) break;  // one pool: the strided kernel
      const mstar_bench::swept_policy saved = mstar_bench::tuning();
      mstar_bench::tuning().general = kind;
      mstar_bench::tuning().search = search;
      mstar_bench::tuning().small_unroll = units;
      const double og = time_per_call_us(stream, calls, [&](int i) {
        step& s = *sets[std::size_t(i) % k];
        mstar_bench::gather<elem>(s.table, s.slots, s.rows, s.batch, stream);
      });
      const double os = time_per_call_us(stream, calls, [&](int i) {
        step& s = *sets[std::size_t(i) % k];
        mstar_bench::scatter<elem>(s.table, s.slots, s.rows, s.batch, stream);
      });
      mstar_bench::tuning() = saved;
      std::printf(" | %5.2f %5.2f %5.2f %5.2f", og, os, m / og, m / os);
    }
    std::printf(" %s\n", ok ? "" : "<- below target");
  }

  std::printf("\n== node steps: several pools and layers, small rows (GPU time per call) ==\n");
  std::printf("%5s %6s %5s %7s %9s | %9s %9s %9s | %5s %5s %5s\n", "pools", "layers", "rows", "row", "moved", "gather_us",
              "scatter", "zero", "g", "s", "z");
  struct shape {
    int pools, layers;
    std::int32_t rows;
    std::size_t row_bytes;
  };
  // One node step timed in each direction: prints "| gather scatter zero | launches" and the verdict.
  const auto time_step = [&](step& s) {
    const std::size_t moved = 2 * s.moved_one_way;
    std::size_t gn = 0, sn = 0, zn = 0;
    const double g = time_per_call_us(stream, 200, [&](int) { mstar_bench::gather<elem>(s.table, s.slots, s.rows, s.batch, stream); }, &gn);
    const double sc = time_per_call_us(stream, 200, [&](int) { mstar_bench::scatter<elem>(s.table, s.slots, s.rows, s.batch, stream); }, &sn);
    const double z = time_per_call_us(stream, 200, [&](int) { mstar_bench::zero_slots<elem>(s.table, s.slots, s.rows, stream); }, &zn);
    const bool ok = (moved > (std::size_t(64) << 10) || std::max({g, sc, z}) <= 3.0) && gn == 1 && sn == 1 && zn == 1;
    fails += ok ? 0 : 1;
    std::printf("%7.1fKiB | %9.2f %9.2f %9.2f | %5zu %5zu %5zu %s\n", double(moved) / 1024, g, sc, z, gn, sn, zn,
                ok ? "" : "<- below target");
  };
  for (const shape sh : {shape{1, 8, 1, 2048}, shape{1, 8, 4, 1024}, shape{2, 8, 8, 256}, shape{1, 16, 16, 128},
                         shape{4, 24, 8, 64}, shape{1, 8, 64, 4096}, shape{3, 100, 32, 512}}) {
    step s(sh.pools, sh.layers, sh.rows, sh.row_bytes, rng);
    std::printf("%5d %6d %5d %6zuB ", sh.pools, sh.layers, sh.rows, sh.row_bytes);
    time_step(s);
  }
  // Small steps of pools of different row sizes (the map kernel, or the 2-D grid for a few groups).
  struct mixed_step {
    const char* name;
    std::vector<pool_shape> shapes;
    std::int32_t rows;
  };
  std::vector<pool_shape> many;
  for (int p = 0; p < 40; ++p) many.push_back({1, std::size_t(64) * std::size_t(1 + p % 4)});
  for (const mixed_step& ms : {mixed_step{"8 pools, 1 | 3 KiB rows in turn", {{1, 1024}, {1, 3072}, {1, 1024}, {1, 3072},
                                                                           {1, 1024}, {1, 3072}, {1, 1024}, {1, 3072}},
                                          2},
                               mixed_step{"40 pools, 64 to 256 B rows", many, 4},
                               mixed_step{"2 pools: 4 x 256 B, 4 x 768 B", {{4, 256}, {4, 768}}, 8}}) {
    step s(ms.shapes, ms.rows, rng);
    std::printf("%-30s %5d ", ms.name, ms.rows);
    time_step(s);
  }
  CUDA_OK(cudaStreamDestroy(stream));
  std::printf("\ntargets: >= 0.90 of memcpy from 8 MiB moved; >= 0.6 for one row >= 1 MiB; <= 3 us for <= 64 KiB "
              "moved; 1 launch per call. rows below target: %d\n",
              fails);
  return 0;
}
