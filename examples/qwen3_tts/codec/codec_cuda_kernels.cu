// The CUDA codec decoder's kernels (codec_cuda_kernels.hpp says what each computes). Plain kernels, written
// for the host decoder's arithmetic rather than for speed: double sums, one fixed order per output.
#include "codec_cuda_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace qwen3_tts::codec_kernels {
namespace {

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts CUDA codec: kernel ") + kernel +
                             " failed to launch: " + cudaGetErrorString(e));
}

constexpr int threads = 256;
unsigned blocks_for(std::size_t n, unsigned cap = 4096) {
  return unsigned(std::clamp<std::size_t>((n + threads - 1) / threads, 1, cap));
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

__device__ inline int row_width(const row_table& rt, int r) { return rt.start[r + 1] - rt.start[r]; }

// ---------------------------------------------------------------------------------------------- GEMM
// A 64 x 64 output tile per block of 256 threads, 4 x 4 outputs a thread (strided by 16, so that the
// shared-memory reads of a warp fall in distinct banks), 16 of the reduction a stage. Each output's
// terms are summed in kk order, tile after tile, whatever the tile's place: the bits of a position
// depend only on its own inputs.
constexpr int tile_m = 64, tile_n = 64, tile_k = 16;

__global__ void __launch_bounds__(256) gemm_kernel(row_table rt, gemm_input a, const float* __restrict__ w, int n_out,
                                                   epilogue ep, float* y, int ldy, int m_rows) {
  __shared__ float as[tile_k][tile_m + 1];
  __shared__ float bs[tile_k][tile_n + 1];
  const int kt = a.taps * a.channels;
  const int m0 = blockIdx.y * tile_m, n0 = blockIdx.x * tile_n;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;

  // The four A rows (and B rows) this thread loads: element e = tid + 256 i of the 64 x 16 stage.
  long long a_row[4];
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + (tid + 256 * i) / tile_k;
    a_row[i] = -1;
    if (m < m_rows) a_row[i] = a.context == 0 ? m : m + (long long)rt.frame_row[m / a.level] * a.context;
  }
  double acc[4][4] = {};
  for (int k0 = 0; k0 < kt; k0 += tile_k) {
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i, r = e / tile_k, c = e % tile_k, kk = k0 + c;
      float av = 0.0f, bv = 0.0f;
      if (kk < kt) {
        if (a_row[i] >= 0) {
          const int tap = kk / a.channels, ch = kk - tap * a.channels;
          av = a.data[(a_row[i] + (long long)tap * a.dilation) * a.channels + ch];
        }
        const int n = n0 + r;
        if (n < n_out) bv = w[(long long)n * kt + kk];
      }
      as[c][r] = av;
      bs[c][r] = bv;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < tile_k; ++c) {
      double av[4], bv[4];
      for (int i = 0; i < 4; ++i) {
        av[i] = as[c][ty + 16 * i];
        bv[i] = bs[c][tx + 16 * i];
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty + 16 * i;
    if (m >= m_rows) continue;
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx + 16 * j;
      if (n >= n_out) continue;
      float v = float(acc[i][j]);
      if (ep.bias) v += ep.bias[n];
      if (ep.scale) v *= ep.scale[n];
      float& out = y[(long long)m * ldy + n];
      out = ep.accumulate ? out + v : v;
    }
  }
}

__device__ inline float snake(float x, float exp_alpha, float inv_exp_beta) {
  const float v = sinf(x * exp_alpha);
  return x + inv_exp_beta * (v * v);
}
// Four consecutive channels' values, ea and ib pointing at the first one's parameters.
__device__ inline float4 snake4(float4 v, const float* ea, const float* ib) {
  return {snake(v.x, ea[0], ib[0]), snake(v.y, ea[1], ib[1]), snake(v.z, ea[2], ib[2]), snake(v.w, ea[3], ib[3])};
}

// The element-wise kernels below index with 32-bit integers (the constructor keeps every buffer they walk
// within max_elementwise_floats): their divisions cost a fraction of 64-bit ones.

// The largest finite fp16 value: a converted value beyond it (or not finite) sets *out_of_range.
constexpr float fp16_max = 65504.0f;
__device__ inline bool outside_fp16(float x) { return !(fabsf(x) <= fp16_max); } // a NaN too
__device__ inline bool outside_fp16(float4 v) {
  return outside_fp16(v.x) | outside_fp16(v.y) | outside_fp16(v.z) | outside_fp16(v.w);
}

