// Forward functions of the Qwen3-TTS-shaped model, for engine.run / the worker:
//
//   qwen3_tts::talker<Backend>  talker_prefill and talker_decode: one 16-code frame per row and step
//   qwen3_tts::codec<Backend>   codec_chunk: a window of frames per row -> 1920 int16 samples per frame,
//                               reading and updating the row's codec_state slot
//
// This header holds the configuration, the step inputs read from the engine's plans and the host
// backend's implementation (plain C++ on the stream's host thread, small sizes); forward_cuda.hpp
// declares the CUDA backend's (cuBLAS GEMMs for the cost, CUDA graphs per decode bucket and prefill
// size, integer kernels for the output). Both produce the same bytes for a request whatever its
// batch, row index, padding bucket or stream: the bytes come from synth.hpp's integer arithmetic,
// per row.
//
//   qwen3_tts::talker<mstar::host_backend> talker(backend, qwen3_tts::talker_config::host_small());
//   qwen3_tts::codec<mstar::host_backend> codec(backend, qwen3_tts::codec_config::host_small());
//   std::vector<qwen3_tts::frame> frames(rows.size());
//   engine.run(decode_step, chain, [&](const auto& ctx) { talker.decode(ctx, frames); });
//   backend.synchronize(chain);                       // frames[i]: row i's new frame
//   engine.run(codec_step, lane, [&](const auto& ctx) { codec.chunk(ctx, windows, audio); });
//
// Outputs are written when the stream reaches the step: keep `frames` / `audio` alive and read them
// after synchronizing the stream (or an event recorded after the step). Inputs (`windows`) are copied
// when the call is made. On the CUDA backend give pinned host memory (backend.allocate_host) for the
// outputs, or the device-to-host copies are synchronous.
//
// One talker (one codec) serves one engine, from the GPU thread. Its steps may run on different
// streams (lane modes): a step on another stream than the previous one first waits for it (an event),
// since the objects' scratch buffers are shared by their steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/kernels/recurrent.hpp>

#include "qwen3_tts/model.hpp"
#include "qwen3_tts/step_io.hpp"
#include "qwen3_tts/synth.hpp"

namespace qwen3_tts {

using synth::frame;

// The Talker's cost model. Defaults: the Talker of Qwen3-TTS 1.7B (28 layers, width 2048, MLP 6144)
// and its code predictor (5 layers, width 1024, MLP 3072, one pass per residual codebook: 15 passes
// a step). Each layer is four GEMMs: QKV (h -> 1.5 h, grouped KV), O (h -> h), gate+up (h -> 2 f),
// down (f -> h). Decode runs them on M = bucket rows; prefill runs the Talker on M = the step's
// tokens and the predictor on M = bucket. The GEMMs' results feed nothing the client sees.
struct talker_config {
  std::uint32_t hidden = 2048;
  std::uint32_t ffn = 6144;
  std::uint32_t layers = 28;
  std::uint32_t predictor_hidden = 1024;
  std::uint32_t predictor_ffn = 3072;
  std::uint32_t predictor_layers = 5;
  std::uint32_t predictor_passes = 15;
  std::uint32_t max_bucket = 256;  // rows of a step, padding included (engine_options.max_batch)
  std::uint32_t max_tokens = 8192; // tokens of a prefill step (engine_options.max_tokens)
  bool graphs = true;              // CUDA: capture talker_decode as a graph per bucket and replay it
  // CUDA: capture talker_prefill as a graph per (prefill_token_bucket, prefill_row_bucket) and replay
  // it. Eager, a prefill step's ~400 launches (cuBLAS) took longer on the host than on the GPU: the
  // step's GPU time then depended on the host's speed (docs/example.md, "Prefill graphs").
  bool prefill_graphs = true;
  // CUDA: the most prefill graphs kept (one a size seen; each ~400 nodes). Once that many are held, a
  // step of a size not among them launches its kernels one by one; nothing is evicted.
  std::uint32_t max_prefill_graphs = 256;

