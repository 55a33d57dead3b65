// qwen3tts_attention_bench: the CUDA Talker's decode attention against FlashInfer's batch decode over the same
// paged KV cache, in one process, so that the choice of kernel (docs/model.md, "Attention") rests on a measurement.
//
//   qwen3tts_attention_bench [--rows 1,8,16,32,64,128] [--kv 17,256,1024] [--iters 30] [--heads 16] [--kv-heads 8]
//
// The cache is the Talker's: K and V each [pages][16 tokens][kv_heads][128] bf16 (FlashInfer's NHD layout with
// separate K and V), every row's pages scattered through the pool, every row `kv` tokens long, the new token
// last. Arms, each as a CUDA graph of one launch a layer over enough layers (each its own K and V) that a replay
// reads more than the L2 holds, as the decode step does; microseconds a launch, median of `iters` replays:
//   ours         decode_attention: the q/k RMSNorm, RoPE and the K/V append of the new token, then attention (the
//                Talker's default: a row's context in 8 equal shares, merged in a fixed order), one launch;
//   ours 1blk    the same in one block a row and KV head (splits 1: the code predictor's, whose context is at most
//                17 tokens);
//   8sh/2blk, 8sh/1blk  ours with the 8 shares dealt to 2 blocks a row and KV head, and to 1 (what
//                talker_cuda_limits::attention_grid does at many rows): the same sums, so the same bits as ours
//                (checked);
//   fi           FlashInfer's BatchDecodeWithPagedKVCache (CUDA-cores decode, its own plan of KV splits) alone,
//                on a bf16 query normalised and rotated beforehand;
//   fi 1blk      FlashInfer's decode kernel without its plan: one block a row and KV head over the row's whole context
//                (what its plan gives where the batch fills the GPU), so that a row's bits follow its own context
//                only, as the Talker's codes need;
//   fi+append    qk_norm_rope_append (the Talker's norm, RoPE and append as its own launch) and then fi: what
//                FlashInfer would cost in the Talker's step, bar the query's bf16 conversion.
// floor: the K and V bytes a launch reads over the device-to-device copy rate measured in the same run (bytes
// read and written a second, as the Talker bench's floor takes it).
// Checks, each failing the run (exit 1) when false: FlashInfer's output agrees with ours within bf16 rounding (both
// read the same cache, so a layout mistake shows here); ours gives a row the same bits alone and among `rows`
// rows of the same context. Reported, not checked: whether FlashInfer does (its plan splits a row's KV by the
// batch's size), the property the Talker's codes rely on (docs/model.md).
#include "talker_cuda_kernels.hpp"

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <cuda_runtime.h>

#include "qwen3_tts/cuda_bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cu = qwen3_tts::cuda;
using cu::bf16;
using qwen3_tts::bench::check;
using qwen3_tts::bench::int_list;

constexpr int head_dim = 128;
constexpr int page_tokens = 16;
constexpr int splits = 8; // the Talker's decode splits (talker_decode_splits)
constexpr float eps = 1e-6f;

using fi_params = flashinfer::BatchDecodeParams<bf16, bf16, bf16, std::int32_t>;
using fi_variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false, /*soft_cap=*/false,
                                                /*alibi=*/false>;
constexpr auto fi_rope = flashinfer::PosEncodingMode::kNone;

