// Random recurrent-state cases shared by the host tests (tests/kernels) and the GPU tests (tests/gpu):
// pools of several layers and odd state sizes, misaligned bases, slot tables with sink and skipped
// rows, data of random non-zero bytes and a poison byte for outputs.
#pragma once

#include <mstar/kernels/recurrent.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <vector>

namespace mstar::test {

inline constexpr unsigned char poison_byte = 0xEE;

struct pool_shape {
  int layers;
  std::int64_t state_elems;
};

// Shape and slot tables of one case; storage is the caller's (host vectors or device buffers).
struct recurrent_case {
  std::vector<pool_shape> pools;
  std::int32_t rows = 0;
  std::int32_t slot_count = 0;
  std::int64_t misalign = 0;        // elements added to every pool base and to the batch base
  std::vector<std::int32_t> slots;  // per row: distinct slots > 0, some 0 (sink), some -1 (skip)
  std::vector<std::int32_t> freed;  // slots to zero: distinct, with a few -1 entries

  std::int64_t pool_elems(std::size_t p) const {
    return misalign + std::int64_t(pools[p].layers) * slot_count * pools[p].state_elems;
  }
  std::size_t segments() const {
    std::size_t n = 0;
    for (const auto& p : pools) n += std::size_t(p.layers);
    return n;
  }

  // Segments in pool-major, layer-minor order, batch offsets from layout_batch. Returns the batch
  // size in elements (misalign included).
  template <class T>
  std::int64_t table(std::span<T* const> pool_bases, std::vector<kernels::recurrent_segment<T>>& out) const {
    out.clear();
    for (std::size_t p = 0; p < pools.size(); ++p)
      for (int l = 0; l < pools[p].layers; ++l)
        out.push_back({pool_bases[p] + misalign + std::int64_t(l) * slot_count * pools[p].state_elems,
                       pools[p].state_elems, slot_count, 0});
    return misalign + kernels::layout_batch<T>(out, rows);
  }
};

// sink and skip fractions in percent; the rest of the rows get distinct random slots > 0.
inline recurrent_case make_case(std::mt19937_64& rng, std::int32_t rows, std::vector<pool_shape> pools,
                                std::int64_t misalign, int sink_pct = 10, int skip_pct = 10) {
  recurrent_case c;
  c.pools = std::move(pools);
  c.rows = rows;
  c.misalign = misalign;
  c.slot_count = rows + 1 + std::int32_t(rng() % 8);
  std::vector<std::int32_t> perm(std::size_t(c.slot_count - 1));
  std::iota(perm.begin(), perm.end(), 1);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.slots.resize(std::size_t(rows));
  for (std::int32_t r = 0; r < rows; ++r) {
    const int roll = int(rng() % 100);
    c.slots[std::size_t(r)] = roll < sink_pct ? kernels::sink_slot
                              : roll < sink_pct + skip_pct ? kernels::skip_slot
                                                           : perm[std::size_t(r)];
  }
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::size_t nfreed = 1 + std::size_t(rng() % std::max<std::size_t>(1, perm.size()));
  c.freed.assign(perm.begin(), perm.begin() + std::ptrdiff_t(std::min(nfreed, perm.size())));
  c.freed.push_back(kernels::skip_slot);
  std::shuffle(c.freed.begin(), c.freed.end(), rng);
  return c;
}

// Random bytes 1..255: no element of the data is zero, so an output that should be zeros and one
// that should be data never agree by accident.
template <class T>
void fill_random(std::span<T> data, std::mt19937_64& rng) {
  auto* bytes = reinterpret_cast<unsigned char*>(data.data());
  for (std::size_t i = 0; i < data.size_bytes(); ++i) bytes[i] = static_cast<unsigned char>(1 + rng() % 255);
}

template <class T>
void poison(std::span<T> data) {
  std::memset(static_cast<void*>(data.data()), poison_byte, data.size_bytes());
}

// Random pools with the sink (slot 0) of every layer zero, as the pool keeps it.
template <class T>
std::vector<std::vector<T>> random_pools(const recurrent_case& c, std::mt19937_64& rng) {
  std::vector<std::vector<T>> pools(c.pools.size());
  for (std::size_t p = 0; p < c.pools.size(); ++p) {
    pools[p].resize(std::size_t(c.pool_elems(p)));
    fill_random<T>(pools[p], rng);
    for (int l = 0; l < c.pools[p].layers; ++l)
      std::memset(static_cast<void*>(pools[p].data() + c.misalign +
                                     std::int64_t(l) * c.slot_count * c.pools[p].state_elems),
                  0, std::size_t(c.pools[p].state_elems) * sizeof(T));
  }
  return pools;
}

template <class T>
bool same_bytes(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

} // namespace mstar::test
