// The split topology of the cost model (configs/qwen3tts_split.yaml): the Talker on worker gpu0, the
// codec alone on worker gpu1 (on its own chain), each a threaded_worker over its one-worker model with
// its own engine, threads and streams, joined by an edge that carries each Talker step's frames (16
// codes a row) into a ring on the codec's side. A request lives on both workers at once
// (mstar::worker_set): the codec's rows become ready as the Talker's frames arrive.
//
//   qwen3_tts::split_forwards<B> fwd(backend, talker, codec, forward_options, {.slots = 64});
//   auto arm = qwen3_tts::run_split_arm(backend, backend, talker, codec, engine_options, forward_options,
//                                       load_options);
//   arm.digests       // equal to run_arm's (the colocated model) for the same requests
//
// A frame's way: the Talker's decode forward writes the step's frames into an output buffer, sends
// them over the edge (one copy per step, on the edge's copy stream; the Talker's stream waits on it)
// and gives each row's request its ticket and row; when the step lands, the Talker flow's landed hook
// announces the frame to the request's frame_channel entry and wakes the request on the codec worker.
// The codec flow's ready hook sees the announced frames; the codec forward makes its stream wait on
// each ticket's event, copies the window's frames from the ring into the request's own frames, and
// releases those ring rows. Frames announced to a request that ended on the codec worker, or sent
// for a request that ended on the Talker before its step landed, are dropped, so every slot frees.
//
// The cost model's codec packs its windows on the host when it launches (codec_impl), so its forward
// waits for the gather (an event on its stream) before calling it; a codec that reads its frames on the
// device would read the ring slots in its kernel with no host wait.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <mstar/worker/edge.hpp>
#include <mstar/worker/topology.hpp>

#include "qwen3_tts/loadgen.hpp"
#include "qwen3_tts/tts_flow.hpp"

namespace qwen3_tts {

// clang-format off
using SplitGpu0  = mstar::worker<"gpu0", mstar::tp<1>, mstar::sp<1>, mstar::streams<1>, Talker>;
using CodecAlone = mstar::group<"Codec", CodecChunk>;                                  // no side lane: alone
using SplitGpu1  = mstar::worker<"gpu1", mstar::tp<1>, mstar::sp<1>, mstar::streams<1>, CodecAlone>;
using SplitModel = mstar::model<"qwen3_tts_split", SplitGpu0, SplitGpu1>;              // configs/qwen3tts_split.yaml
using TalkerWorkerModel = mstar::worker_model<SplitModel, 0>;
using CodecWorkerModel  = mstar::worker_model<SplitModel, 1>;
// clang-format on

namespace split {
inline constexpr std::uint8_t prefill_node = TalkerWorkerModel::node_index<TalkerPrefill>;
inline constexpr std::uint8_t decode_node = TalkerWorkerModel::node_index<TalkerDecode>;
inline constexpr std::uint8_t codec_node = CodecWorkerModel::node_index<CodecChunk>;
} // namespace split

// Where each of a request's frames is in the edge's ring, from the Talker's landed hook to the codec's
// forward. One mutex: a few short sections per row and step.
template <class Edge>
class frame_channel {
public:
  struct frame_ref {
    mstar::edge_ticket ticket;
    std::uint32_t row = 0;
  };
  explicit frame_channel(Edge& e) : edge_(&e) {}

