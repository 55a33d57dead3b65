// The forward functions of the real Qwen3-TTS on the CUDA backend: the Talker and its code predictor on the
// GPU (talker_cuda: bf16 weights, the prefill eager, each decode step one CUDA graph per row count), and the
// codec decoder on the GPU (codec_cuda: float32, the math chosen by codec_cuda_math, each step launched eagerly
// or, with speech_forward_options::codec_graphs, replayed from a CUDA graph per rows bucket and widest window),
// fed each row's window from the request's codes as the flow copied them to the host.
//
//   talker_cuda gpu(cuda_dims(talker.config()), speech_talker_limits<Spec>(16));
//   gpu.load_weights(store_weight_source(checkpoint.weights));
//   speech_forwards<Spec, mstar::cuda_backend> fwd(backend, talker, gpu, codec, sampling, {.max_batch = 16});
//   fwd.install(worker);
//   auto out = run_speech_cuda<Spec>(talker, gpu, codec, requests, options);   // or the whole run (speech_run.hpp)
//
// A request's per-request state lives in the engine's pools, addressed per step by the slot of each row, so a
// request keeps its state whichever row the engine gives it: the Talker's generation state in talker_state
// (talker_cuda::bind_state, gathered and scattered by the Talker), the codec's streaming state in codec_state,
// decoded in place in the row's slot. The Talker and the codec each run on their own stream, ordered after the
// step's stream by an event and the step's stream after them by another, so a slot's zero at its last owner's
// end comes after the owner's last step and before the next owner's first. A step passes only its real rows
// (no padding).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <mstar/backend/cuda.hpp>

#include "codec_cuda.hpp"
#include "speech_forwards.hpp"
#include "speech_run.hpp"
#include "talker_cuda.hpp"

namespace qwen3_tts::pipeline {

// Whether a CUDA device can be used here (a runtime check: the CUDA build runs on machines without one).
inline bool cuda_device_present() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError(); // a failed query must not leave a sticky error behind
  return ok;
}

// Tokens of one prefill step on the CUDA Talker (every row's prompt together): its scratch is sized for it,
// and the engine's max_tokens is set to it.
inline constexpr int cuda_prefill_tokens = 4096;

// The CUDA Talker's capacities for a speech model of Spec at max_batch rows a step. Its generation state goes
// to the engine's talker_state pool (bind_state), so its own store keeps a single slot. Its stream has the
// device's greatest priority: the codec's large grids beside it then yield SMs to the chain's many small kernels
// as blocks finish (qwen3tts_beside_bench; docs/benchmarks.md).
template <class Spec>
talker_cuda_limits speech_talker_limits(std::uint32_t max_batch) {
  talker_cuda_limits l;
  l.max_rows = int(max_batch);
  l.max_prefill_tokens = cuda_prefill_tokens;
  l.kv_blocks = int(Spec::kv_blocks);
  l.block_tokens = 16;
  l.max_pages = int(Spec::kv_blocks);
  l.state_slots = 1;
  l.high_priority = true;
  return l;
}

// The codec's math unless the caller picks another: cuBLAS float32 keeps the fixtures' audio within 4.3e-6 of
// the reference (the tests' bound is 1e-4) and runs a step 3-10x faster than the double-sum kernels
// (docs/benchmarks.md); what it gives up is a row's bits not depending on its step's other rows.
inline constexpr codec_cuda_math default_codec_math = codec_cuda_math::cublas_f32;

namespace detail {

struct device_free {
  mstar::cuda_backend* backend;
  void operator()(float* p) const noexcept { backend->free_device(p); }
};

} // namespace detail