  // Small enough for the host backend's tests: the same structure, tiny widths.
  static talker_config host_small() {
    return talker_config{32, 64, 2, 16, 32, 1, 15, 64, 1024, false, false};
  }
  void check() const {
    auto bad = [](const char* what) {
      throw std::invalid_argument(std::string("qwen3_tts::talker_config: ") + what);
    };
    if (hidden == 0 || ffn == 0 || predictor_hidden == 0 || predictor_ffn == 0)
      bad("a width is 0; give hidden, ffn, predictor_hidden and predictor_ffn at least 1");
    if (hidden % 2 || predictor_hidden % 2) bad("hidden and predictor_hidden must be even (QKV is 1.5 x hidden)");
    if (max_bucket == 0 || max_tokens < max_bucket)
      bad("max_bucket is 0 or above max_tokens; use engine_options' max_batch and max_tokens");
  }
};

// The codec's limits and cost model. Its output comes from the integer recurrence of synth.hpp over
// the codec_state slot (a cheap kernel); `depth` GEMMs of width x width on M = rows_per_frame x the
// step's frames give it the GPU weight of a real decoder (0: none). The GEMMs feed nothing the
// client hears.
struct codec_config {
  std::uint32_t max_bucket = 256;  // rows of a step, padding included
  std::uint32_t max_frames = 4096; // frames in one step, over all rows
  std::uint32_t staging = 4;       // steps whose inputs may be in flight at once
  std::uint32_t width = 1024;
  std::uint32_t depth = 8;
  std::uint32_t rows_per_frame = 16;

  static codec_config host_small() { return codec_config{64, 512, 4, 32, 2, 2}; }
  void check() const {
    if (max_bucket == 0 || max_frames == 0 || staging == 0)
      throw std::invalid_argument("qwen3_tts::codec_config: max_bucket, max_frames and staging must be at least 1");
  }
};

enum class talker_phase : std::uint8_t { prefill, decode };

// The sizes a prefill step's graph is captured for (talker_config::prefill_graphs). The step's GEMMs
// and sampling head then run on more rows than it has; no output depends on the GEMMs, and the head
// skips rows past the step's own, so only the cost moves.
//  - the Talker GEMMs' M: the step's tokens rounded up to one of eight sizes an octave (at most 1/8
//    more; 8 at least), capped at max_tokens;
//  - the predictor's M and the head's rows: the step's rows rounded up to 1, 2, 3, 4, 6, 8, 12, 16,
//    24, ... (at most 1/2 more), capped at max_bucket.
inline std::uint32_t prefill_token_bucket(std::uint32_t tokens, std::uint32_t max_tokens) {
  tokens = std::max(tokens, 1u);
  std::uint32_t octave = 1; // the largest power of two <= tokens
  while (octave <= tokens / 2)
    octave *= 2;
  const std::uint32_t step = std::max(octave / 8, 8u);
  const std::uint64_t rounded = (std::uint64_t(tokens) + step - 1) / step * step;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(rounded, std::max(max_tokens, tokens)));
}
inline std::uint32_t prefill_row_bucket(std::uint32_t rows, std::uint32_t max_bucket) {
  const std::uint64_t cap = std::max(max_bucket, rows);
  std::uint64_t b = 1;
  while (b < rows && b < cap)
    b = b < 2 ? 2 : (b & (b - 1)) == 0 ? b + b / 2 : b / 3 * 4; // 2 -> 3 -> 4 -> 6 -> 8 -> 12 ...
  return static_cast<std::uint32_t>(std::min(b, cap));
}

// What a Talker step reads from the engine's plans (device pointers; host memory on the host backend).
struct talker_inputs {
  const mstar::sampler_row* samplers = nullptr; // [bucket]
  const std::int32_t* positions = nullptr;      // [tokens]
  const std::int32_t* qo_indptr = nullptr;      // [bucket + 1]: row i's last token is qo_indptr[i + 1] - 1
  std::uint32_t rows = 0, bucket = 0, tokens = 0;
};

