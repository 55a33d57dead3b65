// The real Qwen3-TTS request walk under mstar::threaded_worker: a prompt's prefill, one frame of codes per
// decode step until the end token or the frame limit, and the codec's audio windows on a width ramp beside
// the chain. Hooks run on the worker's main thread; batch_key on its GPU thread.
//
//   qwen3_tts::pipeline::speech_flow<Spec> flow(talker, {.ramp = {1, 2, 4, 8}});
//   flow.on_chunk = [](mstar::request_id id, std::span<const float> audio) { ... };  // as each window lands
//   mstar::threaded_worker<typename Spec::Model, Backend, speech_flow<Spec>> w(engine, flow, options);
//   w.submit(id, {.prompt = {...}, .max_frames = 600});
//
// A frame is the Talker's code 0 and the code predictor's 15 codes, made by one step (prefill makes the
// first). A step whose code 0 is the end token ends the Talker's part of the request: that frame is not
// audio. The codec then decodes what is left, however short the ramp's next width.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <mstar/worker.hpp>
#include <mstar/worker/metrics.hpp>

#include "qwen3_tts/step_io.hpp"
#include "talker.hpp"

namespace qwen3_tts::pipeline {

// What a client submits.
struct speech_request {
  talker_prompt prompt;
  std::uint32_t max_frames = 4095;          // the Talker stops here if the end token has not come
  mstar::metrics::nanos submitted = 0;      // the client's submit time (first-audio latency starts here)
  // The request's sampler seed; unset: the engine's seed mixed with the request's id (the sampler's own).
  // A server sets it so that a request's audio does not depend on the id it happened to get.
  std::optional<std::uint64_t> seed;
  // The prompt's rows, built already from `prompt` (speech_service::submit builds them on the caller's thread, so
  // that a request's text projection is not computed on the worker's main thread, one request after another);
  // null: the flow builds them when the request starts.
  std::shared_ptr<const built_prompt> built;
};

// What the flow keeps of an ended request.
struct speech_result {
  mstar::request_end how = mstar::request_end::failed;
  std::string why;                          // a failed request's reason
  std::vector<std::int32_t> codes;          // [frames][code_groups]
  std::uint32_t frames = 0;                 // frames the Talker made (the end token's step not counted)
  bool ended_by_token = false;              // the end token came (else the frame limit, or an abort)
  std::uint32_t chunks = 0;                 // audio windows delivered
  std::uint64_t samples = 0;                // audio samples delivered
  std::vector<float> audio;                 // every sample, when speech_flow_options::keep_audio
  mstar::metrics::nanos submitted = 0, first_audio = -1, ended = 0;
  std::vector<mstar::metrics::nanos> gaps;  // between consecutive audio chunks
};

struct speech_flow_options {
  std::vector<std::uint32_t> ramp = {1, 2, 4, 8}; // codec window widths in frames; the last repeats
  bool codec_per_width = true;  // batch_key: one codec step per width; false: one step for every width
  bool keep_audio = false;      // keep every sample in the result (tests, the synth command)
  bool keep_results = true;     // keep each ended request's result in results(); a long-lived service that
                                // reads them in on_end turns this off so the map does not grow forever
};

// The codec's batching across time (the worker's node_options::min_batch and max_wait on codec_chunk): while the
// chain has work, a codec window waits until min_batch windows of its width are ready or it has waited max_wait;
// with the chain idle it runs at once, and at a load whose windows come more than max_wait apart it never waits.
// A request's first window never waits (speech_flow::urgent: it is the first audio). A CUDA codec step's cost is
// mostly fixed at a few rows, so fewer, fuller steps leave the chain more time. min_batch 0 or 1 (the default): no
// wait. Measured on an H100 before first windows were exempt (docs/benchmarks.md): 8 windows and 10 ms gave +7-16 %
// audio throughput at c = 16 and 64 with lane auto, +1-6 % with lane on, for about 10 ms more first audio at c = 16.
struct codec_wait_options {
  std::uint32_t min_batch = 0;
  std::chrono::microseconds max_wait{10000};

