// Host reference of the recurrent-state kernels (mstar::kernels::host), checked against a naive
// element-by-element oracle written from the semantics in recurrent.hpp. The GPU tests compare the
// CUDA kernels with this reference, so it is the root of the chain.
#include "recurrent_cases.hpp"

#include <mstar/kernels/recurrent.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace {

namespace mk = mstar::kernels;
namespace mt = mstar::test;

// The element oracle: one element at a time, from the semantics alone.
template <class T>
void oracle_gather(const std::vector<mk::recurrent_segment<T>>& table, const std::vector<std::int32_t>& slots,
                   T* batch) {
  for (const auto& s : table)
    for (std::size_t r = 0; r < slots.size(); ++r)
      for (std::int64_t e = 0; e < s.state_elems; ++e) {
        T v{};
        if (slots[r] > 0) v = s.pool_layer[slots[r] * s.state_elems + e];
        else std::memset(static_cast<void*>(&v), 0, sizeof(T));
        batch[s.batch_offset + std::int64_t(r) * s.state_elems + e] = v;
      }
}

template <class T>
void oracle_scatter(const std::vector<mk::recurrent_segment<T>>& table, const std::vector<std::int32_t>& slots,
                    const T* batch) {
  for (const auto& s : table)
    for (std::size_t r = 0; r < slots.size(); ++r)
      if (slots[r] > 0)
        for (std::int64_t e = 0; e < s.state_elems; ++e)
          s.pool_layer[slots[r] * s.state_elems + e] = batch[s.batch_offset + std::int64_t(r) * s.state_elems + e];
}

template <class T>
void oracle_zero(const std::vector<mk::recurrent_segment<T>>& table, const std::vector<std::int32_t>& slots) {
  for (const auto& s : table)
    for (const std::int32_t slot : slots)
      if (slot >= 0) std::memset(static_cast<void*>(s.pool_layer + slot * s.state_elems), 0, std::size_t(s.state_elems) * sizeof(T));
}

// Two identical random states: one for the reference, one for the oracle.
template <class T>
struct twin {
  mt::recurrent_case c;
  std::vector<std::vector<T>> pools_ref, pools_orc;
  std::vector<mk::recurrent_segment<T>> table_ref, table_orc;
  std::vector<T> batch_ref, batch_orc;

  twin(std::mt19937_64& rng, mt::recurrent_case cs) : c(std::move(cs)) {
    pools_ref = mt::random_pools<T>(c, rng);
    pools_orc = pools_ref;
    std::vector<T*> bases_ref, bases_orc;
    for (auto& p : pools_ref) bases_ref.push_back(p.data());
    for (auto& p : pools_orc) bases_orc.push_back(p.data());
    const auto n = c.table<T>(bases_ref, table_ref);
    c.table<T>(bases_orc, table_orc);
    batch_ref.resize(std::size_t(n));
    batch_orc.resize(std::size_t(n));
  }
  T* batch_at(std::vector<T>& b) { return b.data() + c.misalign; }
  bool pools_equal() const {
    for (std::size_t p = 0; p < pools_ref.size(); ++p)
      if (!mt::same_bytes<T>(pools_ref[p], pools_orc[p])) return false;
    return true;
  }
};

const std::vector<std::int32_t> row_counts = {1, 2, 3, 7, 31, 64, 100, 255, 513, 1024};

// Pools of odd and even state sizes, several layers each; misalignment of 0 or 1 element.
std::vector<mt::pool_shape> shapes_for(std::int32_t rows, std::mt19937_64& rng) {
  const std::int64_t cap = rows > 256 ? 40 : 300;
  return {{1 + int(rng() % 3), 1 + std::int64_t(rng() % cap)}, {2, 8}, {1, 1 + std::int64_t(rng() % 7)}};
}

} // namespace

