// The 12 Hz codec decoder on CUDA: the host decoder's math (codec_decoder.hpp) in float32 on the device,
// from the same config and the same codec_weights, over the same flat per-request state
// (codec_state_layout): a request's row of the engine's codec_state pool holds the same bytes on both
// backends, so a request could move between them between windows.
//
// One step decodes one window of 1..max_window frames for each of up to max_rows rows; the rows' frames
// are laid one after the other, so every layer is one launch for the whole step: GEMMs (linear layers,
// and the causal convolutions as GEMMs over each row's [left context | window] with the taps as the
// reduction), then small kernels (SnakeBeta, norms, GELU, SwiGLU, RoPE, the attention over the state's
// key/value window, the transposed convolutions' overlap-add, the contexts carried back into the state).
// By default sums run in double over float32 operands, each output's terms in one fixed order, as on the
// host: a row's audio does not depend on the other rows of its step, and stays within the host's distance
// of the reference (codec_cuda_math has the faster cuBLAS float32 choice).
//
// Everything is enqueued on the decoder's one stream, either eagerly (launch sizes follow the step's own
// rows and frames) or replayed from a CUDA graph per (batch bucket, window width): codec_cuda_launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "codec_decoder.hpp"

namespace qwen3_tts {

namespace codec_kernels {
struct row_table;
} // namespace codec_kernels

// How the GEMMs (linear layers, convolutions) sum. double_sums: the decoder's own kernel, double sums in
// one fixed order per output, as the host decoder: a row's bits do not depend on the other rows of its step
// or on its window split. cublas_f32: cuBLAS SGEMM (float32 sums, no TF32) over the convolutions' windows
// written out (im2col), faster; cuBLAS may pick another algorithm for another row count, so a row's bits
// may then depend on its step's other rows (within float32 rounding). cublas_tf32: the same GEMMs on the
// tensor cores in TF32 (inputs rounded to 10 mantissa bits, float32 sums), for speed at bf16-level precision.
// cublas_fp16: both operands stored in fp16 (the weights once, each product's input as the im2col writes it),
// float32 sums on the tensor cores: the same 10 mantissa bits as TF32 at half the bytes, but fp16's range (a value
// beyond +-65504 becomes an infinity, one below about 6e-5 loses bits); activations stay float32 between products.
// cutlass_tf32: cublas_tf32, except that a causal convolution of more than one tap (pre_conv, decoder_in, the residual
// units' conv1) is a CUTLASS implicit-GEMM convolution in TF32 that reads each row's [left context | window] in place,
// its window never written out (codec_cuda_conv.hpp), where every row of the step has the same width and both channel
// counts are multiples of 4; the others stay on cublas_tf32's im2col. Needs CUTLASS at build time
// (codec_cutlass_available). cutlass_fp16: cublas_fp16, with those convolutions as CUTLASS implicit-GEMM convolutions
// over fp16 operands (the extend writes the extended input in fp16 beside the float32 one the state is carried from;
// input channels a multiple of 8): cublas_fp16's operands, summed in another order. Its range is cublas_fp16's.
enum class codec_cuda_math { double_sums, cublas_f32, cublas_tf32, cublas_fp16, cutlass_tf32, cutlass_fp16 };

// Whether a math stores its products' operands in fp16 (cublas_fp16, cutlass_fp16), and whether it runs CUTLASS's
// convolutions (cutlass_tf32, cutlass_fp16).
constexpr bool fp16_operands(codec_cuda_math m) {
  return m == codec_cuda_math::cublas_fp16 || m == codec_cuda_math::cutlass_fp16;
}
constexpr bool cutlass_convolutions(codec_cuda_math m) {
  return m == codec_cuda_math::cutlass_tf32 || m == codec_cuda_math::cutlass_fp16;
}

// Whether this build has CUTLASS, which codec_cuda_math::cutlass_tf32 and cutlass_fp16 need (scripts/cutlass.sh
// fetches it; without it, a codec_cuda of those maths refuses to be built).
bool codec_cutlass_available();

// The codec math a command line or speech_service_options names: cublas, tf32, fp16, double, tf32-conv, fp16-conv,
// or auto (tf32-conv where this build has CUTLASS, else tf32).
inline codec_cuda_math codec_math_named(const std::string& name) {
  if (name == "auto") return codec_cutlass_available() ? codec_cuda_math::cutlass_tf32 : codec_cuda_math::cublas_tf32;
  if (name == "cublas") return codec_cuda_math::cublas_f32;
  if (name == "tf32") return codec_cuda_math::cublas_tf32;
  if (name == "fp16") return codec_cuda_math::cublas_fp16;
  if (name == "double") return codec_cuda_math::double_sums;
  if (name == "tf32-conv") return codec_cuda_math::cutlass_tf32;
  if (name == "fp16-conv") return codec_cuda_math::cutlass_fp16;
  throw std::invalid_argument("codec math \"" + name +
                              "\" is not cublas (cuBLAS float32), tf32 (cuBLAS on the tensor cores in TF32), fp16 "
                              "(cuBLAS over fp16 operands), double (double sums), tf32-conv (tf32 with CUTLASS's "
                              "TF32 convolutions), fp16-conv (fp16 with CUTLASS's fp16 convolutions) or auto "
                              "(tf32-conv where the build has CUTLASS, else tf32)");
}

// What benches and tests print for a math: "double sums", "cuBLAS f32", "cuBLAS TF32", "cuBLAS fp16",
// "CUTLASS TF32 conv", "CUTLASS fp16 conv".
inline const char* codec_math_label(codec_cuda_math m) {
  switch (m) {
  case codec_cuda_math::double_sums: return "double sums";
  case codec_cuda_math::cublas_f32: return "cuBLAS f32";
  case codec_cuda_math::cublas_tf32: return "cuBLAS TF32";
  case codec_cuda_math::cublas_fp16: return "cuBLAS fp16";
  case codec_cuda_math::cutlass_tf32: return "CUTLASS TF32 conv";
  case codec_cuda_math::cutlass_fp16: return "CUTLASS fp16 conv";
  }
  return "?";
}

// How a step's launches reach the stream.
//   eager     every launch enqueued for the step's own rows and frames.
//   graph     the step padded to a bucket of rows (1, 2, 4, ... up to max_rows) and to bucket x width frames
//             (width: its widest row's window), its launches captured once per (bucket, width) as a CUDA
//             graph and replayed. The graph reads each row's state and audio pointers, codes and frame
//             offsets from the step's upload (device memory), so one graph serves any rows in any slots. The
//             first step of a key runs its launches eagerly (cuBLAS and lazily loaded kernels warm up outside
//             a capture), then captures them for the steps after.
//   bucketed  the graph's padded launches enqueued eagerly, never captured: what a replay computes.
// Padding rows decode into the decoder's own sink state and sink audio, never into a caller's buffer. Under
// double_sums every launch gives a row the same bits; under cublas_f32 a replay gives the bits of `bucketed`
// (the same GEMM shapes), which may differ from `eager`'s in float32 rounding. Under cutlass_tf32 a padded step whose
// rows all have one width pads with rows of that width (filler rows over the one filler state), so that its CUTLASS
// convolutions see equal images; such a step has its own graph, apart from the (bucket, width) of mixed widths.
enum class codec_cuda_launch { eager, graph, bucketed };

// Capacities fixed at construction (every buffer is allocated once, so captured graphs stay valid).
struct codec_cuda_limits {
  int max_rows = 8;   // rows of one step
  int max_window = 8; // frames of one row in one step
  // SMs the decoder's kernels may occupy: 0, the whole GPU; else its stream is an sm_partition_stream of at least
  // this many SMs (a green context; sm_partition.hpp), so beside another stream its grids leave the other SMs
  // free. The same bits either way under double_sums.
  int sm_count = 0;
  // Under codec_cuda_math::cutlass_tf32 and cutlass_fp16, the least threadblocks (implicit_conv::tiles) a convolution
  // must give CUTLASS to run there rather than on the im2col and cuBLAS, whose products split long sums where CUTLASS's
  // kernels do not: -1, the SMs the codec may occupy (one full wave: sm_count, else the device's); 0, every shape
  // CUTLASS takes (the tests' tiny checkpoints, so that CUTLASS runs there).
  int cutlass_min_tiles = -1;
};

class codec_cuda {
public:
  // One row of a step. state and audio are device memory: state is the request's codec_state_layout
  // buffer (all zeros for a fresh request), audio has room for frames.size() / num_quantizers *
  // samples_per_frame() samples. frames is host memory, [n][num_quantizers] codes, 1 <= n <= max_window.
  struct row {
    float* state = nullptr;
    std::span<const std::int32_t> frames;
    float* audio = nullptr;
  };

