// Launchers of the CUDA Talker's own kernels: RMSNorm, the per-head q/k norm with RoPE and the paged-KV
// append, paged attention, SwiGLU, the small-rows weight product (the GEMMs of few rows; larger ones are
// cuBLAS's), bias + activation, embedding sums and the code-0 choice. Each launcher checks its launch and
// throws with the kernel's name; the kernels themselves live in talker_cuda_kernels.cu (nvcc makes
// __global__ stubs local to their translation unit, STYLE.md pitfall 7, so only these host functions
// cross files).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace qwen3_tts::cuda {

using bf16 = __nv_bfloat16;

// Programmatic dependent launch (Hopper and later) for this thread's launches of these kernels while an
// enabled scope lives: each launch carries cudaLaunchAttributeProgrammaticStreamSerialization, so the GPU may
// start a kernel while the one before it on the stream still runs; every kernel here first waits
// (griddepcontrol.wait) until its predecessors have completed and their writes are visible, touching only
// weights before that, so results are the same bits either way. A kernel before one of these that is not
// (cuBLAS's) keeps the ordinary stream order. Stream captures keep the programmatic edges in the graph.
// Without a scope the launches are ordinary; on an older GPU the attribute has no effect.
class pdl_scope {
public:
  explicit pdl_scope(bool on);
  ~pdl_scope();
  pdl_scope(const pdl_scope&) = delete;
  pdl_scope& operator=(const pdl_scope&) = delete;

private:
  bool was_;
};

// FlashInfer-style addressing of a step's tokens into the paged KV cache, all device pointers.
// Row r owns tokens [qo_indptr[r], qo_indptr[r+1]) of this step and pages
// page_indices[page_indptr[r] .. page_indptr[r+1]); its last page holds last_page_len[r] tokens,
// counted after this step's tokens are appended. positions[t] is token t's RoPE position.
struct paged_view {
  const std::int32_t* qo_indptr = nullptr;
  const std::int32_t* page_indptr = nullptr;
  const std::int32_t* page_indices = nullptr;
  const std::int32_t* last_page_len = nullptr;
  const std::int32_t* positions = nullptr;
  int rows = 0;
  int tokens = 0;
  int block_tokens = 0;
};

// Sampling settings of one kind of code (code 0, or the predictor's codes): see sample_rows.
struct sample_settings {
  float temperature = 1.0f;
  int top_k = 0;
};

// One layer's K or V cache: [blocks][block_tokens][kv_heads][head_dim] bf16.
struct kv_layer {
  bf16* k = nullptr;
  bf16* v = nullptr;
};

// RMSNorm of `tokens` rows of `width`: when add is given, x += add first (the residual) and the sum
// is stored back in x; then n = w * (x * rsqrt(mean(x^2) + eps)) goes to y16 (a GEMM input) and/or
// y32 (either may be null).
void rms_norm(float* x, const float* add, const float* w, bf16* y16, float* y32, int tokens, int width, float eps,
              cudaStream_t s);

// dst[r] = src[qo_indptr[r + 1] - 1]: each row's last token (the prefill's only sampled position).
void gather_last_rows(const float* src, const std::int32_t* qo_indptr, float* dst32, bf16* dst16, int rows, int width,
                      cudaStream_t s);

// qkv: [tokens][(heads + 2 kv_heads) * head_dim] float32 from the fused projection. Normalises q and k
// per head, rotates them (NeoX half rotation, angle = position * inv_freq[i]), writes q as float32
// [tokens][heads][head_dim] and appends k, v to the cache at each token's slot.
void qk_norm_rope_append(const float* qkv, const float* q_norm, const float* k_norm, const float* inv_freq,
                         float* q_out, kv_layer cache, paged_view view, int heads, int kv_heads, int head_dim,
                         float eps, cudaStream_t s);

// Causal grouped-query attention of this step's tokens over their rows' pages (the tokens appended
// above included): out [tokens][heads * head_dim] bf16.
void paged_attention(const float* q, kv_layer cache, paged_view view, bf16* out, int heads, int kv_heads, int head_dim,
                     cudaStream_t s);