std::vector<float> download(const bf16* p, std::size_t n) {
  std::vector<bf16> h(n);
  check(cudaMemcpy(h.data(), p, n * sizeof(bf16), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i)
    f[i] = __bfloat162float(h[i]);
  return f;
}

// One row count and context length: the page tables, `layers` caches, the inputs and every arm's buffers.
struct setup {
  int rows = 0, kv = 0, heads = 0, kv_heads = 0, layers = 0;
  std::vector<std::int32_t> page_indptr_h; // host copy: FlashInfer plans on it
  std::int32_t *qo_indptr = nullptr, *page_indptr = nullptr, *page_indices = nullptr, *last_page_len = nullptr,
               *positions = nullptr;
  std::vector<cu::kv_layer> caches;
  float *qkv = nullptr, *q_norm = nullptr, *k_norm = nullptr, *inv_freq = nullptr, *q32 = nullptr;
  bf16 *q16 = nullptr, *out_ours = nullptr, *out_fi = nullptr;
  cu::decode_scratch scratch{};
  // FlashInfer's workspaces and plan.
  void *fi_float = nullptr, *fi_int = nullptr, *fi_int_pinned = nullptr;
  std::size_t fi_float_bytes = std::size_t(128) << 20, fi_int_bytes = std::size_t(8) << 20;
  flashinfer::DecodePlanInfo plan{};
  // fi 1blk's work list: block b is row b's whole context (request b, tile 0).
  std::int32_t *whole_rows = nullptr, *zeros = nullptr;
  std::vector<void*> owned; // every device allocation above, freed by free_setup

  template <class T>
  T* device(std::size_t n) {
    T* p = nullptr;
    check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    owned.push_back(p);
    return p;
  }
  template <class T>
  T* upload(const std::vector<T>& v) {
    T* p = device<T>(v.size());
    check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    return p;
  }

  cu::paged_view view() const {
    cu::paged_view v;
    v.qo_indptr = qo_indptr;
    v.page_indptr = page_indptr;
    v.page_indices = page_indices;
    v.last_page_len = last_page_len;
    v.positions = positions;
    v.rows = rows;
    v.tokens = rows;
    v.block_tokens = page_tokens;
    return v;
  }
  std::size_t kv_bytes_per_launch() const { return std::size_t(rows) * kv * kv_heads * head_dim * sizeof(bf16) * 2; }
};

// same_pages: every row reads row 0's pages (the bits check: a row's context the same alone and among others).
setup make_setup(int rows, int kv, int heads, int kv_heads, bool same_pages, int layers, cudaStream_t s) {
  setup u;
  u.rows = rows;
  u.kv = kv;
  u.heads = heads;
  u.kv_heads = kv_heads;
  u.layers = layers;
  const int pages_per_row = (kv + page_tokens - 1) / page_tokens;
  const int pool_pages = same_pages ? pages_per_row : rows * pages_per_row;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(pool_pages));
  std::iota(pool.begin(), pool.end(), 0);
  // same_pages: the one row's pages in an order that depends on kv only, so that a launch of one row and one of
  // many read equal contexts.
  std::mt19937 rng(1234u + unsigned(kv) + (same_pages ? 0u : unsigned(rows) * 7u));
  std::shuffle(pool.begin(), pool.end(), rng);
  const auto n_rows = static_cast<std::size_t>(rows);
  std::vector<std::int32_t> qo(n_rows + 1), indptr(n_rows + 1), indices, last(n_rows), pos(n_rows);
  for (int r = 0; r < rows; ++r) {
    qo[std::size_t(r) + 1] = r + 1;
    for (int p = 0; p < pages_per_row; ++p)
      indices.push_back(pool[std::size_t(same_pages ? p : r * pages_per_row + p)]);
    indptr[std::size_t(r) + 1] = std::int32_t(indices.size());
    last[std::size_t(r)] = kv - (pages_per_row - 1) * page_tokens;
    pos[std::size_t(r)] = kv - 1;
  }
  u.page_indptr_h = indptr;
  u.qo_indptr = u.upload(qo);
  u.page_indptr = u.upload(indptr);
  u.page_indices = u.upload(indices);
  u.last_page_len = u.upload(last);
  u.positions = u.upload(pos);
  std::vector<std::int32_t> iota_rows(n_rows);
  std::iota(iota_rows.begin(), iota_rows.end(), 0);
  u.whole_rows = u.upload(iota_rows);
  u.zeros = u.upload(std::vector<std::int32_t>(n_rows, 0));
  const std::size_t layer_elems = std::size_t(pool_pages) * page_tokens * kv_heads * head_dim;
  for (int l = 0; l < layers; ++l) {
    cu::kv_layer c;
    c.k = u.device<bf16>(layer_elems);
    c.v = u.device<bf16>(layer_elems);
    cu::fill_random(c.k, layer_elems, 17u + unsigned(l), 1.0f, s);
    cu::fill_random(c.v, layer_elems, 91u + unsigned(l), 1.0f, s);
    u.caches.push_back(c);
  }
  const std::size_t width = std::size_t(heads + 2 * kv_heads) * head_dim;
  // The projection's output rows: as the same_pages check needs, every row's inputs are equal (row 0's).
  std::vector<float> qkv(std::size_t(rows) * width);
  std::mt19937 vr(99u);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < width; ++i)
    qkv[i] = nd(vr);
  for (int r = 1; r < rows; ++r)
    std::copy(qkv.begin(), qkv.begin() + std::ptrdiff_t(width), qkv.begin() + std::ptrdiff_t(r * width));
  u.qkv = u.upload(qkv);
  std::vector<float> norm(head_dim), freq(head_dim / 2);
  for (int i = 0; i < head_dim; ++i)
    norm[std::size_t(i)] = 0.5f + float(i % 7) / 7.0f;
  for (int i = 0; i < head_dim / 2; ++i)
    freq[std::size_t(i)] = std::pow(1.0e6f, -2.0f * float(i) / float(head_dim));
  u.q_norm = u.upload(norm);
  u.k_norm = u.upload(norm);
  u.inv_freq = u.upload(freq);
  u.q32 = u.device<float>(std::size_t(rows) * heads * head_dim);
  u.q16 = u.device<bf16>(std::size_t(rows) * heads * head_dim);
  u.out_ours = u.device<bf16>(std::size_t(rows) * heads * head_dim);
  u.out_fi = u.device<bf16>(std::size_t(rows) * heads * head_dim);
  const std::size_t slots = std::size_t(rows) * heads * cu::max_decode_splits;
  u.scratch.acc = u.device<float>(slots * head_dim);
  u.scratch.m = u.device<float>(slots);
  u.scratch.l = u.device<float>(slots);
  u.scratch.counters = u.device<unsigned>(std::size_t(rows) * kv_heads);
  check(cudaMemsetAsync(u.scratch.counters, 0, std::size_t(rows) * kv_heads * sizeof(unsigned), s), "cudaMemset");
  u.fi_float = u.device<char>(u.fi_float_bytes);
  u.fi_int = u.device<char>(u.fi_int_bytes);
  check(cudaMallocHost(&u.fi_int_pinned, u.fi_int_bytes), "cudaMallocHost");
  // The query FlashInfer reads: the Talker's normalised, rotated query (float32) in bf16; this also appends the
  // new token's K and V to layer 0, which every arm then reads.
  cu::qk_norm_rope_append(u.qkv, u.q_norm, u.k_norm, u.inv_freq, u.q32, u.caches[0], u.view(), heads, kv_heads,
                          head_dim, eps, s);
  cu::to_bf16(u.q32, u.q16, std::size_t(rows) * heads * head_dim, s);
  // Plan with enable_cuda_graph: the launches below are captured.
  const int group = heads / kv_heads;
  auto plan = [&](auto g) {
    constexpr std::uint32_t G = decltype(g)::value;
    auto estimate =
        flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<G, head_dim, fi_rope, fi_variant, fi_params>;
    check(flashinfer::DecodePlan<head_dim, fi_rope, fi_variant, fi_params>(
              u.fi_float, u.fi_float_bytes, u.fi_int, u.fi_int_pinned, u.fi_int_bytes, u.plan, u.page_indptr_h.data(),
              std::uint32_t(rows), std::uint32_t(heads), std::uint32_t(page_tokens), /*enable_cuda_graph=*/true, s,
              estimate),
          "FlashInfer DecodePlan");
  };
  switch (group) {
  case 1: plan(std::integral_constant<std::uint32_t, 1>{}); break;
  case 2: plan(std::integral_constant<std::uint32_t, 2>{}); break;
  case 4: plan(std::integral_constant<std::uint32_t, 4>{}); break;
  case 8: plan(std::integral_constant<std::uint32_t, 8>{}); break;
  default: throw std::invalid_argument("--heads / --kv-heads must be 1, 2, 4 or 8");
  }
  check(cudaStreamSynchronize(s), "setup");
  return u;
}

