// The forward functions of the real Qwen3-TTS on the CUDA backend: the Talker and its code predictor on the
// GPU (talker_cuda: bf16 weights, the prefill eager, each decode step one CUDA graph per row count), and the
// codec decoder on the host for now -- the host float32 decoder, fed the Talker's codes as the flow copied
// them to the host, run on the codec step's stream as a host function (cudaLaunchHostFunc), its per-request
// state in a host mirror of the codec_state pool indexed by the pool's slots.
//
//   talker_cuda gpu(cuda_dims(talker.config()), speech_talker_limits<Spec>(16));
//   gpu.load_weights(store_weight_source(checkpoint.weights));
//   speech_forwards<Spec, mstar::cuda_backend> fwd(backend, talker, gpu, codec, sampling, {.max_batch = 16});
//   fwd.install(worker);
//   auto out = run_speech_cuda<Spec>(talker, gpu, codec, requests, options);   // or the whole run (speech_run.hpp)
//
// A request's generation state lives in the engine's talker_state pool (talker_cuda::bind_state), addressed
// per step by the slot of each row, so a request keeps its state whichever row the engine gives it. The
// Talker runs on talker_cuda's own stream, ordered after the step's stream by an event and the step's stream
// after it by another. The step passes talker_cuda only its real rows (no padding).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <mstar/backend/cuda.hpp>

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
// to the engine's talker_state pool (bind_state), so its own store keeps a single slot.
template <class Spec>
talker_cuda_limits speech_talker_limits(std::uint32_t max_batch) {
  talker_cuda_limits l;
  l.max_rows = int(max_batch);
  l.max_prefill_tokens = cuda_prefill_tokens;
  l.kv_blocks = int(Spec::kv_blocks);
  l.block_tokens = 16;
  l.max_pages = int(Spec::kv_blocks);
  l.state_slots = 1;
  return l;
}

namespace detail {

// Plain host memory for output_pool: the host codec writes its audio from a CUDA host function, so the
// buffers need not be pinned.
struct plain_host_memory {
  void* allocate_host(std::size_t bytes) { return ::operator new(bytes); }
  void free_host(void* p) noexcept { ::operator delete(p); }
};

struct cuda_codec_job {
  void* self = nullptr;
  std::uint32_t rows = 0;
  std::vector<std::int32_t> codes;  // every row's window, [frames][groups], row after row
  std::vector<std::uint32_t> first; // [rows + 1] frame offsets into codes
  std::vector<float*> state;        // [rows] the row's state in the host mirror
  std::vector<std::uint8_t> fresh;  // [rows] 1: the slot holds no state yet (zeroed before use)
  float* audio = nullptr;           // [frames][samples_per_frame], rows in order
};

} // namespace detail