  // Uploads the weights (float32, re-laid for the GEMMs) and allocates the scratch for the limits.
  codec_cuda(const codec_config& config, const codec_weights& weights, const codec_cuda_limits& limits,
             codec_cuda_math math = codec_cuda_math::double_sums);
  ~codec_cuda();
  codec_cuda(const codec_cuda&) = delete;
  codec_cuda& operator=(const codec_cuda&) = delete;

  // Decodes each row's window and advances its state, asynchronously on stream(). The codes are checked
  // on the host first (the host decoder's checks and messages: a code outside [0, codebook_size), a
  // partial frame); nothing is enqueued when a row is refused. A state whose frame counter is not a
  // frame count is not detected here (the host decoder refuses it). The frames may be reused as soon as
  // the call returns; state and audio must stay valid until the stream has run the step.
  void decode_step(std::span<const row> rows, codec_cuda_launch launch = codec_cuda_launch::eager);

  // The rows bucket a step of `rows` rows is padded to under codec_cuda_launch::graph: the next power of two,
  // at most max_rows.
  int bucket_of(int rows) const;
  // Graphs captured so far: one per (bucket, width) that a step under codec_cuda_launch::graph has used (under
  // cutlass_tf32, one per (bucket, width, whether the step's rows had one width)).
  std::size_t graphs() const;

