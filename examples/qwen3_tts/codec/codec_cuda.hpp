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
// Everything is enqueued on the decoder's one stream. A step's launch sizes follow its total frames, so
// a CUDA graph per (batch bucket, window width) is where capture would go (not done: widths vary per row,
// and graphs come after a GPU run has measured the step).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "codec_decoder.hpp"

namespace qwen3_tts {

namespace codec_kernels {
struct row_table;
} // namespace codec_kernels

// How the GEMMs (linear layers, convolutions) sum. double_sums: the decoder's own kernel, double sums in
// one fixed order per output, as the host decoder: a row's bits do not depend on the other rows of its step
// or on its window split. cublas_f32: cuBLAS SGEMM (float32 sums, no TF32) over the convolutions' windows
// written out (im2col), faster; cuBLAS may pick another algorithm for another row count, so a row's bits
// may then depend on its step's other rows (within float32 rounding).
enum class codec_cuda_math { double_sums, cublas_f32 };

// Capacities fixed at construction (every buffer is allocated once).
struct codec_cuda_limits {
  int max_rows = 8;   // rows of one step
  int max_window = 8; // frames of one row in one step
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
  void decode_step(std::span<const row> rows);

  const codec_config& config() const { return config_; }
  const codec_state_layout& state_layout() const { return layout_; }
  const codec_cuda_limits& limits() const { return limits_; }
  codec_cuda_math math() const { return math_; }
  std::size_t samples_per_frame() const { return std::size_t(config_.samples_per_frame()); }
  std::size_t weight_bytes() const { return weight_bytes_; }
  std::size_t scratch_bytes() const { return scratch_bytes_; }
  cudaStream_t stream() const { return stream_; }
  void synchronize() const;

  struct state; // device buffers and weights (codec_cuda.cu)

private:
  // Every launch of one step, for the rows of the uploaded table.
  void enqueue(const codec_kernels::row_table& rows, const std::int32_t* codes, float* const* audio);

  codec_config config_;
  codec_cuda_limits limits_;
  codec_cuda_math math_;
  codec_state_layout layout_;
  cudaStream_t stream_ = nullptr;
  std::size_t weight_bytes_ = 0, scratch_bytes_ = 0;
  std::unique_ptr<state> s_;
};

} // namespace qwen3_tts
