// A single-threaded driver that walks requests through the Qwen3-TTS-shaped model with engine.run:
// prefill, decode steps, codec windows on a ramp, teardown. The tests and the step benchmark use it
// to run the same requests under different batchings (concurrency, row order, padding buckets,
// codec batching mode, codec stream) and compare the audio. It is not the worker: no threads, no
// pre-plan, every step synchronized before the next.
//
//   auto result = qwen3_tts::run_flow(engine, talker, codec, chain, lane, requests, options);
//   result.digests[id]   // 64-bit FNV-1a of request id's audio, chunk by chunk
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mstar/engine/engine.hpp>

#include "qwen3_tts/audio_hash.hpp"
#include "qwen3_tts/forward.hpp"
#include "qwen3_tts/model.hpp"
#include "qwen3_tts/tts_walk.hpp"

namespace qwen3_tts {

struct request_spec {
  mstar::request_id id = 0;
  std::uint32_t prompt_tokens = 16;
  std::uint32_t frames = 8; // frames the Talker emits: one at prefill, one per decode step
};

struct flow_options {
  std::uint32_t concurrency = 8;                  // requests live at once
  std::vector<std::uint32_t> buckets;             // decode padding buckets (sorted); empty: no padding
  std::vector<std::uint32_t> ramp = {1, 2, 4, 8}; // codec window widths in frames, the last repeats
  bool codec_step_per_width = true;               // one codec step per width; false: one step for every width
  bool reverse_rows = false;                      // rows in reverse order of admission
  bool codec_on_lane = true;                      // the codec on the lane stream; false: on the chain
  bool keep_audio = false;                        // keep every request's samples in the result
  // Called before a request's codec window (its index from 0) runs, every stream idle: tests use it
  // to disturb the request's state.
  std::function<void(const request_spec&, mstar::request_ref, std::uint32_t window)> before_window;
};

struct flow_result {
  std::map<mstar::request_id, audio_digest> digests;
  std::map<mstar::request_id, std::vector<std::int16_t>> audio; // with keep_audio
  std::map<mstar::request_id, std::vector<frame>> frames;       // with keep_audio
  std::uint64_t prefill_steps = 0, decode_steps = 0, codec_steps = 0, codec_rows = 0;
};

namespace detail {
template <class Backend, class T>
struct host_buffer { // pinned on CUDA
  host_buffer(Backend& b, std::size_t n) : backend(&b), data(static_cast<T*>(b.allocate_host(n * sizeof(T)))), size(n) {}
  ~host_buffer() { backend->free_host(data); }
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;
  std::span<T> span(std::size_t n) const { return {data, n}; }
  Backend* backend;
  T* data;
  std::size_t size;
};

inline void require(const mstar::step_outcome& o, const char* what) {
  if (!o) throw std::runtime_error(std::string("qwen3_tts::run_flow: the ") + what + " step did not run: " + o.message());
}
} // namespace detail

template <class Backend>
flow_result run_flow(mstar::engine<Model, Backend>& engine, talker<Backend>& talker, codec<Backend>& codec,
                     typename Backend::stream_type chain, typename Backend::stream_type lane,
                     std::span<const request_spec> requests, const flow_options& opt) {
  using prefill_step = mstar::chain_step<Model, TalkerPrefill>;
  using decode_step = mstar::chain_step<Model, TalkerDecode>;
  using codec_step = mstar::side_step<Model, CodecChunk>;
  constexpr tts_nodes nodes = nodes_of<Model, TalkerPrefill, TalkerDecode, CodecChunk>;
  if (opt.concurrency == 0 || opt.ramp.empty() || std::find(opt.ramp.begin(), opt.ramp.end(), 0u) != opt.ramp.end())
    throw std::invalid_argument("qwen3_tts::run_flow: concurrency must be at least 1 and the ramp's widths at least 1");
  auto& backend = engine.backend();
  const auto codec_stream = opt.codec_on_lane ? lane : chain;
  engine.template set_side_stream<CodecChunk>(codec_stream); // teardown of codec_state runs where the codec runs
  const std::uint32_t max_rows = engine.options().max_batch;
  detail::host_buffer<Backend, frame> frames_out(backend, max_rows);
  detail::host_buffer<Backend, std::int16_t> audio_out(backend, std::size_t(codec.config().max_frames) *
                                                                    synth::samples_per_frame);

  struct live : tts_walk {
    const request_spec* spec = nullptr;
    mstar::request_ref ref{};
    std::vector<frame> frames;
  };
  flow_result result;
  std::vector<live> active;
  std::size_t next = 0;
  std::vector<mstar::row> rows;
  std::vector<live*> who;

  auto order = [&] {
    if (opt.reverse_rows) {
      std::reverse(rows.begin(), rows.end());
      std::reverse(who.begin(), who.end());
    }
  };
  auto take_frames = [&](std::uint8_t node, std::size_t n) {
    backend.synchronize(chain);
    for (std::size_t i = 0; i < n; ++i) {
      who[i]->frames.push_back(frames_out.data[i]);
      who[i]->landed(nodes, node, 0);
    }
  };
  // The requests that have a row of `node` now, in rows and who.
  auto gather = [&](std::uint8_t node) {
    rows.clear();
    who.clear();
    for (auto& a : active) {
      mstar::row row{a.ref};
      tts_walk::window w;
      if (a.ready(nodes, node, row, opt.ramp, w)) {
        rows.push_back(row);
        who.push_back(&a);
      }
    }
    order();
  };

  while (next < requests.size() || !active.empty()) {
    // Admit: a prefill step for the requests that join.
    while (active.size() < opt.concurrency && next < requests.size()) {
      const auto& spec = requests[next++];
      if (spec.frames == 0 || spec.prompt_tokens == 0)
        throw std::invalid_argument("qwen3_tts::run_flow: request " + std::to_string(spec.id) +
                                    " asks for no frames or has an empty prompt");
      auto ref = engine.add_request(spec.id);
      if (!ref) throw std::runtime_error("qwen3_tts::run_flow: engine_options.max_requests is below the concurrency");
      auto& a = active.emplace_back();
      a.spec = &spec;
      a.ref = *ref;
      a.prompt_tokens = spec.prompt_tokens;
      a.frame_count = spec.frames;
    }
    gather(nodes.prefill);
    if (!rows.empty()) {
      detail::require(engine.run(prefill_step{rows}, chain,
                                 [&](const auto& ctx) { talker.prefill(ctx, frames_out.span(rows.size())); }),
                      "talker_prefill");
      ++result.prefill_steps;
      take_frames(nodes.prefill, rows.size());
    }
    // Decode: one frame for every request that wants more (those just prefilled included).
    gather(nodes.decode);
    if (!rows.empty()) {
      const auto bucket = mstar::bucket_for(static_cast<std::uint32_t>(rows.size()), opt.buckets);
      detail::require(engine.run(decode_step{rows, bucket}, chain,
                                 [&](const auto& ctx) { talker.decode(ctx, frames_out.span(rows.size())); }),
                      "talker_decode");
      ++result.decode_steps;
      take_frames(nodes.decode, rows.size());
    }
    // Codec: every request with a full window (or the rest of its audio) decodes it.
    std::map<std::uint32_t, std::vector<std::pair<live*, tts_walk::window>>> groups;
    for (auto& a : active) {
      mstar::row row{a.ref};
      tts_walk::window w;
      if (a.ready(nodes, nodes.codec, row, opt.ramp, w))
        groups[tts_walk::batch_key(nodes, nodes.codec, w.width, opt.codec_step_per_width)].push_back({&a, w});
    }
    if (opt.reverse_rows)
      for (auto& [w, g] : groups)
        std::reverse(g.begin(), g.end());
    for (auto& [key, group] : groups) {
      for (std::size_t first = 0; first < group.size(); first += max_rows) {
        const std::size_t n = std::min<std::size_t>(max_rows, group.size() - first);
        rows.clear();
        std::vector<codec_window> windows;
        for (std::size_t i = first; i < first + n; ++i) {
          auto [a, w] = group[i];
          if (opt.before_window) {
            backend.synchronize(chain);
            backend.synchronize(lane);
            opt.before_window(*a->spec, a->ref, a->chunks);
          }
          rows.push_back({a->ref});
          windows.push_back({a->frames.data() + w.first, w.width});
        }
        const auto samples = audio_samples(windows);
        detail::require(engine.run(codec_step{rows}, codec_stream,
                                   [&](const auto& ctx) { codec.chunk(ctx, windows, audio_out.span(samples)); }),
                        "codec_chunk");
        ++result.codec_steps;
        result.codec_rows += n;
        backend.synchronize(codec_stream);
        std::size_t offset = 0;
        for (std::size_t i = 0; i < n; ++i) {
          auto [a, w] = group[first + i];
          const std::span<const std::int16_t> chunk(audio_out.data + offset,
                                                    std::size_t(w.width) * synth::samples_per_frame);
          result.digests[a->spec->id].update(chunk);
          if (opt.keep_audio) {
            auto& keep = result.audio[a->spec->id];
            keep.insert(keep.end(), chunk.begin(), chunk.end());
          }
          offset += chunk.size();
          a->landed(nodes, nodes.codec, w.width);
        }
      }
    }
    // Teardown: requests whose audio is complete.
    for (auto it = active.begin(); it != active.end();) {
      if (it->finished()) {
        if (opt.keep_audio) result.frames[it->spec->id] = it->frames;
        engine.remove_request(it->ref, chain);
        it = active.erase(it);
      } else {
        ++it;
      }
    }
  }
  backend.synchronize(chain);
  backend.synchronize(lane);
  return result;
}

} // namespace qwen3_tts
