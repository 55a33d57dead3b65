// What the engine tests share: a small model with Qwen3-TTS's shape (a chain with a KV cache,
// attention, positions and a sampler; a codec with its own recurrent pool on a side lane), small
// enough that pools fill in a few requests; a stand-in codec forward on the host backend that reads
// and writes state through the host reference kernels; and a snapshot of everything the chain's
// stage consists of, to tell whether a step touched it.
#pragma once

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

namespace engine_test {

// clang-format off
using Kv        = mstar::kv_cache<"kv_cache", mstar::blocks<32>, mstar::block_tokens<4>>;
using Positions = mstar::positions<"positions">;
using Attention = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;
using Sampler   = mstar::sampler<"sampler">;
using State     = mstar::recurrent_pool<"codec_state", float, mstar::shape<2, 3>, /*layers=*/2, /*slots=*/4>;  // 3 usable

using Prefill = mstar::node<"prefill", mstar::declares<Kv, Attention, Positions, Sampler>, mstar::walk::chain>;
using Decode  = mstar::node<"decode", mstar::declares<Kv, Attention, Positions, Sampler>, mstar::walk::chain>;
using Codec   = mstar::node<"codec", mstar::declares<State>>;
using Model   = mstar::model<"tiny_tts", mstar::worker<"w", mstar::group<"Talker", Prefill, Decode>,
                                                      mstar::group<"CodecGroup", mstar::side_stream, Codec>>>;
// clang-format on

// A test double of the codec's pool: the real pool, which raises on demand in admit or plan (the
// seed's "a raise in its admit or plan" cases). Plugged in through the policy's implementation<B>.
template <class Backend>
struct faulty_pool : mstar::recurrent_state_pool<Backend, float> {
  using base = mstar::recurrent_state_pool<Backend, float>;
  using base::base;
  static inline std::atomic<bool> raise_in_admit{false};
  static inline std::atomic<bool> raise_in_plan{false};
  std::optional<mstar::refusal> admit(const mstar::step_view& s) {
    if (raise_in_admit.load()) throw std::runtime_error("injected raise in the codec pool's admit");
    return base::admit(s);
  }
  void plan(const mstar::step_view& s, mstar::plan_arena& a, typename Backend::stream_type st) {
    if (raise_in_plan.load()) throw std::runtime_error("injected raise in the codec pool's plan");
    base::plan(s, a, st);
  }
};
struct FaultyState : mstar::recurrent_pool<"codec_state", float, mstar::shape<2, 3>, 2, 4> {
  template <class Backend>
  using implementation = faulty_pool<Backend>;
};
using FaultyCodec = mstar::node<"codec", mstar::declares<FaultyState>>;
using FaultyModel =
    mstar::model<"tiny_tts_faulty", mstar::worker<"w", mstar::group<"Talker", Prefill, Decode>,
                                                  mstar::group<"CodecGroup", mstar::side_stream, FaultyCodec>>>;

using Engine = mstar::engine<Model, mstar::host_backend>;
using DecodeStep = mstar::chain_step<Model, Decode>;
using PrefillStep = mstar::chain_step<Model, Prefill>;
using CodecStep = mstar::side_step<Model, Codec>;

inline mstar::engine_options small_options() {
  mstar::engine_options o;
  o.max_batch = 8;
  o.max_tokens = 64;
  o.max_requests = 16;
  o.max_labels = 2;
  return o;
}

// A recurrent element as an integer, so that state arithmetic is exact for float and bf16 alike.
inline std::uint32_t as_int(float v) { return static_cast<std::uint32_t>(v); }
inline std::uint32_t as_int(mstar::bf16 v) { return v.bits; }
inline void add_int(float& v, std::uint32_t x) { v += static_cast<float>(x); }
inline void add_int(mstar::bf16& v, std::uint32_t x) { v.bits = static_cast<std::uint16_t>(v.bits + x); }

// A stand-in codec window, enqueued on the step's stream: gather the rows' state (zeros for a row
// without state), add the row's input to every element, write the first element of layer 0 to the
// row's output, scatter back. So window k's output is the sum of the first k inputs: it depends on the
// state the previous window wrote. Buffers are owned by the caller and outlive the step.
template <class T, class Plan>
void codec_window(mstar::host_backend& backend, mstar::host_stream stream, const Plan& plan,
                  const std::uint32_t* inputs, std::uint32_t* outputs) {
  backend.enqueue(stream, [plan, inputs, outputs] {
    std::vector<mstar::kernels::recurrent_segment<T>> segs(plan.segments.begin(), plan.segments.end());
    const auto rows = static_cast<std::int32_t>(plan.bucket);
    const auto n = mstar::kernels::layout_batch<T>(segs, rows);
    std::vector<T> batch(static_cast<std::size_t>(n));
    mstar::kernels::segment_table<T> table(segs.data(), segs.size());
    mstar::kernels::host::gather<T>(table, plan.slots, rows, batch.data(), nullptr);
    for (std::uint32_t r = 0; r < plan.rows; ++r)
      for (const auto& s : segs)
        for (std::int64_t e = 0; e < s.state_elems; ++e)
          add_int(batch[s.batch_offset + r * s.state_elems + e], inputs[r]);
    for (std::uint32_t r = 0; r < plan.rows; ++r)
      outputs[r] = as_int(batch[segs[0].batch_offset + r * segs[0].state_elems]);
    // Padding rows are scattered too: the sink must absorb them without being written.
    for (std::uint32_t r = plan.rows; r < plan.bucket; ++r)
      for (const auto& s : segs)
        for (std::int64_t e = 0; e < s.state_elems; ++e)
          add_int(batch[s.batch_offset + r * s.state_elems + e], 99);
    mstar::kernels::host::scatter<T>(table, plan.slots, rows, batch.data(), nullptr);
  });
}

// Everything that makes up the chain's stage: the record and, per resource, whether it holds a
// staged plan and how often it was promoted or cleared. Equal snapshots: nobody touched the stage.
struct stage_snapshot {
  int phase = 0;
  std::uint8_t node = 0;
  std::vector<mstar::row> rows;
  std::uint32_t bucket = 0;
  std::uint64_t stages = 0, promotions = 0, drops = 0, resets = 0;
  std::vector<std::array<std::uint64_t, 4>> per_resource; // staged, promotes, clears, stale promotes
  friend bool operator==(const stage_snapshot&, const stage_snapshot&) = default;
};

template <class E>
stage_snapshot snapshot(E& engine) {
  const auto& stage = engine.runner().stage();
  stage_snapshot s;
  s.phase = static_cast<int>(stage.current());
  s.node = stage.node();
  s.rows.assign(stage.rows().begin(), stage.rows().end());
  s.bucket = stage.bucket();
  s.stages = stage.stages();
  s.promotions = stage.promotions();
  s.drops = stage.drops();
  s.resets = stage.resets();
  for (const auto& st : engine.stats())
    s.per_resource.push_back({st.staged ? 1u : 0u, st.promotes, st.clears, st.stale_promotes});
  return s;
}

} // namespace engine_test
