// What the host and the GPU tests of the Qwen3-TTS-shaped example share: the requests, the batchings
// they are run under, and a run on a fresh engine of either backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qwen3_tts/flow.hpp"

namespace example_test {

// Requests of different prompt lengths and audio lengths, so that they join and leave at different
// times and the codec sees windows of several widths in one pass.
inline std::vector<qwen3_tts::request_spec> requests(std::uint32_t n = 6, std::uint32_t base_frames = 5) {
  std::vector<qwen3_tts::request_spec> out;
  for (std::uint32_t i = 0; i < n; ++i)
    out.push_back({1000 + 17 * i, 8 + 5 * (i % 4), base_frames + (i * 3) % 9});
  return out;
}

struct batching {
  std::string name;
  qwen3_tts::flow_options options;
};

// The same requests under batchings that change every batch composition, row index, padding
// bucket, codec window cut, codec batching mode and codec stream.
inline std::vector<batching> batchings() {
  std::vector<batching> out;
  auto add = [&](std::string name, auto&& edit) {
    qwen3_tts::flow_options o;
    edit(o);
    out.push_back({std::move(name), std::move(o)});
  };
  add("one at a time, codec on the lane, one step per width", [](auto& o) { o.concurrency = 1; });
  add("all at once, rows reversed, buckets 8/16, one codec step for every width, codec on the chain", [](auto& o) {
    o.concurrency = 16;
    o.reverse_rows = true;
    o.buckets = {8, 16};
    o.codec_step_per_width = false;
    o.codec_on_lane = false;
  });
  add("three at a time, bucket 4, another ramp, one codec step for every width", [](auto& o) {
    o.concurrency = 3;
    o.buckets = {4};
    o.ramp = {3, 1, 5};
    o.codec_step_per_width = false;
  });
  add("two at a time, rows reversed, bucket 64, windows of one frame", [](auto& o) {
    o.concurrency = 2;
    o.reverse_rows = true;
    o.buckets = {64};
    o.ramp = {1};
  });
  return out;
}

inline mstar::engine_options engine_options(std::uint32_t max_batch = 64) {
  mstar::engine_options o;
  o.max_batch = max_batch;
  o.max_tokens = 1024;
  o.max_requests = 64;
  o.max_labels = 1;
  o.sampler_seed = 7;
  return o;
}

// A backend with its chain and lane streams, and the model's forward objects (which outlive engines:
// their steps' streams must outlive them too).
template <class Backend>
struct rig {
  rig(Backend& b, qwen3_tts::talker_config t, qwen3_tts::codec_config c)
      : backend(b), chain(b.create_stream()), lane(b.create_stream(mstar::stream_priority::high)), talker(b, t),
        codec(b, c) {}
  ~rig() {
    backend.synchronize(chain);
    backend.synchronize(lane);
  }
  Backend& backend;
  typename Backend::stream_type chain, lane;
  qwen3_tts::talker<Backend> talker;
  qwen3_tts::codec<Backend> codec;
};

// One run on a fresh engine; tells whether every pool was full again afterwards.
template <class Backend>
qwen3_tts::flow_result run_fresh(rig<Backend>& r, const std::vector<qwen3_tts::request_spec>& specs,
                                 const qwen3_tts::flow_options& o, bool* pools_full = nullptr) {
  auto& backend = r.backend;
  mstar::engine<qwen3_tts::Model, Backend> engine(backend, engine_options(r.talker.config().max_bucket));
  const auto chain = r.chain, lane = r.lane;
  auto result = qwen3_tts::run_flow(engine, r.talker, r.codec, chain, lane, specs, o);
  if (pools_full) {
    *pools_full = true;
    for (const auto& st : engine.stats())
      *pools_full = *pools_full && st.free == st.capacity;
  }
  backend.synchronize(chain);
  backend.synchronize(lane);
  return result;
}

} // namespace example_test
