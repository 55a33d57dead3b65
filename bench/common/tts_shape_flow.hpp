// The flow the host benchmarks drive the worker with on qwen3_tts::Model, one copy for the worker
// benchmark and the allocation test (tests/worker/steady_allocs.cpp): the cost model's walk of a request
// (qwen3_tts::tts_walk: a prefill of prompt_tokens that emits the first frame, one decode step per further
// frame, a codec window every `window` frames, the last one shorter), with the prediction hook (a decode row
// continues unless it is the request's last frame). Nothing is computed, so what is measured is the
// worker's own cost. ended counts the requests that ended.
//
// A user that must see its hooks run (the allocation test marks the thread that runs start) derives
// and hides the hook; the worker calls the derived flow's hooks.
#pragma once

#include <mstar/worker.hpp>

#include "qwen3_tts/model.hpp"
#include "qwen3_tts/tts_walk.hpp"

#include <atomic>
#include <cstdint>

namespace mstar_bench {

struct tts_shape_flow {
  static constexpr std::uint32_t prompt_tokens = 16; // a prefill's tokens
  static constexpr std::uint32_t window = 8;         // frames a codec window covers
  static constexpr std::uint32_t ramp[1] = {window}; // one width, repeating
  static constexpr qwen3_tts::tts_nodes nodes =
      qwen3_tts::nodes_of<qwen3_tts::Model, qwen3_tts::TalkerPrefill, qwen3_tts::TalkerDecode, qwen3_tts::CodecChunk>;

  struct request_state : qwen3_tts::tts_walk {};
  using request_input = std::uint32_t; // frames
  struct payload {
    std::uint32_t width = 0;
  };

  void start(request_state& s, mstar::request_id, std::uint32_t frames) {
    s.prompt_tokens = prompt_tokens;
    s.frame_count = frames;
  }
  bool ready(request_state& s, std::uint8_t node, mstar::row& r, payload& p) {
    qwen3_tts::tts_walk::window w;
    if (!s.ready(nodes, node, r, ramp, w)) return false;
    p.width = w.width;
    return true;
  }
  bool landed(request_state& s, std::uint8_t node, const payload& p) { return s.landed(nodes, node, p.width); }
  bool finished(const request_state& s) const { return s.finished(); }
  bool continues(const request_state& s, std::uint8_t node, const payload&) const { return s.continues(nodes, node); }
  void end(request_state&, mstar::request_id, mstar::request_end) { ended.fetch_add(1, std::memory_order_release); }
  std::uint32_t batch_key(std::uint8_t node, const payload& p) const {
    return qwen3_tts::tts_walk::batch_key(nodes, node, p.width, true);
  }

  std::atomic<std::uint64_t> ended{0};
};

} // namespace mstar_bench