// What a codec step reads from the codec_state plan.
struct codec_inputs {
  const std::int32_t* slots = nullptr;    // [bucket], device
  const std::uint8_t* has_state = nullptr; // [bucket], device
  mstar::kernels::segment_table<mstar::bf16> segments;
  std::uint32_t rows = 0, bucket = 0;
};

// One row of a codec step: the frames it decodes now (copied at the call).
struct codec_window {
  const frame* frames = nullptr;
  std::uint32_t width = 0;
};

template <class Ctx>
talker_inputs talker_inputs_of(const Ctx& ctx) {
  const auto& s = ctx.template plan<Sampler>();
  const auto& p = ctx.template plan<Positions>();
  const auto& a = ctx.template plan<Attention>();
  return talker_inputs{s.rows_device, p.positions, a.qo_indptr, static_cast<std::uint32_t>(ctx.view.rows.size()),
                       ctx.view.bucket, ctx.view.tokens};
}

template <class Ctx>
codec_inputs codec_inputs_of(const Ctx& ctx) {
  const auto& p = ctx.template plan<CodecState>();
  return codec_inputs{p.slots, p.has_state, p.segments, p.rows, p.bucket};
}

// Samples a codec step writes: the sum of the windows' widths x 1920.
inline std::size_t audio_samples(std::span<const codec_window> windows) {
  std::size_t n = 0;
  for (const auto& w : windows)
    n += w.width;
  return n * synth::samples_per_frame;
}

namespace detail {

// The four GEMMs of one layer, as (k, n, input row stride) on an [M x k] input.
struct gemm_shape {
  std::uint32_t k, n, input_stride;
};
inline std::vector<gemm_shape> layer_gemms(std::uint32_t h, std::uint32_t f) {
  const std::uint32_t qkv = h + h / 2;
  return {{h, qkv, h}, {h, h, qkv}, {h, 2 * f, h}, {f, h, 2 * f}};
}

inline void check_talker_call(const talker_inputs& in, std::size_t out_rows, const talker_config& cfg) {
  if (out_rows < in.rows)
    throw std::invalid_argument("qwen3_tts::talker: the output holds " + std::to_string(out_rows) +
                                " frames for a " + std::to_string(in.rows) + "-row step; give it one frame per row");
  if (in.rows > in.bucket)
    throw std::invalid_argument("qwen3_tts::talker: a step of " + std::to_string(in.rows) + " rows in a bucket of " +
                                std::to_string(in.bucket) + "; the bucket holds the rows and their padding, so give a "
                                "bucket of at least the row count (the engine's plans do)");
  if (in.bucket > cfg.max_bucket || in.tokens > cfg.max_tokens)
    throw std::invalid_argument("qwen3_tts::talker: a step of bucket " + std::to_string(in.bucket) + " and " +
                                std::to_string(in.tokens) + " tokens is beyond talker_config max_bucket " +
                                std::to_string(cfg.max_bucket) + " / max_tokens " + std::to_string(cfg.max_tokens) +
                                "; raise them to the engine_options' max_batch and max_tokens");
}

// Checks a codec call and returns its frame count.
inline std::uint32_t check_codec_call(const codec_inputs& in, std::span<const codec_window> windows,
                                      std::size_t audio_size, const codec_config& cfg) {
  if (windows.size() != in.rows)
    throw std::invalid_argument("qwen3_tts::codec: " + std::to_string(windows.size()) + " windows for a " +
                                std::to_string(in.rows) + "-row step; give one window per row, in row order");
  if (in.bucket > cfg.max_bucket)
    throw std::invalid_argument("qwen3_tts::codec: a step of bucket " + std::to_string(in.bucket) +
                                " is beyond codec_config max_bucket " + std::to_string(cfg.max_bucket));
  if (in.segments.size() != synth::codec_layers)
    throw std::invalid_argument("qwen3_tts::codec: the codec_state plan has " + std::to_string(in.segments.size()) +
                                " layers, the codec decodes " + std::to_string(synth::codec_layers));
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    if (windows[i].width != 0 && windows[i].frames == nullptr)
      throw std::invalid_argument("qwen3_tts::codec: window " + std::to_string(i) + " has width " +
                                  std::to_string(windows[i].width) + " and no frames");
    total += windows[i].width;
  }
  if (total > cfg.max_frames)
    throw std::invalid_argument("qwen3_tts::codec: the step decodes " + std::to_string(total) +
                                " frames, beyond codec_config max_frames " + std::to_string(cfg.max_frames) +
                                "; split the windows over several steps or raise max_frames");
  if (audio_size < total * synth::samples_per_frame)
    throw std::invalid_argument("qwen3_tts::codec: the audio buffer holds " + std::to_string(audio_size) +
                                " samples, the step writes " + std::to_string(total * synth::samples_per_frame) +
                                " (1920 per frame); size it with qwen3_tts::audio_samples(windows)");
  return static_cast<std::uint32_t>(total);
}