template <class T>
__global__ void im2col_kernel(row_table rt, gemm_input a, T* col, int m_rows, unsigned* out_of_range) {
  const unsigned kt = unsigned(a.taps * a.channels), channels = unsigned(a.channels);
  const unsigned total = unsigned(m_rows) * kt;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned m = i / kt, kk = i - m * kt, tap = kk / channels, ch = kk - tap * channels;
    const unsigned row = a.context == 0 ? m : m + unsigned(rt.frame_row[m / unsigned(a.level)]) * unsigned(a.context);
    const float v = a.data[std::size_t(row + tap * unsigned(a.dilation)) * channels + ch];
    if constexpr (std::is_same_v<T, float>) {
      col[i] = v;
    } else {
      const float u = a.exp_alpha ? snake(v, a.exp_alpha[ch], a.inv_exp_beta[ch]) : v;
      if (outside_fp16(u)) *out_of_range = 1u;
      col[i] = __float2half_rn(u);
    }
  }
}

// The same, V channels a thread (a 16-byte store: 4 floats or 8 halves) where the channels are a multiple of V and
// both buffers 16-byte aligned: a fraction of the scalar kernel's index arithmetic a byte.
template <class T, int V>
__global__ void im2col_vector_kernel(row_table rt, gemm_input a, T* col, int m_rows, unsigned* out_of_range) {
  static_assert(V * sizeof(T) == 16 && V % 4 == 0);
  const unsigned groups = unsigned(a.channels) / V, kt = unsigned(a.taps) * groups, channels = unsigned(a.channels);
  const unsigned total = unsigned(m_rows) * kt;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned m = i / kt, kk = i - m * kt, tap = kk / groups, g = kk - tap * groups;
    const unsigned row = a.context == 0 ? m : m + unsigned(rt.frame_row[m / unsigned(a.level)]) * unsigned(a.context);
    const auto* src = reinterpret_cast<const float4*>(a.data + std::size_t(row + tap * unsigned(a.dilation)) * channels +
                                                      std::size_t(g) * V);
    if constexpr (std::is_same_v<T, float>) {
      reinterpret_cast<float4*>(col)[i] = src[0];
    } else {
      float4 lo = src[0], hi = src[1];
      if (a.exp_alpha) {
        const float *ea = a.exp_alpha + g * V, *ib = a.inv_exp_beta + g * V;
        lo = snake4(lo, ea, ib);
        hi = snake4(hi, ea + 4, ib + 4);
      }
      if (outside_fp16(lo) || outside_fp16(hi)) *out_of_range = 1u;
      const __half2 h[4] = {__floats2half2_rn(lo.x, lo.y), __floats2half2_rn(lo.z, lo.w),
                            __floats2half2_rn(hi.x, hi.y), __floats2half2_rn(hi.z, hi.w)};
      reinterpret_cast<uint4*>(col)[i] = *reinterpret_cast<const uint4*>(h);
    }
  }
}

// im2col of either element type: the vector kernel where it applies, else the scalar one.
template <class T>
void launch_im2col(const row_table& rows, const gemm_input& a, T* col, int m_rows, cudaStream_t s, const char* name,
                   unsigned* out_of_range) {
  constexpr int V = 16 / sizeof(T);
  if (a.channels % V == 0 && aligned16(a.data) && aligned16(col))
    im2col_vector_kernel<T, V><<<blocks_for(std::size_t(m_rows) * a.taps * (a.channels / V)), threads, 0, s>>>(
        rows, a, col, m_rows, out_of_range);
  else
    im2col_kernel<<<blocks_for(std::size_t(m_rows) * a.taps * a.channels), threads, 0, s>>>(rows, a, col, m_rows,
                                                                                            out_of_range);
  check_launch(name);
}

__global__ void epilogue_kernel(const float* g, epilogue ep, float* y, unsigned n_out, unsigned total) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned n = i % n_out;
    float v = g[i];
    if (ep.bias) v += ep.bias[n];
    if (ep.scale) v *= ep.scale[n];
    y[i] = ep.accumulate ? y[i] + v : v;
  }
}