void free_setup(setup& u) {
  for (void* p : u.owned)
    cudaFree(p);
  cudaFreeHost(u.fi_int_pinned);
}

// shares: a row's context cut into this many shares (the Talker's 8, or the predictor's 1), dealt to `blocks`
// blocks (0: one a share).
void run_ours(setup& u, int layer, int shares, cudaStream_t s, int blocks = 0) {
  cu::decode_attention(u.qkv, u.q_norm, u.k_norm, u.inv_freq, u.caches[std::size_t(layer)], u.view(), u.out_ours,
                       u.heads, u.kv_heads, head_dim, eps, u.scratch, shares, s, 0, blocks);
}

// whole: fi 1blk (no plan, no split); else as FlashInfer's plan says.
void run_fi(setup& u, int layer, cudaStream_t s, bool whole = false) {
  const cu::kv_layer& c = u.caches[std::size_t(layer)];
  flashinfer::paged_kv_t<bf16, std::int32_t> kv(
      std::uint32_t(u.kv_heads), std::uint32_t(page_tokens), std::uint32_t(head_dim), std::uint32_t(u.rows),
      flashinfer::QKVLayout::kNHD, c.k, c.v, u.page_indices, u.page_indptr, u.last_page_len);
  fi_params p;
  p.q = u.q16;
  p.paged_kv = kv;
  p.o = u.out_fi;
  p.lse = nullptr;
  p.num_qo_heads = std::uint32_t(u.heads);
  p.q_stride_n = u.heads * head_dim;
  p.q_stride_h = head_dim;
  p.window_left = -1;
  p.logits_soft_cap = 0.0f;
  p.sm_scale = 1.0f / std::sqrt(float(head_dim));
  p.rope_rcp_scale = 1.0f;
  p.rope_rcp_theta = 1.0f;
  auto* ib = static_cast<char*>(u.fi_int);
  auto* fb = static_cast<char*>(u.fi_float);
  p.request_indices = reinterpret_cast<std::int32_t*>(ib + u.plan.request_indices_offset);
  p.kv_tile_indices = reinterpret_cast<std::int32_t*>(ib + u.plan.kv_tile_indices_offset);
  p.o_indptr = reinterpret_cast<std::int32_t*>(ib + u.plan.o_indptr_offset);
  p.kv_chunk_size_ptr = reinterpret_cast<std::int32_t*>(ib + u.plan.kv_chunk_size_ptr_offset);
  p.block_valid_mask = nullptr;
  p.partition_kv = false;
  bf16* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (u.plan.split_kv) {
    tmp_v = reinterpret_cast<bf16*>(fb + u.plan.v_offset);
    tmp_s = reinterpret_cast<float*>(fb + u.plan.s_offset);
    if (u.plan.enable_cuda_graph) p.block_valid_mask = reinterpret_cast<bool*>(ib + u.plan.block_valid_mask_offset);
  }
  p.padded_batch_size = std::uint32_t(u.plan.padded_batch_size);
  if (whole) {
    p.request_indices = u.whole_rows;
    p.kv_tile_indices = u.zeros;
    p.o_indptr = u.whole_rows;
    p.kv_chunk_size_ptr = u.zeros; // read, unused without partition_kv
    p.block_valid_mask = nullptr;
    p.padded_batch_size = std::uint32_t(u.rows);
    tmp_v = nullptr;
    tmp_s = nullptr;
  }
  check(flashinfer::BatchDecodeWithPagedKVCacheDispatched<head_dim, fi_rope, fi_variant>(p, tmp_v, tmp_s,
                                                                                         /*enable_pdl=*/false, s),
        "FlashInfer BatchDecodeWithPagedKVCacheDispatched");
}

