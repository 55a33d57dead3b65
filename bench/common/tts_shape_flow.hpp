// The flow the host benchmarks drive the worker with on qwen3_tts::Model, one copy for the worker
// benchmark and the allocation test (tests/worker/steady_allocs.cpp): a prefill of prompt_tokens, one
// decode step per frame, then a codec window every `window` frames (the last one shorter), with the
// prediction hook (a decode row continues unless it is the request's last frame). Nothing is
// computed, so what is measured is the worker's own cost. ended counts the requests that ended.
//
// A user that must see its hooks run (the allocation test marks the thread that runs start) derives
// and hides the hook; the worker calls the derived flow's hooks.
#pragma once

#include <mstar/worker.hpp>

#include "qwen3_tts/model.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace mstar_bench {

struct tts_shape_flow {
  static constexpr std::uint32_t prompt_tokens = 16; // a prefill's tokens
  static constexpr std::uint32_t window = 8;         // frames a codec window covers
  static constexpr std::uint8_t prefill = qwen3_tts::Model::node_index<qwen3_tts::TalkerPrefill>;
  static constexpr std::uint8_t decode = qwen3_tts::Model::node_index<qwen3_tts::TalkerDecode>;
  static constexpr std::uint8_t codec = qwen3_tts::Model::node_index<qwen3_tts::CodecChunk>;

  struct request_state {
    std::uint32_t frames = 0, decoded = 0, coded = 0;
    bool prefilled = false;
  };
  using request_input = std::uint32_t; // frames
  struct payload {
    std::uint32_t width = 0;
  };

  void start(request_state& s, mstar::request_id, std::uint32_t frames) { s.frames = frames; }
  bool ready(request_state& s, std::uint8_t node, mstar::row& r, payload& p) {
    if (node == prefill) {
      r.tokens = prompt_tokens;
      return !s.prefilled;
    }
    if (node == decode) return s.prefilled && s.decoded < s.frames;
    if (node == codec) {
      p.width = std::min(window, s.frames - s.coded);
      return p.width > 0 && s.decoded - s.coded >= p.width;
    }
    return false;
  }
  bool landed(request_state& s, std::uint8_t node, const payload& p) {
    if (node == prefill) s.prefilled = true;
    if (node == decode) ++s.decoded;
    if (node == codec) s.coded += p.width;
    return node == codec;
  }
  bool finished(const request_state& s) const { return s.prefilled && s.coded == s.frames; }
  bool continues(const request_state& s, std::uint8_t node, const payload&) const {
    return node == decode && s.decoded + 1 < s.frames;
  }
  void end(request_state&, mstar::request_id, mstar::request_end) { ended.fetch_add(1, std::memory_order_release); }
  std::uint32_t batch_key(std::uint8_t, const payload& p) const { return p.width; }

  std::atomic<std::uint64_t> ended{0};
};

} // namespace mstar_bench
