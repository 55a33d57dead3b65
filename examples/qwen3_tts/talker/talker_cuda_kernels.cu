// The CUDA Talker's own kernels (talker_cuda_kernels.hpp says what each computes). Written for
// clarity first: float32 arithmetic everywhere, bf16 only where a value is stored for a GEMM or the KV
// cache, the reference's order of operations (RMSNorm: x * rsqrt(mean(x^2) + eps), then the weight;
// softmax in float32 over the scaled scores), accurate expf/cosf/sinf (no fast-math), so that the only
// differences from the float32 reference are the bf16 roundings.
#include "talker_cuda_kernels.hpp"

#include "mstar/resources/sampler.hpp"

#include <algorithm>
#include <cfloat>
#include <stdexcept>
#include <string>
#include <utility>

namespace qwen3_tts::cuda {
namespace {

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts CUDA talker: launch of ") + kernel +
                             " failed: " + cudaGetErrorString(e));
}

// Whether this thread's launches carry programmatic dependent launch (pdl_scope).
thread_local bool launch_pdl = false;

// kernel<<<grid, block, smem, s>>>(args...), with cudaLaunchAttributeProgrammaticStreamSerialization where a
// pdl_scope is on. A failed launch is left for check_launch (cudaGetLastError reports it).
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = s;
  config.attrs = launch_pdl ? &attr : nullptr;
  config.numAttrs = launch_pdl ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The first thing every kernel here does, before it touches memory that another kernel writes (weights, which
// nothing writes after the upload, may be read before). Launched programmatically (pdl_scope), a kernel may
// start while the kernel before it on the stream still runs: griddepcontrol.wait returns once every
// predecessor has completed and its writes are visible (at once for a launch without that attribute), and
// since every kernel here waits, the completion of each kernel implies that of all before it. Then
// launch_dependents lets the next kernel's blocks start as this one's are all under way: one kernel ahead,
// never more.
__device__ __forceinline__ void await_predecessors() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A 16-byte load through the read-only path, as volatile asm: kept in program order among the other volatile asm.
__device__ __forceinline__ uint4 ldg_nc_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < int(blockDim.x >> 5) ? part[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float r = total;
  __syncthreads(); // part/total may be reused by the caller's next reduction
  return r;
}

// Row r of token t: the last r with qo_indptr[r] <= t (rows are few; a binary search keeps it exact).
__device__ int row_of_token(const std::int32_t* qo_indptr, int rows, int t) {
  int lo = 0, hi = rows - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (qo_indptr[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ int kv_len_of_row(const paged_view& v, int r) {
  return (v.page_indptr[r + 1] - v.page_indptr[r] - 1) * v.block_tokens + v.last_page_len[r];
}

// Element offset of kv index j of row r, kv head h, in a [blocks][block_tokens][kv_heads][head_dim] layer.
__device__ std::size_t kv_offset(const paged_view& v, int r, int j, int h, int kv_heads, int head_dim) {
  const int page = v.page_indices[v.page_indptr[r] + j / v.block_tokens];
  return ((std::size_t(page) * v.block_tokens + j % v.block_tokens) * kv_heads + h) * std::size_t(head_dim);
}

__global__ void rms_norm_kernel(float* x, const float* add, const float* w, bf16* y, float* y32, int width, float eps) {
  await_predecessors();
  float* xr = x + std::size_t(blockIdx.x) * width;
  const float* ar = add ? add + std::size_t(blockIdx.x) * width : nullptr;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float v = xr[i];
    if (ar) {
      v += ar[i];
      xr[i] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / float(width) + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float n = w[i] * (xr[i] * inv);
    if (y) y[std::size_t(blockIdx.x) * width + i] = __float2bfloat16(n);
    if (y32) y32[std::size_t(blockIdx.x) * width + i] = n;
  }
}

__global__ void gather_last_rows_kernel(const float* src, const std::int32_t* qo_indptr, float* dst32, bf16* dst16,
                                        int width) {
  await_predecessors();
  const int r = blockIdx.x;
  const float* row = src + std::size_t(qo_indptr[r + 1] - 1) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    if (dst32) dst32[std::size_t(r) * width + i] = row[i];
    if (dst16) dst16[std::size_t(r) * width + i] = __float2bfloat16(row[i]);
  }
}

// One warp: RMSNorm of one q or k head (weights nw) and its rotation (NeoX half rotation, angle
// position * inv_freq[i]), to dst32 (float) or dst16 (bf16, the KV cache).
__device__ void norm_rope_head(const float* src, const float* nw, const float* inv_freq, float pos, float eps,
                               int head_dim, float* dst32, bf16* dst16) {
  const int lane = threadIdx.x & 31, half = head_dim / 2;
  float ss = 0.0f;
  for (int i = lane; i < head_dim; i += 32)
    ss += src[i] * src[i];
  const float inv = rsqrtf(warp_sum(ss) / float(head_dim) + eps);
  for (int i = lane; i < half; i += 32) {
    const float a = nw[i] * (src[i] * inv);
    const float b = nw[i + half] * (src[i + half] * inv);
    const float angle = pos * inv_freq[i];
    const float c = cosf(angle), s = sinf(angle);
    const float lo = a * c - b * s;
    const float hi = b * c + a * s;
    if (dst32) {
      dst32[i] = lo;
      dst32[i + half] = hi;
    } else {
      dst16[i] = __float2bfloat16(lo);
      dst16[i + half] = __float2bfloat16(hi);
    }
  }
}

// One warp: a v head into the cache as it is.
__device__ void store_head(const float* src, int head_dim, bf16* dst) {
  for (int i = threadIdx.x & 31; i < head_dim; i += 32)
    dst[i] = __float2bfloat16(src[i]);
}

// One warp a head: heads q heads, then kv_heads k heads, then kv_heads v heads.
__global__ void qk_norm_rope_append_kernel(const float* qkv, const float* q_norm, const float* k_norm,
                                           const float* inv_freq, float* q_out, kv_layer cache, paged_view view,
                                           int heads, int kv_heads, int head_dim, float eps) {
  await_predecessors();
  const int t = blockIdx.x;
  const int warps = blockDim.x >> 5;
  const int width = (heads + 2 * kv_heads) * head_dim;
  const int r = row_of_token(view.qo_indptr, view.rows, t);
  const int j = kv_len_of_row(view, r) - (view.qo_indptr[r + 1] - view.qo_indptr[r]) + (t - view.qo_indptr[r]);
  const float pos = float(view.positions[t]);
  for (int h = threadIdx.x >> 5; h < heads + 2 * kv_heads; h += warps) {
    const float* src = qkv + std::size_t(t) * width + std::size_t(h) * head_dim;
    if (h < heads)
      norm_rope_head(src, q_norm, inv_freq, pos, eps, head_dim, q_out + (std::size_t(t) * heads + h) * head_dim,
                     nullptr);
    else if (h < heads + kv_heads)
      norm_rope_head(src, k_norm, inv_freq, pos, eps, head_dim, nullptr,
                     cache.k + kv_offset(view, r, j, h - heads, kv_heads, head_dim));
    else
      store_head(src, head_dim, cache.v + kv_offset(view, r, j, h - heads - kv_heads, kv_heads, head_dim));
  }
}

// Attention of one query head (qh: head_dim floats) of row r over its kv indices 0..last, by the 4
// warps of the block; lane l owns elements [l*per, (l+1)*per) of the head (lanes past head_dim own
// none). Each warp runs an online softmax over kv indices w, w+4, ...; the four partial results are
// merged through shared memory into dst (bf16). Ends with a barrier, so the block may call it again.
template <int D>
__device__ void attend(const float* qh, const kv_layer& cache, const paged_view& view, int r, int last, int kvh,
                       int kv_heads, bf16* dst) {
  constexpr int per = D >= 32 ? D / 32 : 1;
  constexpr int warps = 4;
  __shared__ float part_m[warps], part_l[warps];
  __shared__ float part_acc[warps][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool active = lane * per < D;
  const float scale = rsqrtf(float(D));

  float qv[per], acc[per];
#pragma unroll
  for (int e = 0; e < per; ++e) {
    qv[e] = active ? qh[lane * per + e] : 0.0f;
    acc[e] = 0.0f;
  }
  // Each pass takes `unroll` positions (j, j + warps, ...), loading all their K and V rows before the
  // first use, so a warp keeps several loads in flight instead of one dependent load per position.
  constexpr int unroll = 4;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = warp; j0 <= last; j0 += warps * unroll) {
    float kr[unroll][per], vr[unroll][per];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int j = j0 + u * warps;
      const bool load = active && j <= last;
      const std::size_t off = load ? kv_offset(view, r, j, kvh, kv_heads, D) + lane * per : 0;
#pragma unroll
      for (int e = 0; e < per; ++e) {
        kr[u][e] = load ? __bfloat162float(cache.k[off + e]) : 0.0f;
        vr[u][e] = load ? __bfloat162float(cache.v[off + e]) : 0.0f;
      }
    }
    float sc[unroll];
    float m_new = m;
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < per; ++e)
        d += qv[e] * kr[u][e];
      d = warp_sum(d) * scale;
      sc[u] = j0 + u * warps <= last ? d : -INFINITY; // warp-uniform: past the causal limit counts nothing
      m_new = fmaxf(m_new, sc[u]);
    }
    const float corr = expf(m - m_new); // m_new is finite: position j0 <= last is always in the pass
    l *= corr;
#pragma unroll
    for (int e = 0; e < per; ++e)
      acc[e] *= corr;
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const float p = expf(sc[u] - m_new); // 0 for positions past the limit
      l += p;
#pragma unroll
      for (int e = 0; e < per; ++e)
        acc[e] += p * vr[u][e];
    }
    m = m_new;
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
  if (active) {
#pragma unroll
    for (int e = 0; e < per; ++e)
      part_acc[warp][lane * per + e] = acc[e];
  }
  __syncthreads();
  if (warp == 0) {
    float big = -INFINITY;
    for (int w = 0; w < warps; ++w)
      big = fmaxf(big, part_m[w]);
    float total = 0.0f, f[warps];
    for (int w = 0; w < warps; ++w) {
      f[w] = part_l[w] > 0.0f ? expf(part_m[w] - big) : 0.0f;
      total += part_l[w] * f[w];
    }
    if (active) {
#pragma unroll
      for (int e = 0; e < per; ++e) {
        float v = 0.0f;
        for (int w = 0; w < warps; ++w)
          v += part_acc[w][lane * per + e] * f[w];
        dst[lane * per + e] = __float2bfloat16(v / total);
      }
    }
  }
  __syncthreads();
}

