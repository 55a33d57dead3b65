// A long-lived Qwen3-TTS service on the host backend: one engine, one threaded worker, one flow and its
// forward functions, started once, taking requests from any thread until it is destroyed. Each request has its
// own audio and end callbacks (run on the worker's main thread: they must not block). The server behind
// `qwen3tts serve` is one of these; run_speech (speech_run.hpp) stays the one-shot driver of synth and tests.
//
//   speech_service<host_speech> svc(talker, codec, {.sampling = sampling_from(dir), .max_live = 16});
//   auto id = svc.submit(req, {.on_chunk = [](std::span<const float> a) {...}, .on_end = [](auto& r) {...}});
//   svc.cancel(id);   // from any thread; the request ends as cancelled, its slot and KV blocks go back
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include <mstar/backend/host.hpp>
#include <mstar/engine.hpp>
#include <mstar/worker.hpp>

#include "speech_flow.hpp"
#include "speech_forwards.hpp"

namespace qwen3_tts::pipeline {

struct speech_service_options {
  mstar::lane_mode lane = mstar::lane_mode::on;
  std::vector<std::uint32_t> ramp = {1, 2, 4, 8};
  talker_sampling sampling{};
  std::uint32_t max_batch = 16; // rows of a step
  // Requests the engine holds at once (a request index each); more wait in the worker's backlog. At most the
  // codec pool's slots less its sink, so that an admitted request never waits for a codec slot with its KV
  // blocks held.
  std::uint32_t max_live = 16;
};

// Per-request callbacks; either may be empty.
struct speech_callbacks {
  std::function<void(std::span<const float>)> on_chunk;
  std::function<void(const speech_result&)> on_end;
};

// Counts since the service started, and what is in flight now.
struct speech_service_counts {
  std::uint64_t submitted = 0, completed = 0, cancelled = 0, failed = 0;
  std::uint32_t live = 0;   // admitted by the worker and not ended
  std::uint32_t queued = 0; // submitted, not admitted yet, not ended
};

template <class Spec>
class speech_service {
  using Flow = speech_flow<Spec>;
  using Worker = mstar::threaded_worker<typename Spec::Model, mstar::host_backend, Flow>;

public:
  speech_service(const talker_host& talker, const codec_decoder& codec, const speech_service_options& o = {})
      : o_(o), engine_(backend_, engine_options_of(o)),
        flow_(talker, speech_flow_options{.ramp = o.ramp, .keep_audio = false, .keep_results = false}),
        fwd_(backend_, talker, codec, o.sampling, forward_options_of(o, flow_)) {
    flow_.set_samples_per_frame(codec.samples_per_frame());
    flow_.on_start = [this](mstar::request_id id) {
      std::lock_guard g(lock_);
      if (auto it = calls_.find(id); it != calls_.end()) it->second.started = true;
    };
    flow_.on_chunk = [this](mstar::request_id id, std::span<const float> audio) {
      std::function<void(std::span<const float>)>* f = nullptr;
      {
        std::lock_guard g(lock_);
        if (auto it = calls_.find(id); it != calls_.end()) f = &it->second.cb.on_chunk;
      }
      // The entry is erased only by on_end, on this same thread: f stays valid through the call.
      if (f && *f) (*f)(audio);
    };
    flow_.on_end = [this](mstar::request_id id, const speech_result& r) {
      speech_callbacks cb;
      {
        std::lock_guard g(lock_);
        auto it = calls_.find(id);
        if (it == calls_.end()) return;
        cb = std::move(it->second.cb);
        calls_.erase(it);
        if (r.how == mstar::request_end::completed)
          ++counts_.completed;
        else if (r.how == mstar::request_end::cancelled)
          ++counts_.cancelled;
        else
          ++counts_.failed;
      }
      if (cb.on_end) cb.on_end(r);
    };
    mstar::worker_options wo;
    wo.lane = o.lane;
    wo.nodes.resize(Spec::Model::descriptor.nodes.size());
    wo.nodes[Spec::codec_node].batch = mstar::batching::per_key;
    wo.trace_events = 0;
    worker_.emplace(engine_, flow_, wo);
    fwd_.install(*worker_);
    worker_->start();
  }
  speech_service(const speech_service&) = delete;
  speech_service& operator=(const speech_service&) = delete;
  ~speech_service() {
    // Live requests end as cancelled (their callbacks run) before the worker stops.
    std::vector<mstar::request_id> ids;
    {
      std::lock_guard g(lock_);
      for (const auto& [id, c] : calls_)
        ids.push_back(id);
    }
    for (auto id : ids)
      worker_->cancel(id);
    try {
      worker_->wait_idle();
    } catch (...) {
    }
    worker_->stop();
  }

  // Any thread. The request's id; its callbacks run on the worker's main thread.
  mstar::request_id submit(speech_request in, speech_callbacks cb) {
    mstar::request_id id;
    {
      std::lock_guard g(lock_);
      id = ++last_id_;
      calls_[id] = call{std::move(cb), false};
      ++counts_.submitted;
    }
    in.submitted = mstar::metrics::now_ns();
    worker_->submit(id, std::move(in));
    return id;
  }
  // Any thread; a request that already ended is left alone.
  void cancel(mstar::request_id id) {
    {
      std::lock_guard g(lock_);
      if (!calls_.count(id)) return;
    }
    worker_->cancel(id);
  }

  speech_service_counts counts() const {
    std::lock_guard g(lock_);
    speech_service_counts c = counts_;
    for (const auto& [id, x] : calls_)
      (x.started ? c.live : c.queued)++;
    return c;
  }
  std::uint32_t kv_free_blocks() const { return engine_.template resource<typename Spec::KvCache>().free_blocks(); }
  std::uint32_t kv_blocks() const { return Spec::kv_blocks; }
  std::uint32_t codec_free_slots() const { return engine_.template resource<typename Spec::CodecState>().free_count(); }
  std::uint32_t codec_slots() const { return engine_.template resource<typename Spec::CodecState>().capacity(); }
  const Worker& worker() const { return *worker_; }
  const speech_service_options& options() const { return o_; }

private:
  struct call {
    speech_callbacks cb;
    bool started = false;
  };
  static mstar::engine_options engine_options_of(const speech_service_options& o) {
    if (o.max_live == 0 || o.max_live + 1 > Spec::codec_slots)
      throw std::invalid_argument("qwen3_tts::speech_service: max_live " + std::to_string(o.max_live) +
                                  " is outside 1.." + std::to_string(Spec::codec_slots - 1) +
                                  " (the codec pool's slots less its sink)");
    mstar::engine_options eo;
    eo.max_batch = o.max_batch;
    eo.max_requests = o.max_live;
    eo.max_tokens = std::uint32_t(Spec::kv_tokens); // a prefill row is a whole prompt: refuse none the KV cache holds
    return eo;
  }
  static speech_forward_options forward_options_of(const speech_service_options& o, const Flow& flow) {
    speech_forward_options fo;
    fo.max_batch = o.max_batch;
    fo.max_window = flow.widest_window();
    return fo;
  }

  speech_service_options o_;
  mstar::host_backend backend_;
  mutable mstar::engine<typename Spec::Model, mstar::host_backend> engine_; // its pools' counts are read locked
  Flow flow_;
  speech_forwards<Spec, mstar::host_backend> fwd_;
  std::optional<Worker> worker_;
  mutable std::mutex lock_;
  std::map<mstar::request_id, call> calls_;
  mstar::request_id last_id_ = 0;
  speech_service_counts counts_;
};

} // namespace qwen3_tts::pipeline