  const codec_config& config() const { return config_; }
  const codec_state_layout& state_layout() const { return layout_; }
  const codec_cuda_limits& limits() const { return limits_; }
  codec_cuda_math math() const { return math_; }
  std::size_t samples_per_frame() const { return std::size_t(config_.samples_per_frame()); }
  std::size_t weight_bytes() const { return weight_bytes_; }
  std::size_t scratch_bytes() const { return scratch_bytes_; }
  cudaStream_t stream() const { return stream_; }
  // SMs the stream's kernels may occupy (the partition's, which rounds limits().sm_count up; 0: the whole GPU).
  int sm_count() const;
  // cublas_fp16 only (else false): whether, since construction, a value beyond fp16's range (+-65504) or not finite
  // reached a product's fp16 input. The products after it, and the audio of the rows it came from, are then wrong
  // (full-scale samples after the final clamp): use cublas_tf32 for that checkpoint. Read without synchronizing, so
  // a step still running may set it later; it never clears.
  bool fp16_out_of_range() const;
  void synchronize() const;

  struct state; // device buffers and weights (codec_cuda.cu)

private:
  // The step's rows, codes and frame offsets into the pinned mirror and up to the device, compact (bucket 0)
  // or padded to bucket rows of at most width frames (one_width: every row `width` frames, padded with rows of
  // `width` frames; cutlass_tf32 only); the table the launches read.
  codec_kernels::row_table upload(std::span<const row> rows, int bucket, int width, bool one_width);
  // Every launch of one step, for the rows, codes and audio pointers of the uploaded table.
  void enqueue(const codec_kernels::row_table& rows);
  // A padded step: the filler row's sink state zeroed, then enqueue.
  void enqueue_padded(const codec_kernels::row_table& rows);
  void replay(const codec_kernels::row_table& rows, int bucket, int width, bool one_width);

  codec_config config_;
  codec_cuda_limits limits_;
  codec_cuda_math math_;
  codec_state_layout layout_;
  cudaStream_t stream_ = nullptr;
  std::size_t weight_bytes_ = 0, scratch_bytes_ = 0;
  std::unique_ptr<state> s_;
};

} // namespace qwen3_tts
