// The forward functions of the real Qwen3-TTS's three nodes on the host backend: the Talker (prefill and
// decode, each making one frame per row: code 0 from the Talker's logits, codes 1..15 from the code
// predictor) over a paged KV cache addressed by the engine's kv_cache / attention / positions plans, and
// the codec decoder over each request's state row in the codec_state pool (in-place slot addressing). The
// CUDA backend's forward functions are in speech_forwards_cuda.hpp; the pieces both use are in detail below.
//
//   speech_forwards<Spec, mstar::host_backend> fwd(backend, talker, codec, sampling, {.max_batch = 16});
//   fwd.install(worker);
//
// Inputs are copied at the call, on the GPU thread, into a job taken from a small ring (a job is refilled
// only after the step that read it has run), because the request that owns them may end (a cancel) before
// the stream runs the step. Outputs go to buffers of output_pool (step_io.hpp), read by the flow's landed
// hook. Rows share nothing but read-only weights, so a request's codes and audio do not depend on its batch,
// its row, the padding or the stream: sampling draws are keyed by the request's seed and frame.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <mstar/backend/host.hpp>

#include "codec_decoder.hpp"
#include "qwen3_tts/step_io.hpp"
#include "speech_flow.hpp"
#include "talker.hpp"

namespace qwen3_tts::pipeline {

struct speech_forward_options {
  std::uint32_t max_batch = 16;  // rows of a step (engine_options.max_batch)
  std::uint32_t max_window = 8;  // widest codec window (the ramp's widest)
  std::uint32_t buffers = 16;    // output buffers per kind: >= the worker's step_records + 2
  std::uint32_t jobs = 8;        // input jobs per kind in flight (>= the engine's staging depth is plenty)
  // The CUDA codec's steps replayed from a CUDA graph per rows bucket and widest window (codec_cuda_launch::graph:
  // no launch cost a kernel, but the padding up to bucket x width frames is computed too) instead of launched
  // eagerly. The host backend has no launches to save and ignores it.
  bool codec_graphs = false;
  // SMs the CUDA codec's kernels may occupy (codec_cuda_limits::sm_count; 0: the whole GPU). The host backend
  // ignores it.
  int codec_sms = 0;
  // The CUDA Talker's decode-step graphs captured for every row count 1..max_batch when the forward functions are
  // prepared (speech_forwards::prepare, before the worker starts), instead of when a row count first comes to a
  // step (under load a capture held the GPU thread for tens of milliseconds, the chain waiting;
  // docs/benchmarks.md). Off here, where a caller's one request would pay for graphs it never replays;
  // speech_service_options turns it on. The host backend ignores it.
  bool talker_graphs_at_start = false;
};

namespace detail {

// Typed per-step inputs, reused round robin: job i is refilled only after the step that read it has run.
template <class Backend, class Job>
class job_ring {
public:
  job_ring(Backend& b, std::uint32_t depth) : backend_(&b), jobs_(std::max(depth, 2u)) {
    for (std::size_t i = 0; i < jobs_.size(); ++i)
      events_.push_back(b.create_event());
  }
  ~job_ring() {
    for (auto& e : events_) {
      try {
        backend_->synchronize(e);
      } catch (...) { // a failed step's error was reported to its caller; the job is freed all the same
      }
      backend_->destroy_event(e);
    }
  }
  job_ring(const job_ring&) = delete;
  job_ring& operator=(const job_ring&) = delete;
  Job& acquire() {
    const std::size_t i = next_;
    next_ = (next_ + 1) % jobs_.size();
    backend_->synchronize(events_[i]);
    last_ = i;
    return jobs_[i];
  }
  void release(typename Backend::stream_type s) { backend_->record(events_[last_], s); }

private:
  Backend* backend_;
  std::vector<Job> jobs_;
  std::vector<typename Backend::event_type> events_;
  std::size_t next_ = 0, last_ = 0;
};

// What the forward functions of every backend share: installing the three nodes' steps (Forwards' talker_step
// and codec_step) and counting them, copying each codec row's window of codes, and handing each row its share
// of a step's output buffer.
template <class Spec, class Forwards>
class speech_steps {
public:
  template <class Worker>
  void install(Worker& w) {
    auto* self = static_cast<Forwards*>(this);
    w.template forward<typename Spec::TalkerPrefill>([self](const auto& ctx) { self->talker_step(ctx, true); });
    w.template forward<typename Spec::TalkerDecode>([self](const auto& ctx) { self->talker_step(ctx, false); });
    w.template forward<typename Spec::CodecChunk>([self](const auto& ctx) { self->codec_step(ctx); });
  }