// Block (token, q head), 4 warps: causal attention of the token over its row's pages.
template <int D>
__global__ void paged_attention_kernel(const float* q, kv_layer cache, paged_view view, bf16* out, int heads,
                                       int kv_heads) {
  await_predecessors();
  const int t = blockIdx.x, h = blockIdx.y;
  const int r = row_of_token(view.qo_indptr, view.rows, t);
  const int last = kv_len_of_row(view, r) - (view.qo_indptr[r + 1] - view.qo_indptr[r]) + (t - view.qo_indptr[r]);
  attend<D>(q + (std::size_t(t) * heads + h) * D, cache, view, r, last, h / (heads / kv_heads), kv_heads,
            out + (std::size_t(t) * heads + h) * D);
}

// The 8 bf16 values of a 16-byte load, as floats.
__device__ void bf16x8_to_float(const uint4& u, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 v = __bfloat1622float2(h[e]);
    f[2 * e] = v.x;
    f[2 * e + 1] = v.y;
  }
}

// A decode step's attention in one launch (every row has exactly one new token): block (row, kv head, z),
// 4 warps. A row's kv indices go to `splits` shares, equal (so a short context at few rows still fills the GPU) or,
// with `chunk`, of chunk tokens (more where the row needs more than `splits` of them: a short context takes one
// share and no merge); the shares are dealt out in order to the row's gridDim.z blocks (one a block, or several a
// block when many rows fill the GPU anyway). Each block first normalises and rotates the group's query heads into
// shared memory; the block whose shares hold the new token also normalises, rotates and appends its K and V
// (visible to the block after the barrier). Within a share, the tokens go to the block's 4 warps, each warp taking
// 256 / D tokens at a time: D / 8 lanes a token, each lane 8 elements read as one 16-byte load, so a K or V row is
// read once for all query heads of the group. Every lane-group runs an online softmax; the block merges them in
// shared memory into the share's result, and where a row has several shares the last of its kv head's blocks to
// finish (a counter) merges the shares' partial results from `scratch` in share order and resets the counter. A
// row's result depends on its own length, `splits` and `chunk` only: never on the other rows of the step, nor on
// how many blocks its shares are dealt to.
template <int D, int G, bool Dealt>
__global__ void __launch_bounds__(128)
    decode_attention_kernel(const float* qkv, const float* q_norm, const float* k_norm, const float* inv_freq,
                            kv_layer cache, paged_view view, bf16* out, int heads, int kv_heads, float eps,
                            decode_scratch scratch, int chunk, int splits) {
  await_predecessors();
  constexpr int lanes_per_token = D / 8, tokens_per_warp = 32 / lanes_per_token, warps = 4;
  constexpr int parts = warps * tokens_per_warp;
  __shared__ float q_s[G][D];
  __shared__ float part_m[G][parts], part_l[G][parts];
  __shared__ float part_acc[G][parts][D];
  __shared__ bool last_block;
  const int r = blockIdx.x, kvh = blockIdx.y;
  const int group = heads / kv_heads;
  const int t = view.qo_indptr[r];
  const int len = kv_len_of_row(view, r), j_new = len - 1;
  // A chunk of len or more is one share whatever its size: taken as len, so that share * splits and
  // len + share - 1 stay within int for any chunk (a chunk near 2^31 would wrap them).
  const int share = max(min(chunk, len), (len + splits - 1) / splits);
  const int used = (len + share - 1) / share; // shares with at least one kv index
  // This block's shares, [first, last) in order: per_block of them, the row's shares dealt out to gridDim.z blocks.
  // (Dealt false: one share a block, gridDim.z == splits, and the loop below runs once.)
  const int per_block = Dealt ? (splits + int(gridDim.z) - 1) / int(gridDim.z) : 1;
  const int first = int(blockIdx.z) * per_block, last = min(used, first + per_block);
  const int active = (used + per_block - 1) / per_block; // blocks of the row with at least one share
  if (first >= last) return; // past the row's length: no work and no part in the merge
  const bool owner = first * share <= j_new && j_new < min(len, last * share);
  const float pos = float(view.positions[t]);
  const float* row = qkv + std::size_t(t) * (heads + 2 * kv_heads) * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int item = warp; item < G + 2; item += warps) {
    if (item < group)
      norm_rope_head(row + std::size_t(kvh * group + item) * D, q_norm, inv_freq, pos, eps, D, q_s[item], nullptr);
    else if (item < G)
      for (int i = lane; i < D; i += 32)
        q_s[item][i] = 0.0f;
    else if (item == G && owner)
      norm_rope_head(row + std::size_t(heads + kvh) * D, k_norm, inv_freq, pos, eps, D, nullptr,
                     cache.k + kv_offset(view, r, j_new, kvh, kv_heads, D));
    else if (item == G + 1 && owner)
      store_head(row + std::size_t(heads + kv_heads + kvh) * D, D,
                 cache.v + kv_offset(view, r, j_new, kvh, kv_heads, D));
  }
  __syncthreads();

  const int sub = lane % lanes_per_token, tok = lane / lanes_per_token;
  const float scale = rsqrtf(float(D));
  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      q[g][e] = q_s[g][sub * 8 + e] * scale;
  // Each share as if it had a block of its own: the same tokens to each lane-group, the same merge of the parts, so
  // a row's bits do not depend on how many of its shares a block takes.
  for (int sh = first; sh < last; ++sh) {
    const int begin = sh * share, end = min(len, begin + share);
    float acc[G][8], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[g][e] = 0.0f;
    }
    // Two tokens a lane-group in flight: both K and V rows are loaded before the first is used.
    constexpr int stride = warps * tokens_per_warp;
    for (int j0 = begin + warp * tokens_per_warp; j0 < end; j0 += 2 * stride) {
      uint4 kr[2], vr[2];
      bool valid[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int j = j0 + u * stride + tok;
        valid[u] = j < end;
        if (valid[u]) {
          const std::size_t off = kv_offset(view, r, j, kvh, kv_heads, D) + sub * 8;
          kr[u] = *reinterpret_cast<const uint4*>(cache.k + off);
          vr[u] = *reinterpret_cast<const uint4*>(cache.v + off);
        } else {
          kr[u] = make_uint4(0, 0, 0, 0);
          vr[u] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float k[8], v[8];
        bf16x8_to_float(kr[u], k);
        bf16x8_to_float(vr[u], v);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e)
            d += q[g][e] * k[e];
#pragma unroll
          for (int o = lanes_per_token / 2; o > 0; o >>= 1)
            d += __shfl_xor_sync(0xffffffffu, d, o);
          if (valid[u]) {
            const float m_new = fmaxf(m[g], d);
            const float corr = expf(m[g] - m_new), p = expf(d - m_new);
            l[g] = l[g] * corr + p;
#pragma unroll
            for (int e = 0; e < 8; ++e)
              acc[g][e] = acc[g][e] * corr + p * v[e];
            m[g] = m_new;
          }
        }
      }
    }
    if (sh != first) __syncthreads(); // the previous share's merge has read the parts
    const int part = warp * tokens_per_warp + tok;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (sub == 0) {
        part_m[g][part] = m[g];
        part_l[g][part] = l[g];
      }
#pragma unroll
      for (int e = 0; e < 8; ++e)
        part_acc[g][part][sub * 8 + e] = acc[g][e];
    }
    __syncthreads();

    // The share's result for each (query head, element): its parts merged; a row of one share writes it out whole.
    for (int idx = threadIdx.x; idx < group * D; idx += blockDim.x) {
      const int g = idx / D, e = idx % D;
      float big = -INFINITY;
      for (int p = 0; p < parts; ++p)
        big = fmaxf(big, part_m[g][p]);
      float sum_l = 0.0f, sum_acc = 0.0f;
      for (int p = 0; p < parts; ++p) {
        const float f = part_l[g][p] > 0.0f ? expf(part_m[g][p] - big) : 0.0f;
        sum_l += part_l[g][p] * f;
        sum_acc += part_acc[g][p][e] * f;
      }
      const int h = kvh * group + g;
      if (used == 1) {
        out[(std::size_t(t) * heads + h) * D + e] = __float2bfloat16(sum_acc / sum_l);
      } else {
        const std::size_t slot = (std::size_t(r) * heads + h) * splits + sh;
        scratch.acc[slot * D + e] = sum_acc;
        if (e == 0) {
          scratch.m[slot] = big;
          scratch.l[slot] = sum_l;
        }
      }
    }
  }
  if (used == 1) return;
  __threadfence(); // this block's partials before its count
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = atomicAdd(&scratch.counters[r * kv_heads + kvh], 1u);
    last_block = done == unsigned(active - 1);
  }
  __syncthreads();
  if (!last_block) return;
  __threadfence(); // the other blocks' partials after their counts
  for (int idx = threadIdx.x; idx < group * D; idx += blockDim.x) {
    const int g = idx / D, e = idx % D;
    const int h = kvh * group + g;
    const std::size_t base = (std::size_t(r) * heads + h) * splits;
    float big = -INFINITY;
    for (int p = 0; p < used; ++p)
      big = fmaxf(big, __ldcg(scratch.m + base + p));
    float sum_l = 0.0f, sum_acc = 0.0f;
    for (int p = 0; p < used; ++p) {
      const float f = expf(__ldcg(scratch.m + base + p) - big);
      sum_l += __ldcg(scratch.l + base + p) * f;
      sum_acc += __ldcg(scratch.acc + (base + p) * D + e) * f;
    }
    out[(std::size_t(t) * heads + h) * D + e] = __float2bfloat16(sum_acc / sum_l);
  }
  if (threadIdx.x == 0) scratch.counters[r * kv_heads + kvh] = 0; // ready for the next launch
}

