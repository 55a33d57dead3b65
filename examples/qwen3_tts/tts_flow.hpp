// The Qwen3-TTS worker flow: a request's walk through the model under mstar::threaded_worker
// (prefill -> one decode frame per step -> codec windows on a width ramp), and the forward functions
// that drive forward.hpp's talker and codec from the worker's steps, on the host or CUDA backend.
//
//   qwen3_tts::tts_flow flow({.ramp = {2, 4, 8, 16}, .codec_per_width = true});
//   qwen3_tts::tts_forwards<Backend> fwd(backend, talker, codec, {.max_batch = 128, .max_window = 16});
//   mstar::threaded_worker<qwen3_tts::Model, Backend, qwen3_tts::tts_flow> w(engine, flow, options);
//   fwd.install(w, flow);
//   w.start();  w.submit(id, {.prompt_tokens = 24, .frames = 80, .submitted = mstar::metrics::now_ns()});
//   w.wait_idle();  w.stop();
//   flow.results()[id].digest      // 64-bit FNV-1a of the request's audio (audio_hash.hpp)
//
// How outputs reach a request. A step's forward writes its outputs in row order into a buffer of its
// own (pinned host memory on CUDA: the talker's frames, the codec's samples), taken from a small pool
// on the GPU thread; before launching, it tells each row's request where its output will be (the
// request's mailbox). When the step lands, the flow's landed hook (main thread) copies the frame, or
// hashes the audio chunk, and gives its share of the buffer back; a request that ends with a share
// still held (cancelled or failed while its row was in a step) gives it back in end(). So a buffer is
// reused only after every row's request has read it or ended, and the forward never allocates.
//
// Determinism. A row's payload depends on its request's state only (its frames so far, its window
// index); the frames come from the sampler (seed = the engine's sampler_seed mixed with the request
// id, step, position), the audio from the request's own codec_state slot; so the audio bytes do not
// depend on the lane mode, the codec batching, the concurrency or on other requests' cancellation,
// and equal those of the single-threaded run_flow (flow.hpp) for the same requests.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <mstar/worker.hpp>
#include <mstar/worker/metrics.hpp>

#include "qwen3_tts/audio_hash.hpp"
#include "qwen3_tts/forward.hpp"
#include "qwen3_tts/model.hpp"
#include "qwen3_tts/step_io.hpp"
#include "qwen3_tts/tts_walk.hpp"