// ------------------------------------------------------------------------------------ state contexts

// One row's extended buffer a blockIdx.y; with ea (snake), the window's values through SnakeBeta on the way
// (the context, carried from an earlier extended buffer, went through it then); with ext16, the same values rounded
// to fp16 there too (a value beyond fp16's range setting *out_of_range). A row holds at most
// max_rows x max_window x samples_per_frame x channels floats (the constructor keeps that under
// max_elementwise_floats), so the index within a row is 32-bit.
template <bool snaked>
__global__ void extend_kernel(row_table rt, const float* x, int level, int ch, int context, std::size_t off,
                              float* ext, const float* ea, const float* ib, bool vector, __half* ext16,
                              unsigned* out_of_range) {
  const int r = blockIdx.y;
  const unsigned n = unsigned(row_width(rt, r)) * unsigned(level), ctx = unsigned(context) * unsigned(ch);
  const unsigned len = n * unsigned(ch) + ctx;
  const float* c = rt.state[r] + off;
  const float* xr = x + std::size_t(rt.start[r]) * level * ch;
  const std::size_t first = (std::size_t(rt.start[r]) * level + std::size_t(r) * context) * ch;
  float* er = ext + first;
  __half* hr = ext16 ? ext16 + first : nullptr;
  // Four floats a thread where the launcher found the channels a multiple of 4 and x and ext (and ext16) 16-byte
  // aligned, and the row's state is too (a pool's slots need not be); the position's channel then starts a group of
  // four.
  if (vector && reinterpret_cast<std::uintptr_t>(c) % 16 == 0) {
    for (unsigned i = 4 * (blockIdx.x * blockDim.x + threadIdx.x); i < len; i += 4 * gridDim.x * blockDim.x) {
      float4 v = i < ctx ? *reinterpret_cast<const float4*>(c + i) : *reinterpret_cast<const float4*>(xr + (i - ctx));
      if constexpr (snaked) {
        if (i >= ctx) {
          const unsigned k = i % unsigned(ch);
          v = snake4(v, ea + k, ib + k);
        }
      }
      *reinterpret_cast<float4*>(er + i) = v;
      if (hr) {
        if (outside_fp16(v)) *out_of_range = 1u;
        const __half2 h[2] = {__floats2half2_rn(v.x, v.y), __floats2half2_rn(v.z, v.w)};
        *reinterpret_cast<uint2*>(hr + i) = *reinterpret_cast<const uint2*>(h);
      }
    }
    return;
  }
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < len; i += gridDim.x * blockDim.x) {
    float v;
    if (i < ctx) {
      v = c[i];
    } else if constexpr (snaked) {
      const unsigned k = i % unsigned(ch);
      v = snake(xr[i - ctx], ea[k], ib[k]);
    } else {
      v = xr[i - ctx];
    }
    er[i] = v;
    if (hr) {
      if (outside_fp16(v)) *out_of_range = 1u;
      hr[i] = __float2half_rn(v);
    }
  }
}

__global__ void carry_kernel(row_table rt, const float* ext, int level, int ch, int context, std::size_t off) {
  const int r = blockIdx.y;
  const std::size_t n = std::size_t(row_width(rt, r)) * level, ctx = std::size_t(context) * ch;
  const float* er = ext + (std::size_t(rt.start[r]) * level + std::size_t(r) * context) * ch;
  float* c = rt.state[r] + off;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < ctx;
       i += std::size_t(gridDim.x) * blockDim.x)
    c[i] = er[n * ch + i];
}

__global__ void depthwise_kernel(row_table rt, const float* ext, int level, int ch, int taps, int context,
                                 const float* w, const float* bias, float* y) {
  const std::size_t total = std::size_t(rt.frames) * level * ch;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t m = i / ch;
    const int c = int(i % ch);
    const std::size_t e = m + std::size_t(rt.frame_row[m / level]) * context;
    float acc = bias[c];
    for (int k = 0; k < taps; ++k)
      acc += w[std::size_t(c) * taps + k] * ext[(e + k) * ch + c];
    y[i] = acc;
  }
}

__device__ inline int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