template <class Spec>
class speech_forwards<Spec, mstar::cuda_backend>
    : public detail::speech_steps<Spec, speech_forwards<Spec, mstar::cuda_backend>> {
  friend class detail::speech_steps<Spec, speech_forwards>;

public:
  using backend_type = mstar::cuda_backend;

  speech_forwards(backend_type& b, const talker_host& talker, talker_cuda& gpu, const codec_decoder& codec,
                  talker_sampling sampling, speech_forward_options o)
      : backend_(&b), talker_(&talker), gpu_(&gpu), codec_(&codec), o_(o), groups_(talker.config().code_groups),
        frames_(b, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * talker_out_ints(groups_)),
        audio_(memory_, std::max(o_.buffers, 4u),
               std::size_t(o_.max_batch) * o_.max_window * codec.samples_per_frame()),
        codec_jobs_(b, o_.jobs), to_talker_(b.create_event()), from_talker_(b.create_event()) {
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
    if (codec.config().num_quantizers != groups_)
      throw std::invalid_argument("qwen3_tts::speech_forwards (CUDA): the Talker makes frames of " +
                                  std::to_string(groups_) + " codes, the codec decodes " +
                                  std::to_string(codec.config().num_quantizers) +
                                  " codebooks; the checkpoint's two configs disagree");
    gpu.set_sampling(sampling); // refuses what the CUDA sampler does not compute (top_p < 1)
  }
  ~speech_forwards() {
    try {
      backend_->synchronize(cuda_stream());
    } catch (...) { // a failed step's error was reported to its caller
    }
    backend_->destroy_event(to_talker_);
    backend_->destroy_event(from_talker_);
  }
  speech_forwards(const speech_forwards&) = delete;
  speech_forwards& operator=(const speech_forwards&) = delete;

  bool buffers_free() const { return frames_.all_free() && audio_.all_free(); }

private:
  mstar::cuda_stream cuda_stream() const { return mstar::cuda_stream{gpu_->stream()}; }

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
      gpu_->prefill_frame(embeds_, plan, slots); // synchronous: embeds_ is free again on return
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

  template <class Ctx>
  void codec_step(const Ctx& ctx) {
    rethrow_codec_error();
    const auto& st = ctx.template plan<typename Spec::CodecState>();
    const auto rows = static_cast<std::uint32_t>(ctx.payloads.size());
    const auto& seg = st.segments[0];
    const std::size_t n = codec_->state_layout().total;
    if (states_.empty()) states_.assign(std::size_t(seg.slot_count) * n, 0.0f);
    ++this->codec_steps;
    auto& job = codec_jobs_.acquire();
    job.self = this;
    job.rows = rows;
    const std::uint32_t frames = detail::copy_windows(ctx, groups_, job.codes, job.first);
    job.state.resize(rows);
    job.fresh.resize(rows);
    for (std::uint32_t i = 0; i < rows; ++i) {
      const std::int32_t slot = st.host_slots[i];
      if (slot <= 0 || slot >= seg.slot_count)
        throw std::logic_error("qwen3_tts::speech_forwards (CUDA): codec row " + std::to_string(i) + " has slot " +
                               std::to_string(slot) + "; a real row always holds a slot of its own");
      job.state[i] = states_.data() + std::size_t(slot) * n;
      job.fresh[i] = st.host_has_state[i] ? 0 : 1;
    }
    this->codec_frames += frames;
    const std::size_t spf = codec_->samples_per_frame();
    auto lease = audio_.acquire(rows, std::size_t(frames) * spf);
    detail::lend_audio(ctx, lease, job.first, spf);
    job.audio = lease.data;
    const cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(ctx.stream.handle), &run_codec_job, &job);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("qwen3_tts::speech_forwards (CUDA): cudaLaunchHostFunc (codec step) "
                                           "failed: ") + cudaGetErrorString(e));
    codec_jobs_.release(ctx.stream);
  }

  // On CUDA's host-function thread, in the codec stream's order: no CUDA calls here, and no exception may
  // leave (the next codec step rethrows it on the GPU thread).
  static void CUDART_CB run_codec_job(void* p) {
    auto& job = *static_cast<detail::cuda_codec_job*>(p);
    auto& self = *static_cast<speech_forwards*>(job.self);
    try {
      self.run_codec(job);
    } catch (const std::exception& e) {
      std::lock_guard g(self.error_lock_);
      if (self.codec_error_.empty()) self.codec_error_ = e.what();
      self.failed_.store(true, std::memory_order_release);
    }
  }

  void run_codec(detail::cuda_codec_job& job) {
    const std::size_t spf = codec_->samples_per_frame(), n = codec_->state_layout().total;
    for (std::uint32_t i = 0; i < job.rows; ++i) {
      if (job.fresh[i]) std::fill_n(job.state[i], n, 0.0f); // the engine zeroes its own (device) slot alike
      const std::size_t f0 = job.first[i], f1 = job.first[i + 1];
      codec_->decode_window(std::span<float>(job.state[i], n),
                            std::span<const std::int32_t>(job.codes.data() + f0 * groups_, (f1 - f0) * groups_),
                            std::span<float>(job.audio + f0 * spf, (f1 - f0) * spf));
    }
  }

  void rethrow_codec_error() {
    if (!failed_.load(std::memory_order_acquire)) return;
    std::lock_guard g(error_lock_);
    failed_.store(false, std::memory_order_relaxed);
    const std::string why = std::move(codec_error_);
    codec_error_.clear();
    throw std::runtime_error("qwen3_tts::speech_forwards (CUDA): the host codec failed on an earlier step: " + why);
  }

  backend_type* backend_;
  const talker_host* talker_;
  talker_cuda* gpu_;
  const codec_decoder* codec_;
  speech_forward_options o_;
  int groups_;
  // What a pending host function touches is declared before codec_jobs_, whose destructor waits for them.
  std::vector<float> states_; // the codec state's host mirror, [slots][state floats]
  std::mutex error_lock_;
  std::string codec_error_;
  std::atomic<bool> failed_{false};
  detail::plain_host_memory memory_;
  qwen3_tts::detail::output_pool<backend_type, std::int32_t> frames_;     // pinned: the Talker copies into it
  qwen3_tts::detail::output_pool<detail::plain_host_memory, float> audio_; // the host codec writes it
  detail::job_ring<backend_type, detail::cuda_codec_job> codec_jobs_;
  mstar::cuda_event to_talker_, from_talker_;
  const float* bound_ = nullptr; // the talker_state pool's layer, once bound
  std::vector<float> embeds_;    // GPU thread's scratch
  std::vector<std::uint64_t> seeds_;
  std::vector<std::int32_t> text_;
};

// run_speech on the CUDA backend: the Talker on `gpu` (built with speech_talker_limits<Spec>(o.max_batch), its
// weights loaded), the codec on the host. The program defines the CUDA backend once (backend/cuda_impl.hpp).
template <class Spec>
speech_run_result run_speech_cuda(const talker_host& talker, talker_cuda& gpu, const codec_decoder& codec,
                                  const std::vector<speech_request>& requests, const speech_run_options& o = {}) {
  mstar::cuda_backend backend;
  return run_speech_with<Spec>(backend, talker, codec, requests, o, std::uint32_t(cuda_prefill_tokens),
                               [&](mstar::cuda_backend& b, const speech_forward_options& fo) {
                                 return std::make_unique<speech_forwards<Spec, mstar::cuda_backend>>(
                                     b, talker, gpu, codec, o.sampling, fo);
                               });
}

} // namespace qwen3_tts::pipeline