__device__ float silu(float g) { return g / (1.0f + expf(-g)); }

__global__ void swiglu_kernel(const float* gate_up, bf16* out, int tokens, int inter) {
  await_predecessors();
  const std::size_t n = std::size_t(tokens) * inter;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t t = i / inter, c = i % inter;
    const float g = gate_up[t * 2 * inter + c], u = gate_up[t * 2 * inter + inter + c];
    out[i] = __float2bfloat16(silu(g) * u);
  }
}

// small_gemv's kernel. Mapping: a block is gemv_warps warps; each warp owns O weight rows whole (O = 2
// for swiglu: gate row i and up row inter + i, so one warp has both factors of output i; O = 2 for the
// other epilogues at 4..8 rows, so each x slice loaded serves two weight rows; else 1). Lane l streams
// the 16-byte slices (8 bf16) l, l + 32, l + 64, ... of its rows, gemv_unroll slices a row loaded before
// the first multiply, then multiplies each slice against the same slice of every x row; a warp-shuffle
// sum ends it and lane r writes row r's result. Why: at 1..8 rows the product is bound by reading w once
// from HBM, so every lane keeps 16-byte loads in flight (4 to 8 a lane, 8-16 KB a block), w goes through
// the streaming cache path (it is read once a pass and must not push the activations out of L2), and x
// (at most 8 x 6144 bf16 = 96 KB, read by every warp) comes through L1 with 16-byte loads too. R is the
// row count rounded up to 1, 2, 4 or 8; rows past `rows` are neither read nor written.
constexpr int gemv_warps = 4;
constexpr int gemv_unroll = 4;

constexpr int gemv_rows_per_warp(gemv_epilogue e, int r) { return e == gemv_epilogue::swiglu || r >= 4 ? 2 : 1; }

// Adds the 8 products of a w slice and an x slice (float32 values of x) to acc.
__device__ float dot8(uint4 w, const float (&x)[8], float acc) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    acc = fmaf(f.x, x[2 * j], acc);
    acc = fmaf(f.y, x[2 * j + 1], acc);
  }
  return acc;
}

// The norm prologue of small_gemv: x32's rows RMS-normalised into xs (bf16, rows x in) by the block, each row's
// sum of squares taken as rms_norm_kernel takes it with its 256 threads (thread t's strided sum, warp sums, the
// 8 warps' sums summed by one warp), here by 128 threads standing for 256: the same bits as rms_norm.
__device__ void gemv_norm_rows(const gemv_norm& n, int in, int rows, bf16* xs) {
  static_assert(gemv_warps * 32 * 2 == 256, "the prologue stands 128 threads for rms_norm's 256");
  __shared__ float part[8];
  __shared__ float inv_s;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  for (int r = 0; r < rows; ++r) {
    const float* xr = n.x32 + std::size_t(r) * n.ld;
    float lo = 0.0f, hi = 0.0f;
    for (int i = t; i < in; i += 256)
      lo += xr[i] * xr[i];
    for (int i = t + 128; i < in; i += 256)
      hi += xr[i] * xr[i];
    lo = warp_sum(lo);
    hi = warp_sum(hi);
    if (lane == 0) {
      part[warp] = lo;
      part[warp + 4] = hi;
    }
    __syncthreads();
    if (warp == 0) {
      float v = lane < 8 ? part[lane] : 0.0f;
      v = warp_sum(v);
      if (lane == 0) inv_s = rsqrtf(v / float(in) + n.eps);
    }
    __syncthreads();
    const float inv = inv_s;
    for (int i = t; i < in; i += blockDim.x)
      xs[std::size_t(r) * in + i] = __float2bfloat16(n.weight[i] * (xr[i] * inv));
    __syncthreads(); // part and inv_s are reused by the next row; xs is read by every warp
  }
}