__global__ void overlap_add_kernel(row_table rt, const float* z, int level, int out, int kernel, int stride,
                                   int context, const float* bias, float* y) {
  // y is an activation and z an intermediate, each within max_elementwise_floats: 32-bit indices.
  const unsigned out_level = unsigned(level * stride), uout = unsigned(out);
  const unsigned total = unsigned(rt.frames) * out_level * uout;
  const unsigned zw = unsigned(kernel) * uout;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const unsigned m = i / uout;
    const int o = int(i - m * uout);
    const int r = rt.frame_row[m / out_level];
    const int mm = int(m - unsigned(rt.start[r]) * out_level); // output position within the row
    const int n = row_width(rt, r) * level;                    // the row's input positions
    const unsigned ext0 = unsigned(rt.start[r]) * unsigned(level) + unsigned(r) * unsigned(context);
    // Extended input position f reaches output mm through tap mm - (f - context) * stride.
    const int f_hi = min(context + n - 1, context + mm / stride);
    const int f_lo = max(0, context - floor_div(kernel - 1 - mm, stride));
    double acc = bias[o];
    for (int f = f_lo; f <= f_hi; ++f) {
      const int j = mm - (f - context) * stride;
      acc += z[(ext0 + unsigned(f)) * zw + unsigned(j) * uout + unsigned(o)];
    }
    y[i] = float(acc);
  }
}

// ------------------------------------------------------------------------------------ elementwise
// count <= max_elementwise_floats (the constructor): 32-bit indices, whose division is far cheaper than 64-bit's.
__global__ void snake_kernel(const float* x, const float* ea, const float* ib, unsigned count, unsigned ch, float* y) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const unsigned c = i % ch;
    y[i] = snake(x[i], ea[c], ib[c]);
  }
}

// Four floats a thread: ch a multiple of 4, x and y 16-byte aligned (the launcher checks).
__global__ void snake_vector_kernel(const float4* x, const float* ea, const float* ib, unsigned count4, unsigned ch,
                                    float4* y) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count4; i += gridDim.x * blockDim.x) {
    const unsigned c = (4 * i) % ch;
    y[i] = snake4(x[i], ea + c, ib + c);
  }
}

__global__ void gelu_kernel(float* x, std::size_t count) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float m = x[i];
    x[i] = 0.5f * m * (1.0f + erff(m * 0.70710678118654752440f));
  }
}

__global__ void swiglu_kernel(const float* gate_up, int tokens, int inter, float* out) {
  const std::size_t total = std::size_t(tokens) * inter;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t t = i / inter, c = i % inter;
    const float g = gate_up[t * 2 * inter + c], u = gate_up[t * 2 * inter + inter + c];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

// Block-wide sum in double; every thread gets the total.
__device__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads(); // shared may still be read from the previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0;
  for (int i = 0; i < int(blockDim.x / 32); ++i)
    total += shared[i];
  return total;
}

constexpr int norm_threads = 128;

__global__ void rms_norm_kernel(const float* x, const float* w, float eps, int dim, float* y) {
  __shared__ double shared[norm_threads / 32];
  const float* r = x + std::size_t(blockIdx.x) * dim;
  double ss = 0;
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    ss += double(r[c]) * r[c];
  ss = block_sum(ss, shared);
  const float scale = 1.0f / sqrtf(float(ss) / float(dim) + eps);
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    y[std::size_t(blockIdx.x) * dim + c] = w[c] * (r[c] * scale);
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float eps, int dim, float* y) {
  __shared__ double shared[norm_threads / 32];
  const float* r = x + std::size_t(blockIdx.x) * dim;
  double sum = 0;
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    sum += r[c];
  const float mean = float(block_sum(sum, shared) / dim);
  double var = 0;
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    var += double(r[c] - mean) * (r[c] - mean);
  const float inv = 1.0f / sqrtf(float(block_sum(var, shared) / dim) + eps);
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    y[std::size_t(blockIdx.x) * dim + c] = (r[c] - mean) * inv * w[c] + b[c];
}

// -------------------------------------------------------------------------------------- attention
__device__ inline int frame_position(const row_table& rt, int r) { return int(rt.state[r][0]); }