template <class Spec>
class speech_forwards<Spec, mstar::cuda_backend>
    : public detail::speech_steps<Spec, speech_forwards<Spec, mstar::cuda_backend>> {
  friend class detail::speech_steps<Spec, speech_forwards>;

public:
  using backend_type = mstar::cuda_backend;

  // codec's weights are uploaded to a codec_cuda of max_batch rows and max_window frames; codec_math picks
  // its sums.
  speech_forwards(backend_type& b, const talker_host& talker, talker_cuda& gpu, const codec_decoder& codec,
                  talker_sampling sampling, speech_forward_options o, codec_cuda_math codec_math = default_codec_math)
      : backend_(&b), talker_(&talker), gpu_(&gpu), o_(o), groups_(talker.config().code_groups),
        spf_(codec.samples_per_frame()),
        codec_(codec.config(), codec.weights(), codec_cuda_limits{int(o_.max_batch), int(o_.max_window), o_.codec_sms},
               codec_math),
        frames_(b, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * talker_out_ints(groups_)),
        audio_(b, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * o_.max_window * spf_),
        audio_dev_(static_cast<float*>(b.allocate_device(std::size_t(o_.max_batch) * o_.max_window * spf_ *
                                                         sizeof(float))),
                   detail::device_free{&b}),
        to_talker_(b.create_event()), from_talker_(b.create_event()), to_codec_(b.create_event()),
        from_codec_(b.create_event()) {
    const auto& l = gpu.limits();
    if (l.max_rows < int(o_.max_batch) || l.kv_blocks < int(Spec::kv_blocks) || l.block_tokens != 16 ||
        l.max_pages < int(Spec::kv_blocks))
      throw std::invalid_argument(
          "qwen3_tts::speech_forwards (CUDA): the CUDA Talker was built for " + std::to_string(l.max_rows) +
          " rows, " + std::to_string(l.kv_blocks) + " KV blocks of " + std::to_string(l.block_tokens) +
          " tokens; the speech model needs " + std::to_string(o_.max_batch) + " rows and " +
          std::to_string(Spec::kv_blocks) + " blocks of 16: build it with speech_talker_limits<Spec>(max_batch)");
    if (gpu.state_bytes() > Spec::talker_state_floats * sizeof(float))
      throw std::invalid_argument("qwen3_tts::speech_forwards (CUDA): the Talker's state takes " +
                                  std::to_string(gpu.state_bytes()) + " bytes a request, the compiled talker_state "
                                  "pool holds " + std::to_string(Spec::talker_state_floats * sizeof(float)) +
                                  "; build a speech_model with a larger pool");
    if (codec.state_layout().total > Spec::codec_state_floats)
      throw std::invalid_argument(
          "qwen3_tts::speech_forwards (CUDA): the checkpoint's codec decoder carries " +
          std::to_string(codec.state_layout().total) + " floats of state per request, the compiled codec_state pool " +
          "holds " + std::to_string(Spec::codec_state_floats) + "; build a speech_model with a larger pool");
    if (codec.config().num_quantizers != groups_)
      throw std::invalid_argument("qwen3_tts::speech_forwards (CUDA): the Talker makes frames of " +
                                  std::to_string(groups_) + " codes, the codec decodes " +
                                  std::to_string(codec.config().num_quantizers) +
                                  " codebooks; the checkpoint's two configs disagree");
    gpu.set_sampling(sampling); // refuses what the CUDA sampler does not compute (top_p < 1)
  }
  ~speech_forwards() {
    for (const mstar::cuda_stream s : {cuda_stream(), codec_stream()}) {
      try {
        backend_->synchronize(s);
      } catch (...) { // a failed step's error was reported to its caller
      }
    }
    for (const mstar::cuda_event e : {to_talker_, from_talker_, to_codec_, from_codec_})
      backend_->destroy_event(e);
  }
  speech_forwards(const speech_forwards&) = delete;
  speech_forwards& operator=(const speech_forwards&) = delete;

  bool buffers_free() const { return frames_.all_free() && audio_.all_free(); }

  // Before the worker starts: with talker_graphs_at_start, binds the Talker to the engine's talker_state pool (as
  // the first step would) and captures its decode-step graphs for every row count up to max_batch.
  template <class Engine>
  void prepare(Engine& engine) {
    if (!o_.talker_graphs_at_start) return;
    const auto& pool = engine.template resource<typename Spec::TalkerState>();
    float* layer = pool.state(0, 0); // the pool's layer 0 block, the steps' segments[0].pool_layer
    gpu_->bind_state(layer, pool.state_elements() * sizeof(float), int(pool.slots()));
    bound_ = layer;
    const auto t0 = std::chrono::steady_clock::now();
    gpu_->capture_decode_graphs(int(o_.max_batch), /*frame_first=*/true);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    std::cerr << "talker graphs: " << gpu_->decode_graphs() << " decode-step graphs (1.." << o_.max_batch
              << " rows) captured in " << ms.count() << " ms\n";
  }

private:
  mstar::cuda_stream cuda_stream() const { return mstar::cuda_stream{gpu_->stream()}; }
  mstar::cuda_stream codec_stream() const { return mstar::cuda_stream{codec_.stream()}; }

  template <class Ctx>
  void talker_step(const Ctx& ctx, bool prefill) {
    const auto& kv = ctx.template plan<typename Spec::KvCache>();
    const auto& at = ctx.template plan<typename Spec::Attention>();
    const auto& pos = ctx.template plan<typename Spec::Positions>();
    const auto& smp = ctx.template plan<typename Spec::Sampler>();
    const auto& ts = ctx.template plan<typename Spec::TalkerState>();
    const auto rows = static_cast<std::uint32_t>(ctx.payloads.size());
    (prefill ? this->prefill_steps : this->decode_steps)++;

    const auto& seg = ts.segments[0];
    if (bound_ != seg.pool_layer) { // once: the pool's storage does not move
      gpu_->bind_state(seg.pool_layer, std::size_t(seg.state_elems) * sizeof(float), seg.slot_count);
      bound_ = seg.pool_layer;
    }
    // The step's real rows only: padding rows (slot 0, the pool's sink) never reach the Talker.
    const std::int32_t tokens = at.host_qo_indptr[rows];
    const step_plan plan{at.host_qo_indptr.first(rows + 1), kv.host_page_indptr.first(rows + 1),
                         kv.host_page_indices.first(std::size_t(kv.host_page_indptr[rows])),
                         kv.host_last_page_len.first(rows), pos.host_positions.first(std::size_t(tokens))};
    const std::span<const std::int32_t> slots = ts.host_slots.first(rows);
    for (std::uint32_t i = 0; i < rows; ++i)
      if (slots[i] <= 0)
        throw std::logic_error("qwen3_tts::speech_forwards (CUDA): Talker row " + std::to_string(i) + " has slot " +
                               std::to_string(slots[i]) + "; a real row always holds a slot of its own");

    auto lease = frames_.acquire(rows, std::size_t(rows) * talker_out_ints(groups_));
    detail::lend_frames(ctx, lease, groups_);

    // The Talker's stream runs the step's state accesses after the step stream's work (a slot's zero at its
    // last owner's end among them): the wait comes after the plan's upload, before the first state access.
    backend_->record(to_talker_, ctx.stream);
    if (prefill) {
      const int hidden = talker_->config().talker.hidden;
      embeds_.resize(std::size_t(tokens) * hidden);
      seeds_.resize(rows);
      std::size_t token = 0;
      for (std::uint32_t i = 0; i < rows; ++i) {
        const auto& r = *ctx.payloads[i].req;
        std::copy(r.prompt.prefill.begin(), r.prompt.prefill.end(), embeds_.data() + token * hidden);
        token += std::size_t(r.prompt.rows);
        seeds_[i] = r.in.seed ? *r.in.seed : smp.host_rows[i].seed;
      }
      if (token != std::size_t(tokens))
        throw std::logic_error("qwen3_tts::speech_forwards (CUDA): the step's rows hold " + std::to_string(token) +
                               " tokens, its plans " + std::to_string(tokens));
      gpu_->set_seeds(seeds_);
      backend_->wait(cuda_stream(), to_talker_);
      gpu_->prefill_frame(embeds_, plan, slots); // asynchronous; embeds_ is staged, free again on return
    } else {
      text_.resize(rows);
      for (std::uint32_t i = 0; i < rows; ++i) {
        const auto& r = *ctx.payloads[i].req;
        text_[i] = trailing_text_id(r.in.prompt, talker_->config(), int(r.decoded) - 1);
      }
      gpu_->set_decode_inputs(plan, text_, slots);
      backend_->wait(cuda_stream(), to_talker_);
      gpu_->decode_frame(int(rows));
    }
    gpu_->copy_frames_out(lease.data, int(rows));
    backend_->record(from_talker_, cuda_stream());
    backend_->wait(ctx.stream, from_talker_);
  }

  // Each row's window decoded in place in its slot of codec_state (device memory), into the device audio
  // buffer, then copied to a pinned output buffer that the flow's landed hook reads.
  template <class Ctx>
  void codec_step(const Ctx& ctx) {
    const auto& st = ctx.template plan<typename Spec::CodecState>();
    const auto rows = static_cast<std::uint32_t>(ctx.payloads.size());
    const auto& seg = st.segments[0];
    ++this->codec_steps;
    codec_rows_.resize(rows);
    first_.assign(1, 0);
    for (std::uint32_t i = 0; i < rows; ++i) {
      const std::int32_t slot = st.host_slots[i];
      if (slot <= 0 || slot >= seg.slot_count)
        throw std::logic_error("qwen3_tts::speech_forwards (CUDA): codec row " + std::to_string(i) + " has slot " +
                               std::to_string(slot) + "; a real row always holds a slot of its own");
      const auto& p = ctx.payloads[i];
      codec_rows_[i] = {seg.pool_layer + std::size_t(slot) * std::size_t(seg.state_elems),
                        std::span<const std::int32_t>(p.req->codes.data() + std::size_t(p.first) * groups_,
                                                      std::size_t(p.width) * groups_),
                        audio_dev_.get() + std::size_t(first_.back()) * spf_};
      first_.push_back(first_.back() + p.width);
    }
    const std::uint32_t frames = first_.back();
    this->codec_frames += frames;
    // The codec's stream runs the step's state accesses after the step stream's work (a slot's zero at its
    // last owner's end among them). decode_step copies the codes before it returns and enqueues nothing for
    // a window it refuses.
    backend_->record(to_codec_, ctx.stream);
    backend_->wait(codec_stream(), to_codec_);
    codec_.decode_step(codec_rows_, o_.codec_graphs ? codec_cuda_launch::graph : codec_cuda_launch::eager);
    if (!range_warned_ && codec_.fp16_out_of_range()) { // an earlier step's, seen once
      range_warned_ = true;
      std::cerr << "qwen3_tts: the CUDA codec met a value beyond fp16's range (+-65504) in a product's input; audio "
                   "decoded since is wrong. Use --codec-math tf32 with this checkpoint.\n";
    }
    auto lease = audio_.acquire(rows, std::size_t(frames) * spf_);
    detail::lend_audio(ctx, lease, first_, spf_);
    backend_->copy_to_host(lease.data, audio_dev_.get(), std::size_t(frames) * spf_ * sizeof(float), codec_stream());
    backend_->record(from_codec_, codec_stream());
    backend_->wait(ctx.stream, from_codec_);
  }

  backend_type* backend_;
  const talker_host* talker_;
  talker_cuda* gpu_;
  speech_forward_options o_;
  int groups_;
  std::size_t spf_; // audio samples a frame
  codec_cuda codec_;
  qwen3_tts::detail::output_pool<backend_type, std::int32_t> frames_; // pinned: the Talker copies into it
  qwen3_tts::detail::output_pool<backend_type, float> audio_;         // pinned: the codec's audio lands here
  // [max_batch * max_window][samples a frame]: one step's audio, written and read on the codec's stream only
  std::unique_ptr<float, detail::device_free> audio_dev_;
  mstar::cuda_event to_talker_, from_talker_, to_codec_, from_codec_;
  const float* bound_ = nullptr; // the talker_state pool's layer, once bound
  std::vector<float> embeds_;    // GPU thread's scratch
  std::vector<std::uint64_t> seeds_;
  std::vector<std::int32_t> text_;
  std::vector<codec_cuda::row> codec_rows_;
  std::vector<std::uint32_t> first_; // [rows + 1] the rows' frame offsets in the step's audio
  bool range_warned_ = false;        // fp16's range warning printed (codec_cuda::fp16_out_of_range)
};

// run_speech on the CUDA backend: the Talker on `gpu` (built with speech_talker_limits<Spec>(o.max_batch), its
// weights loaded), the codec on a codec_cuda of `codec`'s weights and codec_math. The program defines the CUDA
// backend once (backend/cuda_impl.hpp).
template <class Spec>
speech_run_result run_speech_cuda(const talker_host& talker, talker_cuda& gpu, const codec_decoder& codec,
                                  const std::vector<speech_request>& requests, const speech_run_options& o = {},
                                  codec_cuda_math codec_math = default_codec_math) {
  mstar::cuda_backend backend;
  return run_speech_with<Spec>(backend, talker, codec, requests, o, std::uint32_t(cuda_prefill_tokens),
                               [&](mstar::cuda_backend& b, const speech_forward_options& fo) {
                                 return std::make_unique<speech_forwards<Spec, mstar::cuda_backend>>(
                                     b, talker, gpu, codec, o.sampling, fo, codec_math);
                               });
}

} // namespace qwen3_tts::pipeline
