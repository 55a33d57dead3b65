// Launchers of the CUDA codec decoder's kernels (codec_cuda.hpp says what the decoder computes). Every
// launcher checks its launch and throws naming the kernel; the kernels live in codec_cuda_kernels.cu (nvcc
// makes __global__ stubs local to their translation unit, STYLE.md pitfall 7, so only these cross files).
//
// Activations are time-major, [positions][channels], the rows of a step one after the other. At a level
// of `level` positions a frame (1 before the upsampling, samples_per_frame at the output), row r holds
// positions [start[r] * level, start[r + 1] * level). An extended activation ([context | window] per row,
// the causal convolutions' input) gives row r positions from start[r] * level + r * context on, n_r * level
// + context of them. Dot products and convolutions sum float32 operands in double, as the host decoder
// does, each output's terms in one fixed order whatever the step's rows: a row's bits do not depend on
// the other rows of its step.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace qwen3_tts::codec_kernels {

// The step's rows, all device pointers (one upload a step).
struct row_table {
  const std::int32_t* start = nullptr;     // [rows + 1]: first frame of each row, then the total
  const std::int32_t* frame_row = nullptr; // [frames]: the row of each frame
  float* const* state = nullptr;           // [rows]: each row's state buffer (codec_state_layout)
  int rows = 0;
  int frames = 0;    // all rows together
  int max_width = 0; // the widest row's frames (launch sizes)
  // rows where every row holds max_width frames (a step of one width, eager or padded with rows of its width), else
  // 0: host-side, whether the step's extended inputs are `rows` equal images (codec_cuda_conv.hpp).
  int uniform_rows = 0;
};

// A GEMM's left operand A[m][kk], kk = tap * channels + channel: position m of a compact activation at
// `level` reads the extended buffer `data` at row m + row(m) * context + tap * dilation (context 0, one
// tap: a plain [m][channels] matrix).
struct gemm_input {
  const float* data = nullptr;
  int channels = 0;
  int taps = 1;
  int dilation = 1;
  int context = 0;
  int level = 1;
  // SnakeBeta (snake_beta below) on every value read, where set: only the fp16 im2col applies it, only without a
  // context (a context is carried already through it).
  const float* exp_alpha = nullptr;
  const float* inv_exp_beta = nullptr;
};

// y[m][n] = float(sum_kk A[m][kk] * w[n][kk]) (+ bias[n]) (* scale[n]), then (accumulate) y += that.
struct epilogue {
  const float* bias = nullptr;
  const float* scale = nullptr;
  bool accumulate = false;
};

// w: [n_out][taps * channels] row-major. m_rows positions of A; y has leading dimension ldy.
void gemm(const row_table& rows, const gemm_input& a, const float* w, int n_out, const epilogue& ep, float* y, int ldy,
          int m_rows, cudaStream_t s);

// The most elements a buffer that the element-wise kernels (im2col, epilogue, SnakeBeta, extend, overlap-add) walk may
// hold: they index it with 32-bit grid-stride loops, whose last stride (at most 4096 blocks of 256 threads) must not
// wrap past 2^32. codec_cuda's constructor refuses limits that need more.
constexpr std::size_t max_elementwise_floats = (std::size_t(1) << 32) - std::size_t(4096) * 256;

// The cuBLAS path's halves of gemm: col[m][kk] = A[m][kk] written out (im2col), and the epilogue over a
// plain product g[m][n] (ldy == n_out).
void im2col(const row_table& rows, const gemm_input& a, float* col, int m_rows, cudaStream_t s);
// The same rounded to fp16 (round to nearest; beyond +-65504 an infinity): codec_cuda_math::cublas_fp16's operand,
// a plain matrix (one tap, no context) included; with a's SnakeBeta, through it first. A value beyond +-65504 or
// not finite sets *out_of_range to 1 (never back to 0).
void im2col(const row_table& rows, const gemm_input& a, __half* col, int m_rows, unsigned* out_of_range,
            cudaStream_t s);
void apply_epilogue(const float* g, const epilogue& ep, float* y, int n_out, int m_rows, cudaStream_t s);

