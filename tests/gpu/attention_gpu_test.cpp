// The Talker's decode attention over spans merged by a fixed tree (cuda::decode_attention_tree) on one paged cache of
// the released head shape (16 query heads over 8 KV heads of 128, pages of 16 tokens): a row's bits must not change
// with the blocks a row takes or with the other rows of its launch (the Talker picks the blocks by the row count,
// and a request's codes may not depend on its batch), and its result must be the equal shares' kernel's
// (cuda::decode_attention) up to float32 summation order, i.e. within a bf16 step of the output. Contexts from 1
// token to several hundred, so that spans, their last partial span, the tree's missing leaves and every block count
// run; spans of 32 (the Talker's), 7 and 1 (a deep tree).
#include "device_data.hpp"
#include "gpu_test.hpp"
#include "talker_cuda_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cu = qwen3_tts::cuda;
using cu::bf16;
using mstar::test::bf16_value;
using mstar::test::device_array;
using mstar::test::random_bf16;
using mstar::test::random_f32;

constexpr int heads = 16, kv_heads = 8, head_dim = 128, page = 16;
constexpr int width = (heads + 2 * kv_heads) * head_dim; // a projection row: q heads, then k, then v
constexpr float eps = 1e-6f;

// The contexts of the launch of many rows; row r's pages are its own in one pool, scattered.
const std::vector<int> lens = {1, 2, 17, 31, 32, 33, 64, 100, 255, 256, 257, 600};

int pages_of(int len) { return (len + page - 1) / page; }

// The pool every launch reads: K and V pages, the rows' projections, the norms and frequencies.
struct pool {
  int pages = 0;
  std::vector<std::vector<std::int32_t>> row_pages; // physical pages of each row of `lens`
  device_array<bf16> k, v;
  device_array<float> qkv, q_norm, k_norm, inv_freq;
  static int total_pages() {
    int n = 0;
    for (int len : lens)
      n += pages_of(len);
    return n;
  }
  pool()
      : pages(total_pages()), k(std::size_t(pages) * page * kv_heads * head_dim),
        v(std::size_t(pages) * page * kv_heads * head_dim), qkv(lens.size() * std::size_t(width)), q_norm(head_dim),
        k_norm(head_dim), inv_freq(head_dim / 2) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t i = order.size(); i > 1; --i) // a fixed shuffle
      std::swap(order[i - 1], order[(i * 2654435761u) % i]);
    std::size_t next = 0;
    for (int len : lens) {
      row_pages.emplace_back(order.begin() + std::ptrdiff_t(next),
                             order.begin() + std::ptrdiff_t(next + pages_of(len)));
      next += std::size_t(pages_of(len));
    }
    const std::size_t cache = std::size_t(pages) * page * kv_heads * head_dim;
    k.upload(random_bf16(cache, 11, 1.0f));
    v.upload(random_bf16(cache, 12, 1.0f));
    qkv.upload(random_f32(lens.size() * std::size_t(width), 13));
    std::vector<float> norm(head_dim), freq(head_dim / 2);
    for (int i = 0; i < head_dim; ++i)
      norm[std::size_t(i)] = 0.5f + float(i % 7) / 7.0f;
    for (int i = 0; i < head_dim / 2; ++i)
      freq[std::size_t(i)] = std::pow(1.0e6f, -2.0f * float(i) / float(head_dim));
    q_norm.upload(norm);
    k_norm.upload(norm);
    inv_freq.upload(freq);
  }
};

// A launch over some rows of `lens` (by index), in that order, with its page tables and outputs.
struct launch {
  std::vector<int> which;
  device_array<std::int32_t> qo, indptr, indices, last, positions;
  device_array<float> qkv, acc, m, l;
  device_array<unsigned> counters;
  device_array<bf16> out;
  static std::size_t page_count(const std::vector<int>& which) {
    std::size_t n = 0;
    for (int i : which)
      n += std::size_t(pages_of(lens[std::size_t(i)]));
    return n;
  }
  launch(const pool& p, std::vector<int> rows)
      : which(std::move(rows)), qo(which.size() + 1), indptr(which.size() + 1), indices(page_count(which)),
        last(which.size()), positions(which.size()), qkv(which.size() * std::size_t(width)),
        acc(which.size() * heads * cu::max_decode_splits * head_dim), m(which.size() * heads * cu::max_decode_splits),
        l(which.size() * heads * cu::max_decode_splits), counters(which.size() * kv_heads),
        out(which.size() * heads * head_dim) {
    std::vector<std::int32_t> q{0}, ip{0}, ix, ls, pos;
    for (std::size_t r = 0; r < which.size(); ++r) {
      const int len = lens[std::size_t(which[r])];
      q.push_back(std::int32_t(r + 1));
      for (const std::int32_t pg : p.row_pages[std::size_t(which[r])])
        ix.push_back(pg);
      ip.push_back(std::int32_t(ix.size()));
      ls.push_back(len - (pages_of(len) - 1) * page);
      pos.push_back(len - 1);
      MSTAR_CUDA_REQUIRE(cudaMemcpy(qkv.p + r * width, p.qkv.p + std::size_t(which[r]) * width, width * sizeof(float),
                                    cudaMemcpyDeviceToDevice));
    }
    qo.upload(q);
    indptr.upload(ip);
    indices.upload(ix);
    last.upload(ls);
    positions.upload(pos);
    MSTAR_CUDA_REQUIRE(cudaMemset(counters.p, 0, which.size() * kv_heads * sizeof(unsigned)));
  }
  cu::paged_view view() const {
    return {qo.p, indptr.p, indices.p, last.p, positions.p, int(which.size()), int(which.size()), page};
  }
  cu::decode_scratch scratch() const { return {acc.p, m.p, l.p, counters.p}; }
  // Row r's output (heads x head_dim bf16 bit patterns).
  std::vector<std::uint16_t> run_tree(const pool& p, int span, int blocks) {
    cu::decode_attention_tree(qkv.p, p.q_norm.p, p.k_norm.p, p.inv_freq.p, {p.k.p, p.v.p}, view(), out.p, heads,
                              kv_heads, head_dim, eps, scratch(), span, blocks, nullptr);
    MSTAR_CUDA_REQUIRE(cudaGetLastError());
    return out.download<std::uint16_t>(which.size() * heads * head_dim);
  }
  std::vector<std::uint16_t> run_shares(const pool& p) {
    cu::decode_attention(qkv.p, p.q_norm.p, p.k_norm.p, p.inv_freq.p, {p.k.p, p.v.p}, view(), out.p, heads, kv_heads,
                         head_dim, eps, scratch(), 8, nullptr);
    MSTAR_CUDA_REQUIRE(cudaGetLastError());
    return out.download<std::uint16_t>(which.size() * heads * head_dim);
  }
};