// qk_norm_rope_append and paged_attention in one launch, for a step whose every row has exactly one
// new token (a decode step; the predictor's single-token passes), with at most max_decode_group query
// heads a KV head and head_dim 16, 32, 64, 128 or 256. Each row's kv indices are cut into at most `splits`
// shares (1..max_decode_splits): equal, or with `chunk` > 0 of at least chunk tokens (a row then has as many
// shares as its own length needs, one for a context of at most chunk tokens). Either way a row's shares follow its
// own length only, never the other rows of the launch. `blocks` (1..splits; 0: splits) is how many blocks a row's
// shares are dealt to, in order: fewer blocks do the same sums, so a row's bits do not depend on it, and a launch
// of many rows may take fewer a row. With more than one share, `scratch` holds their partial results, sized for the
// rows, query heads and splits of the launch, and its counters (rows * kv_heads) start at zero and are left so.
constexpr int max_decode_group = 8;
constexpr int max_decode_splits = 16;
struct decode_scratch {
  float* acc = nullptr;          // [rows][heads][splits][head_dim]
  float* m = nullptr;            // [rows][heads][splits]
  float* l = nullptr;            // [rows][heads][splits]
  unsigned* counters = nullptr;  // [rows][kv_heads], zero between launches
};
void decode_attention(const float* qkv, const float* q_norm, const float* k_norm, const float* inv_freq, kv_layer cache,
                      paged_view view, bf16* out, int heads, int kv_heads, int head_dim, float eps,
                      const decode_scratch& scratch, int splits, cudaStream_t s, int chunk = 0, int blocks = 0);

// gate_up: [tokens][2 * inter] float32 (gate first, up second) -> silu(gate) * up as bf16.
void swiglu(const float* gate_up, bf16* out, int tokens, int inter, cudaStream_t s);