  // Onto the codec node's options.
  void apply(mstar::node_options& node) const {
    node.min_batch = min_batch;
    node.max_wait = max_wait;
  }
};

namespace detail {

// A request's data, owned by its request_state (a stable address for the payloads that point to it).
struct live_speech {
  mstar::request_id id = 0;
  speech_request in;
  built_prompt prompt;               // the prefill's rows and the trailing text rows, built at start
  std::vector<std::int32_t> codes;   // [max_frames][groups], reserved at start: the GPU thread reads earlier
                                     // frames while the main thread appends, so it never reallocates
  std::uint32_t decoded = 0, coded = 0, chunks = 0;
  bool prefilled = false, talker_done = false;
  mstar::metrics::nanos last_chunk = 0;
  qwen3_tts::detail::mailbox talker_out, codec_out; // written by the forward (GPU thread) before launch
  speech_result result;
};

} // namespace detail

// What a row carries to its forward.
struct speech_payload {
  detail::live_speech* req = nullptr;
  std::uint32_t first = 0; // codec: the window's first frame
  std::uint32_t width = 0; // codec: frames in the window
};

// A Talker row's output: the frame's codes, then 1 when code 0 was the end token (the frame is not audio).
inline std::size_t talker_out_ints(int groups) { return std::size_t(groups) + 1; }

template <class Spec>
class speech_flow {
public:
  struct request_state {
    std::unique_ptr<detail::live_speech> req;
  };
  using request_input = speech_request;
  using payload = speech_payload;

  speech_flow(const talker_host& talker, speech_flow_options o = {}) : talker_(&talker), o_(std::move(o)) {
    if (o_.ramp.empty() || std::find(o_.ramp.begin(), o_.ramp.end(), 0u) != o_.ramp.end())
      throw std::invalid_argument("qwen3_tts::speech_flow: the ramp is empty or has a width of 0; give widths >= 1");
  }

  // Main thread, must not block: audio as each window lands, and a request's end.
  std::function<void(mstar::request_id, std::span<const float>)> on_chunk;
  std::function<void(mstar::request_id, const speech_result&)> on_end;
  // Main thread, must not block: the worker admitted the request (it holds a request index from here on).
  std::function<void(mstar::request_id)> on_start;

  void start(request_state& s, mstar::request_id id, const speech_request& in) {
    if (in.max_frames == 0)
      throw std::invalid_argument("qwen3_tts::speech_flow: request " + std::to_string(id) +
                                  " asks for at most 0 frames; give max_frames >= 1");
    auto r = std::make_unique<detail::live_speech>();
    r->id = id;
    r->in = in;
    // Throws for an unknown speaker or language: the request fails.
    r->prompt = in.built ? *in.built : talker_->build_prompt(in.prompt);
    r->in.built.reset();
    // Each frame after the first adds a token to the request's KV: past the cache's capacity it could never be
    // given its last frames, and its code buffer (reserved whole, below) could ask for gigabytes.
    if (std::uint64_t(r->prompt.rows) + in.max_frames > Spec::kv_tokens)
      throw std::invalid_argument("qwen3_tts::speech_flow: request " + std::to_string(id) + " asks for max_frames " +
                                  std::to_string(in.max_frames) + " after a prompt of " +
                                  std::to_string(r->prompt.rows) + " tokens; the KV cache holds " +
                                  std::to_string(Spec::kv_tokens) + " tokens a request: give max_frames <= " +
                                  std::to_string(Spec::kv_tokens - std::min<std::uint64_t>(r->prompt.rows,
                                                                                           Spec::kv_tokens)));
    r->codes.reserve(std::size_t(in.max_frames) * groups());
    r->result.submitted = in.submitted;
    s.req = std::move(r);
    if (on_start) on_start(id);
  }

  bool ready(request_state& s, std::uint8_t node, mstar::row& row, speech_payload& p) {
    auto& r = *s.req;
    p.req = &r;
    if (node == Spec::prefill_node) {
      if (r.prefilled) return false;
      row.tokens = static_cast<std::uint32_t>(r.prompt.rows);
      return true;
    }
    if (node == Spec::decode_node) {
      if (!r.prefilled || r.talker_done) return false;
      row.tokens = 1;
      return true;
    }
    if (node == Spec::codec_node) {
      const std::uint32_t w = window(r);
      if (w == 0) return false;
      p.first = r.coded;
      p.width = w;
      return true;
    }
    return false;
  }