  void open(mstar::request_id id, std::uint32_t frames) {
    std::lock_guard g(m_);
    auto& e = map_[id];
    e.refs.resize(frames);
  }
  // The Talker's landed hook: frame `k` of `id` is in the ring. Dropped when the codec side ended.
  void announce(mstar::request_id id, std::uint32_t k, frame_ref ref) {
    std::lock_guard g(m_);
    auto& e = map_.at(id);
    if (e.consumer_ended) {
      edge_->drop(ref.ticket, 1);
      return;
    }
    e.refs.at(k) = ref;
    e.announced = k + 1;
  }
  std::uint32_t announced(mstar::request_id id) {
    std::lock_guard g(m_);
    return map_.at(id).announced;
  }
  // The codec's forward: the refs of frames [first, first + width), marked consumed.
  template <class Out>
  void take(mstar::request_id id, std::uint32_t first, std::uint32_t width, Out&& out) {
    std::lock_guard g(m_);
    auto& e = map_.at(id);
    for (std::uint32_t k = first; k < first + width; ++k)
      out(k, e.refs[k]);
    e.consumed = first + width;
  }
  // The codec side ended: announced frames it did not consume are dropped.
  void close_consumer(mstar::request_id id) {
    std::lock_guard g(m_);
    auto it = map_.find(id);
    if (it == map_.end()) return;
    auto& e = it->second;
    for (std::uint32_t k = e.consumed; k < e.announced; ++k)
      edge_->drop(e.refs[k].ticket, 1);
    e.consumer_ended = true;
    if (e.producer_ended) map_.erase(it);
  }
  void close_producer(mstar::request_id id) {
    std::lock_guard g(m_);
    auto it = map_.find(id);
    if (it == map_.end()) return;
    it->second.producer_ended = true;
    if (it->second.consumer_ended) map_.erase(it);
  }
  std::size_t open_requests() {
    std::lock_guard g(m_);
    return map_.size();
  }

private:
  struct entry {
    std::vector<frame_ref> refs;
    std::uint32_t announced = 0, consumed = 0;
    bool consumer_ended = false, producer_ended = false;
  };
  Edge* edge_;
  std::mutex m_;
  std::unordered_map<mstar::request_id, entry> map_;
};

namespace detail {
struct talker_request {
  mstar::request_id id = 0;
  tts_request in{};
  std::uint32_t decoded = 0;
  bool prefilled = false;
  mailbox talker_out;             // the step's output buffer share (given back at landing or end)
  mstar::edge_ticket sent{};      // set by the forward: the ring slot of this row's frame
  std::uint32_t sent_row = 0;
};
struct codec_request {
  mstar::request_id id = 0;
  tts_request in{};
  std::vector<frame> frames; // gathered from the ring by the codec's forward
  std::uint32_t coded = 0, chunks = 0;
  mstar::metrics::nanos last_chunk = 0;
  mailbox codec_out;
  tts_result result;
};
} // namespace detail

struct talker_payload {
  detail::talker_request* req = nullptr;
};
struct codec_payload {
  detail::codec_request* req = nullptr;
  std::uint32_t first = 0, width = 0;
};

// The Talker's flow on gpu0: prefill, then a decode row per frame; each landed frame is announced.
template <class Edge>
class talker_flow {
public:
  struct request_state {
    std::unique_ptr<detail::talker_request> req;
  };
  using request_input = tts_request;
  using payload = talker_payload;

  talker_flow(Edge& e, frame_channel<Edge>& ch) : edge_(&e), channel_(&ch) {}
  std::function<void(mstar::request_id)> on_frame; // a frame was announced (wake the codec's request)
  std::function<void(mstar::request_id, mstar::request_end, std::string_view)> on_end;

  void start(request_state& s, mstar::request_id id, const tts_request& in) {
    s.req = std::make_unique<detail::talker_request>();
    s.req->id = id;
    s.req->in = in;
  }
  bool ready(request_state& s, std::uint8_t node, mstar::row& row, talker_payload& p) {
    auto& r = *s.req;
    p.req = &r;
    if (node == split::prefill_node && !r.prefilled) {
      row.tokens = r.in.prompt_tokens;
      return true;
    }
    if (node == split::decode_node && r.prefilled && r.decoded < r.in.frames) {
      row.tokens = 1;
      return true;
    }
    return false;
  }
  bool landed(request_state& s, std::uint8_t, const talker_payload&) {
    auto& r = *s.req;
    r.talker_out.release();
    channel_->announce(r.id, r.decoded++, {r.sent, r.sent_row});
    r.sent = {};
    r.prefilled = true;
    if (on_frame) on_frame(r.id);
    return false;
  }
  bool finished(const request_state& s) const { return s.req->decoded == s.req->in.frames; }
  bool continues(const request_state& s, std::uint8_t node, const talker_payload&) const {
    return node == split::decode_node && s.req->decoded + 1 < s.req->in.frames;
  }
  void end(request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    if (s.req) {
      s.req->talker_out.release();
      if (s.req->sent.valid()) edge_->drop(s.req->sent, 1); // sent by a step whose landing it did not see
      s.req.reset();
    }
    channel_->close_producer(id);
    if (on_end) on_end(id, how, why);
  }
  std::uint32_t batch_key(std::uint8_t, const talker_payload&) const { return 0; }

private:
  Edge* edge_;
  frame_channel<Edge>* channel_;
};

// The codec's flow on gpu1: a window once the frames it covers are announced, widths on the ramp.
template <class Edge>
class codec_flow {
public:
  struct request_state {
    std::unique_ptr<detail::codec_request> req;
  };
  using request_input = tts_request;
  using payload = codec_payload;