TEST_CASE_TEMPLATE("gather copies each row's slot into its batch row and writes zeros for sink and skipped rows", T,
                   float, mstar::bf16, mstar::f16, std::uint8_t, double) {
  std::mt19937_64 rng(1234 + sizeof(T));
  for (const std::int32_t rows : row_counts) {
    for (const std::int64_t misalign : {0, 1}) {
      twin<T> t(rng, mt::make_case(rng, rows, shapes_for(rows, rng), misalign));
      mt::poison<T>(t.batch_ref);
      mt::poison<T>(t.batch_orc);
      mk::host::gather<T>(t.table_ref, t.c.slots.data(), rows, t.batch_at(t.batch_ref), nullptr);
      oracle_gather<T>(t.table_orc, t.c.slots, t.batch_at(t.batch_orc));
      CAPTURE(rows);
      CAPTURE(misalign);
      CHECK(mt::same_bytes<T>(t.batch_ref, t.batch_orc));
      CHECK(t.pools_equal());  // gather never writes the pools
    }
  }
}

TEST_CASE_TEMPLATE("scatter writes batch rows into their slots and leaves sink, skipped and unnamed slots untouched",
                   T, float, mstar::bf16, mstar::f16, std::uint8_t) {
  std::mt19937_64 rng(99 + sizeof(T));
  for (const std::int32_t rows : row_counts) {
    for (const std::int64_t misalign : {0, 1}) {
      twin<T> t(rng, mt::make_case(rng, rows, shapes_for(rows, rng), misalign, 15, 15));
      mt::fill_random<T>(t.batch_ref, rng);
      t.batch_orc = t.batch_ref;
      mk::host::scatter<T>(t.table_ref, t.c.slots.data(), rows, t.batch_at(t.batch_ref), nullptr);
      oracle_scatter<T>(t.table_orc, t.c.slots, t.batch_at(t.batch_orc));
      CAPTURE(rows);
      CHECK(t.pools_equal());
      // the sink of every segment is still zero
      for (const auto& s : t.table_ref)
        for (std::int64_t e = 0; e < s.state_elems; ++e) {
          T zero;
          std::memset(static_cast<void*>(&zero), 0, sizeof(T));
          REQUIRE(std::memcmp(&s.pool_layer[e], &zero, sizeof(T)) == 0);
        }
    }
  }
}

TEST_CASE_TEMPLATE("zero_slots zeros the listed slots of every pool and layer and nothing else", T, float, mstar::bf16,
                   std::uint8_t) {
  std::mt19937_64 rng(7 + sizeof(T));
  for (const std::int32_t rows : row_counts) {
    twin<T> t(rng, mt::make_case(rng, rows, shapes_for(rows, rng), rows % 2));
    mk::host::zero_slots<T>(t.table_ref, t.c.freed.data(), std::int32_t(t.c.freed.size()), nullptr);
    oracle_zero<T>(t.table_orc, t.c.freed);
    CAPTURE(rows);
    CHECK(t.pools_equal());
  }
}

TEST_CASE("gather after scatter gives back the scattered rows, and zeros for sink and skipped rows") {
  std::mt19937_64 rng(5);
  twin<float> t(rng, mt::make_case(rng, 200, {{3, 33}, {1, 64}}, 0, 20, 20));
  std::vector<float> in(t.batch_ref.size());
  mt::fill_random<float>(in, rng);
  mk::host::scatter<float>(t.table_ref, t.c.slots.data(), t.c.rows, in.data(), nullptr);
  mt::poison<float>(t.batch_ref);
  mk::host::gather<float>(t.table_ref, t.c.slots.data(), t.c.rows, t.batch_ref.data(), nullptr);
  for (const auto& s : t.table_ref)
    for (std::int32_t r = 0; r < t.c.rows; ++r)
      for (std::int64_t e = 0; e < s.state_elems; ++e) {
        const std::int64_t i = s.batch_offset + r * s.state_elems + e;
        const float want = t.c.slots[std::size_t(r)] > 0 ? in[std::size_t(i)] : 0.0f;
        REQUIRE(std::memcmp(&t.batch_ref[std::size_t(i)], &want, sizeof(float)) == 0);
      }
}