// A codec step's staged inputs: per padded row its first frame and width, then the frames.
struct codec_row {
  std::uint32_t frame_offset;
  std::uint32_t width;
};
inline std::size_t codec_staging_bytes(const codec_config& cfg) {
  return std::size_t(cfg.max_bucket) * sizeof(codec_row) + std::size_t(cfg.max_frames) * sizeof(frame);
}
// Packs the windows into `buffer` (rows, then frames); padding rows get width 0.
inline void pack_codec_inputs(unsigned char* buffer, std::span<const codec_window> windows, std::uint32_t bucket,
                              std::uint32_t max_bucket) {
  auto* rows = reinterpret_cast<codec_row*>(buffer);
  auto* frames = reinterpret_cast<frame*>(buffer + std::size_t(max_bucket) * sizeof(codec_row));
  std::uint32_t offset = 0;
  for (std::uint32_t i = 0; i < bucket; ++i) {
    const std::uint32_t w = i < windows.size() ? windows[i].width : 0;
    rows[i] = codec_row{offset, w};
    if (w) std::memcpy(frames + offset, windows[i].frames, std::size_t(w) * sizeof(frame));
    offset += w;
  }
}

template <class Backend>
class talker_impl;
template <class Backend>
class codec_impl;

// Host backend: the same structure on the stream's host thread, float GEMMs at host_small sizes for
// the cost (their results stay in scratch) and synth.hpp's integer math for the frames.
template <>
class talker_impl<mstar::host_backend> {
public:
  talker_impl(mstar::host_backend& b, talker_config cfg) : backend_(&b), cfg_(cfg), fence_(b) {
    cfg_.check();
    const std::uint32_t widest = std::max({cfg_.hidden * 2, cfg_.ffn * 2, cfg_.predictor_hidden * 2,
                                           cfg_.predictor_ffn * 2});
    for (auto dims : {std::pair{cfg_.hidden, cfg_.ffn}, std::pair{cfg_.predictor_hidden, cfg_.predictor_ffn}}) {
      auto& w = weights_.emplace_back();
      for (const auto& g : layer_gemms(dims.first, dims.second)) {
        auto& m = w.emplace_back(std::size_t(g.k) * g.n);
        for (std::size_t i = 0; i < m.size(); ++i)
          m[i] = float(std::int32_t(synth::hash32(std::uint32_t(i) + g.n)) % 1000) / (1000.0f * float(g.k));
      }
    }
    x_.resize(std::size_t(cfg_.max_tokens) * widest);
    y_.resize(x_.size());
  }
  ~talker_impl() { fence_.drain(); }
  talker_impl(const talker_impl&) = delete;
  talker_impl& operator=(const talker_impl&) = delete;