  codec_flow(frame_channel<Edge>& ch, tts_flow_options o) : channel_(&ch), o_(std::move(o)) {}
  std::function<void(mstar::request_id)> on_cancel_point;
  std::function<void(mstar::request_id, mstar::request_end, std::string_view)> on_end;

  void start(request_state& s, mstar::request_id id, const tts_request& in) {
    detail::start_request(s.req, id, in, on_cancel_point);
  }
  bool ready(request_state& s, std::uint8_t, mstar::row&, codec_payload& p) {
    auto& r = *s.req;
    const std::uint32_t announced = channel_->announced(r.id);
    const std::uint32_t w = qwen3_tts::detail::ramp_window(o_.ramp, r.chunks, announced, r.coded,
                                                            announced == r.in.frames);
    if (w == 0) return false;
    p = {&r, r.coded, w};
    return true;
  }
  bool landed(request_state& s, std::uint8_t, const codec_payload& p) {
    detail::land_chunk(*s.req, p.width, on_cancel_point);
    return true;
  }
  bool finished(const request_state& s) const { return s.req->coded == s.req->in.frames; }
  void end(request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    auto res = detail::end_result(s.req.get(), how, why); // how and why: the worker_set's, set by the caller
    s.req.reset();
    channel_->close_consumer(id);
    {
      std::lock_guard g(lock_);
      results_[id] = std::move(res);
    }
    if (on_end) on_end(id, how, why);
  }
  std::uint32_t batch_key(std::uint8_t, const codec_payload& p) const { return o_.codec_per_width ? p.width : 0; }

  std::map<mstar::request_id, tts_result>& results() { return results_; }
  std::mutex& results_lock() { return lock_; }

private:
  frame_channel<Edge>* channel_;
  tts_flow_options o_;
  std::mutex lock_;
  std::map<mstar::request_id, tts_result> results_;
};

// The forwards of both workers: the Talker's steps send their frames over the edge, the codec's
// steps gather theirs from it.
template <class Backend>
class split_forwards {
public:
  using edge_type = mstar::local_edge<Backend, frame>;

  // `tb`: the Talker worker's device, `cb`: the codec worker's (the same backend when they share one).
  split_forwards(Backend& tb, Backend& cb, talker<Backend>& t, codec<Backend>& c, forward_options o, edge_type& e,
                 frame_channel<edge_type>& ch)
      : talker_backend_(&tb), backend_(&cb), talker_(&t), codec_(&c), o_(std::move(o)), edge_(&e), channel_(&ch),
        frames_(tb, std::max(o_.buffers, 4u), o_.max_batch),
        audio_(cb, std::max(o_.buffers, 4u), std::size_t(o_.max_batch) * o_.max_window * synth::samples_per_frame),
        gathered_(cb.create_event()) {
    windows_.reserve(o_.max_batch);
    slots_.reserve(e.options().slots);
    moves_.reserve(std::size_t(o_.max_batch) * o_.max_window);
    staging_frames_ = e.options().slots * e.options().max_rows; // every slot at most once a step
    staging_ = static_cast<frame*>(cb.allocate_host(std::size_t(staging_frames_) * sizeof(frame)));
  }
  ~split_forwards() {
    backend_->destroy_event(gathered_);
    backend_->free_host(staging_);
  }
  split_forwards(const split_forwards&) = delete;
  split_forwards& operator=(const split_forwards&) = delete;