__global__ void rope_kernel(row_table rt, float* qkv, attention_shape a, const float* inv_freq) {
  const int half = a.head_dim / 2, heads = a.heads + a.kv_heads;
  const std::size_t total = std::size_t(rt.frames) * heads * half;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int m = int(i / (std::size_t(heads) * half));
    const int h = int(i / half % heads), k = int(i % half);
    const int r = rt.frame_row[m];
    const float pos = float(frame_position(rt, r) + (m - rt.start[r]));
    // q heads, then k heads (k follows q in the row: column heads * head_dim on)
    float* v = qkv + std::size_t(m) * a.ld + std::size_t(h) * a.head_dim;
    const float angle = inv_freq[k] * pos;
    const float c = cosf(angle), s = sinf(angle);
    const float x0 = v[k], x1 = v[k + half];
    v[k] = x0 * c - x1 * s;
    v[k + half] = x1 * c + x0 * s;
  }
}

// One block per (frame, head): the window's scores, then softmax and the weighted values, in the host
// decoder's order.
__global__ void attention_kernel(row_table rt, const float* qkv, attention_shape a, float* out) {
  extern __shared__ float scores[];
  __shared__ float total;
  const int m = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
  const int r = rt.frame_row[m], t = m - rt.start[r];
  const int keep = a.window - 1, fill = min(frame_position(rt, r), keep);
  const int last = fill + t, first = max(0, last - keep), count = last - first + 1;
  const int qw = a.heads * hd, kvw = a.kv_heads * hd, kvh = h / (a.heads / a.kv_heads);
  const float* q = qkv + std::size_t(m) * a.ld + std::size_t(h) * hd;
  const float* state = rt.state[r];
  // Key / value j of the row's sequence (carried fill, then this window's), head kvh.
  auto key = [&](int j, int which) -> const float* {
    if (j < fill)
      return state + (which ? a.value_offset : a.key_offset) + std::size_t(keep - fill + j) * kvw +
             std::size_t(kvh) * hd;
    return qkv + std::size_t(rt.start[r] + j - fill) * a.ld + qw + std::size_t(which) * kvw + std::size_t(kvh) * hd;
  };
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const float* k = key(first + i, 0);
    double dot = 0;
    for (int d = 0; d < hd; ++d)
      dot += double(q[d]) * k[d];
    scores[i] = float(dot) * a.scaling;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float mx = scores[0];
    for (int i = 1; i < count; ++i)
      mx = fmaxf(mx, scores[i]);
    float sum = 0;
    for (int i = 0; i < count; ++i)
      sum += scores[i] = expf(scores[i] - mx);
    total = sum;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0;
    for (int i = 0; i < count; ++i)
      o += scores[i] / total * key(first + i, 1)[d];
    out[std::size_t(m) * qw + std::size_t(h) * hd + d] = o;
  }
}

// One thread per (row, key or value channel), walking the window upwards: it reads n positions ahead of
// where it writes, so the shift in place is safe.
__global__ void window_update_kernel(row_table rt, const float* qkv, attention_shape a) {
  const int r = blockIdx.y, kvw = a.kv_heads * a.head_dim;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= 2 * kvw) return;
  const int which = c / kvw, ch = c % kvw;
  const int keep = a.window - 1, n = row_width(rt, r), fill = min(frame_position(rt, r), keep);
  const int total = fill + n, kept = min(total, keep);
  float* seg = rt.state[r] + (which ? a.value_offset : a.key_offset);
  const float* fresh = qkv + std::size_t(a.heads) * a.head_dim + std::size_t(which) * kvw + ch;
  for (int i = 0; i < kept; ++i) {
    const int src = total - kept + i;
    const float v = src < fill ? seg[std::size_t(keep - fill + src) * kvw + ch]
                               : fresh[std::size_t(rt.start[r] + src - fill) * a.ld];
    seg[std::size_t(keep - kept + i) * kvw + ch] = v;
  }
}

__global__ void audio_kernel(row_table rt, const float* y, int spf, float* const* audio) {
  const int r = blockIdx.y;
  const std::size_t n = std::size_t(row_width(rt, r)) * spf;
  const float* yr = y + std::size_t(rt.start[r]) * spf;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    audio[r][i] = fminf(fmaxf(yr[i], -1.0f), 1.0f);
}

__global__ void counter_kernel(row_table rt) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rt.rows) rt.state[r][0] += float(row_width(rt, r));
}