// sums[0][t] = table[0][codes[t][0]], sums[1][t] = sum over q >= 1 of table[q][codes[t][q]] (in q order):
// the split RVQ's two halves before their projections. tables: [quantizers][size][dim].
void rvq_sums(const std::int32_t* codes, const float* tables, int quantizers, int size, int dim, float* sums,
              int frames, cudaStream_t s);

// ext = [the row's context from its state at state_offset | x's row], per row (see the header's layout).
// With exp_alpha and inv_exp_beta, x's row goes through SnakeBeta (snake_beta below) on the way: the context
// is the earlier window's, already through it. With ext16 (codec_cuda_math::cutlass_fp16's convolution input), the
// same values also rounded to fp16 there, at the same offsets, as the fp16 im2col rounds them; a value beyond +-65504
// or not finite sets *out_of_range to 1 (out_of_range is then required).
void extend(const row_table& rows, const float* x, int level, int channels, int context, std::size_t state_offset,
            float* ext, cudaStream_t s, const float* exp_alpha = nullptr, const float* inv_exp_beta = nullptr,
            __half* ext16 = nullptr, unsigned* out_of_range = nullptr);
// The row's next context: the last `context` positions of its extended buffer, back into its state.
void carry(const row_table& rows, const float* ext, int level, int channels, int context, std::size_t state_offset,
           cudaStream_t s);

// Depthwise causal convolution over an extended buffer: y[m][c] = bias[c] + sum_k w[c][k] * ext[..][c].
void depthwise_conv(const row_table& rows, const float* ext, int level, int channels, int taps, int context,
                    const float* w, const float* bias, float* y, cudaStream_t s);

// A transposed convolution of stride `stride`, trimmed on the right, from z[e][j * out + o] (the GEMM of
// every extended input position e by every tap j): y at level * stride. `context` earlier input positions
// reach into the window.
void overlap_add(const row_table& rows, const float* z, int level, int out, int kernel, int stride, int context,
                 const float* bias, float* y, cudaStream_t s);

// y = x + inv_exp_beta[c] * sin(x * exp_alpha[c])^2 over count positions of `channels`.
void snake_beta(const float* x, const float* exp_alpha, const float* inv_exp_beta, std::size_t count, int channels,
                float* y, cudaStream_t s);
void rms_norm(const float* x, const float* w, float eps, int tokens, int dim, float* y, cudaStream_t s);
void layer_norm(const float* x, const float* w, const float* b, float eps, int tokens, int dim, float* y,
                cudaStream_t s);
void gelu(float* x, std::size_t count, cudaStream_t s); // exact (erf) GELU, in place
// gate_up: [tokens][2 * inter] (gate, then up) -> silu(gate) * up, [tokens][inter].
void swiglu(const float* gate_up, int tokens, int inter, float* out, cudaStream_t s);

// The pre-transformer's attention, one layer. qkv: [frames][ld], q at column 0, k at q_width, v at
// q_width + kv_width; a frame's position is its row's frame counter (state[0]) plus its index in the row.
struct attention_shape {
  int heads = 0, kv_heads = 0, head_dim = 0;
  int window = 0; // sliding_window: a frame sees itself and window - 1 earlier frames
  int ld = 0;     // qkv's leading dimension
  float scaling = 1;
  std::size_t key_offset = 0, value_offset = 0; // the layer's carried keys / values in the state
};
// NeoX half rotation of q and k in place.
void rope(const row_table& rows, float* qkv, const attention_shape& a, const float* inv_freq, cudaStream_t s);
// out: [frames][heads * head_dim], over the carried keys (the state's last window - 1) and this window's.
void window_attention(const row_table& rows, const float* qkv, const attention_shape& a, float* out, cudaStream_t s);
// The carried keys and values move on: the last window - 1 of (carried, this window's). After attention.
void window_update(const row_table& rows, const float* qkv, const attention_shape& a, cudaStream_t s);

// audio[r][i] = clamp(y[start[r] * samples_per_frame + i], -1, 1), then each row's frame counter advances.
void finish_step(const row_table& rows, const float* y, int samples_per_frame, float* const* audio, cudaStream_t s);

} // namespace qwen3_tts::codec_kernels