template <int R, gemv_epilogue E, bool Norm>
__global__ void __launch_bounds__(gemv_warps * 32)
    small_gemv_kernel(const bf16* __restrict__ w, int out, int in, const bf16* __restrict__ x, int ldx, float* y32,
                      bf16* act, int ldy, int rows, gemv_norm norm) {
  constexpr int O = gemv_rows_per_warp(E, R);
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * gemv_warps + (threadIdx.x >> 5);
  const int inter = out / 2;
  // The warp's weight rows; a second row past `out` (odd out) re-reads the first and is not written.
  int wrow[O];
  bool live[O];
#pragma unroll
  for (int k = 0; k < O; ++k) {
    wrow[k] = E == gemv_epilogue::swiglu ? warp + k * inter : warp * O + k;
    live[k] = E == gemv_epilogue::swiglu ? warp < inter : wrow[k] < out;
  }
  const int slices = in / 8;
  const uint4* wv[O];
#pragma unroll
  for (int k = 0; k < O; ++k)
    wv[k] = reinterpret_cast<const uint4*>(w + std::size_t(live[k] ? wrow[k] : wrow[0]) * in);
  // The weights are no kernel's output: a programmatically launched kernel loads its first pass's slices while it
  // waits for the kernel before it, and asks the second pass's into L2 (a hint; nothing waits for it).
  uint4 wq[gemv_unroll][O];
  auto load_pass = [&](int s0) {
#pragma unroll
    for (int u = 0; u < gemv_unroll; ++u)
#pragma unroll
      for (int k = 0; k < O; ++k)
        wq[u][k] = s0 + 32 * u < slices ? __ldcs(wv[k] + s0 + 32 * u) : make_uint4(0, 0, 0, 0);
  };
  if (live[0]) {
    load_pass(lane);
#pragma unroll
    for (int u = gemv_unroll; u < 2 * gemv_unroll; ++u)
#pragma unroll
      for (int k = 0; k < O; ++k)
        if (lane + 32 * u < slices) asm volatile("prefetch.global.L2 [%0];" ::"l"(wv[k] + lane + 32 * u));
  }
  await_predecessors();
  if constexpr (Norm) {
    extern __shared__ uint4 gemv_xs[]; // rows x in bf16, 16-byte aligned
    bf16* xs = reinterpret_cast<bf16*>(gemv_xs);
    gemv_norm_rows(norm, in, rows, xs); // every thread of the block, before any warp may leave
    x = xs;
    ldx = in;
  }
  if (!live[0]) return; // uniform across the warp, and no block barrier follows

  float acc[O][R] = {};
  for (int s0 = lane; s0 < slices; s0 += 32 * gemv_unroll) {
    if (s0 != lane) load_pass(s0); // the first pass's came before the wait
    // Inputs from global memory: every slice of the pass asked for before the first sum (volatile asm loads of
    // valid addresses: a slice past the inputs re-reads the last and is zeroed, as its weights are; a row past
    // `rows` reads row 0 and its sums are never written), and no branch between the sums, so that the loads'
    // latencies overlap: with a break between the slices the compiler issued each slice's load after the previous
    // slice's sums, one L2 round trip a slice.
    uint4 xg[Norm ? 1 : gemv_unroll][Norm ? 1 : R];
    if constexpr (!Norm) {
#pragma unroll
      for (int u = 0; u < gemv_unroll; ++u) {
        const int sl = s0 + 32 * u < slices ? s0 + 32 * u : slices - 1;
#pragma unroll
        for (int r = 0; r < R; ++r)
          xg[u][r] = ldg_nc_v4(reinterpret_cast<const uint4*>(x + std::size_t(r < rows ? r : 0) * ldx) + sl);
      }
#pragma unroll
      for (int u = 0; u < gemv_unroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (s0 + 32 * u >= slices) xg[u][r] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < gemv_unroll; ++u) {
      const int sl = s0 + 32 * u;
      if (Norm && sl >= slices) break;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (Norm && r >= rows) break;
        uint4 xq;
        if constexpr (Norm)
          xq = reinterpret_cast<const uint4*>(x + std::size_t(r) * ldx)[sl];
        else
          xq = xg[u][r];
        float xf[8];
        bf16x8_to_float(xq, xf);
#pragma unroll
        for (int k = 0; k < O; ++k)
          acc[k][r] = dot8(wq[u][k], xf, acc[k][r]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < O; ++k)
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[k][r] = warp_sum(acc[k][r]);

#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rows || lane != r) continue;
    if constexpr (E == gemv_epilogue::swiglu) {
      act[std::size_t(r) * ldy + warp] = __float2bfloat16(silu(acc[0][r]) * acc[1][r]);
    } else {
#pragma unroll
      for (int k = 0; k < O; ++k) {
        if (!live[k]) continue;
        float& y = y32[std::size_t(r) * ldy + wrow[k]];
        y = E == gemv_epilogue::residual ? y + acc[k][r] : acc[k][r];
      }
    }
  }
}

template <gemv_epilogue E, bool Norm>
void launch_small_gemv(const bf16* w, int out, int in, const bf16* x, int ldx, float* y32, bf16* act, int ldy, int rows,
                       const gemv_norm& norm, cudaStream_t s) {
  const int rounded = rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8;
  const int per_warp = gemv_rows_per_warp(E, rounded);
  const int warps = E == gemv_epilogue::swiglu ? out / 2 : (out + per_warp - 1) / per_warp;
  const unsigned blocks = unsigned((warps + gemv_warps - 1) / gemv_warps);
  const std::size_t smem = Norm ? std::size_t(rows) * in * sizeof(bf16) : 0;
  switch (rounded) {
  case 1:
    launch_kernel(&small_gemv_kernel<1, E, Norm>, blocks, gemv_warps * 32, smem, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, norm);
    break;
  case 2:
    launch_kernel(&small_gemv_kernel<2, E, Norm>, blocks, gemv_warps * 32, smem, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, norm);
    break;
  case 4:
    launch_kernel(&small_gemv_kernel<4, E, Norm>, blocks, gemv_warps * 32, smem, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, norm);
    break;
  default:
    launch_kernel(&small_gemv_kernel<8, E, Norm>, blocks, gemv_warps * 32, smem, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, norm);
  }
}

// small_gemv on the tensor cores (gemv_path::tensor_cores), 1..max_mma_gemv_rows rows. Mapping: a block is mma_warps
// warps and owns 16 outputs (for swiglu: 16 gate rows and their 16 up rows); its warps share the inputs in chunks
// of 32, warp w taking chunks w, w + mma_warps, ... in order, mma_unroll of them loaded before the first product.
// In a chunk, thread (g = lane / 4, t = lane % 4) loads the 16-byte slice t of weight rows g and g + 8 and of input
// rows g, g + 8, ... (one n-tile of 8 rows up to 8 rows, two up to 16, four up to 32) and feeds them to two
// m16n8k16 bf16 products an n-tile (float32 sums): the weight rows are the product's M, the input rows its N. The chunk's 32 inputs enter the two products in the order the loads
// give the fragments, the same for weights and inputs, so each sum covers every input once. The warps' sums are
// then added in warp order through shared memory and the epilogue writes them. Every output's sum follows the
// weights and its own input row only: the step's other rows never change it. Why: from a few rows on, the warp a
// weight row of the CUDA-core kernel multiplies every weight slice by every row (its time grows with the rows),
// and cuBLAS's tiles at 2..16 rows read the weights with few blocks; here the tensor cores take the rows at no
// cost and the weights are read once, 16-byte loads, all of a block's in flight at once.
constexpr int mma_warps = 8;
constexpr int mma_unroll = 4;
__device__ __forceinline__ void mma_16816(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                          std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Rows [0, rows) of x (float32, leading dimension ld, `width` values, at most 256 M) RMS-normalised into y (bf16,
// leading dimension width) with rms_norm_kernel's bits, by a block of 256 threads standing for rms_norm's: thread t
// sums values t, t + 256, ... of a row in that order (a value past the row is a zero, which leaves the sum's bits
// as they were), warp_sum adds a warp's sums and the 8 warps' are added as block_sum's warp 0 adds them. G rows at
// a time, every value of a group asked for before the first sum and kept for the output, and the next group's asked
// for before this group's sums: one L2 round trip for the first group, the others' latencies behind the sums,
// barriers and stores of the one before (a warp reading each row's values a sum at a time took one round trip a
// value, some 12 us a projection at 2 rows). x is read through L2 (other blocks wrote it).
template <int M>
__device__ void norm_rows_as_rms_norm(const float* x, int ld, int width, int rows, const float* w, bf16* y, float eps) {
  constexpr int G = 16 / M; // rows a group: 16 values a thread, twice that in flight
  static_assert(G >= 1 && G <= mma_warps, "a warp totals each row of a group");
  __shared__ float part[G][mma_warps];
  __shared__ float inv_s[G];
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  float wt[M];
#pragma unroll
  for (int m = 0; m < M; ++m)
    wt[m] = t + 256 * m < width ? w[t + 256 * m] : 0.0f;
  auto load_group = [&](int r0, float (&v)[G][M]) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int m = 0; m < M; ++m)
        v[g][m] = r0 + g < rows && t + 256 * m < width ? __ldcg(x + std::size_t(r0 + g) * ld + t + 256 * m) : 0.0f;
  };
  float v[G][M], next[G][M];
  load_group(0, v);
  for (int r0 = 0; r0 < rows; r0 += G) {
    if (r0 + G < rows) load_group(r0 + G, next);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float ss = 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m)
        ss += v[g][m] * v[g][m];
      ss = warp_sum(ss);
      if (lane == 0) part[g][warp] = ss;
    }
    __syncthreads();
    if (warp < G) {
      float s = lane < mma_warps ? part[warp][lane] : 0.0f;
      s = warp_sum(s);
      if (lane == 0) inv_s[warp] = rsqrtf(s / float(width) + eps);
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (r0 + g >= rows) break;
      const float inv = inv_s[g];
#pragma unroll
      for (int m = 0; m < M; ++m)
        if (t + 256 * m < width)
          y[std::size_t(r0 + g) * width + t + 256 * m] = __float2bfloat16(wt[m] * (v[g][m] * inv));
    }
    __syncthreads(); // part and inv_s are the next group's
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int m = 0; m < M; ++m)
        v[g][m] = next[g][m];
  }
}

template <int NT, gemv_epilogue E, bool NormAfter>
__global__ void __launch_bounds__(mma_warps * 32)
    mma_gemv_kernel(const bf16* __restrict__ w, int out, int in, const bf16* __restrict__ x, int ldx, float* y32,
                    bf16* act, int ldy, int rows, gemv_split split, gemv_norm_after norm_after) {
  constexpr int O = E == gemv_epilogue::swiglu ? 2 : 1; // weight tiles: [gate; up] for swiglu
  constexpr int U = NT >= 8 ? 2 : mma_unroll;            // chunks a warp has in flight (fewer registers at 8 n-tiles)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int outs = E == gemv_epilogue::swiglu ? out / 2 : out; // outputs a row
  // Block (tile, part) of splits blocks a tile; its warp is warp part * mma_warps + warp of the tile's `stride`.
  const int splits = split.splits, tiles = int(gridDim.x) / splits;
  const int tile = int(blockIdx.x) % tiles, part = int(blockIdx.x) / tiles;
  const int vw = part * mma_warps + warp, stride = mma_warps * splits;
  const int o0 = tile * 16, chunks = in / 32;
  // The thread's weight rows g and g + 8 of each tile; a row past the outputs re-reads the tile's first and is
  // not written.
  const uint4* wr[O][2];
#pragma unroll
  for (int k = 0; k < O; ++k)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int o = o0 + g + 8 * h < outs ? o0 + g + 8 * h : o0;
      wr[k][h] = reinterpret_cast<const uint4*>(w + std::size_t(o + k * outs) * in) + t;
    }
  // The weights are no kernel's output: a programmatically launched kernel loads its first pass's chunks while it
  // waits for the kernel before it, and asks the second pass's into L2 (a hint; nothing waits for it).
  uint4 wq[U][O][2];
  auto load_pass = [&](int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * stride;
#pragma unroll
      for (int k = 0; k < O; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wq[u][k][h] = c < chunks ? __ldcs(wr[k][h] + 4 * c) : make_uint4(0, 0, 0, 0);
    }
  };
  load_pass(vw);
#pragma unroll
  for (int u = U; u < 2 * U; ++u) {
    const int c = vw + u * stride;
    if (c < chunks)
#pragma unroll
      for (int k = 0; k < O; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(wr[k][h] + 4 * c));
  }
  await_predecessors();
  // The thread's input rows g and g + 8 (n-tiles 0 and 1); a row past `rows` gives zeros.
  const uint4* xr[NT];
  bool xlive[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    xlive[j] = j * 8 + g < rows;
    xr[j] = reinterpret_cast<const uint4*>(x + std::size_t(xlive[j] ? j * 8 + g : 0) * ldx) + t;
  }

  float acc[O][NT][4] = {};
  for (int c0 = vw; c0 < chunks; c0 += stride * U) {
    if (c0 != vw) load_pass(c0); // the first pass's came before the wait
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * stride;
      if (c >= chunks) break;
      uint4 xq[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j)
        xq[j] = xlive[j] ? __ldg(xr[j] + 4 * c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int k = 0; k < O; ++k) {
        const uint4 lo = wq[u][k][0], hi = wq[u][k][1];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          mma_16816(acc[k][j], lo.x, hi.x, lo.y, hi.y, xq[j].x, xq[j].y);
          mma_16816(acc[k][j], lo.z, hi.z, lo.w, hi.w, xq[j].z, xq[j].w);
        }
      }
    }
  }

  // The warps' sums added in warp order through shared memory, one weight tile at a time (32 KB at 8 n-tiles);
  // thread x keeps elements x, x + 256, ... of each tile's sums.
  constexpr int elems = NT * 4 * 32; // fragment elements of an n-tile's sums, all n-tiles
  constexpr int mine_n = (elems + mma_warps * 32 - 1) / (mma_warps * 32);
  __shared__ float red[mma_warps][NT * 4][32];
  float sums[O][mine_n];