__global__ void rvq_kernel(const std::int32_t* codes, const float* tables, int quantizers, int size, int dim,
                           float* sums, int frames) {
  const std::size_t total = std::size_t(2) * frames * dim;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int half = int(i / (std::size_t(frames) * dim));
    const std::size_t t = i / dim % frames;
    const int d = int(i % dim);
    const std::int32_t* c = codes + t * quantizers;
    float sum = 0;
    for (int q = half == 0 ? 0 : 1; q < (half == 0 ? 1 : quantizers); ++q)
      sum += tables[(std::size_t(q) * size + c[q]) * dim + d];
    sums[i] = sum;
  }
}

} // namespace

void gemm(const row_table& rows, const gemm_input& a, const float* w, int n_out, const epilogue& ep, float* y, int ldy,
          int m_rows, cudaStream_t s) {
  if (m_rows == 0 || n_out == 0) return;
  const dim3 grid(unsigned((n_out + tile_n - 1) / tile_n), unsigned((m_rows + tile_m - 1) / tile_m));
  if (grid.y > 65535u)
    throw std::invalid_argument("qwen3_tts CUDA codec: a GEMM over " + std::to_string(m_rows) +
                                " positions needs more than 65535 row tiles of 64; lower codec_cuda_limits "
                                "(max_rows * max_window * samples_per_frame must stay under 4,194,240)");
  gemm_kernel<<<grid, 256, 0, s>>>(rows, a, w, n_out, ep, y, ldy, m_rows);
  check_launch("gemm");
}

void im2col(const row_table& rows, const gemm_input& a, float* col, int m_rows, cudaStream_t s) {
  launch_im2col(rows, a, col, m_rows, s, "im2col", nullptr);
}

void im2col(const row_table& rows, const gemm_input& a, __half* col, int m_rows, unsigned* out_of_range,
            cudaStream_t s) {
  launch_im2col(rows, a, col, m_rows, s, "im2col (fp16)", out_of_range);
}

void apply_epilogue(const float* g, const epilogue& ep, float* y, int n_out, int m_rows, cudaStream_t s) {
  const std::size_t total = std::size_t(m_rows) * n_out;
  epilogue_kernel<<<blocks_for(total), threads, 0, s>>>(g, ep, y, unsigned(n_out), unsigned(total));
  check_launch("epilogue");
}

void rvq_sums(const std::int32_t* codes, const float* tables, int quantizers, int size, int dim, float* sums,
              int frames, cudaStream_t s) {
  rvq_kernel<<<blocks_for(std::size_t(2) * frames * dim), threads, 0, s>>>(codes, tables, quantizers, size, dim, sums,
                                                                           frames);
  check_launch("rvq_sums");
}

void extend(const row_table& rows, const float* x, int level, int channels, int context, std::size_t state_offset,
            float* ext, cudaStream_t s, const float* exp_alpha, const float* inv_exp_beta, __half* ext16,
            unsigned* out_of_range) {
  if (ext16 != nullptr && out_of_range == nullptr)
    throw std::logic_error("qwen3_tts CUDA codec: extend's fp16 copy needs the out-of-range flag");
  const bool vector =
      channels % 4 == 0 && state_offset % 4 == 0 && aligned16(x) && aligned16(ext) && (!ext16 || aligned16(ext16));
  const std::size_t longest = (std::size_t(rows.max_width) * level + context) * channels;
  const dim3 grid(blocks_for(vector ? longest / 4 : longest, 1024), unsigned(rows.rows));
  if (exp_alpha)
    extend_kernel<true><<<grid, threads, 0, s>>>(rows, x, level, channels, context, state_offset, ext, exp_alpha,
                                                 inv_exp_beta, vector, ext16, out_of_range);
  else
    extend_kernel<false><<<grid, threads, 0, s>>>(rows, x, level, channels, context, state_offset, ext, nullptr,
                                                  nullptr, vector, ext16, out_of_range);
  check_launch("extend");
}

void carry(const row_table& rows, const float* ext, int level, int channels, int context, std::size_t state_offset,
           cudaStream_t s) {
  carry_kernel<<<dim3(blocks_for(std::size_t(context) * channels, 1024), unsigned(rows.rows)), threads, 0, s>>>(
      rows, ext, level, channels, context, state_offset);
  check_launch("carry");
}