void run_append(setup& u, int layer, cudaStream_t s) {
  cu::qk_norm_rope_append(u.qkv, u.q_norm, u.k_norm, u.inv_freq, u.q32, u.caches[std::size_t(layer)], u.view(), u.heads,
                          u.kv_heads, head_dim, eps, s);
}

// Microseconds a launch of `body(layer)` over the setup's layers: a graph of one launch a layer, replayed.
template <class Body>
double time_arm(setup& u, int iters, cudaStream_t s, Body body) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int l = 0; l < u.layers; ++l)
    body(l);
  check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&x, g, 0), "cudaGraphInstantiate");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  check(cudaGraphLaunch(x, s), "cudaGraphLaunch"); // warm
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    check(cudaGraphLaunch(x, s), "cudaGraphLaunch");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  return 1e3 * qwen3_tts::bench::median(ms) / double(u.layers);
}

// Largest |a - b| over the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0, big = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    big = std::max(big, double(std::fabs(b[i])));
  }
  return big > 0.0 ? d / big : d;
}

// Whether every row of a launch of `rows` rows, all over one context, has the bits of a launch of that row alone:
// ours, FlashInfer with its plan, FlashInfer in one block a row.
struct bits_result {
  bool ours_same = true, fi_same = true, whole_same = true;
};