  void forward(mstar::host_stream s, const talker_inputs& in, std::span<frame> out, talker_phase phase) {
    check_talker_call(in, out.size(), cfg_);
    fence_.enter(s);
    backend_->enqueue(s, [this, in, out = out.data(), phase] { run(in, out, phase); });
  }
  const talker_config& config() const { return cfg_; }

private:
  // y[M x n] = x[M x k (stride ldx)] * w[k x n], fixed loop order.
  static void gemm(const float* x, std::uint32_t ldx, const float* w, float* y, std::uint32_t m, std::uint32_t k,
                   std::uint32_t n) {
    for (std::uint32_t i = 0; i < m; ++i)
      for (std::uint32_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (std::uint32_t p = 0; p < k; ++p)
          acc += x[std::size_t(i) * ldx + p] * w[std::size_t(p) * n + j];
        y[std::size_t(i) * n + j] = acc;
      }
  }
  void chain(std::size_t which, std::uint32_t m, std::uint32_t layers, std::uint32_t h, std::uint32_t f) {
    const auto shapes = layer_gemms(h, f);
    for (std::uint32_t l = 0; l < layers; ++l)
      for (std::size_t g = 0; g < shapes.size(); ++g) {
        gemm(x_.data(), shapes[g].input_stride, weights_[which][g].data(), y_.data(), m, shapes[g].k, shapes[g].n);
        std::swap(x_, y_);
      }
  }
  void run(const talker_inputs& in, frame* out, talker_phase phase) {
    const std::uint32_t m = phase == talker_phase::prefill ? std::max(in.tokens, 1u) : in.bucket;
    for (std::size_t i = 0; i < std::size_t(m) * cfg_.hidden; ++i)
      x_[i] = float(i % 7) * 0.125f;
    chain(0, m, cfg_.layers, cfg_.hidden, cfg_.ffn);
    for (std::uint32_t p = 0; p < cfg_.predictor_passes; ++p)
      chain(1, in.bucket, cfg_.predictor_layers, cfg_.predictor_hidden, cfg_.predictor_ffn);
    for (std::uint32_t i = 0; i < in.rows; ++i) {
      const std::int32_t pos = in.positions[in.qo_indptr[i + 1] - 1];
      out[i] = synth::sample_frame(in.samplers[i], static_cast<std::uint32_t>(pos));
    }
  }

  mstar::host_backend* backend_;
  talker_config cfg_;
  stream_fence<mstar::host_backend> fence_;
  std::vector<std::vector<std::vector<float>>> weights_; // [talker, predictor][gemm][k x n]
  std::vector<float> x_, y_;
};

template <>
class codec_impl<mstar::host_backend> {
public:
  codec_impl(mstar::host_backend& b, codec_config cfg)
      : backend_(&b), cfg_(cfg), fence_(b), staging_(b, cfg.staging, codec_staging_bytes(cfg)),
        batch_(std::size_t(cfg.max_bucket) * synth::codec_layers * synth::layer_elems) {
    cfg_.check();
    const std::uint32_t w = cfg_.width;
    weights_.resize(std::size_t(w) * w);
    for (std::size_t i = 0; i < weights_.size(); ++i)
      weights_[i] = float(std::int32_t(synth::hash32(std::uint32_t(i))) % 1000) / (1000.0f * float(w));
    x_.resize(std::size_t(cfg_.max_frames) * cfg_.rows_per_frame * w);
    y_.resize(x_.size());
  }
  ~codec_impl() { fence_.drain(); }
  codec_impl(const codec_impl&) = delete;
  codec_impl& operator=(const codec_impl&) = delete;