// A weight product of a few rows, y[r][o] = sum_i x[r][i] * w[o][i] (w bf16 [out][in] as the checkpoint
// stores it, x bf16 rows of leading dimension ldx, float32 accumulation: cuBLAS's products, summed in
// another order), for r < rows <= max_gemv_rows, where a GEMM of m = rows is a GEMV that cuBLAS's tiles
// read at a fraction of the bandwidth. What happens to each sum:
//   store:    y32[r * ldy + o] = sum (float32, as the cuBLAS GEMM writes it);
//   residual: y32[r * ldy + o] += sum (the float32 residual stream, updated in place);
//   swiglu:   w is the fused [gate; up] weight of out = 2 * inter rows, and
//             act[r * ldy + i] = bf16(silu(gate_i) * up_i) for i < inter (the GEMM and swiglu in one).
// in must be a multiple of 8, ldx too, and w and x 16-byte aligned (w is read as 16-byte slices);
// small_gemv_fits says whether a shape qualifies, and small_gemv throws, naming the value, for one that
// does not.
// With `norm` (x32 given), x is not read: each block first computes x = bf16(RMSNorm(x32 rows) * weight) into
// shared memory, with rms_norm's sums in rms_norm's order (the same bits as rms_norm then small_gemv), so the
// norm's launch and its bf16 round trip through memory go (at most max_gemv_norm_in inputs a row).
// Two kernels compute it (`path`): cuda_cores, a warp a weight row multiplying each slice by every row on the CUDA
// cores (1..max_gemv_rows rows; its time grows with the rows), and tensor_cores, a block 16 weight rows, its warps
// sharing the inputs, each chunk of 32 inputs two m16n8k16 products (1..max_mma_gemv_rows rows, in a multiple
// of 32; the rows cost almost nothing, and a row's sums never depend on the other rows; no norm prologue).
enum class gemv_epilogue { store, residual, swiglu };
enum class gemv_path { cuda_cores, tensor_cores };
constexpr int max_gemv_rows = 8;
constexpr int max_mma_gemv_rows = 64;
constexpr int max_gemv_norm_in = 48 * 1024 / (2 * max_gemv_rows);
struct gemv_norm {
  const float* x32 = nullptr; // float32 rows of leading dimension ld
  int ld = 0;
  const float* weight = nullptr;
  float eps = 0.0f;
};
// Whether the norm prologue takes the rows: on the CUDA cores only (on the tensor cores every block would
// normalise every row: measured slower than one rms_norm, docs/benchmarks.md), in at most max_gemv_norm_in.
constexpr bool gemv_norm_fits(int in, gemv_path path = gemv_path::cuda_cores) {
  return path == gemv_path::cuda_cores && in <= max_gemv_norm_in;
}
constexpr bool small_gemv_fits(int rows, int in, int ldx, gemv_path path = gemv_path::cuda_cores) {
  const bool mma = path == gemv_path::tensor_cores;
  return rows >= 1 && rows <= (mma ? max_mma_gemv_rows : max_gemv_rows) && in > 0 && in % (mma ? 32 : 8) == 0 &&
         ldx >= in && ldx % 8 == 0;
}
// The tensor-core kernel's inputs shared among `splits` blocks a tile of 16 outputs (split-K), for products of few
// tiles: a block a tile leaves SMs idle where the outputs are fewer than 16 x the SMs (the 0.6B's o and down
// projections, 64 tiles), and each block's weights take longer to stream than those of many blocks. Block s of a
// tile takes the chunks of 32 inputs that warps s * 8 .. s * 8 + 7 of a kernel of 8 x splits warps would, sums
// its warps in warp order into `partial`, and the tile's last block to arrive (a ticket counted in `tickets`,
// which it puts back to 0) adds the splits' sums in split order and writes the epilogue: the bits follow the
// split count, the weights and the row's own inputs, never the arrival order or the other rows. partial holds
// tiles x splits x 2 x 16 x max_mma_gemv_rows floats and tickets `tiles` zeroed counters (tiles at most
// `capacity`); launches that share them must not overlap (one stream, as the decode step's). splits 1: no split.
struct gemv_split {
  float* partial = nullptr;
  unsigned* tickets = nullptr;
  int capacity = 0; // tiles partial and tickets have room for
  int splits = 1;
};
constexpr int max_gemv_splits = 4;
// Tiles of 16 outputs of a tensor-core product of `out` weight rows (for swiglu, of its out / 2 outputs).
constexpr int gemv_tiles(gemv_epilogue e, int out) { return ((e == gemv_epilogue::swiglu ? out / 2 : out) + 15) / 16; }
// Floats of gemv_split::partial for `tiles` tiles of `splits` blocks.
constexpr std::size_t gemv_split_floats(int tiles, int splits) {
  return std::size_t(tiles) * std::size_t(splits) * 2 * 16 * max_mma_gemv_rows;
}
// The RMSNorm of the rows a residual product leaves, done by the product (tensor cores only): the last of its
// blocks to finish (a ticket counted in `ticket`, a zeroed counter it puts back to 0) normalises y32's `rows` rows
// of out values (at most max_gemv_norm_after_out) into y16 (bf16, leading dimension out) with weight `weight`, its
// sums in rms_norm's order (the block's 256 threads standing for rms_norm's): the bits of rms_norm(y32 rows, weight)
// after the product, one launch fewer. y16 given: on; launches that share the ticket must not overlap.
constexpr int max_gemv_norm_after_out = 2048;
struct gemv_norm_after {
  const float* weight = nullptr;
  bf16* y16 = nullptr;
  float eps = 0.0f;
  unsigned* ticket = nullptr;
};
void small_gemv(gemv_epilogue epilogue, const bf16* w, int out, int in, const bf16* x, int ldx, float* y32, bf16* act,
                int ldy, int rows, cudaStream_t s, const gemv_norm& norm = {}, gemv_path path = gemv_path::cuda_cores,
                const gemv_split& split = {}, const gemv_norm_after& norm_after = {});

// y = silu(x + bias) as bf16, or (silu == false) y32 = x + bias as float32.
void bias_silu(const float* x, const float* bias, bf16* y, int tokens, int width, cudaStream_t s);
void bias_add(const float* x, const float* bias, float* y32, bf16* y16, int tokens, int width, cudaStream_t s);

// out[r] = table[ids[r]] as bf16 rows (text embedding look-up; an id outside [0, vocab) is a
// programming error caught on the host before the step).
void gather_rows(const bf16* table, const std::int32_t* ids, bf16* out, int rows, int width, cudaStream_t s);

// The predictor's 2-token prefill input per row: [past_hidden[r], codec_embedding[code0[r]]] as
// float32 rows 2r and 2r+1 (talker width).
void predictor_prefill_input(const float* past_hidden, const bf16* codec_embedding, const std::int32_t* code0,
                             float* out, int rows, int width, cudaStream_t s);

// out[r] = table[codes[r * code_stride + g]] as float32 (the predictor's feedback of codebook g).
void gather_code_rows(const bf16* table, const std::int32_t* codes, int code_stride, int g, float* out, int rows,
                      int width, cudaStream_t s);

// y = bf16(x), n elements.
void to_bf16(const float* x, bf16* y, std::size_t n, cudaStream_t s);