#pragma unroll
  for (int k = 0; k < O; ++k) {
    if (k > 0) __syncthreads(); // the previous tile's sums are read
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        red[warp][j * 4 + i][lane] = acc[k][j][i];
    __syncthreads();
#pragma unroll
    for (int q = 0; q < mine_n; ++q) {
      const int e = int(threadIdx.x) + q * mma_warps * 32;
      float v = 0.0f;
      if (e < elems) {
        const int ln = e & 31, j = e >> 7, i = (e >> 5) & 3;
#pragma unroll
        for (int ww = 0; ww < mma_warps; ++ww)
          v += red[ww][j * 4 + i][ln];
      }
      sums[k][q] = v;
    }
  }
  // Element i of lane ln's fragment of n-tile j: output g + 8 (i >= 2), row 8 j + 2 t + (i odd).
  auto live_elem = [&](int e, int& o, int& r) {
    const int ln = e & 31, j = e >> 7, i = (e >> 5) & 3;
    o = o0 + (ln >> 2) + (i >= 2 ? 8 : 0);
    r = j * 8 + 2 * (ln & 3) + (i & 1);
    return e < elems && o < outs && r < rows;
  };
  if (splits > 1) {
    // This block's sums to partial, then the tile's last block to arrive goes on with every split's.
    float* mine = split.partial + std::size_t(blockIdx.x) * O * elems;
#pragma unroll
    for (int q = 0; q < mine_n; ++q) {
      const int e = int(threadIdx.x) + q * mma_warps * 32;
      int o, r;
      if (!live_elem(e, o, r)) continue;
#pragma unroll
      for (int k = 0; k < O; ++k)
        mine[k * elems + e] = sums[k][q];
    }
    __threadfence();
    __syncthreads();
    __shared__ unsigned arrived;
    if (threadIdx.x == 0) arrived = atomicAdd(split.tickets + tile, 1u);
    __syncthreads();
    if (arrived != unsigned(splits - 1)) return;
    __threadfence();
    if (threadIdx.x == 0) split.tickets[tile] = 0; // for the next launch, which waits for this one
  }
#pragma unroll
  for (int q = 0; q < mine_n; ++q) {
    const int e = int(threadIdx.x) + q * mma_warps * 32;
    int o, r;
    if (!live_elem(e, o, r)) continue;
    float v[O];
#pragma unroll
    for (int k = 0; k < O; ++k) {
      if (splits == 1) {
        v[k] = sums[k][q];
      } else {
        v[k] = 0.0f;
        for (int p = 0; p < splits; ++p)
          v[k] += __ldcg(split.partial + (std::size_t(p) * tiles + tile) * O * elems + k * elems + e);
      }
    }
    if constexpr (E == gemv_epilogue::swiglu) {
      act[std::size_t(r) * ldy + o] = __float2bfloat16(silu(v[0]) * v[O - 1]);
    } else {
      float& y = y32[std::size_t(r) * ldy + o];
      y = E == gemv_epilogue::residual ? y + v[0] : v[0];
    }
  }
  if constexpr (NormAfter) {
    static_assert(E == gemv_epilogue::residual, "the norm after follows the residual epilogue");
    // Every tile's outputs written: the last tile to finish normalises the rows.
    __threadfence();
    __syncthreads();
    __shared__ unsigned finished;
    if (threadIdx.x == 0) finished = atomicAdd(norm_after.ticket, 1u);
    __syncthreads();
    if (finished != unsigned(tiles - 1)) return;
    __threadfence();
    if (threadIdx.x == 0) *norm_after.ticket = 0; // for the next launch, which waits for this one
    static_assert(mma_warps * 32 == 256, "norm_rows_as_rms_norm's threads are rms_norm's 256");
    if (outs <= 1024)
      norm_rows_as_rms_norm<4>(y32, ldy, outs, rows, norm_after.weight, norm_after.y16, norm_after.eps);
    else
      norm_rows_as_rms_norm<max_gemv_norm_after_out / 256>(y32, ldy, outs, rows, norm_after.weight, norm_after.y16,
                                                           norm_after.eps);
  }
}

template <gemv_epilogue E, bool NormAfter>
void launch_mma_gemv(const bf16* w, int out, int in, const bf16* x, int ldx, float* y32, bf16* act, int ldy, int rows,
                     const gemv_split& split, const gemv_norm_after& na, cudaStream_t s) {
  const unsigned blocks = unsigned(gemv_tiles(E, out) * split.splits);
  if (rows <= 8)
    launch_kernel(&mma_gemv_kernel<1, E, NormAfter>, blocks, mma_warps * 32, 0, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, split, na);
  else if (rows <= 16)
    launch_kernel(&mma_gemv_kernel<2, E, NormAfter>, blocks, mma_warps * 32, 0, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, split, na);
  else if (rows <= 32)
    launch_kernel(&mma_gemv_kernel<4, E, NormAfter>, blocks, mma_warps * 32, 0, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, split, na);
  else
    launch_kernel(&mma_gemv_kernel<8, E, NormAfter>, blocks, mma_warps * 32, 0, s, w, out, in, x, ldx, y32, act, ldy,
                  rows, split, na);
}

template <gemv_epilogue E>
void launch_small_gemv(const bf16* w, int out, int in, const bf16* x, int ldx, float* y32, bf16* act, int ldy, int rows,
                       const gemv_norm& norm, gemv_path path, const gemv_split& split, const gemv_norm_after& na,
                       cudaStream_t s) {
  if (path == gemv_path::tensor_cores) {
    // The norm after as its own instantiation: its registers never weigh on the products without it.
    if constexpr (E == gemv_epilogue::residual) {
      if (na.y16) {
        launch_mma_gemv<E, true>(w, out, in, x, ldx, y32, act, ldy, rows, split, na, s);
        return;
      }
    }
    launch_mma_gemv<E, false>(w, out, in, x, ldx, y32, act, ldy, rows, split, na, s);
  } else if (norm.x32) {
    launch_small_gemv<E, true>(w, out, in, x, ldx, y32, act, ldy, rows, norm, s);
  } else {
    launch_small_gemv<E, false>(w, out, in, x, ldx, y32, act, ldy, rows, norm, s);
  }
}

__global__ void bias_kernel(const float* x, const float* bias, bf16* y16, float* y32, int tokens, int width, bool act) {
  await_predecessors();
  const std::size_t n = std::size_t(tokens) * width;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float v = x[i] + bias[i % width];
    if (act) v = silu(v);
    if (y16) y16[i] = __float2bfloat16(v);
    if (y32) y32[i] = v;
  }
}

__global__ void gather_rows_kernel(const bf16* table, const std::int32_t* ids, bf16* out, int width) {
  await_predecessors();
  const bf16* src = table + std::size_t(ids[blockIdx.x]) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    out[std::size_t(blockIdx.x) * width + i] = src[i];
}

__global__ void predictor_prefill_input_kernel(const float* past_hidden, const bf16* codec_embedding,
                                               const std::int32_t* code0, float* out, int width) {
  await_predecessors();
  const int r = blockIdx.x;
  const bf16* e = codec_embedding + std::size_t(code0[r]) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    out[std::size_t(2 * r) * width + i] = past_hidden[std::size_t(r) * width + i];
    out[std::size_t(2 * r + 1) * width + i] = __bfloat162float(e[i]);
  }
}

__global__ void gather_code_rows_kernel(const bf16* table, const std::int32_t* codes, int code_stride, int g,
                                        float* out, int width) {
  await_predecessors();
  const int r = blockIdx.x;
  const bf16* e = table + std::size_t(codes[r * code_stride + g]) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    out[std::size_t(r) * width + i] = __bfloat162float(e[i]);
}

__global__ void to_bf16_kernel(const float* x, bf16* y, std::size_t n) {
  await_predecessors();
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

__global__ void frame_embedding_sum_kernel(const bf16* codec_embedding, const bf16* pred_embeddings,
                                           std::int64_t pred_table_elems, const std::int32_t* frames, int groups,
                                           const float* text, float* x, int width) {
  await_predecessors();
  const int r = blockIdx.x;
  const std::int32_t* f = frames + std::size_t(r) * groups;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float v = __bfloat162float(codec_embedding[std::size_t(f[0]) * width + i]);
    for (int g = 1; g < groups; ++g)
      v += __bfloat162float(pred_embeddings[std::size_t(g - 1) * pred_table_elems + std::size_t(f[g]) * width + i]);
    x[std::size_t(r) * width + i] = v + text[std::size_t(r) * width + i];
  }
}

// Block-wide argmax, lowest index on ties; every thread gets the result.
__device__ int block_argmax(const float* v, int n) {
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  __shared__ int result;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (v[i] > bv || (v[i] == bv && i < bi)) {
      bv = v[i];
      bi = i;
    }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float fv = best_v[0];
    int fi = best_i[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (best_v[w] > fv || (best_v[w] == fv && best_i[w] < fi)) {
        fv = best_v[w];
        fi = best_i[w];
      }
    result = fi == 0x7fffffff ? 0 : fi; // all -inf or NaN: index 0, as no better choice exists
  }
  __syncthreads();
  return result;
}