  template <class TalkerWorker, class CodecWorker>
  void install(TalkerWorker& w0, CodecWorker& w1) {
    w0.template forward<TalkerPrefill>([this](const auto& ctx) { talker_step(ctx, talker_phase::prefill); });
    w0.template forward<TalkerDecode>([this](const auto& ctx) { talker_step(ctx, talker_phase::decode); });
    w1.template forward<CodecChunk>([this](const auto& ctx) { codec_step(ctx); });
  }

  std::uint64_t prefill_steps = 0, decode_steps = 0, decode_rows = 0, decode_padded_rows = 0, codec_steps = 0,
                codec_rows = 0;
  mstar::metrics::nanos send_ns = 0; // host time in edge sends (backpressure waits included)
  std::function<void(mstar::request_id)> fault; // split_options::talker_fault
  bool buffers_free() const { return frames_.all_free() && audio_.all_free(); }

private:
  template <class Ctx>
  void talker_step(const Ctx& ctx, talker_phase phase) {
    current(*talker_backend_);
    auto in = talker_inputs_of(ctx);
    if (phase == talker_phase::decode) {
      ++decode_steps;
      decode_rows += in.rows;
      decode_padded_rows += in.bucket;
    } else {
      ++prefill_steps;
    }
    if (fault)
      for (std::uint32_t i = 0; i < in.rows; ++i)
        fault(ctx.payloads[i].req->id);
    auto lease = frames_.acquire(in.rows, in.rows);
    talker_->forward(ctx.stream, in, std::span<frame>(lease.data, in.rows), phase);
    const auto t0 = mstar::metrics::now_ns();
    const auto ticket = edge_->send(ctx.stream, lease.data, in.rows);
    send_ns += mstar::metrics::now_ns() - t0;
    for (std::uint32_t i = 0; i < in.rows; ++i) {
      auto& r = *ctx.payloads[i].req;
      r.talker_out = {lease.data + i, lease.refs};
      r.sent = ticket;
      r.sent_row = i;
    }
  }

  template <class Ctx>
  void codec_step(const Ctx& ctx) {
    // The step's frames come from a few ring slots (one per Talker step they were made in): each slot
    // is copied once, after the codec's stream waited on its event, into pinned staging; its rows are
    // released once, after the copy. The frames are then picked on the host (the cost model's codec
    // packs its windows on the host when it launches).
    current(*backend_);
    slots_.clear();
    moves_.clear();
    windows_.clear();
    std::uint32_t total = 0, staged = 0;
    for (const auto& p : ctx.payloads) {
      auto& r = *p.req;
      channel_->take(r.id, p.first, p.width, [&](std::uint32_t k, const auto& ref) {
        auto it = std::find_if(slots_.begin(), slots_.end(),
                               [&](const slot_read& s) { return s.ticket.sequence == ref.ticket.sequence; });
        if (it == slots_.end()) {
          if (staged + ref.ticket.rows > staging_frames_)
            throw std::logic_error("qwen3_tts::split_forwards: a codec step reads more ring rows than its staging "
                                   "holds; raise the edge's slots or max_rows together with forward_options");
          const frame* slot = edge_->receive(ctx.stream, ref.ticket);
          backend_->copy_to_host(staging_ + staged, slot, ref.ticket.rows * sizeof(frame), ctx.stream);
          edge_->note_read(ctx.stream, ref.ticket);
          slots_.push_back({ref.ticket, staged, 0});
          staged += ref.ticket.rows;
          it = slots_.end() - 1;
        }
        ++it->rows_read;
        moves_.push_back({&r.frames[k], it->offset + ref.row});
      });
      windows_.push_back({r.frames.data() + p.first, p.width});
      total += p.width;
    }
    for (const auto& s : slots_)
      edge_->release(ctx.stream, s.ticket, s.rows_read);
    backend_->record(gathered_, ctx.stream);
    backend_->synchronize(gathered_);
    for (const auto& m : moves_)
      *m.to = staging_[m.from];
    const auto [lease, samples] = detail::lease_audio(audio_, ctx.payloads, total);
    ++codec_steps;
    codec_rows += ctx.payloads.size();
    codec_->chunk(ctx, std::span<const codec_window>(windows_), std::span<std::int16_t>(lease.data, samples));
  }