TEST_CASE("layout_batch starts every segment's block on a 16-byte boundary with no two blocks overlapping") {
  for (const std::int64_t state : {1, 3, 8, 13, 1000}) {
    std::vector<mstar::bf16> pool(16);
    std::vector<mk::recurrent_segment<mstar::bf16>> table(5, {pool.data(), state, 1, -1});
    const std::int32_t rows = 7;
    const auto total = mk::layout_batch<mstar::bf16>(table, rows);
    std::int64_t end = 0;
    for (const auto& s : table) {
      CHECK(s.batch_offset * 2 % 16 == 0);
      CHECK(s.batch_offset >= end);
      end = s.batch_offset + rows * state;
    }
    CHECK(total == end);
  }
}

TEST_CASE("row addresses send reads of sink and skipped rows to the zero sink and give them no write address") {
  std::vector<float> pool(4 * 10 * 6);
  std::vector<mk::recurrent_segment<float>> table = {{pool.data(), 6, 10, 0}, {pool.data() + 60, 6, 10, 0}};
  const std::vector<std::int32_t> slots = {3, 0, -1, 9};
  std::vector<mk::row_address<float>> addr(table.size() * slots.size());
  mk::build_row_addresses<float>(table, slots, addr);
  for (std::size_t s = 0; s < table.size(); ++s) {
    const auto* a = &addr[s * slots.size()];
    CHECK(a[0].read == table[s].pool_layer + 18);
    CHECK(a[0].write == table[s].pool_layer + 18);
    CHECK(a[1].read == table[s].pool_layer);
    CHECK(a[1].write == nullptr);
    CHECK(a[2].read == table[s].pool_layer);
    CHECK(a[2].write == nullptr);
    CHECK(a[3].write == table[s].pool_layer + 54);
  }
  std::vector<mk::row_index> idx(slots.size());
  mk::build_row_indices(slots, idx);
  CHECK(idx[0].read == 3);
  CHECK(idx[0].write == 3);
  CHECK(idx[1].read == 0);
  CHECK(idx[1].write == -1);
  CHECK(idx[2].read == 0);
  CHECK(idx[2].write == -1);
  CHECK(idx[3].read == 9);
}

TEST_CASE("a model step in place through row addresses equals gather, the same update, then scatter") {
  std::mt19937_64 rng(11);
  twin<float> t(rng, mt::make_case(rng, 64, {{2, 17}, {1, 5}}, 0, 20, 20));
  const auto update = [](float x, std::int64_t e) { return x * 0.5f + float(e); };
  // copy path
  mk::host::gather<float>(t.table_ref, t.c.slots.data(), t.c.rows, t.batch_ref.data(), nullptr);
  for (const auto& s : t.table_ref)
    for (std::int32_t r = 0; r < t.c.rows; ++r)
      for (std::int64_t e = 0; e < s.state_elems; ++e) {
        auto& x = t.batch_ref[std::size_t(s.batch_offset + r * s.state_elems + e)];
        x = update(x, e);
      }
  mk::host::scatter<float>(t.table_ref, t.c.slots.data(), t.c.rows, t.batch_ref.data(), nullptr);
  // in-place path
  std::vector<mk::row_address<float>> addr(t.table_orc.size() * t.c.slots.size());
  mk::build_row_addresses<float>(t.table_orc, t.c.slots, addr);
  for (std::size_t s = 0; s < t.table_orc.size(); ++s)
    for (std::size_t r = 0; r < t.c.slots.size(); ++r) {
      const auto a = addr[s * t.c.slots.size() + r];
      if (a.write == nullptr) continue;
      for (std::int64_t e = 0; e < t.table_orc[s].state_elems; ++e) a.write[e] = update(a.read[e], e);
    }
  CHECK(t.pools_equal());
}