namespace qwen3_tts {

inline constexpr std::uint8_t prefill_node = Model::node_index<TalkerPrefill>;
inline constexpr std::uint8_t decode_node = Model::node_index<TalkerDecode>;
inline constexpr std::uint8_t codec_node = Model::node_index<CodecChunk>;
inline constexpr tts_nodes nodes = nodes_of<Model, TalkerPrefill, TalkerDecode, CodecChunk>;

// What a client submits.
struct tts_request {
  std::uint32_t prompt_tokens = 16;
  std::uint32_t frames = 8;               // frames the Talker emits: one at prefill, one per decode step
  std::uint32_t cancel_after_chunks = ~0u; // tell the client (on_cancel_point) once this many chunks landed
  mstar::metrics::nanos submitted = 0;     // the client's submit time (first-audio latency starts here)
};

// What the flow keeps of an ended request.
struct tts_result {
  mstar::request_end how = mstar::request_end::failed;
  audio_digest digest;
  std::uint32_t frames = 0, chunks = 0;
  mstar::metrics::nanos submitted = 0, first_audio = -1, ended = 0;
  std::vector<mstar::metrics::nanos> gaps; // between consecutive audio chunks, at the flow's landed hook
  struct chunk {
    mstar::metrics::nanos at = 0; // when it landed (the flow's landed hook)
    std::uint32_t frames = 0;     // its width
  };
  std::vector<chunk> chunk_log; // every audio chunk, in order (the load generator's steady-state window)
  std::string why;              // a failed request's reason (the worker's end hook)
};

namespace detail {

// A request's data, owned by its request_state (a stable address for the payloads that point to it),
// beside its walk.
struct live_request : tts_walk {
  mstar::request_id id = 0;
  tts_request in{};
  std::vector<frame> frames; // sized at start: the codec reads frames the main thread no longer writes
  mstar::metrics::nanos last_chunk = 0;
  mailbox talker_out, codec_out; // written by the forward (GPU thread) before the step's launch
  tts_result result;
};

// A request's data at its start (frames sized: the codec reads them where the main thread no longer
// writes); the client told at once when it asked to be cancelled before any chunk.
template <class Request, class CancelPoint>
void start_request(std::unique_ptr<Request>& p, mstar::request_id id, const tts_request& in,
                   const CancelPoint& on_cancel_point) {
  p = std::make_unique<Request>();
  auto& r = *p;
  r.id = id;
  r.in = in;
  r.frames.resize(in.frames);
  r.result.submitted = in.submitted;
  r.result.frames = in.frames;
  if (in.cancel_after_chunks == 0 && on_cancel_point) on_cancel_point(id);
}

// A codec chunk of `width` frames landed for request r (its codec_out share), already counted in r.coded
// and r.chunks: its audio hashed, the share given back, the chunk's time and gap recorded, the client
// told at its cancel point.
template <class Request, class CancelPoint>
void deliver_chunk(Request& r, std::uint32_t width, const CancelPoint& on_cancel_point) {
  const auto now = mstar::metrics::now_ns();
  r.result.digest.update(
      {static_cast<const std::int16_t*>(r.codec_out.at), std::size_t(width) * synth::samples_per_frame});
  r.codec_out.release();
  if (r.result.first_audio < 0)
    r.result.first_audio = now;
  else
    r.result.gaps.push_back(now - r.last_chunk);
  r.last_chunk = now;
  r.result.chunk_log.push_back({now, width});
  if (r.chunks == r.in.cancel_after_chunks && on_cancel_point) on_cancel_point(r.id);
}

// The same for a request that keeps its own counts (the split flow's).
template <class Request, class CancelPoint>
void land_chunk(Request& r, std::uint32_t width, const CancelPoint& on_cancel_point) {
  r.coded += width;
  ++r.chunks;
  deliver_chunk(r, width, on_cancel_point);
}

// What the flow keeps of a request that ended (r null: cancelled before it started); gives back the
// audio share of a codec step whose landing it did not see.
template <class Request>
tts_result end_result(Request* r, mstar::request_end how, std::string_view why) {
  tts_result res;
  if (r) {
    r->codec_out.release();
    res = std::move(r->result);
    res.chunks = r->chunks;
  }
  res.how = how;
  res.why = std::string(why);
  res.ended = mstar::metrics::now_ns();
  return res;
}

// A codec step's audio buffer: each row's request told where its window's samples will be.
template <class Pool, class Payloads>
auto lease_audio(Pool& pool, const Payloads& payloads, std::uint32_t frames) {
  const std::size_t samples = std::size_t(frames) * synth::samples_per_frame;
  auto lease = pool.acquire(static_cast<std::uint32_t>(payloads.size()), samples);
  std::size_t offset = 0;
  for (const auto& p : payloads) {
    p.req->codec_out = {lease.data + offset, lease.refs};
    offset += std::size_t(p.width) * synth::samples_per_frame;
  }
  return std::pair{lease, samples};
}

} // namespace detail

// What a row carries to its forward: its request, and for a codec row its window.
struct tts_payload {
  detail::live_request* req = nullptr;
  std::uint32_t first = 0; // codec: the window's first frame
  std::uint32_t width = 0; // codec: frames in the window
};

struct tts_flow_options {
  std::vector<std::uint32_t> ramp = {1, 2, 4, 8}; // codec window widths in frames; the last repeats
  bool codec_per_width = true; // batch_key: one codec step per width; false: one step for every width
};

// The flow (mstar::worker_flow). Hooks run on the worker's main thread, batch_key on its GPU thread.
class tts_flow {
public:
  struct request_state {
    std::unique_ptr<detail::live_request> req;
  };
  using request_input = tts_request;
  using payload = tts_payload;

  explicit tts_flow(tts_flow_options o = {}) : o_(std::move(o)) {
    if (o_.ramp.empty() || std::find(o_.ramp.begin(), o_.ramp.end(), 0u) != o_.ramp.end())
      throw std::invalid_argument("qwen3_tts::tts_flow: the ramp is empty or has a width of 0; give widths >= 1");
  }