  // Two workers on two devices: each step's thread makes its worker's device current before it launches.
  static void current(Backend& b) {
    if constexpr (requires { b.make_current(); }) b.make_current();
  }

  Backend* talker_backend_; // the Talker worker's device
  Backend* backend_;        // the codec worker's device (the edge's consumer side)
  talker<Backend>* talker_;
  codec<Backend>* codec_;
  forward_options o_;
  edge_type* edge_;
  frame_channel<edge_type>* channel_;
  detail::output_pool<Backend, frame> frames_;
  detail::output_pool<Backend, std::int16_t> audio_;
  typename Backend::event_type gathered_;
  std::vector<codec_window> windows_;   // codec worker's GPU thread
  struct slot_read {
    mstar::edge_ticket ticket;
    std::uint32_t offset = 0, rows_read = 0; // where its rows are in staging_; rows this step reads
  };
  struct frame_move {
    frame* to = nullptr;
    std::uint32_t from = 0;
  };
  std::vector<slot_read> slots_;  // the ring slots the codec step reads (codec worker's GPU thread)
  std::vector<frame_move> moves_; // staging -> each request's frames
  std::uint32_t staging_frames_ = 0;
  frame* staging_ = nullptr;      // pinned on CUDA: the slots' rows, copied device to host
};

} // namespace qwen3_tts