void depthwise_conv(const row_table& rows, const float* ext, int level, int channels, int taps, int context,
                    const float* w, const float* bias, float* y, cudaStream_t s) {
  depthwise_kernel<<<blocks_for(std::size_t(rows.frames) * level * channels), threads, 0, s>>>(
      rows, ext, level, channels, taps, context, w, bias, y);
  check_launch("depthwise_conv");
}

void overlap_add(const row_table& rows, const float* z, int level, int out, int kernel, int stride, int context,
                 const float* bias, float* y, cudaStream_t s) {
  overlap_add_kernel<<<blocks_for(std::size_t(rows.frames) * level * stride * out), threads, 0, s>>>(
      rows, z, level, out, kernel, stride, context, bias, y);
  check_launch("overlap_add");
}

void snake_beta(const float* x, const float* exp_alpha, const float* inv_exp_beta, std::size_t count, int channels,
                float* y, cudaStream_t s) {
  if (channels % 4 == 0 && aligned16(x) && aligned16(y))
    snake_vector_kernel<<<blocks_for(count * channels / 4), threads, 0, s>>>(
        reinterpret_cast<const float4*>(x), exp_alpha, inv_exp_beta, unsigned(count * channels / 4),
        unsigned(channels), reinterpret_cast<float4*>(y));
  else
    snake_kernel<<<blocks_for(count * channels), threads, 0, s>>>(x, exp_alpha, inv_exp_beta,
                                                                  unsigned(count * channels), unsigned(channels), y);
  check_launch("snake_beta");
}

void rms_norm(const float* x, const float* w, float eps, int tokens, int dim, float* y, cudaStream_t s) {
  if (tokens == 0) return;
  rms_norm_kernel<<<unsigned(tokens), norm_threads, 0, s>>>(x, w, eps, dim, y);
  check_launch("rms_norm");
}

void layer_norm(const float* x, const float* w, const float* b, float eps, int tokens, int dim, float* y,
                cudaStream_t s) {
  if (tokens == 0) return;
  layer_norm_kernel<<<unsigned(tokens), norm_threads, 0, s>>>(x, w, b, eps, dim, y);
  check_launch("layer_norm");
}

void gelu(float* x, std::size_t count, cudaStream_t s) {
  gelu_kernel<<<blocks_for(count), threads, 0, s>>>(x, count);
  check_launch("gelu");
}

void swiglu(const float* gate_up, int tokens, int inter, float* out, cudaStream_t s) {
  swiglu_kernel<<<blocks_for(std::size_t(tokens) * inter), threads, 0, s>>>(gate_up, tokens, inter, out);
  check_launch("swiglu");
}

void rope(const row_table& rows, float* qkv, const attention_shape& a, const float* inv_freq, cudaStream_t s) {
  const std::size_t n = std::size_t(rows.frames) * (a.heads + a.kv_heads) * (a.head_dim / 2);
  rope_kernel<<<blocks_for(n), threads, 0, s>>>(rows, qkv, a, inv_freq);
  check_launch("rope");
}

void window_attention(const row_table& rows, const float* qkv, const attention_shape& a, float* out, cudaStream_t s) {
  if (rows.frames == 0) return;
  attention_kernel<<<dim3(unsigned(rows.frames), unsigned(a.heads)), 64, std::size_t(a.window) * sizeof(float), s>>>(
      rows, qkv, a, out);
  check_launch("window_attention");
}

void window_update(const row_table& rows, const float* qkv, const attention_shape& a, cudaStream_t s) {
  const int channels = 2 * a.kv_heads * a.head_dim;
  window_update_kernel<<<dim3(unsigned((channels + 127) / 128), unsigned(rows.rows)), 128, 0, s>>>(rows, qkv, a);
  check_launch("window_update");
}

void finish_step(const row_table& rows, const float* y, int samples_per_frame, float* const* audio, cudaStream_t s) {
  const std::size_t longest = std::size_t(rows.max_width) * samples_per_frame;
  audio_kernel<<<dim3(blocks_for(longest, 1024), unsigned(rows.rows)), threads, 0, s>>>(rows, y, samples_per_frame,
                                                                                        audio);
  check_launch("audio");
  counter_kernel<<<unsigned((rows.rows + 127) / 128), 128, 0, s>>>(rows);
  check_launch("frame counter");
}

} // namespace qwen3_tts::codec_kernels
