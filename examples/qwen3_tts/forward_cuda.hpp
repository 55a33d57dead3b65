// The Qwen3-TTS-shaped model's forward functions on the CUDA backend, declared without CUDA headers
// (plain C++ units can use them); defined in forward_cuda.cu, linked through
// qwen3tts_example_cuda_dep (cuBLAS, cudart, the codec_state gather/scatter kernels).
//
//   mstar::cuda_backend gpu;
//   qwen3_tts::talker<mstar::cuda_backend> talker(gpu, {});     // ~2.8 GB of bf16 weights at the defaults
//   qwen3_tts::codec<mstar::cuda_backend> codec(gpu, {});
//   talker.capture({8, 16, 32, 64, 128}, chain);                // optional: graphs before the first step
//
// talker_decode: a small staging kernel copies the plan's sampler rows and per-row positions into
// fixed device buffers (outside the graph), then the bucket's CUDA graph replays: an input fill, the
// Talker's and code predictor's cuBLAS GEMMs, and the integer sampling head writing the frames to a
// fixed buffer; a device-to-host copy hands the rows' frames to the caller. A bucket's graph is
// captured at its first step (or by capture()) on a private stream and replayed on the step's
// stream. talker_prefill replays a graph of the same kernels too, captured at the first step of its
// size: the step's tokens and rows rounded up (prefill_token_bucket, prefill_row_bucket in
// forward.hpp); talker_config::prefill_graphs = false launches them one by one instead.
// codec_chunk: inputs staged through pinned memory, codec_state gathered into a batch
// (mstar::kernels::gather), the integer decoder kernel (one block per row, frames in order),
// the codec's cuBLAS GEMMs, the state scattered back, the audio copied to the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include <mstar/backend/cuda.hpp>

#include "qwen3_tts/forward.hpp"

namespace qwen3_tts::detail {

template <>
class talker_impl<mstar::cuda_backend> {
public:
  talker_impl(mstar::cuda_backend& b, talker_config cfg);
  ~talker_impl();
  talker_impl(const talker_impl&) = delete;
  talker_impl& operator=(const talker_impl&) = delete;

  void forward(mstar::cuda_stream s, const talker_inputs& in, std::span<frame> out, talker_phase phase);
  // Captures the decode graphs of these buckets now (a first step of a new bucket captures its own).
  void capture(std::span<const std::uint32_t> buckets, mstar::cuda_stream s);
  std::size_t graphs() const;         // talker_decode's graphs (one a bucket)
  std::size_t prefill_graphs() const; // talker_prefill's (one a token bucket and row bucket seen)
  const talker_config& config() const;

private:
  struct state;
  std::unique_ptr<state> s_;
};

template <>
class codec_impl<mstar::cuda_backend> {
public:
  codec_impl(mstar::cuda_backend& b, codec_config cfg);
  ~codec_impl();
  codec_impl(const codec_impl&) = delete;
  codec_impl& operator=(const codec_impl&) = delete;

  void forward(mstar::cuda_stream s, const codec_inputs& in, std::span<const codec_window> windows,
               std::span<std::int16_t> audio);
  const codec_config& config() const;

private:
  struct state;
  std::unique_ptr<state> s_;
};

} // namespace qwen3_tts::detail