TEST_CASE("a slot outside the pool is refused, naming the row and the pool's slot range") {
  std::vector<float> pool(4 * 3), batch(8);
  std::vector<mk::recurrent_segment<float>> table = {{pool.data(), 3, 4, 0}};
  const std::vector<std::int32_t> slots = {1, 4};
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(table, slots.data(), 2, batch.data(), nullptr),
                       doctest::Contains("row 1 names slot 4"), std::out_of_range);
  const std::vector<std::int32_t> negative = {-2};
  CHECK_THROWS_AS(mk::host::scatter<float>(table, negative.data(), 1, batch.data(), nullptr), std::out_of_range);
}

TEST_CASE("a table of more segments than one launch takes is refused with the way out") {
  std::vector<float> pool(8);
  std::vector<mk::recurrent_segment<float>> table(mk::max_segments + 1, {pool.data(), 1, 1, 0});
  std::vector<float> batch(table.size());
  const std::int32_t slot = 0;
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(table, &slot, 1, batch.data(), nullptr),
                       doctest::Contains("split the node's pools"), std::invalid_argument);
}

TEST_CASE("a segment without state or without a pool is refused") {
  std::vector<float> pool(8), batch(8);
  const std::int32_t slot = 0;
  std::vector<mk::recurrent_segment<float>> empty_state = {{pool.data(), 0, 2, 0}};
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(empty_state, &slot, 1, batch.data(), nullptr),
                       doctest::Contains("state_elems is 0"), std::invalid_argument);
  std::vector<mk::recurrent_segment<float>> no_pool = {{nullptr, 2, 2, 0}};
  CHECK_THROWS_WITH_AS(mk::host::zero_slots<float>(no_pool, &slot, 1, nullptr), doctest::Contains("pool_layer is null"),
                       std::invalid_argument);
}

