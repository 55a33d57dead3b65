// A request's walk through a Qwen3-TTS-shaped model, as the worker flow's hooks see it: a prefill row
// (the prompt; it emits the first frame), one decode row per further frame, and codec windows over the
// frames landed so far on a width ramp (the last width repeating; the last window takes what is left).
// The example's flow (tts_flow.hpp) and the worker tests' flow (tests/worker/tts_flow.hpp) both walk
// their requests with it, so the walk the tests check is the one the example runs.
//
//   struct request_state : qwen3_tts::tts_walk { ... };             // the flow's own data beside it
//   s.prompt_tokens = 24;  s.frame_count = 80;                      // at start
//   tts_walk::window w;
//   if (s.ready(nodes, node, row, ramp, w)) ...                     // ready hook: row.tokens set, w for a codec row
//   if (s.landed(nodes, node, p.width)) ...                         // landed hook: true for a chunk of audio
#pragma once

#include <cstdint>
#include <span>

#include <mstar/resources/step_view.hpp>

#include "qwen3_tts/step_io.hpp"

namespace qwen3_tts {

// The model's three nodes, by index.
struct tts_nodes {
  std::uint8_t prefill, decode, codec;
};
template <class Model, class Prefill, class Decode, class Codec>
inline constexpr tts_nodes nodes_of{Model::template node_index<Prefill>, Model::template node_index<Decode>,
                                    Model::template node_index<Codec>};

// Where a request is on its walk. Every hook runs on the worker's main thread.
struct tts_walk {
  struct window {
    std::uint32_t first = 0; // the window's first frame
    std::uint32_t width = 0; // frames in the window
  };

  std::uint32_t prompt_tokens = 0;
  std::uint32_t frame_count = 0; // frames the Talker emits: one at prefill, one per decode step
  std::uint32_t decoded = 0;     // frames landed (the prefill's included)
  std::uint32_t coded = 0;       // frames turned into audio
  std::uint32_t chunks = 0;      // codec windows landed

  bool prefilled() const { return decoded > 0; }
  bool talker_done() const { return decoded == frame_count; }

  // The ready hook's answer for `node`: whether the request has a row of it now, with the row's tokens
  // in `row` and, for a codec row, its window in `w`.
  bool ready(const tts_nodes& n, std::uint8_t node, mstar::row& row, std::span<const std::uint32_t> ramp,
             window& w) const {
    if (node == n.prefill) {
      if (prefilled()) return false;
      row.tokens = prompt_tokens;
      return true;
    }
    if (node == n.decode) {
      if (!prefilled() || talker_done()) return false;
      row.tokens = 1;
      return true;
    }
    if (node == n.codec) {
      const std::uint32_t width = detail::ramp_window(ramp, chunks, decoded, coded, talker_done());
      if (width == 0) return false;
      w = {coded, width};
      return true;
    }
    return false;
  }

  // The landed hook's bookkeeping for a row of `node` (a codec row's window `width` frames wide): true
  // when it was a chunk of audio for the client.
  bool landed(const tts_nodes& n, std::uint8_t node, std::uint32_t width) {
    if (node == n.prefill || node == n.decode) {
      ++decoded;
      return false;
    }
    coded += width;
    ++chunks;
    return true;
  }

  bool finished() const { return coded == frame_count; }

  // mstar::predicts_continuation: once this row's step lands, does the request at once have a row of
  // the same node again? A decode row does unless it decodes the last frame (the row decodes frame
  // `decoded`, counted when it lands); a prefill is never followed by another prefill.
  bool continues(const tts_nodes& n, std::uint8_t node) const {
    return node == n.decode && decoded + 1 < frame_count;
  }

  // batch_key: one codec step per window width when `per_width`; every other node, one key.
  static std::uint32_t batch_key(const tts_nodes& n, std::uint8_t node, std::uint32_t width, bool per_width) {
    return node == n.codec && per_width ? width : 0;
  }
};

} // namespace qwen3_tts