// The next Talker input: x[r] = codec_embedding[frame[r][0]] + sum_g pred_embedding[g-1][frame[r][g]]
// + text[r], float32.
void frame_embedding_sum(const bf16* codec_embedding, const bf16* pred_embeddings, std::int64_t pred_table_elems,
                         const std::int32_t* frames, int groups, const float* text, float* x, int rows, int width,
                         cudaStream_t s);

// Greedy argmax over each row's logits (first index on ties, as torch.argmax), written to
// out[r * out_stride + out_offset]. Where forced is given and forced[r * out_stride + out_offset] >= 0,
// that code is written instead (a test's teacher forcing: the logits stay the model's own); chosen,
// when given, receives the model's own choice at the same place.
void argmax_rows(const float* logits, int vocab, std::int32_t* out, int out_stride, int out_offset,
                 const std::int32_t* forced, std::int32_t* chosen, int rows, cudaStream_t s);

// Code 0 for each row, as the reference's generate does greedily: repetition penalty on the codes
// this row already chose (seen bitmap [rows][vocab]), the end token banned while generated[r] <
// min_new, ids >= suppress_from banned except eos, argmax. Records the choice in seen and generated,
// writes the processed logits to `processed` (so a test can read the margins) and code0[r]. A
// forced[r * forced_stride] >= 0 replaces the choice, and chosen receives the own one, as in argmax_rows.
void choose_code0(const float* raw, float* processed, int vocab, std::uint8_t* seen, std::int32_t* generated,
                  std::int32_t* code0, const std::int32_t* forced, std::int32_t* chosen, int forced_stride, int rows,
                  float penalty, int min_new, int eos, int suppress_from, cudaStream_t s);
// The same processing, then a draw (sample_rows' rule, counter generated[r], lane 0) instead of argmax.
void sample_code0(const float* raw, float* processed, int vocab, std::uint8_t* seen, std::int32_t* generated,
                  std::int32_t* code0, const std::int32_t* forced, std::int32_t* chosen, int forced_stride, int rows,
                  float penalty, int min_new, int eos, int suppress_from, sample_settings settings,
                  const std::uint64_t* seeds, cudaStream_t s);

// The reference's sampling of one code per row, as the host talker_sampler draws it: values
// logits / temperature, those below the top_k-th largest dropped (top_k <= 0: none), probabilities
// exp(v - max), and an inverse-CDF pick in index order at u * total, u the Philox uniform of (seed[r],
// counter frame[r] + frame_offset, lane). top_p < 1 is not computed here (the caller refuses it). The
// choice goes to out[r * out_stride + out_offset] unless forced there (as argmax_rows).
void sample_rows(const float* logits, int vocab, sample_settings settings, const std::uint64_t* seeds,
                 const std::int32_t* frame, int frame_offset, std::uint32_t lane, std::int32_t* out, int out_stride,
                 int out_offset, const std::int32_t* forced, std::int32_t* chosen, int rows, cudaStream_t s);

// A request's generation state is one row of bytes in a slot store (the engine's talker_state pool, or the
// model's own); a step works on row-indexed arrays, so it gathers each row's piece from the row's slot first
// and scatters it back last. Piece i is bytes [offset, offset + bytes) of a slot row and row r's
// [r * bytes, (r + 1) * bytes) of its array.
struct state_piece {
  void* rows = nullptr;
  int offset = 0;
  int bytes = 0;
};
constexpr int max_state_pieces = 8;
struct state_pieces {
  state_piece piece[max_state_pieces];
  int count = 0;
};
// store: slots x row_bytes bytes; slots[r]: row r's slot (device).
void gather_state(const unsigned char* store, std::size_t row_bytes, const std::int32_t* slots, state_pieces pieces,
                  int rows, cudaStream_t s);
void scatter_state(unsigned char* store, std::size_t row_bytes, const std::int32_t* slots, state_pieces pieces,
                   int rows, cudaStream_t s);

// out[r] = frames[r][0 .. groups) followed by 1 when frames[r][0] == eos, else 0 (a step's output rows as the
// speech flow reads them: the frame, then whether code 0 was the end token).
void frames_with_end(const std::int32_t* frames, int groups, int eos, std::int32_t* out, int rows, cudaStream_t s);

// Deterministic pseudo-random bf16 values in [-scale, scale] (bench weights), and float32 values.
void fill_random(bf16* p, std::size_t n, std::uint32_t seed, float scale, cudaStream_t s);
void fill_random_f32(float* p, std::size_t n, std::uint32_t seed, float offset, float scale, cudaStream_t s);

} // namespace qwen3_tts::cuda