__global__ void argmax_rows_kernel(const float* logits, int vocab, std::int32_t* out, int out_stride, int out_offset,
                                   const std::int32_t* forced, std::int32_t* chosen) {
  await_predecessors();
  const int r = blockIdx.x;
  const int best = block_argmax(logits + std::size_t(r) * vocab, vocab);
  const int at = r * out_stride + out_offset;
  if (threadIdx.x == 0) {
    out[at] = forced && forced[at] >= 0 ? forced[at] : best;
    if (chosen) chosen[at] = best;
  }
}

// A float's bits as an unsigned key that orders as the floats do (larger float, larger key).
__device__ std::uint32_t order_key(float f) {
  const std::uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ float key_value(std::uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

// The k-th largest of v[0..n) / temperature (k >= 1, k <= n), by a 4-pass radix select over order
// keys: each pass histograms the next 8 bits of the candidates that share the prefix found so far, and the bin
// holding the k-th is found from the bins' counts above it. The keys are computed once into registers (a row of
// at most 16 x blockDim.x; a longer one is read again each pass); a warp adds each bin once for all its lanes
// that fall in it (most keys share their top byte, so per-lane atomics conflicted 32-way); and warp 0 finds the
// bin, 8 bins a lane, where one thread used to walk down the 256 bins of every pass. Integer counts only: the
// k-th is the same value whatever the order of the additions.
__device__ float block_kth_largest(const float* v, int n, float temperature, int k) {
  constexpr int per = 16;
  __shared__ int hist[256];
  __shared__ std::uint32_t prefix_s;
  __shared__ int k_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rounds = (n + int(blockDim.x) - 1) / int(blockDim.x); // the same for every thread of the block
  const bool cached = rounds <= per;
  std::uint32_t keys[per];
#pragma unroll
  for (int j = 0; j < per; ++j) {
    const int i = int(threadIdx.x) + j * int(blockDim.x);
    keys[j] = cached && i < n ? order_key(v[i] / temperature) : 0u;
  }
  if (threadIdx.x == 0) {
    prefix_s = 0;
    k_s = k;
  }
  std::uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
      hist[b] = 0;
    __syncthreads();
    const std::uint32_t prefix = prefix_s;
    // Every lane of a warp takes every round (a lane past n with nothing to add), so the warp's votes see it whole.
    auto count = [&](std::uint32_t key, bool valid) {
      const bool in = valid && (key & mask) == prefix;
      const unsigned voters = __ballot_sync(0xffffffffu, in);
      if (in) {
        const std::uint32_t bin = (key >> shift) & 0xffu;
        const unsigned same = __match_any_sync(voters, bin);
        if (lane == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
      }
    };
    if (cached) {
#pragma unroll
      for (int j = 0; j < per; ++j)
        if (j < rounds) count(keys[j], int(threadIdx.x) + j * int(blockDim.x) < n);
    } else {
      for (int j = 0; j < rounds; ++j) {
        const int i = int(threadIdx.x) + j * int(blockDim.x);
        count(i < n ? order_key(v[i] / temperature) : 0u, i < n);
      }
    }
    __syncthreads();
    if (warp == 0) {
      // Lane L holds bins 8L..8L+7; `above` counts the candidates in higher bins. The k_s-th largest lies in the
      // lane with above < k_s <= above + its own count, in its highest bin whose count, with those above it,
      // reaches k_s. Where no lane has it (fewer candidates than k_s: not for a k within the row), bin 0.
      int c[8], own = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        c[e] = hist[lane * 8 + e];
        own += c[e];
      }
      int from_here = own; // candidates in this lane's bins and every higher lane's
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_down_sync(0xffffffffu, from_here, o);
        if (lane + o < 32) from_here += y;
      }
      const int above = from_here - own, need = k_s;
      bool mine = above < need && need <= from_here;
      if (__ballot_sync(0xffffffffu, mine) == 0u) mine = lane == 0;
      if (mine) {
        int left = need - above, b = 7;
        while (b > 0 && c[b] < left)
          left -= c[b--];
        prefix_s = prefix | (std::uint32_t(lane * 8 + b) << shift);
        k_s = left;
      }
    }
    mask |= 0xffu << shift;
    __syncthreads();
  }
  return key_value(prefix_s);
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = part[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      t = fmaxf(t, part[w]);
    total = t;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}

// One draw from row v[0..n) (sample_rows' rule). Thread t owns the contiguous chunk [t*c, t*c + c), so
// an exclusive scan of the chunks' sums gives each thread the CDF at its chunk's start.
__device__ int block_sample(const float* v, int n, float temperature, int top_k, std::uint64_t seed,
                            std::uint32_t counter, std::uint32_t lane_id) {
  const float kth = top_k > 0 && top_k < n ? block_kth_largest(v, n, temperature, top_k) : -INFINITY;
  float local_max = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float x = v[i] / temperature;
    if (x >= kth) local_max = fmaxf(local_max, x);
  }
  const float top = block_max(local_max);
  const int c = (n + int(blockDim.x) - 1) / int(blockDim.x);
  const int first = int(threadIdx.x) * c, end = min(first + c, n);
  auto prob = [&](int i) {
    const float x = v[i] / temperature;
    return x >= kth ? expf(x - top) : 0.0f;
  };
  float chunk = 0.0f;
  for (int i = first; i < end; ++i)
    chunk += prob(i);
  // Exclusive scan of the chunk sums over the block.
  __shared__ float warp_total[32];
  __shared__ int pick;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float incl = chunk;
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_total[warp] = incl;
  if (threadIdx.x == 0) pick = 0x7fffffff;
  __syncthreads();
  float before = incl - chunk, total = 0.0f;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) {
    if (w < warp) before += warp_total[w];
    total += warp_total[w];
  }
  const mstar::sampler_row row{seed, counter, 0, 0.0f, 0.0f};
  const float target = mstar::sample_uniform(row, lane_id) * total;
  float acc = before;
  for (int i = first; i < end; ++i) {
    const float p = prob(i);
    acc += p;
    if (p > 0.0f && target < acc) {
      atomicMin(&pick, i);
      break;
    }
  }
  __syncthreads();
  int result = pick;
  __syncthreads();
  if (result == 0x7fffffff) result = -1; // rounding left the target past the last probability
  return result;
}

__global__ void sample_rows_kernel(const float* logits, int vocab, sample_settings st, const std::uint64_t* seeds,
                                   const std::int32_t* frame, int frame_offset, std::uint32_t lane, std::int32_t* out,
                                   int out_stride, int out_offset, const std::int32_t* forced, std::int32_t* chosen) {
  await_predecessors();
  const int r = blockIdx.x;
  const float* l = logits + std::size_t(r) * vocab;
  int choice = block_sample(l, vocab, st.temperature, st.top_k, seeds[r], std::uint32_t(frame[r] + frame_offset), lane);
  if (choice < 0) choice = block_argmax(l, vocab);
  const int at = r * out_stride + out_offset;
  if (threadIdx.x == 0) {
    out[at] = forced && forced[at] >= 0 ? forced[at] : choice;
    if (chosen) chosen[at] = choice;
  }
}

__global__ void choose_code0_kernel(const float* raw, float* logits, int vocab, std::uint8_t* seen,
                                    std::int32_t* generated, std::int32_t* code0, const std::int32_t* forced,
                                    int forced_stride, float penalty, int min_new, int eos, int suppress_from,
                                    bool sample, sample_settings settings, const std::uint64_t* seeds,
                                    std::int32_t* chosen) {
  await_predecessors();
  const int r = blockIdx.x;
  const float* in = raw + std::size_t(r) * vocab;
  float* lr = logits + std::size_t(r) * vocab;
  std::uint8_t* sr = seen + std::size_t(r) * vocab;
  const bool ban_eos = generated[r] < min_new;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = in[i];
    if (sr[i]) v = v < 0.0f ? v * penalty : v / penalty;
    if ((i == eos && ban_eos) || (i >= suppress_from && i != eos)) v = -INFINITY;
    lr[i] = v;
  }
  __syncthreads();
  int best = -1;
  if (sample) // counter: the frame this code 0 opens (the codes chosen so far); lane 0, as the host sampler
    best = block_sample(lr, vocab, settings.temperature, settings.top_k, seeds[r], std::uint32_t(generated[r]), 0);
  if (best < 0) best = block_argmax(lr, vocab);
  if (chosen && threadIdx.x == 0) chosen[r * forced_stride] = best;
  if (forced && forced[r * forced_stride] >= 0) best = forced[r * forced_stride];
  if (threadIdx.x == 0) {
    sr[best] = 1;
    generated[r] += 1;
    code0[r] = best;
  }
}

__device__ std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

__global__ void fill_random_kernel(bf16* p, float* p32, std::size_t n, std::uint32_t seed, float offset, float scale) {
  await_predecessors();
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::uint32_t h = mix32(std::uint32_t(i) ^ mix32(seed ^ std::uint32_t(i >> 32)));
    const float u = float(h) * (2.0f / 4294967296.0f) - 1.0f; // [-1, 1)
    if (p) p[i] = __float2bfloat16(u * scale);
    if (p32) p32[i] = offset + u * scale;
  }
}

