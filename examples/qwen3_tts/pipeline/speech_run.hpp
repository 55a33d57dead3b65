// Runs requests of the real Qwen3-TTS through mstar's engine and threaded worker: the driver behind
// `qwen3tts synth` and the end-to-end tests. A fresh engine and worker per call, over the caller's Talker and
// codec decoder (their weights outlive calls). run_speech runs the host backend; run_speech_cuda
// (speech_forwards_cuda.hpp) the CUDA Talker through the same run_speech_with.
//
//   auto out = qwen3_tts::pipeline::run_speech<host_speech>(talker, codec, requests, {.lane = mstar::lane_mode::on});
//   out.results[1].codes / .audio / .how
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/worker.hpp>

#include "speech_flow.hpp"
#include "speech_forwards.hpp"

namespace qwen3_tts::pipeline {

struct speech_run_options {
  mstar::lane_mode lane = mstar::lane_mode::on;
  speech_flow_options flow{.keep_audio = true};
  talker_sampling sampling{};
  std::uint64_t seed = 0;          // engine_options.sampler_seed: mixed with each request's id into its seed
  std::uint32_t max_batch = 16;    // rows of a step
  std::uint32_t concurrency = 0;   // requests live at once (0: all of them)
  bool codec_graphs = false;       // speech_forward_options::codec_graphs (the CUDA codec's steps from graphs)
  codec_wait_options codec_wait{}; // the codec node's batching across time (none by default)
  // Cancel request id after it received this many audio chunks (0: before its first, at submit).
  std::map<mstar::request_id, std::uint32_t> cancel_after_chunks;
};

struct speech_run_result {
  std::map<mstar::request_id, speech_result> results;
  std::uint64_t prefill_steps = 0, decode_steps = 0, codec_steps = 0;
  bool buffers_free = false;       // every output buffer came back (nothing held past its request's end)
  // After the worker stopped: what the engine's pools hold free, and their sizes.
  std::uint32_t kv_free_blocks = 0, kv_blocks = 0, codec_free_slots = 0, codec_slots = 0;
  std::uint32_t talker_free_slots = 0, talker_slots = 0;
};

// requests[i] gets id i + 1. make_forwards(backend, forward_options) gives the forward functions (a
// unique_ptr to speech_forwards<Spec, Backend>); max_tokens bounds a step's tokens (a prefill step's prompts).
template <class Spec, class Backend, class MakeForwards>
speech_run_result run_speech_with(Backend& backend, const talker_host& talker, const codec_decoder& codec,
                                  const std::vector<speech_request>& requests, const speech_run_options& o,
                                  std::uint32_t max_tokens, MakeForwards&& make_forwards) {
  using Flow = speech_flow<Spec>;
  using Worker = mstar::threaded_worker<typename Spec::Model, Backend, Flow>;
  mstar::engine_options eo;
  eo.max_batch = o.max_batch;
  eo.max_requests = std::max<std::uint32_t>(64, o.max_batch);
  eo.max_tokens = max_tokens;
  eo.sampler_seed = o.seed;
  mstar::engine<typename Spec::Model, Backend> engine(backend, eo);
  Flow flow(talker, o.flow);
  flow.set_samples_per_frame(codec.samples_per_frame());
  speech_forward_options fo;
  fo.max_batch = o.max_batch;
  fo.max_window = flow.widest_window();
  fo.codec_graphs = o.codec_graphs;
  auto fwd_owner = make_forwards(backend, fo);
  auto& fwd = *fwd_owner;

  mstar::worker_options wo;
  wo.lane = o.lane;
  wo.nodes.resize(Spec::Model::descriptor.nodes.size());
  wo.nodes[Spec::codec_node].batch = mstar::batching::per_key; // the flow's batch_key: per width or all widths
  o.codec_wait.apply(wo.nodes[Spec::codec_node]);
  wo.trace_events = 0;
  Worker worker(engine, flow, wo);
  fwd.install(worker);

  std::mutex m;
  std::condition_variable cv;
  std::deque<mstar::request_id> ended, to_cancel;
  std::map<mstar::request_id, std::uint32_t> chunks;
  flow.on_chunk = [&](mstar::request_id id, std::span<const float>) {
    const auto it = o.cancel_after_chunks.find(id);
    if (it != o.cancel_after_chunks.end() && ++chunks[id] == it->second) {
      std::lock_guard g(m);
      to_cancel.push_back(id);
      cv.notify_one();
    }
  };
  flow.on_end = [&](mstar::request_id id, const speech_result&) {
    std::lock_guard g(m);
    ended.push_back(id);
    cv.notify_one();
  };

  const std::uint32_t limit = o.concurrency ? o.concurrency : static_cast<std::uint32_t>(requests.size());
  worker.start();
  try {
    std::size_t next = 0, done = 0;
    std::uint32_t live = 0;
    while (done < requests.size()) {
      while (live < limit && next < requests.size()) {
        auto in = requests[next];
        in.submitted = mstar::metrics::now_ns();
        const mstar::request_id id = next + 1;
        worker.submit(id, in);
        const auto it = o.cancel_after_chunks.find(id);
        if (it != o.cancel_after_chunks.end() && it->second == 0) worker.cancel(id);
        ++live;
        ++next;
      }
      std::deque<mstar::request_id> e, c;
      {
        std::unique_lock g(m);
        cv.wait_for(g, std::chrono::milliseconds(50), [&] { return !ended.empty() || !to_cancel.empty(); });
        e.swap(ended);
        c.swap(to_cancel);
      }
      for (auto id : c)
        worker.cancel(id);
      live -= static_cast<std::uint32_t>(e.size());
      done += e.size();
    }
    worker.wait_idle();
  } catch (...) {
    worker.stop();
    throw;
  }
  worker.stop();
  speech_run_result out;
  out.results = std::move(flow.results());
  out.prefill_steps = fwd.prefill_steps;
  out.decode_steps = fwd.decode_steps;
  out.codec_steps = fwd.codec_steps;
  out.buffers_free = fwd.buffers_free();
  out.kv_free_blocks = engine.template resource<typename Spec::KvCache>().free_blocks();
  out.kv_blocks = Spec::kv_blocks;
  out.codec_free_slots = engine.template resource<typename Spec::CodecState>().free_count();
  out.codec_slots = engine.template resource<typename Spec::CodecState>().capacity();
  out.talker_free_slots = engine.template resource<typename Spec::TalkerState>().free_count();
  out.talker_slots = engine.template resource<typename Spec::TalkerState>().capacity();
  return out;
}

template <class Spec>
speech_run_result run_speech(const talker_host& talker, const codec_decoder& codec,
                             const std::vector<speech_request>& requests, const speech_run_options& o = {}) {
  mstar::host_backend backend;
  // a prefill row is a whole prompt: refuse none the KV cache holds
  return run_speech_with<Spec>(backend, talker, codec, requests, o, std::uint32_t(Spec::kv_tokens),
                               [&](mstar::host_backend& b, const speech_forward_options& fo) {
                                 return std::make_unique<speech_forwards<Spec, mstar::host_backend>>(
                                     b, talker, codec, o.sampling, fo);
                               });
}

} // namespace qwen3_tts::pipeline