namespace qwen3_tts {

struct split_options {
  mstar::edge_options edge{.slots = 64, .max_rows = 0, .name = "talker->codec frames"}; // max_rows 0: max_batch
  mstar::worker_options talker_worker{}, codec_worker{};
  // Called by the Talker's forward for each row's request before it launches; a throw fails the step
  // (tests: a failure on gpu0 must reach the request on gpu1).
  std::function<void(mstar::request_id)> talker_fault;
};

// One arm of the split topology: the same requests, load and figures as run_arm, on two workers: the
// Talker's over `tb` (its device; `tk` built on it), the codec's over `cb` (`cd` built on it). The same
// backend for both shares its device (the host backend must: one ordering checker sees both workers).
// Checks afterwards that every pool of both engines, every edge slot and every output buffer is back.
template <class Backend>
arm_result run_split_arm(Backend& tb, Backend& cb, talker<Backend>& tk, codec<Backend>& cd,
                         const mstar::engine_options& eo, const forward_options& fo, const load_options& lo,
                         split_options so = {}) {
  using edge_type = mstar::local_edge<Backend, frame>;
  using W0 = mstar::threaded_worker<TalkerWorkerModel, Backend, talker_flow<edge_type>>;
  using W1 = mstar::threaded_worker<CodecWorkerModel, Backend, codec_flow<edge_type>>;
  arm_result out;
  const auto index = begin_arm(out, lo, eo);

  if (so.edge.max_rows == 0) so.edge.max_rows = eo.max_batch;
  if constexpr (mstar::timing_backend<Backend>) so.edge.time_copies = true;
  edge_type edge(cb, so.edge, &tb);
  frame_channel<edge_type> channel(edge);
  {
    mstar::engine<TalkerWorkerModel, Backend> e0(tb, eo);
    mstar::engine<CodecWorkerModel, Backend> e1(cb, eo);
    talker_flow<edge_type> f0(edge, channel);
    codec_flow<edge_type> f1(channel, lo.flow);
    split_forwards<Backend> fwd(tb, cb, tk, cd, fo, edge, channel);
    fwd.fault = so.talker_fault;

    auto& o0 = so.talker_worker;
    o0.lane = mstar::lane_mode::off;
    o0.nodes.resize(TalkerWorkerModel::descriptor.nodes.size());
    if (lo.prefill_waits()) {
      o0.nodes[split::prefill_node].min_batch = lo.prefill_min_batch;
      o0.nodes[split::prefill_node].max_wait = lo.prefill_max_wait;
    }
    o0.nodes[split::decode_node].buckets = decode_buckets(fo, eo);
    auto& o1 = so.codec_worker;
    o1.lane = mstar::lane_mode::off;
    o1.nodes.resize(CodecWorkerModel::descriptor.nodes.size());
    o1.nodes[split::codec_node].batch = mstar::batching::per_key;
    if (lo.trace.empty()) o0.trace_events = o1.trace_events = 0;
    W0 w0(e0, f0, o0);
    W1 w1(e1, f1, o1);
    fwd.install(w0, w1);
    mstar::worker_set<W0, W1> set(w0, w1);

    client_events ev;
    f0.on_end = [&](mstar::request_id id, mstar::request_end how, std::string_view why) { set.ended(0, id, how, why); };
    f1.on_end = [&](mstar::request_id id, mstar::request_end how, std::string_view why) { set.ended(1, id, how, why); };
    f0.on_frame = [&](mstar::request_id id) { set.template wake<1>(id); };
    f1.on_cancel_point = [&](mstar::request_id id) { ev.cancel_point(id); };
    std::map<mstar::request_id, std::pair<mstar::request_end, std::string>> outcome;
    std::mutex outcome_lock;
    set.on_end = [&](mstar::request_id id, mstar::request_end how, std::string_view why) {
      {
        std::lock_guard g(outcome_lock);
        outcome[id] = {how, std::string(why)};
      }
      ev.end(id);
    };
    struct client {
      mstar::worker_set<W0, W1>* set;
      frame_channel<edge_type>* channel;
      void submit(mstar::request_id id, const tts_request& in) {
        channel->open(id, in.frames);
        set->submit(id, in, in);
      }
      void cancel(mstar::request_id id) { set->cancel(id); }
      void wait_idle() { set->wait_idle(); }
      void stop() { set->stop(); }
    } cl{&set, &channel};
    set.start();
    const auto clock = drive_clients(cl, out.plan, lo, nullptr, ev);
    auto results = std::move(f1.results());
    for (auto& [id, r] : results) { // the request's end over both workers
      const auto& [how, why] = outcome.at(id);
      r.how = how;
      r.why = why;
    }
    tally(out, std::move(results), index, clock);
    out.prefill_steps = fwd.prefill_steps;
    out.decode_steps = fwd.decode_steps;
    out.decode_rows = fwd.decode_rows;
    out.decode_padded_rows = fwd.decode_padded_rows;
    out.codec_steps = fwd.codec_steps;
    out.codec_rows = fwd.codec_rows;
    for (const auto* k : {&w0.counters(), &w1.counters()}) {
      out.refusals += k->refusals.load();
      out.failed_steps += k->failed_steps.load();
      out.parked += k->parked.load();
    }
    out.summary = w0.summary();
    out.buffers_free = fwd.buffers_free();
    out.pools_full = check_pools(out, e0) & check_pools(out, e1);
    if (channel.open_requests() != 0) {
      out.pools_full = false;
      out.pools_why += std::to_string(channel.open_requests()) + " requests still in the frame channel; ";
    }
    // Before the workers' streams go: a slot's last read may still be landing after stop().
    cb.synchronize(edge.copy_stream());
    auto free = edge.slots_free();
    for (int i = 0; i < 1000 && free != so.edge.slots; ++i, free = edge.slots_free())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (free != so.edge.slots) {
      out.pools_full = false;
      out.pools_why += "the edge has " + std::to_string(free) + " of " + std::to_string(so.edge.slots) + " slots free; ";
    }
    out.edge_sends = edge.sends();
    out.edge_full_waits = edge.full_waits();
    out.edge_send_us_mean = out.edge_sends ? double(fwd.send_ns) / double(out.edge_sends) / 1e3 : 0.0;
    const auto copies = edge.copy_time();
    out.edge_copy_us_mean = copies.mean_ns() / 1e3;
    out.edge_copy_us_max = double(copies.max_ns) / 1e3;
    out.edge_copies_unmeasured = copies.unmeasured;
  }
  return out;
}

} // namespace qwen3_tts