  bool landed(request_state& s, std::uint8_t node, const speech_payload& p) {
    auto& r = *s.req;
    if (node == Spec::prefill_node || node == Spec::decode_node) {
      const auto* out = static_cast<const std::int32_t*>(r.talker_out.at);
      const int g = groups();
      if (out[g] != 0) {
        r.talker_done = true;
        r.result.ended_by_token = true;
      } else {
        r.codes.insert(r.codes.end(), out, out + g);
        if (++r.decoded == r.in.max_frames) r.talker_done = true;
      }
      r.talker_out.release();
      r.prefilled = true;
      return false;
    }
    // codec_chunk: one window of audio for the client.
    const auto now = mstar::metrics::now_ns();
    const auto* audio = static_cast<const float*>(r.codec_out.at);
    const std::size_t n = std::size_t(p.width) * samples_per_frame_;
    if (on_chunk) on_chunk(r.id, std::span<const float>(audio, n));
    if (o_.keep_audio) r.result.audio.insert(r.result.audio.end(), audio, audio + n);
    r.codec_out.release();
    r.coded += p.width;
    ++r.chunks;
    r.result.samples += n;
    if (r.result.first_audio < 0)
      r.result.first_audio = now;
    else
      r.result.gaps.push_back(now - r.last_chunk);
    r.last_chunk = now;
    return true;
  }

  bool finished(const request_state& s) const { return s.req->talker_done && s.req->coded == s.req->decoded; }

  // A decode row continues unless it makes the request's last allowed frame (the end token cannot be
  // foreseen: a staged step for a request that stopped is dropped by the worker).
  bool continues(const request_state& s, std::uint8_t node, const speech_payload&) const {
    const auto& r = *s.req;
    return node == Spec::decode_node && r.decoded + 1 < r.in.max_frames;
  }

  void end(request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    speech_result res;
    if (s.req) { // a request cancelled before it started has no data
      auto& r = *s.req;
      r.talker_out.release(); // shares of steps whose landing this request no longer saw
      r.codec_out.release();
      res = std::move(r.result);
      res.codes = std::move(r.codes);
      res.frames = r.decoded;
      res.chunks = r.chunks;
      s.req.reset();
    }
    res.how = how;
    res.why = std::string(why);
    res.ended = mstar::metrics::now_ns();
    if (on_end) on_end(id, res);
    if (!o_.keep_results) return;
    std::lock_guard g(lock_);
    results_[id] = std::move(res);
  }

  std::uint32_t batch_key(std::uint8_t node, const speech_payload& p) const {
    return node == Spec::codec_node && o_.codec_per_width ? p.width : 0;
  }
  // A request's first codec window never waits for the codec's batch (the codec's wait, speech_service_options::
  // codec_wait): it is the request's first audio.
  bool urgent(std::uint8_t node, const speech_payload& p) const { return node == Spec::codec_node && p.first == 0; }

  void set_samples_per_frame(std::size_t n) { samples_per_frame_ = n; }
  int groups() const { return talker_->config().code_groups; }
  const speech_flow_options& options() const { return o_; }
  std::uint32_t widest_window() const { return *std::max_element(o_.ramp.begin(), o_.ramp.end()); }

  // Results of ended requests (read after wait_idle, or under results_lock()).
  std::map<mstar::request_id, speech_result>& results() { return results_; }
  std::mutex& results_lock() { return lock_; }

private:
  // The next window's width: the ramp's, or what is left once the Talker is done; 0 while the frames it
  // covers are not all made yet.
  std::uint32_t window(const detail::live_speech& r) const {
    return qwen3_tts::detail::ramp_window(o_.ramp, r.chunks, r.decoded, r.coded, r.talker_done);
  }

  const talker_host* talker_;
  speech_flow_options o_;
  std::size_t samples_per_frame_ = 1920;
  std::mutex lock_;
  std::map<mstar::request_id, speech_result> results_;
};

} // namespace qwen3_tts::pipeline