// Block (r, i) copies piece i of row r between the slot store and the row array; 4-byte words when the
// piece, its offset and the row stride allow it (every piece of the layout talker_cuda uses does).
template <bool Gather>
__global__ void move_state_kernel(unsigned char* store, std::size_t row_bytes, const std::int32_t* slots,
                                  state_pieces pieces) {
  await_predecessors();
  const int r = blockIdx.x;
  const state_piece p = pieces.piece[blockIdx.y];
  unsigned char* slot_row = store + std::size_t(slots[r]) * row_bytes + p.offset;
  unsigned char* row = static_cast<unsigned char*>(p.rows) + std::size_t(r) * p.bytes;
  unsigned char* dst = Gather ? row : slot_row;
  const unsigned char* src = Gather ? slot_row : row;
  if (p.bytes % 4 == 0 && p.offset % 4 == 0 && row_bytes % 4 == 0) {
    auto* d = reinterpret_cast<std::uint32_t*>(dst);
    const auto* x = reinterpret_cast<const std::uint32_t*>(src);
    for (int i = threadIdx.x; i < p.bytes / 4; i += blockDim.x)
      d[i] = x[i];
  } else {
    for (int i = threadIdx.x; i < p.bytes; i += blockDim.x)
      dst[i] = src[i];
  }
}

__global__ void frames_with_end_kernel(const std::int32_t* frames, int groups, int eos, std::int32_t* out) {
  await_predecessors();
  const int r = blockIdx.x;
  for (int g = threadIdx.x; g <= groups; g += blockDim.x)
    out[std::size_t(r) * (groups + 1) + g] =
        g < groups ? frames[std::size_t(r) * groups + g] : (frames[std::size_t(r) * groups] == eos ? 1 : 0);
}

unsigned grid_for(std::size_t n) {
  const std::size_t b = (n + 255) / 256;
  return unsigned(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

} // namespace

pdl_scope::pdl_scope(bool on) : was_(launch_pdl) { launch_pdl = on; }
pdl_scope::~pdl_scope() { launch_pdl = was_; }

void rms_norm(float* x, const float* add, const float* w, bf16* y16, float* y32, int tokens, int width, float eps,
              cudaStream_t s) {
  if (tokens == 0) return;
  launch_kernel(&rms_norm_kernel, tokens, 256, 0, s, x, add, w, y16, y32, width, eps);
  check_launch("rms_norm");
}

void gather_last_rows(const float* src, const std::int32_t* qo_indptr, float* dst32, bf16* dst16, int rows, int width,
                      cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&gather_last_rows_kernel, rows, 256, 0, s, src, qo_indptr, dst32, dst16, width);
  check_launch("gather_last_rows");
}

void qk_norm_rope_append(const float* qkv, const float* q_norm, const float* k_norm, const float* inv_freq,
                         float* q_out, kv_layer cache, paged_view view, int heads, int kv_heads, int head_dim,
                         float eps, cudaStream_t s) {
  if (view.tokens == 0) return;
  if (head_dim % 2 != 0 || head_dim > 256)
    throw std::runtime_error("qwen3_tts CUDA talker: head_dim " + std::to_string(head_dim) +
                             " is not supported (even, at most 256)");
  launch_kernel(&qk_norm_rope_append_kernel, view.tokens, 256, 0, s, qkv, q_norm, k_norm, inv_freq, q_out, cache, view,
                heads, kv_heads, head_dim, eps);
  check_launch("qk_norm_rope_append");
}

void paged_attention(const float* q, kv_layer cache, paged_view view, bf16* out, int heads, int kv_heads, int head_dim,
                     cudaStream_t s) {
  if (view.tokens == 0) return;
  if (kv_heads <= 0 || heads % kv_heads != 0)
    throw std::runtime_error("qwen3_tts CUDA talker: " + std::to_string(heads) + " query heads are not a multiple of " +
                             std::to_string(kv_heads) + " KV heads");
  const dim3 grid(unsigned(view.tokens), unsigned(heads));
  switch (head_dim) {
  case 16: launch_kernel(&paged_attention_kernel<16>, grid, 128, 0, s, q, cache, view, out, heads, kv_heads); break;
  case 32: launch_kernel(&paged_attention_kernel<32>, grid, 128, 0, s, q, cache, view, out, heads, kv_heads); break;
  case 64: launch_kernel(&paged_attention_kernel<64>, grid, 128, 0, s, q, cache, view, out, heads, kv_heads); break;
  case 128: launch_kernel(&paged_attention_kernel<128>, grid, 128, 0, s, q, cache, view, out, heads, kv_heads); break;
  case 256: launch_kernel(&paged_attention_kernel<256>, grid, 128, 0, s, q, cache, view, out, heads, kv_heads); break;
  default:
    throw std::runtime_error("qwen3_tts CUDA talker: paged attention has no kernel for head_dim " +
                             std::to_string(head_dim) + " (16, 32, 64, 128, 256 are built; add a case here)");
  }
  check_launch("paged_attention");
}

void decode_attention(const float* qkv, const float* q_norm, const float* k_norm, const float* inv_freq, kv_layer cache,
                      paged_view view, bf16* out, int heads, int kv_heads, int head_dim, float eps,
                      const decode_scratch& scratch, int splits, cudaStream_t s, int chunk, int blocks) {
  if (view.rows == 0) return;
  if (kv_heads <= 0 || heads % kv_heads != 0 || heads / kv_heads > max_decode_group)
    throw std::runtime_error("qwen3_tts CUDA talker: decode_attention takes at most " +
                             std::to_string(max_decode_group) + " query heads a KV head, not " + std::to_string(heads) +
                             " / " + std::to_string(kv_heads) + " (use qk_norm_rope_append + paged_attention)");
  if (splits < 1 || splits > max_decode_splits || (splits > 1 && (!scratch.acc || !scratch.counters)))
    throw std::runtime_error("qwen3_tts CUDA talker: decode_attention splits " + std::to_string(splits) +
                             " outside 1.." + std::to_string(max_decode_splits) + " or without scratch");
  if (chunk < 0)
    throw std::runtime_error("qwen3_tts CUDA talker: decode_attention chunk " + std::to_string(chunk) +
                             " is negative (0: equal shares)");
  if (blocks < 0 || blocks > splits)
    throw std::runtime_error("qwen3_tts CUDA talker: decode_attention blocks " + std::to_string(blocks) +
                             " a row outside 0..splits (" + std::to_string(splits) + "; 0: one block a share)");
  const dim3 grid(unsigned(view.rows), unsigned(kv_heads), unsigned(blocks == 0 ? splits : blocks));
  const int group = heads / kv_heads;
  const bool dealt = grid.z < unsigned(splits);
  auto launch = [&](auto d, auto g) {
    constexpr int D = decltype(d)::value, G = decltype(g)::value;
    launch_kernel(dealt ? &decode_attention_kernel<D, G, true> : &decode_attention_kernel<D, G, false>, grid, 128, 0,
                  s, qkv, q_norm, k_norm, inv_freq, cache, view, out, heads, kv_heads, eps, scratch, chunk, splits);
  };
  auto by_group = [&](auto d) {
    if (group <= 1)
      launch(d, std::integral_constant<int, 1>{});
    else if (group <= 2)
      launch(d, std::integral_constant<int, 2>{});
    else if (group <= 4)
      launch(d, std::integral_constant<int, 4>{});
    else
      launch(d, std::integral_constant<int, 8>{});
  };
  switch (head_dim) {
  case 16: by_group(std::integral_constant<int, 16>{}); break;
  case 32: by_group(std::integral_constant<int, 32>{}); break;
  case 64: by_group(std::integral_constant<int, 64>{}); break;
  case 128: by_group(std::integral_constant<int, 128>{}); break;
  case 256: by_group(std::integral_constant<int, 256>{}); break;
  default:
    throw std::runtime_error("qwen3_tts CUDA talker: decode attention has no kernel for head_dim " +
                             std::to_string(head_dim) + " (16, 32, 64, 128, 256 are built; add a case here)");
  }
  check_launch("decode_attention");
}

void swiglu(const float* gate_up, bf16* out, int tokens, int inter, cudaStream_t s) {
  if (tokens == 0) return;
  launch_kernel(&swiglu_kernel, grid_for(std::size_t(tokens) * inter), 256, 0, s, gate_up, out, tokens, inter);
  check_launch("swiglu");
}