  // Called (main thread) when a request that asked for it reached its cancel point, and when a
  // request ended; both must not block.
  std::function<void(mstar::request_id)> on_cancel_point, on_end;

  void start(request_state& s, mstar::request_id id, const tts_request& in) {
    if (in.frames == 0 || in.prompt_tokens == 0)
      throw std::invalid_argument("qwen3_tts::tts_flow: request " + std::to_string(id) +
                                  " asks for no frames or has an empty prompt");
    detail::start_request(s.req, id, in, on_cancel_point);
    s.req->prompt_tokens = in.prompt_tokens;
    s.req->frame_count = in.frames;
  }

  bool ready(request_state& s, std::uint8_t node, mstar::row& row, tts_payload& p) {
    auto& r = *s.req;
    p.req = &r;
    tts_walk::window w;
    if (!r.ready(nodes, node, row, o_.ramp, w)) return false;
    p.first = w.first;
    p.width = w.width;
    return true;
  }

  bool landed(request_state& s, std::uint8_t node, const tts_payload& p) {
    auto& r = *s.req;
    if (node == prefill_node || node == decode_node) { // a frame from the Talker
      r.frames[r.decoded] = *static_cast<const frame*>(r.talker_out.at);
      r.talker_out.release();
    }
    if (!r.landed(nodes, node, p.width)) return false;
    detail::deliver_chunk(r, p.width, on_cancel_point); // one chunk of audio for the client
    return true;
  }

  bool finished(const request_state& s) const { return s.req->finished(); }

  // mstar::predicts_continuation (tts_walk::continues): the worker stages the decode node's next step
  // from these answers while the current one runs.
  bool continues(const request_state& s, std::uint8_t node, const tts_payload&) const {
    return s.req->continues(nodes, node);
  }

  void end(request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    if (s.req) s.req->talker_out.release(); // a share of a step whose landing this request no longer saw
    auto res = detail::end_result(s.req.get(), how, why); // (no data when cancelled before it started)
    s.req.reset();
    {
      std::lock_guard g(lock_);
      results_[id] = std::move(res);
    }
    if (on_end) on_end(id);
  }

  std::uint32_t batch_key(std::uint8_t node, const tts_payload& p) const {
    return tts_walk::batch_key(nodes, node, p.width, o_.codec_per_width);
  }

  // Results of ended requests (read after wait_idle, or under results_lock()).
  std::map<mstar::request_id, tts_result>& results() { return results_; }
  std::mutex& results_lock() { return lock_; }
  const tts_flow_options& options() const { return o_; }
  std::uint32_t widest_window() const { return *std::max_element(o_.ramp.begin(), o_.ramp.end()); }

  // Digests of the requests that completed.
  std::map<mstar::request_id, audio_digest> digests() {
    std::lock_guard g(lock_);
    std::map<mstar::request_id, audio_digest> out;
    for (const auto& [id, r] : results_)
      if (r.how == mstar::request_end::completed) out[id] = r.digest;
    return out;
  }

private:
  tts_flow_options o_;
  std::mutex lock_;
  std::map<mstar::request_id, tts_result> results_;
};

static_assert(mstar::worker_flow<tts_flow>);
static_assert(mstar::predicts_continuation<tts_flow>);

// Device time stamps around each step's launches (the CUDA example brackets them with timing events;
// the host backend has none): begin/end on the step's stream, from the GPU thread.
struct step_timeline {
  virtual ~step_timeline() = default;
  virtual void begin(std::uint8_t node, void* stream, std::uint32_t rows) = 0;
  virtual void end(std::uint8_t node, void* stream) = 0;
  virtual void arm(bool on) = 0; // record only while armed (the measured part of a run)
};

struct forward_options {
  std::uint32_t max_batch = 64;             // rows of a step (engine_options.max_batch)
  std::uint32_t max_window = 8;             // widest codec window (the ramp's widest)
  std::uint32_t buffers = 16;               // output buffers per kind: >= the worker's step_records + 2
  std::vector<std::uint32_t> decode_buckets; // talker_decode's padding buckets (CUDA graphs); empty: none.
                                             // The worker pads to them: run_arm sets the decode node's buckets
};

// The forward functions of the three nodes, with their output pools and step counters.
template <class Backend>
class tts_forwards {
public:
  tts_forwards(Backend& b, talker<Backend>& t, codec<Backend>& c, forward_options o)
      : talker_(&t), codec_(&c), o_(std::move(o)), frames_(b, std::max(o_.buffers, 4u), o_.max_batch),
        audio_(b, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * o_.max_window * synth::samples_per_frame) {
    windows_.reserve(o_.max_batch);
    std::sort(o_.decode_buckets.begin(), o_.decode_buckets.end());
  }