  void forward(mstar::host_stream s, const codec_inputs& in, std::span<const codec_window> windows,
               std::span<std::int16_t> audio) {
    const std::uint32_t frames = check_codec_call(in, windows, audio.size(), cfg_);
    fence_.enter(s);
    const std::uint32_t slot = staging_.acquire();
    pack_codec_inputs(staging_.host(slot), windows, in.bucket, cfg_.max_bucket);
    backend_->enqueue(s, [this, in, slot, frames, audio = audio.data()] { run(in, slot, frames, audio); });
    staging_.release(slot, s);
  }
  const codec_config& config() const { return cfg_; }

private:
  void run(const codec_inputs& in, std::uint32_t slot, std::uint32_t frames, std::int16_t* audio) {
    // Cost: a GEMM chain on the step's frames (results stay in scratch).
    const std::uint32_t m = frames * cfg_.rows_per_frame, w = cfg_.width;
    for (std::uint32_t d = 0; d < cfg_.depth; ++d) {
      for (std::uint32_t i = 0; i < m; ++i)
        for (std::uint32_t j = 0; j < w; ++j) {
          float acc = 0.0f;
          for (std::uint32_t p = 0; p < w; ++p)
            acc += x_[std::size_t(i) * w + p] * weights_[std::size_t(p) * w + j];
          y_[std::size_t(i) * w + j] = acc;
        }
      std::swap(x_, y_);
    }
    // Output: gather the rows' state, decode, scatter it back.
    mstar::kernels::recurrent_segment<mstar::bf16> table[synth::codec_layers];
    std::copy(in.segments.begin(), in.segments.end(), table);
    mstar::kernels::layout_batch(std::span<mstar::kernels::recurrent_segment<mstar::bf16>>(table),
                                 static_cast<std::int32_t>(in.bucket));
    const mstar::kernels::segment_table<mstar::bf16> t(table, synth::codec_layers);
    mstar::kernels::host::gather(t, in.slots, static_cast<std::int32_t>(in.bucket), batch_.data(), nullptr);
    const auto* rows = reinterpret_cast<const codec_row*>(staging_.host(slot));
    const auto* fr = reinterpret_cast<const frame*>(staging_.host(slot) + std::size_t(cfg_.max_bucket) * sizeof(codec_row));
    const std::size_t stride = std::size_t(in.bucket) * synth::layer_elems; // layer to layer in the batch
    for (std::uint32_t r = 0; r < in.rows; ++r) {
      auto* state = reinterpret_cast<std::uint16_t*>(batch_.data()) + std::size_t(r) * synth::layer_elems;
      if (!in.has_state[r]) // a slot with no committed state decodes from zeros
        for (std::uint32_t l = 0; l < synth::codec_layers; ++l)
          std::memset(state + l * stride, 0, synth::layer_elems * sizeof(std::uint16_t));
      synth::codec_decode_row(state, stride, fr + rows[r].frame_offset, rows[r].width,
                              audio + std::size_t(rows[r].frame_offset) * synth::samples_per_frame);
    }
    mstar::kernels::host::scatter(t, in.slots, static_cast<std::int32_t>(in.bucket), batch_.data(), nullptr);
  }

  mstar::host_backend* backend_;
  codec_config cfg_;
  stream_fence<mstar::host_backend> fence_;
  staging_ring<mstar::host_backend> staging_;
  std::vector<mstar::bf16> batch_; // [layers][bucket][16 * 1024]
  std::vector<float> weights_, x_, y_;
};

} // namespace detail

template <class Backend>
class talker : public detail::talker_impl<Backend> {
public:
  using detail::talker_impl<Backend>::talker_impl;
  // Forward functions for engine.run: ctx is the step_context of the node.
  template <class Ctx>
  void prefill(const Ctx& ctx, std::span<frame> out) {
    this->forward(ctx.stream, talker_inputs_of(ctx), out, talker_phase::prefill);
  }
  template <class Ctx>
  void decode(const Ctx& ctx, std::span<frame> out) {
    this->forward(ctx.stream, talker_inputs_of(ctx), out, talker_phase::decode);
  }
};

template <class Backend>
class codec : public detail::codec_impl<Backend> {
public:
  using detail::codec_impl<Backend>::codec_impl;
  // Row i decodes windows[i]; its samples land in `audio` after the earlier rows' (row order).
  template <class Ctx>
  void chunk(const Ctx& ctx, std::span<const codec_window> windows, std::span<std::int16_t> audio) {
    this->forward(ctx.stream, codec_inputs_of(ctx), windows, audio);
  }
};

} // namespace qwen3_tts
