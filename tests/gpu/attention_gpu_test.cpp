// The CUDA Talker's fused decode attention (decode_attention: the q/k norm, RoPE, the new token's K/V append and
// the attention in one launch) against its two-launch form (qk_norm_rope_append, then paged_attention), on random
// inputs at the released Talker's head shape, at the tiny fixtures' and at a group of 8 query heads a KV head, over
// contexts of 1 to 1,029 tokens on scattered pages: in 8 equal shares, in shares of at least 4 tokens and in one
// block a row (a block's share from 1 token to 1,029). Rules: the appended K and V are the same bits; the two
// outputs (bf16, sums in different orders) agree within 8e-3 of the largest; a row's output is the same bits
// alone as among the others.
#include "device_array.hpp"
#include "gpu_test.hpp"
#include "talker_cuda_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace {

using mstar::test::bf16_value;
using mstar::test::device_array;
using mstar::test::random_bf16;
using mstar::test::random_f32;
using qwen3_tts::cuda::bf16;

constexpr int block_tokens = 16;

struct shape {
  int heads, kv_heads, head_dim;
};

// Rows of the given context lengths (the new token included) on pages handed out in a scattered order, and
// every buffer a launch of both forms needs.
struct attention_rig {
  shape sh;
  std::vector<int> lens;
  int rows, width, pages;
  std::size_t cache_elems;
  std::vector<std::int32_t> page_indptr, page_indices, last_page_len, positions;
  std::vector<std::uint16_t> cache_k0, cache_v0;
  device_array<float> qkv, q_norm, k_norm, inv_freq, q;
  device_array<bf16> k, v, out;
  device_array<std::int32_t> qo_d, page_indptr_d, page_indices_d, last_page_len_d, positions_d;
  device_array<float> acc, m, l;
  device_array<unsigned> counters;

  attention_rig(shape s, std::vector<int> lens_)
      : sh(s), lens(std::move(lens_)), rows(int(lens.size())), width((s.heads + 2 * s.kv_heads) * s.head_dim),
        pages(count_pages(lens)), cache_elems(std::size_t(pages) * block_tokens * s.kv_heads * s.head_dim),
        qkv(std::size_t(rows) * width), q_norm(std::size_t(s.head_dim)), k_norm(std::size_t(s.head_dim)),
        inv_freq(std::size_t(s.head_dim / 2)), q(std::size_t(rows) * s.heads * s.head_dim), k(cache_elems),
        v(cache_elems), out(std::size_t(rows) * s.heads * s.head_dim), qo_d(std::size_t(rows) + 1),
        page_indptr_d(std::size_t(rows) + 1), page_indices_d(std::size_t(pages)), last_page_len_d(std::size_t(rows)),
        positions_d(std::size_t(rows)),
        acc(std::size_t(rows) * s.heads * qwen3_tts::cuda::max_decode_splits * s.head_dim),
        m(std::size_t(rows) * s.heads * qwen3_tts::cuda::max_decode_splits),
        l(std::size_t(rows) * s.heads * qwen3_tts::cuda::max_decode_splits), counters(std::size_t(rows) * s.kv_heads) {
    // The pool's pages go to the rows in a shuffled order, so a row's pages are scattered.
    std::vector<std::int32_t> order(static_cast<std::size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    page_indptr.push_back(0);
    for (int r = 0; r < rows; ++r) {
      const int n = (lens[std::size_t(r)] + block_tokens - 1) / block_tokens;
      for (int i = 0; i < n; ++i)
        page_indices.push_back(order[page_indices.size()]);
      page_indptr.push_back(std::int32_t(page_indices.size()));
      last_page_len.push_back(std::int32_t(lens[std::size_t(r)] - (n - 1) * block_tokens));
      positions.push_back(std::int32_t(lens[std::size_t(r)] - 1 + 3 * r)); // any position: RoPE takes it
    }
    cache_k0 = random_bf16(cache_elems, 11, 2.0f);
    cache_v0 = random_bf16(cache_elems, 12, 2.0f);
    qkv.upload(random_f32(std::size_t(rows) * width, 13));
    std::vector<float> nq = random_f32(std::size_t(s.head_dim), 14), nk = random_f32(std::size_t(s.head_dim), 15);
    for (auto* n : {&nq, &nk})
      for (float& x : *n)
        x = 1.0f + x / 6.0f; // RMSNorm weights in [0.5, 1.5)
    q_norm.upload(nq);
    k_norm.upload(nk);
    std::vector<float> f(std::size_t(s.head_dim / 2));
    for (int i = 0; i < s.head_dim / 2; ++i)
      f[std::size_t(i)] = 1.0f / std::pow(1e6f, float(2 * i) / float(s.head_dim));
    inv_freq.upload(f);
    MSTAR_CUDA_REQUIRE(cudaMemset(counters.p, 0, std::size_t(rows) * s.kv_heads * sizeof(unsigned)));
  }

  static int count_pages(const std::vector<int>& lens) {
    int n = 0;
    for (int len : lens)
      n += (len + block_tokens - 1) / block_tokens;
    return n;
  }

  // The view of rows first..first+count-1 (their tokens are 0..count-1).
  qwen3_tts::cuda::paged_view view(int first, int count) {
    std::vector<std::int32_t> qo(std::size_t(count) + 1), indptr(std::size_t(count) + 1);
    std::iota(qo.begin(), qo.end(), 0);
    for (int i = 0; i <= count; ++i)
      indptr[std::size_t(i)] = page_indptr[std::size_t(first + i)];
    qo_d.upload(qo);
    page_indptr_d.upload(indptr);
    page_indices_d.upload(page_indices);
    last_page_len_d.upload(
        std::vector<std::int32_t>(last_page_len.begin() + first, last_page_len.begin() + first + count));
    positions_d.upload(std::vector<std::int32_t>(positions.begin() + first, positions.begin() + first + count));
    qwen3_tts::cuda::paged_view v;
    v.qo_indptr = qo_d.p;
    v.page_indptr = page_indptr_d.p;
    v.page_indices = page_indices_d.p;
    v.last_page_len = last_page_len_d.p;
    v.positions = positions_d.p;
    v.rows = count;
    v.tokens = count;
    v.block_tokens = block_tokens;
    return v;
  }

  void reset_cache() {
    k.upload(cache_k0);
    v.upload(cache_v0);
  }

  struct result {
    std::vector<std::uint16_t> out, k, v;
  };
  result read(int rows_out) const {
    return {out.download<std::uint16_t>(std::size_t(rows_out) * sh.heads * sh.head_dim),
            k.download<std::uint16_t>(cache_elems), v.download<std::uint16_t>(cache_elems)};
  }

  // The two-launch form over every row, from the initial cache.
  result two_launch() {
    reset_cache();
    const auto vw = view(0, rows);
    qwen3_tts::cuda::qk_norm_rope_append(qkv.p, q_norm.p, k_norm.p, inv_freq.p, q.p, {k.p, v.p}, vw, sh.heads,
                                         sh.kv_heads, sh.head_dim, 1e-6f, nullptr);
    qwen3_tts::cuda::paged_attention(q.p, {k.p, v.p}, vw, out.p, sh.heads, sh.kv_heads, sh.head_dim, nullptr);
    return read(rows);
  }

  // The fused form over rows first..first+count-1 (qkv row first is its token 0), from the initial cache; a row's 8
  // shares dealt to `blocks` blocks (0: one a share).
  result fused(int first, int count, int chunk, int blocks = 0) {
    reset_cache();
    const auto vw = view(first, count);
    const qwen3_tts::cuda::decode_scratch scratch{acc.p, m.p, l.p, counters.p};
    qwen3_tts::cuda::decode_attention(qkv.p + std::size_t(first) * width, q_norm.p, k_norm.p, inv_freq.p, {k.p, v.p},
                                      vw, out.p, sh.heads, sh.kv_heads, sh.head_dim, 1e-6f, scratch, 8, nullptr, chunk,
                                      blocks);
    return read(count);
  }
};

} // namespace