bits_result check_bits(int rows, int kv, int heads, int kv_heads, cudaStream_t s) {
  setup one = make_setup(1, kv, heads, kv_heads, /*same_pages=*/true, 1, s);
  setup many = make_setup(rows, kv, heads, kv_heads, /*same_pages=*/true, 1, s);
  // Each its own cache of equal values (the same seeds and page order); the rows of `many` all append equal bytes
  // to the one shared slot, which make_setup's append already holds.
  const std::size_t per = std::size_t(heads) * head_dim;
  auto same_rows = [&](const bf16* a, const bf16* b) {
    const auto alone = download(a, per), among = download(b, per * std::size_t(rows));
    bool same = true;
    for (int r = 0; r < rows; ++r)
      same = same && std::memcmp(among.data() + std::size_t(r) * per, alone.data(), per * sizeof(float)) == 0;
    return same;
  };
  bits_result b;
  run_ours(one, 0, splits, s);
  run_fi(one, 0, s);
  run_ours(many, 0, splits, s);
  run_fi(many, 0, s);
  check(cudaStreamSynchronize(s), "bits check");
  b.ours_same = same_rows(one.out_ours, many.out_ours);
  b.fi_same = same_rows(one.out_fi, many.out_fi);
  run_fi(one, 0, s, /*whole=*/true);
  run_fi(many, 0, s, /*whole=*/true);
  check(cudaStreamSynchronize(s), "bits check");
  b.whole_same = same_rows(one.out_fi, many.out_fi);
  free_setup(one);
  free_setup(many);
  return b;
}

} // namespace