std::vector<std::uint16_t> row_of(const std::vector<std::uint16_t>& all, std::size_t r) {
  const std::size_t n = std::size_t(heads) * head_dim;
  return {all.begin() + std::ptrdiff_t(r * n), all.begin() + std::ptrdiff_t((r + 1) * n)};
}

} // namespace

TEST_CASE("the tree decode attention gives a row the same bits in any number of blocks, alone and among other rows, "
          "and the equal shares' result within a bf16 step" *
          doctest::skip(!mstar::test::has_gpu())) {
  pool p;
  std::vector<int> all(lens.size());
  std::iota(all.begin(), all.end(), 0);
  launch many(p, all);
  const auto shares = many.run_shares(p);
  for (const int span : {32, 7, 1}) {
    CAPTURE(span);
    const auto first = many.run_tree(p, span, 1);
    // Within a bf16 step of the equal shares' output: both sum float32 in their own order, then round to bf16.
    float worst = 0.0f, largest = 0.0f;
    for (std::size_t i = 0; i < first.size(); ++i) {
      worst = std::max(worst, std::fabs(bf16_value(first[i]) - bf16_value(shares[i])));
      largest = std::max(largest, std::fabs(bf16_value(shares[i])));
    }
    MESSAGE("span " << span << ": largest |tree - equal shares| " << worst << " of a largest output " << largest);
    CHECK(worst <= largest / 128.0f);
    for (const int blocks : {2, 3, 4, 8, 16}) {
      CAPTURE(blocks);
      CHECK(many.run_tree(p, span, blocks) == first);
    }
    // Each row alone, in the blocks the Talker would give one row and in one block: its bits among the others.
    for (std::size_t r = 0; r < lens.size(); ++r) {
      CAPTURE(lens[r]);
      launch alone(p, {int(r)});
      CHECK(alone.run_tree(p, span, cu::decode_tree_blocks(1, kv_heads)) == row_of(first, r));
      CHECK(alone.run_tree(p, span, 1) == row_of(first, r));
    }
    // The rows in another order, two of them twice: each row's bits again.
    launch mixed(p, {11, 3, 0, 7, 3, 9, 11, 1});
    const auto shuffled = mixed.run_tree(p, span, cu::decode_tree_blocks(8, kv_heads));
    for (std::size_t r = 0; r < mixed.which.size(); ++r)
      CHECK(row_of(shuffled, r) == row_of(first, std::size_t(mixed.which[r])));
  }
}

TEST_CASE("the tree decode attention refuses a head shape it has no kernel for, a span below 1 and blocks outside "
          "1..max_decode_splits, naming them") {
  cu::paged_view one{};
  one.rows = 1;
  cu::decode_scratch none{};
  auto call = [&](int h, int kvh, int d, int span, int blocks) {
    cu::decode_attention_tree(nullptr, nullptr, nullptr, nullptr, {}, one, nullptr, h, kvh, d, eps, none, span, blocks,
                              nullptr);
  };
  CHECK_FALSE(cu::decode_attention_tree_fits(64, 8, 64)); // 8 query heads a KV head of 64: its stack exceeds 48 KB
  CHECK(cu::decode_attention_tree_fits(heads, kv_heads, head_dim));
  CHECK_THROWS_WITH_AS(call(64, 8, 64, 32, 1), doctest::Contains("64 query heads over 8 KV heads of 64"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(call(heads, kv_heads, head_dim, 0, 1), doctest::Contains("span 0"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(call(heads, kv_heads, head_dim, 32, 17), doctest::Contains("blocks 17"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(call(heads, kv_heads, head_dim, 32, 2), doctest::Contains("scratch"), std::invalid_argument);
}

TEST_CASE("decode_tree_blocks spreads a few rows over up to max_decode_splits blocks and gives many rows one") {
  CHECK(cu::decode_tree_blocks(1, kv_heads) == cu::max_decode_splits);
  CHECK(cu::decode_tree_blocks(16, kv_heads) == 8);
  CHECK(cu::decode_tree_blocks(64, kv_heads) == 2);
  CHECK(cu::decode_tree_blocks(128, kv_heads) == 1);
  CHECK(cu::decode_tree_blocks(512, kv_heads) == 1);
  for (int rows = 1; rows <= 256; ++rows) {
    const int b = cu::decode_tree_blocks(rows, kv_heads);
    CHECK((b >= 1 && b <= cu::max_decode_splits && (b & (b - 1)) == 0));
  }
}