  // Steps launched (GPU thread; read after the worker stopped).
  std::uint64_t prefill_steps = 0, decode_steps = 0, codec_steps = 0, codec_frames = 0;
};

// Every codec row's window, [frames][groups] row after row, and the rows' frame offsets (first[i] .. first[i + 1]);
// returns the step's frames.
template <class Ctx>
std::uint32_t copy_windows(const Ctx& ctx, int groups, std::vector<std::int32_t>& codes,
                           std::vector<std::uint32_t>& first) {
  codes.clear();
  first.assign(1, 0);
  std::uint32_t frames = 0;
  for (const auto& p : ctx.payloads) {
    const auto* src = p.req->codes.data() + std::size_t(p.first) * groups;
    codes.insert(codes.end(), src, src + std::size_t(p.width) * groups);
    frames += p.width;
    first.push_back(frames);
  }
  return frames;
}

// Row i's Talker output: ints [i * talker_out_ints, (i + 1) * talker_out_ints) of the lease.
template <class Ctx, class Lease>
void lend_frames(const Ctx& ctx, const Lease& lease, int groups) {
  for (std::size_t i = 0; i < ctx.payloads.size(); ++i)
    ctx.payloads[i].req->talker_out = {lease.data + i * talker_out_ints(groups), lease.refs};
}

// Row i's audio: frames [first[i], first[i + 1]) of the lease, samples_per_frame samples each.
template <class Ctx, class Lease>
void lend_audio(const Ctx& ctx, const Lease& lease, const std::vector<std::uint32_t>& first, std::size_t spf) {
  for (std::size_t i = 0; i < ctx.payloads.size(); ++i)
    ctx.payloads[i].req->codec_out = {lease.data + std::size_t(first[i]) * spf, lease.refs};
}

struct talker_job {
  bool prefill = false;
  std::uint32_t rows = 0;
  std::vector<float> embeds;               // [tokens][hidden]
  std::vector<std::int32_t> history;       // every row's code-0 ids so far, row after row
  std::vector<std::uint32_t> history_at;   // [rows + 1] offsets into history
  std::vector<std::uint64_t> seeds;        // [rows]
  std::vector<std::uint32_t> frames;       // [rows] the frame each row makes
  step_plan plan;                          // the engine's plan buffers (valid until the step lands)
  std::int32_t* out = nullptr;             // [rows][groups + 1]
};

struct codec_job {
  std::uint32_t rows = 0;
  std::vector<std::int32_t> codes;         // every row's window, [frames][groups], row after row
  std::vector<std::uint32_t> first;        // [rows + 1] frame offsets into codes
  std::vector<float*> state;               // [rows] the row's state in the pool (in place)
  float* audio = nullptr;                  // [frames][samples_per_frame], rows in order
};

} // namespace detail

template <class Spec, class Backend>
class speech_forwards;

template <class Spec>
class speech_forwards<Spec, mstar::host_backend>
    : public detail::speech_steps<Spec, speech_forwards<Spec, mstar::host_backend>> {
  friend class detail::speech_steps<Spec, speech_forwards>;

public:
  using backend_type = mstar::host_backend;

  speech_forwards(backend_type& b, const talker_host& talker, const codec_decoder& codec, talker_sampling sampling,
                  speech_forward_options o)
      : backend_(&b), talker_(&talker), codec_(&codec), sampler_(talker.config(), sampling), o_(o),
        kv_(talker.kv_for(int(Spec::kv_blocks), 16)), groups_(talker.config().code_groups),
        frames_(b, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * talker_out_ints(groups_)),
        audio_(b, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * o_.max_window * codec.samples_per_frame()),
        talker_jobs_(b, o_.jobs), codec_jobs_(b, o_.jobs) {
    if (codec.state_layout().total > Spec::codec_state_floats)
      throw std::invalid_argument(
          "qwen3_tts::speech_forwards: the checkpoint's codec decoder carries " +
          std::to_string(codec.state_layout().total) + " floats of state per request, the compiled codec_state pool " +
          "holds " + std::to_string(Spec::codec_state_floats) + "; build a speech_model with a larger pool");
    if (codec.config().num_quantizers != groups_)
      throw std::invalid_argument("qwen3_tts::speech_forwards: the Talker makes frames of " + std::to_string(groups_) +
                                  " codes, the codec decodes " + std::to_string(codec.config().num_quantizers) +
                                  " codebooks; the checkpoint's two configs disagree");
    // Code 0 ranges over the Talker's vocabulary less its 1024 control ids, codes 1.. over the predictor's
    // vocabulary; a code the codebook lacks would fail its request at the codec, after its Talker steps ran.
    const auto& tc = talker.config();
    const int code0 = tc.talker.vocab - 1024, cb = codec.config().codebook_size;
    if (code0 > cb || tc.predictor.vocab > cb)
      throw std::invalid_argument(
          "qwen3_tts::speech_forwards: the Talker makes codes below " + std::to_string(code0) + " (codebook 0: "
          "config.json talker_config.vocab_size - 1024) and below " + std::to_string(tc.predictor.vocab) +
          " (code_predictor_config.vocab_size), the codec's codebooks hold " + std::to_string(cb) +
          " (speech_tokenizer/config.json decoder_config.codebook_size); the checkpoint's two configs disagree");
  }

  bool buffers_free() const { return frames_.all_free() && audio_.all_free(); }

private:
  template <class Ctx>
  void talker_step(const Ctx& ctx, bool prefill) {
    const auto& kv = ctx.template plan<typename Spec::KvCache>();
    const auto& at = ctx.template plan<typename Spec::Attention>();
    const auto& pos = ctx.template plan<typename Spec::Positions>();
    const auto& smp = ctx.template plan<typename Spec::Sampler>();
    const auto rows = static_cast<std::uint32_t>(ctx.payloads.size());
    const int hidden = talker_->config().talker.hidden;
    (prefill ? this->prefill_steps : this->decode_steps)++;

    auto& job = talker_jobs_.acquire();
    job.prefill = prefill;
    job.rows = rows;
    job.embeds.resize(std::size_t(pos.tokens) * hidden);
    job.history.clear();
    job.history_at.assign(1, 0);
    job.seeds.resize(rows);
    job.frames.resize(rows);
    std::size_t token = 0;
    for (std::uint32_t i = 0; i < rows; ++i) {
      const auto& r = *ctx.payloads[i].req;
      float* dst = job.embeds.data() + token * hidden;
      if (prefill) {
        std::copy(r.prompt.prefill.begin(), r.prompt.prefill.end(), dst);
        token += std::size_t(r.prompt.rows);
      } else { // the previous frame's 16 embeddings plus this step's text row
        talker_->decode_input(std::span<const std::int32_t>(r.codes.data() + std::size_t(r.decoded - 1) * groups_,
                                                            std::size_t(groups_)),
                              r.prompt.text_row(int(r.decoded) - 1), dst);
        token += 1;
      }
      for (std::uint32_t f = 0; f < r.decoded; ++f)
        job.history.push_back(r.codes[std::size_t(f) * groups_]);
      job.history_at.push_back(static_cast<std::uint32_t>(job.history.size()));
      job.seeds[i] = r.in.seed ? *r.in.seed : smp.host_rows[i].seed;
      job.frames[i] = r.decoded;
    }
    if (token != pos.tokens)
      throw std::logic_error("qwen3_tts::speech_forwards: the step's rows hold " + std::to_string(token) +
                             " tokens, its plans " + std::to_string(pos.tokens));
    job.plan = step_plan{{at.qo_indptr, kv.bucket + 1u},
                         {kv.page_indptr, kv.bucket + 1u},
                         {kv.page_indices, kv.pages},
                         {kv.last_page_len, kv.bucket},
                         {pos.positions, pos.tokens}};
    auto lease = frames_.acquire(rows, std::size_t(rows) * talker_out_ints(groups_));
    detail::lend_frames(ctx, lease, groups_);
    job.out = lease.data;
    backend_->enqueue(ctx.stream, [this, &job] { run_talker(job); });
    talker_jobs_.release(ctx.stream);
  }

  void run_talker(detail::talker_job& job) {
    if (job.prefill)
      talker_->prefill(job.embeds, job.plan, kv_, step_out_);
    else
      talker_->decode(job.embeds, job.plan, kv_, step_out_);
    const int vocab = talker_->config().talker.vocab;
    const int hidden = talker_->config().talker.hidden;
    // The plan's rows include padding; outputs are per padded row, the step's rows come first.
    codes_.assign(std::size_t(job.rows) * groups_, 0);
    hidden_.resize(std::size_t(job.rows) * hidden);
    for (std::uint32_t i = 0; i < job.rows; ++i) {
      std::span<float> logits(step_out_.logits.data() + std::size_t(i) * vocab, std::size_t(vocab));
      std::span<const std::int32_t> history(job.history.data() + job.history_at[i],
                                            job.history_at[i + 1] - job.history_at[i]);
      codes_[std::size_t(i) * groups_] = sampler_.pick_code0(logits, history, job.seeds[i], job.frames[i]);
      std::copy_n(step_out_.hidden.data() + std::size_t(i) * hidden, hidden, hidden_.data() + std::size_t(i) * hidden);
    }
    talker_->predict(hidden_, codes_, sampler_, std::span<const std::uint64_t>(job.seeds.data(), job.rows),
                     std::span<const std::uint32_t>(job.frames.data(), job.rows));
    const int eos = talker_->config().codec_eos;
    for (std::uint32_t i = 0; i < job.rows; ++i) {
      std::int32_t* out = job.out + std::size_t(i) * talker_out_ints(groups_);
      std::copy_n(codes_.data() + std::size_t(i) * groups_, groups_, out);
      out[groups_] = codes_[std::size_t(i) * groups_] == eos ? 1 : 0;
    }
  }

  template <class Ctx>
  void codec_step(const Ctx& ctx) {
    const auto& st = ctx.template plan<typename Spec::CodecState>();
    const auto rows = static_cast<std::uint32_t>(ctx.payloads.size());
    const auto& seg = st.segments[0];
    ++this->codec_steps;
    auto& job = codec_jobs_.acquire();
    job.rows = rows;
    const std::uint32_t frames = detail::copy_windows(ctx, groups_, job.codes, job.first);
    job.state.resize(rows);
    for (std::uint32_t i = 0; i < rows; ++i) {
      const std::int32_t slot = st.host_slots[i];
      if (slot <= 0)
        throw std::logic_error("qwen3_tts::speech_forwards: codec row " + std::to_string(i) + " has slot " +
                               std::to_string(slot) + "; a real row always holds a slot of its own");
      job.state[i] = seg.pool_layer + std::size_t(slot) * std::size_t(seg.state_elems);
    }
    this->codec_frames += frames;
    const std::size_t spf = codec_->samples_per_frame();
    auto lease = audio_.acquire(rows, std::size_t(frames) * spf);
    detail::lend_audio(ctx, lease, job.first, spf);
    job.audio = lease.data;
    backend_->enqueue(ctx.stream, [this, &job] { run_codec(job); });
    codec_jobs_.release(ctx.stream);
  }

  void run_codec(detail::codec_job& job) {
    const std::size_t spf = codec_->samples_per_frame(), n = codec_->state_layout().total;
    for (std::uint32_t i = 0; i < job.rows; ++i) {
      const std::size_t f0 = job.first[i], f1 = job.first[i + 1];
      codec_->decode_window(std::span<float>(job.state[i], n),
                            std::span<const std::int32_t>(job.codes.data() + f0 * groups_, (f1 - f0) * groups_),
                            std::span<float>(job.audio + f0 * spf, (f1 - f0) * spf));
    }
  }

  backend_type* backend_;
  const talker_host* talker_;
  const codec_decoder* codec_;
  talker_sampler sampler_;
  speech_forward_options o_;
  paged_kv kv_;   // the Talker's K/V, addressed by the kv_cache plan (chain stream only)
  int groups_;
  qwen3_tts::detail::output_pool<backend_type, std::int32_t> frames_;
  qwen3_tts::detail::output_pool<backend_type, float> audio_;
  detail::job_ring<backend_type, detail::talker_job> talker_jobs_;
  detail::job_ring<backend_type, detail::codec_job> codec_jobs_;
  talker_step_output step_out_;          // chain stream's scratch
  std::vector<std::int32_t> codes_;      // chain stream's scratch
  std::vector<float> hidden_;            // chain stream's scratch
};

} // namespace qwen3_tts::pipeline