int main(int argc, char** argv) try {
  std::vector<int> rows_list = {1, 8, 16, 32, 64, 128}, kv_list = {17, 256, 1024};
  int iters = 30, heads = 16, kv_heads = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--rows")
      rows_list = int_list(value());
    else if (a == "--kv")
      kv_list = int_list(value(), 2);
    else if (a == "--iters")
      iters = int_list(value()).front();
    else if (a == "--heads")
      heads = int_list(value()).front();
    else if (a == "--kv-heads")
      kv_heads = int_list(value()).front();
    else
      throw std::invalid_argument("unknown argument " + a +
                                  " (--rows LIST, --kv LIST, --iters N, --heads N, --kv-heads N)");
  }
  if (heads % kv_heads != 0) throw std::invalid_argument("--heads must be a multiple of --kv-heads");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double rate = qwen3_tts::bench::copy_rate(s);
  std::printf("device %s (%d SMs, L2 %d MB); copy rate %.0f GB/s; %d query / %d KV heads of %d, pages of %d tokens\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, rate / 1e9, heads, kv_heads, head_dim,
              page_tokens);
  std::printf("%5s %5s %6s %8s %8s %8s %8s %8s %8s %9s %8s %11s %9s %15s\n", "rows", "kv", "layers", "ours us",
              "8sh/2blk", "8sh/1blk", "ours 1blk", "fi us", "fi 1blk", "fi+app us", "floor us", "ours/fi+app", "fi diff",
              "row bits");
  bool ok = true;
  for (int kv : kv_list)
    for (int rows : rows_list) {
      const std::size_t per_launch = std::size_t(rows) * kv * kv_heads * head_dim * sizeof(bf16) * 2;
      // Enough layers that a replay reads at least 256 MB (several times the L2), at least 4, at most 128.
      const int layers = int(std::clamp<std::size_t>((std::size_t(256) << 20) / per_launch + 1, 4, 128));
      setup u = make_setup(rows, kv, heads, kv_heads, /*same_pages=*/false, layers, s);
      const std::size_t n = std::size_t(rows) * heads * head_dim;
      run_ours(u, 0, splits, s);
      run_fi(u, 0, s);
      check(cudaStreamSynchronize(s), "first launches");
      const auto ours_out = download(u.out_ours, n);
      double diff = rel_diff(download(u.out_fi, n), ours_out);
      run_fi(u, 0, s, /*whole=*/true);
      check(cudaStreamSynchronize(s), "first launches");
      diff = std::max(diff, rel_diff(download(u.out_fi, n), ours_out));
      bool dealt_same = true; // the 8 shares in 2 blocks and in 1: ours's bits
      for (int blocks : {2, 1}) {
        run_ours(u, 0, splits, s, blocks);
        check(cudaStreamSynchronize(s), "first launches");
        dealt_same = dealt_same && std::memcmp(download(u.out_ours, n).data(), ours_out.data(), n * sizeof(float)) == 0;
      }
      const double ours = time_arm(u, iters, s, [&](int l) { run_ours(u, l, splits, s); });
      const double dealt2 = time_arm(u, iters, s, [&](int l) { run_ours(u, l, splits, s, 2); });
      const double dealt1 = time_arm(u, iters, s, [&](int l) { run_ours(u, l, splits, s, 1); });
      const double ours1 = time_arm(u, iters, s, [&](int l) { run_ours(u, l, 1, s); });
      const double fi = time_arm(u, iters, s, [&](int l) { run_fi(u, l, s); });
      const double whole = time_arm(u, iters, s, [&](int l) { run_fi(u, l, s, /*whole=*/true); });
      const double fi_app = time_arm(u, iters, s, [&](int l) {
        run_append(u, l, s);
        run_fi(u, l, s);
      });
      const double floor_us = 1e6 * double(u.kv_bytes_per_launch()) / rate;
      const bits_result b = check_bits(rows, kv, heads, kv_heads, s);
      auto word = [](bool same) { return same ? "same" : "differ"; };
      char bits[48];
      std::snprintf(bits, sizeof bits, "%s/%s/%s", word(b.ours_same), word(b.fi_same), word(b.whole_same));
      std::printf("%5d %5d %6d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %8.2f %11.2f %9.2e %15s\n", rows, kv, layers,
                  ours, dealt2, dealt1, ours1, fi, whole, fi_app, floor_us, ours / fi_app, diff, bits);
      std::printf("RESULT attention rows=%d kv=%d ours_us=%.3f ours_8sh_2blk_us=%.3f ours_8sh_1blk_us=%.3f "
                  "ours_1blk_us=%.3f fi_us=%.3f fi_1blk_us=%.3f fi_append_us=%.3f floor_us=%.3f fi_rel_diff=%.3e "
                  "fi_split_kv=%d row_bits(ours/fi/fi_1blk)=%s\n",
                  rows, kv, ours, dealt2, dealt1, ours1, fi, whole, fi_app, floor_us, diff, int(u.plan.split_kv), bits);
      if (!dealt_same) {
        std::fprintf(stderr, "FAILED: decode_attention's 8 shares in 2 or 1 blocks gave other bits than in 8 (rows %d, "
                             "kv %d)\n", rows, kv);
        ok = false;
      }
      // bf16 outputs of float32 sums in other orders, FlashInfer's query in bf16: a few bf16 steps at most.
      if (!(diff < 2e-2)) {
        std::fprintf(stderr,
                     "FAILED: FlashInfer's output differs from ours by %.3e of the largest value (rows %d, kv "
                     "%d): the two do not read the same cache\n",
                     diff, rows, kv);
        ok = false;
      }
      if (!b.ours_same) {
        std::fprintf(stderr, "FAILED: decode_attention gave a row other bits among %d rows than alone (kv %d)\n", rows,
                     kv);
        ok = false;
      }
      free_setup(u);
    }
  std::printf("row bits: ours / fi / fi 1blk, \"same\" where every row of a launch of equal contexts has the bits of "
              "a launch of that row alone\n");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "qwen3tts_attention_bench: %s\n", e.what());
  return 1;
}