  template <class Worker>
  void install(Worker& w) {
    w.template forward<TalkerPrefill>([this](const auto& ctx) { talker_step(ctx, talker_phase::prefill); });
    w.template forward<TalkerDecode>([this](const auto& ctx) { talker_step(ctx, talker_phase::decode); });
    w.template forward<CodecChunk>([this](const auto& ctx) { codec_step(ctx); });
  }

  step_timeline* timeline = nullptr;

  // Steps launched (GPU thread; read after the worker stopped).
  std::uint64_t prefill_steps = 0, decode_steps = 0, codec_steps = 0, codec_rows = 0, codec_frames = 0;
  std::uint64_t decode_rows = 0, decode_padded_rows = 0;
  bool buffers_free() const { return frames_.all_free() && audio_.all_free(); }

private:
  template <class Ctx>
  void talker_step(const Ctx& ctx, talker_phase phase) {
    auto in = talker_inputs_of(ctx);
    if (phase == talker_phase::decode) {
      // The worker pads the step to the decode node's buckets (worker_options: node_options::buckets,
      // set from decode_buckets by run_arm), so the bucket is the step's own and part of the staged
      // step's identity; padding rows address the sink and write nothing the rows read.
      if (!o_.decode_buckets.empty() && in.bucket != mstar::bucket_for(in.rows, o_.decode_buckets))
        throw std::logic_error("qwen3_tts::tts_forwards: a decode step of " + std::to_string(in.rows) +
                               " rows has bucket " + std::to_string(in.bucket) + ", not one of decode_buckets; give the "
                               "worker's talker_decode node_options::buckets the same buckets");
      ++decode_steps;
      decode_rows += in.rows;
      decode_padded_rows += in.bucket;
    } else {
      ++prefill_steps;
    }
    auto lease = frames_.acquire(in.rows, in.rows);
    for (std::uint32_t i = 0; i < in.rows; ++i)
      ctx.payloads[i].req->talker_out = {lease.data + i, lease.refs};
    const auto node = phase == talker_phase::decode ? decode_node : prefill_node;
    if (timeline) timeline->begin(node, stream_handle(ctx.stream), in.rows);
    talker_->forward(ctx.stream, in, std::span<frame>(lease.data, in.rows), phase);
    if (timeline) timeline->end(node, stream_handle(ctx.stream));
  }

  template <class Ctx>
  void codec_step(const Ctx& ctx) {
    windows_.clear();
    std::uint32_t total = 0;
    for (const auto& p : ctx.payloads) {
      windows_.push_back({p.req->frames.data() + p.first, p.width});
      total += p.width;
    }
    const auto [lease, samples] = detail::lease_audio(audio_, ctx.payloads, total);
    ++codec_steps;
    codec_rows += ctx.payloads.size();
    codec_frames += total;
    if (timeline) timeline->begin(codec_node, stream_handle(ctx.stream), static_cast<std::uint32_t>(ctx.payloads.size()));
    codec_->chunk(ctx, std::span<const codec_window>(windows_), std::span<std::int16_t>(lease.data, samples));
    if (timeline) timeline->end(codec_node, stream_handle(ctx.stream));
  }

  template <class S>
  static void* stream_handle(S s) {
    if constexpr (requires { s.handle; })
      return static_cast<void*>(s.handle);
    else
      return nullptr;
  }

  talker<Backend>* talker_;
  codec<Backend>* codec_;
  forward_options o_;
  detail::output_pool<Backend, frame> frames_;
  detail::output_pool<Backend, std::int16_t> audio_;
  std::vector<codec_window> windows_; // GPU thread
};

} // namespace qwen3_tts