TEST_CASE("a null slot table or batch is refused by the host reference as by the launchers") {
  std::vector<float> pool(4 * 3), batch(8);
  std::vector<mk::recurrent_segment<float>> table = {{pool.data(), 3, 4, 0}};
  const std::int32_t slot = 1;
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(table, nullptr, 1, batch.data(), nullptr),
                       doctest::Contains("slots is null"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(mk::host::scatter<float>(table, &slot, 1, nullptr, nullptr), doctest::Contains("batch is null"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mk::host::zero_slots<float>(table, nullptr, 1, nullptr), doctest::Contains("slots is null"),
                       std::invalid_argument);
  // An empty step touches nothing, so it needs no pointers.
  CHECK_NOTHROW(mk::host::gather<float>(table, nullptr, 0, nullptr, nullptr));
  CHECK_NOTHROW(mk::host::zero_slots<float>(table, nullptr, 0, nullptr));
}

TEST_CASE("a slot outside the pool is refused before anything is written, in every direction") {
  // Two layers of one pool of 4 slots and a second pool of 2 slots: row 1's slot 3 fits the first
  // pool, not the second, so a per-segment check would have written the first pool already.
  std::vector<float> pool_a(2 * 4 * 3), pool_b(2 * 3);
  for (std::size_t i = 0; i < pool_a.size(); ++i) pool_a[i] = float(i + 1);
  for (std::size_t i = 0; i < pool_b.size(); ++i) pool_b[i] = float(100 + i);
  std::vector<mk::recurrent_segment<float>> table = {
      {pool_a.data(), 3, 4, 0}, {pool_a.data() + 12, 3, 4, 0}, {pool_b.data(), 3, 2, 0}};
  const std::int32_t rows = 2;
  std::vector<float> batch(std::size_t(mk::layout_batch<float>(table, rows)), -7.0f);
  const std::vector<std::int32_t> slots = {1, 3};
  const auto a0 = pool_a, b0 = pool_b, batch0 = batch;
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(table, slots.data(), rows, batch.data(), nullptr),
                       doctest::Contains("row 1 names slot 3"), std::out_of_range);
  CHECK(batch == batch0);
  std::vector<float> input(batch.size(), 5.0f);
  CHECK_THROWS_AS(mk::host::scatter<float>(table, slots.data(), rows, input.data(), nullptr), std::out_of_range);
  CHECK(pool_a == a0);
  CHECK(pool_b == b0);
  CHECK_THROWS_AS(mk::host::zero_slots<float>(table, slots.data(), rows, nullptr), std::out_of_range);
  CHECK(pool_a == a0);
  CHECK(pool_b == b0);
}


TEST_CASE("a table whose segments share batch rows is refused with the way out: layout_batch for this row count") {
  std::vector<float> pool(3 * 5 * 4);
  // A pool's own table (every batch_offset 0, as recurrent_state_pool::segments() gives it): all three
  // layers would land in one batch block.
  std::vector<mk::recurrent_segment<float>> table = {
      {pool.data(), 4, 5, 0}, {pool.data() + 20, 4, 5, 0}, {pool.data() + 40, 4, 5, 0}};
  const std::vector<std::int32_t> slots = {1, 2, 3, 4};
  std::vector<float> batch(3 * 4 * 4, -7.0f);
  const auto batch0 = batch;
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(table, slots.data(), 4, batch.data(), nullptr),
                       doctest::Contains("layout_batch"), std::invalid_argument);
  CHECK(batch == batch0);
  CHECK_THROWS_WITH_AS(mk::host::scatter<float>(table, slots.data(), 4, batch.data(), nullptr),
                       doctest::Contains("overlap"), std::invalid_argument);
  // Laid out for 2 rows, called with 4: segment 0's rows 2..3 are segment 1's rows 0..1.
  mk::layout_batch<float>(table, 2);
  CHECK_THROWS_WITH_AS(mk::host::gather<float>(table, slots.data(), 4, batch.data(), nullptr),
                       doctest::Contains("layout_batch"), std::invalid_argument);
  // The same table laid out for 4 rows is accepted; zero_slots has no batch and never refuses offsets.
  mk::layout_batch<float>(table, 4);
  CHECK_NOTHROW(mk::host::gather<float>(table, slots.data(), 4, batch.data(), nullptr));
  std::vector<mk::recurrent_segment<float>> zeroed = {{pool.data(), 4, 5, 0}, {pool.data() + 20, 4, 5, 0}};
  CHECK_NOTHROW(mk::host::zero_slots<float>(zeroed, slots.data(), 4, nullptr));
  // Disjoint blocks in any order (pools and batch blocks in reverse) are accepted and round-trip.
  std::vector<mk::recurrent_segment<float>> reversed = {
      {pool.data() + 40, 4, 5, 32}, {pool.data() + 20, 4, 5, 16}, {pool.data(), 4, 5, 0}};
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = float(i % 20 < 4 ? 0 : i);
  std::vector<float> copy(48, -7.0f);
  CHECK_NOTHROW(mk::host::gather<float>(reversed, slots.data(), 4, copy.data(), nullptr));
  const auto pool0 = pool;
  CHECK_NOTHROW(mk::host::scatter<float>(reversed, slots.data(), 4, copy.data(), nullptr));
  CHECK(pool == pool0);
}

TEST_CASE("scatter refuses two segments over the same pool memory, which would race on the GPU") {
  std::vector<float> pool(2 * 5 * 4);
  std::vector<mk::recurrent_segment<float>> table = {{pool.data(), 4, 5, 0}, {pool.data(), 4, 5, 0}};
  const std::vector<std::int32_t> slots = {1, 2};
  std::vector<float> batch(std::size_t(mk::layout_batch<float>(table, 2)), 3.0f);
  const auto pool0 = pool;
  CHECK_THROWS_WITH_AS(mk::host::scatter<float>(table, slots.data(), 2, batch.data(), nullptr),
                       doctest::Contains("each (pool, layer) once"), std::invalid_argument);
  CHECK(pool == pool0);
  // Reading the same pool twice (gather) and zeroing it twice are well defined.
  CHECK_NOTHROW(mk::host::gather<float>(table, slots.data(), 2, batch.data(), nullptr));
  CHECK_NOTHROW(mk::host::zero_slots<float>(table, slots.data(), 2, nullptr));
}