TEST_CASE(
    "the fused decode attention gives the two-launch form's cache bits and output over contexts of 1 to 1,029 tokens, "
    "a row the same bits alone as among others, and the same bits with its shares dealt to fewer blocks" *
    doctest::skip(!mstar::test::has_gpu())) {
  const std::vector<int> lens{1, 2, 16, 17, 47, 130, 300, 1029};
  for (const shape sh : {shape{16, 8, 128}, shape{4, 2, 32}, shape{8, 1, 64}}) {
    CAPTURE(sh.head_dim);
    CAPTURE(sh.heads);
    CAPTURE(sh.kv_heads);
    attention_rig rig(sh, lens);
    const auto want = rig.two_launch();
    const std::size_t per_row = std::size_t(sh.heads) * sh.head_dim;
    float big = 0.0f;
    for (const std::uint16_t b : want.out)
      big = std::max(big, std::fabs(bf16_value(b)));
    REQUIRE(big > 0.0f);
    for (const int chunk : {0, 4, 1 << 20}) {
      CAPTURE(chunk);
      const auto got = rig.fused(0, rig.rows, chunk);
      CHECK(got.k == want.k);
      CHECK(got.v == want.v);
      float worst = 0.0f;
      for (std::size_t i = 0; i < want.out.size(); ++i)
        worst = std::max(worst, std::fabs(bf16_value(got.out[i]) - bf16_value(want.out[i])));
      std::printf("decode attention, head_dim %d, %d/%d heads, chunk %d: max |fused - two launches| %.3g of %.3g\n",
                  sh.head_dim, sh.heads, sh.kv_heads, chunk, double(worst), double(big));
      CHECK(worst <= 8e-3f * big);
      for (int r = 0; r < rig.rows; ++r) {
        CAPTURE(r);
        const auto alone = rig.fused(r, 1, chunk);
        CHECK(std::equal(alone.out.begin(), alone.out.end(), got.out.begin() + std::ptrdiff_t(r * per_row)));
      }
      // Fewer blocks a row do the same sums (3: blocks of 3, 3 and 2 shares); the counters left at zero.
      for (const int blocks : {1, 2, 3, 4, 8}) {
        CAPTURE(blocks);
        const auto dealt = rig.fused(0, rig.rows, chunk, blocks);
        CHECK(dealt.out == got.out);
        CHECK(dealt.k == want.k);
        CHECK(dealt.v == want.v);
      }
      CHECK(rig.counters.download<unsigned>(std::size_t(rig.rows) * sh.kv_heads) ==
            std::vector<unsigned>(std::size_t(rig.rows) * sh.kv_heads, 0u));
    }
  }
}