void small_gemv(gemv_epilogue epilogue, const bf16* w, int out, int in, const bf16* x, int ldx, float* y32, bf16* act,
                int ldy, int rows, cudaStream_t s, const gemv_norm& norm, gemv_path path, const gemv_split& split,
                const gemv_norm_after& norm_after) {
  auto refuse = [](const std::string& what) {
    throw std::invalid_argument("qwen3_tts CUDA talker: small_gemv " + what);
  };
  const bool swiglu = epilogue == gemv_epilogue::swiglu, mma = path == gemv_path::tensor_cores;
  const int most = mma ? max_mma_gemv_rows : max_gemv_rows, multiple = mma ? 32 : 8;
  if (rows < 1 || rows > most)
    refuse("takes 1.." + std::to_string(most) + " rows" + (mma ? " on the tensor cores" : " on the CUDA cores") +
           ", not " + std::to_string(rows) + " (use cuBLAS)");
  if (in <= 0 || in % multiple != 0)
    refuse(std::string(mma ? "reads w in chunks of 32 inputs" : "reads w in 16-byte slices") +
           ": in must be a positive multiple of " + std::to_string(multiple) + ", not " + std::to_string(in) +
           " (use cuBLAS)");
  if (norm.x32) {
    if (!norm.weight || norm.ld < in)
      refuse("normalises x32 rows: it needs the norm's weight and a leading dimension of at least in " +
             std::to_string(in) + ", not " + std::to_string(norm.ld));
    if (mma)
      refuse("normalises rows on the CUDA cores only: on the tensor cores every block would normalise every row, "
             "slower than one rms_norm (use rms_norm, then small_gemv)");
    if (in > max_gemv_norm_in)
      refuse("normalises rows of at most " + std::to_string(max_gemv_norm_in) + " inputs in shared memory, not " +
             std::to_string(in) + " (use rms_norm, then small_gemv)");
  } else if (ldx < in || ldx % 8 != 0) {
    refuse("reads x in 16-byte slices: ldx must be a multiple of 8 and at least in " + std::to_string(in) + ", not " +
           std::to_string(ldx));
  }
  if (out <= 0 || (swiglu && out % 2 != 0))
    refuse("needs out > 0" + std::string(swiglu ? " and even (the fused [gate; up] weight)" : "") + ", not " +
           std::to_string(out));
  if (reinterpret_cast<std::uintptr_t>(w) % 16 != 0 || (!norm.x32 && reinterpret_cast<std::uintptr_t>(x) % 16 != 0))
    refuse("needs w and x 16-byte aligned; w is at " + std::to_string(reinterpret_cast<std::uintptr_t>(w) % 16) +
           " and x at " + std::to_string(reinterpret_cast<std::uintptr_t>(x) % 16) + " bytes past a 16-byte boundary");
  if (ldy < (swiglu ? out / 2 : out))
    refuse("writes rows of " + std::to_string(swiglu ? out / 2 : out) + " outputs, but ldy is " + std::to_string(ldy));
  if (norm.x32 && epilogue == gemv_epilogue::residual && y32 == norm.x32)
    refuse("cannot add to the rows it normalises (other blocks still read them)");
  if (swiglu ? act == nullptr : y32 == nullptr)
    refuse(swiglu ? "has no output: the swiglu epilogue writes act" : "has no output: store and residual write y32");
  if (split.splits < 1 || split.splits > max_gemv_splits)
    refuse("shares a tile among 1.." + std::to_string(max_gemv_splits) + " blocks, not " +
           std::to_string(split.splits));
  if (norm_after.y16) {
    if (epilogue != gemv_epilogue::residual || !mma)
      refuse("normalises the rows it leaves after the residual epilogue on the tensor cores only");
    if (!norm_after.weight || !norm_after.ticket)
      refuse("normalising the rows it leaves needs gemv_norm_after's weight and ticket");
    if (out > max_gemv_norm_after_out)
      refuse("normalises rows of at most " + std::to_string(max_gemv_norm_after_out) + " outputs, not " +
             std::to_string(out) + " (use rms_norm after small_gemv)");
    if (static_cast<const void*>(norm_after.y16) == static_cast<const void*>(y32) ||
        static_cast<const void*>(norm_after.y16) == static_cast<const void*>(x))
      refuse("cannot write the normalised rows over its input or its residual rows");
  }
  if (split.splits > 1) {
    if (!mma) refuse("splits the inputs among blocks on the tensor cores only (gemv_split.splits 1 on the CUDA cores)");
    if (!split.partial || !split.tickets)
      refuse("split among " + std::to_string(split.splits) + " blocks needs gemv_split's partial and tickets");
    if (gemv_tiles(epilogue, out) > split.capacity)
      refuse("split among blocks has room for " + std::to_string(split.capacity) + " tiles of 16 outputs, not " +
             std::to_string(gemv_tiles(epilogue, out)) + " (a larger gemv_split, or splits 1)");
  }
  switch (epilogue) {
  case gemv_epilogue::store:
    launch_small_gemv<gemv_epilogue::store>(w, out, in, x, ldx, y32, act, ldy, rows, norm, path, split, norm_after,
                                              s);
    break;
  case gemv_epilogue::residual:
    launch_small_gemv<gemv_epilogue::residual>(w, out, in, x, ldx, y32, act, ldy, rows, norm, path, split, norm_after,
                                              s);
    break;
  case gemv_epilogue::swiglu:
    launch_small_gemv<gemv_epilogue::swiglu>(w, out, in, x, ldx, y32, act, ldy, rows, norm, path, split, norm_after,
                                              s);
    break;
  }
  check_launch("small_gemv");
}

void bias_silu(const float* x, const float* bias, bf16* y, int tokens, int width, cudaStream_t s) {
  if (tokens == 0) return;
  launch_kernel(&bias_kernel, grid_for(std::size_t(tokens) * width), 256, 0, s, x, bias, y, nullptr, tokens, width,
                true);
  check_launch("bias_silu");
}

void bias_add(const float* x, const float* bias, float* y32, bf16* y16, int tokens, int width, cudaStream_t s) {
  if (tokens == 0) return;
  launch_kernel(&bias_kernel, grid_for(std::size_t(tokens) * width), 256, 0, s, x, bias, y16, y32, tokens, width,
                false);
  check_launch("bias_add");
}

void gather_rows(const bf16* table, const std::int32_t* ids, bf16* out, int rows, int width, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&gather_rows_kernel, rows, 256, 0, s, table, ids, out, width);
  check_launch("gather_rows");
}

void predictor_prefill_input(const float* past_hidden, const bf16* codec_embedding, const std::int32_t* code0,
                             float* out, int rows, int width, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&predictor_prefill_input_kernel, rows, 256, 0, s, past_hidden, codec_embedding, code0, out, width);
  check_launch("predictor_prefill_input");
}

void gather_code_rows(const bf16* table, const std::int32_t* codes, int code_stride, int g, float* out, int rows,
                      int width, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&gather_code_rows_kernel, rows, 256, 0, s, table, codes, code_stride, g, out, width);
  check_launch("gather_code_rows");
}

void to_bf16(const float* x, bf16* y, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel(&to_bf16_kernel, grid_for(n), 256, 0, s, x, y, n);
  check_launch("to_bf16");
}

void frame_embedding_sum(const bf16* codec_embedding, const bf16* pred_embeddings, std::int64_t pred_table_elems,
                         const std::int32_t* frames, int groups, const float* text, float* x, int rows, int width,
                         cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&frame_embedding_sum_kernel, rows, 256, 0, s, codec_embedding, pred_embeddings, pred_table_elems,
                frames, groups, text, x, width);
  check_launch("frame_embedding_sum");
}

void argmax_rows(const float* logits, int vocab, std::int32_t* out, int out_stride, int out_offset,
                 const std::int32_t* forced, std::int32_t* chosen, int rows, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&argmax_rows_kernel, rows, 256, 0, s, logits, vocab, out, out_stride, out_offset, forced, chosen);
  check_launch("argmax_rows");
}

void choose_code0(const float* raw, float* processed, int vocab, std::uint8_t* seen, std::int32_t* generated,
                  std::int32_t* code0, const std::int32_t* forced, std::int32_t* chosen, int forced_stride, int rows,
                  float penalty, int min_new, int eos, int suppress_from, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&choose_code0_kernel, rows, 256, 0, s, raw, processed, vocab, seen, generated, code0, forced,
                forced_stride, penalty, min_new, eos, suppress_from, false, sample_settings{}, nullptr, chosen);
  check_launch("choose_code0");
}

void sample_code0(const float* raw, float* processed, int vocab, std::uint8_t* seen, std::int32_t* generated,
                  std::int32_t* code0, const std::int32_t* forced, std::int32_t* chosen, int forced_stride, int rows,
                  float penalty, int min_new, int eos, int suppress_from, sample_settings settings,
                  const std::uint64_t* seeds, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&choose_code0_kernel, rows, 256, 0, s, raw, processed, vocab, seen, generated, code0, forced,
                forced_stride, penalty, min_new, eos, suppress_from, true, settings, seeds, chosen);
  check_launch("sample_code0");
}

void sample_rows(const float* logits, int vocab, sample_settings settings, const std::uint64_t* seeds,
                 const std::int32_t* frame, int frame_offset, std::uint32_t lane, std::int32_t* out, int out_stride,
                 int out_offset, const std::int32_t* forced, std::int32_t* chosen, int rows, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&sample_rows_kernel, rows, 256, 0, s, logits, vocab, settings, seeds, frame, frame_offset, lane, out,
                out_stride, out_offset, forced, chosen);
  check_launch("sample_rows");
}

void gather_state(const unsigned char* store, std::size_t row_bytes, const std::int32_t* slots, state_pieces pieces,
                  int rows, cudaStream_t s) {
  if (rows == 0 || pieces.count == 0) return;
  launch_kernel(&move_state_kernel<true>, dim3(unsigned(rows), unsigned(pieces.count)), 256, 0, s,
                const_cast<unsigned char*>(store), row_bytes, slots, pieces);
  check_launch("gather_state");
}

void scatter_state(unsigned char* store, std::size_t row_bytes, const std::int32_t* slots, state_pieces pieces,
                   int rows, cudaStream_t s) {
  if (rows == 0 || pieces.count == 0) return;
  launch_kernel(&move_state_kernel<false>, dim3(unsigned(rows), unsigned(pieces.count)), 256, 0, s, store, row_bytes,
                slots, pieces);
  check_launch("scatter_state");
}

void frames_with_end(const std::int32_t* frames, int groups, int eos, std::int32_t* out, int rows, cudaStream_t s) {
  if (rows == 0) return;
  launch_kernel(&frames_with_end_kernel, rows, 32, 0, s, frames, groups, eos, out);
  check_launch("frames_with_end");
}

void fill_random(bf16* p, std::size_t n, std::uint32_t seed, float scale, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel(&fill_random_kernel, grid_for(n), 256, 0, s, p, nullptr, n, seed, 0.0f, scale);
  check_launch("fill_random");
}

void fill_random_f32(float* p, std::size_t n, std::uint32_t seed, float offset, float scale, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel(&fill_random_kernel, grid_for(n), 256, 0, s, nullptr, p, n, seed, offset, scale);
  check_launch("fill_random_f32");
}

} // namespace qwen3_tts::cuda
