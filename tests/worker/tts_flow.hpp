// What the worker tests and the soak share: a small model with Qwen3-TTS's shape (prefill and decode on
// the chain with a KV cache, attention, positions and a sampler; a codec with its own recurrent pool on
// a side lane), a codec pool small enough that rows park, the example's walk of a request
// (qwen3_tts::tts_walk: a prefill that emits the first frame, then one decode step per further frame,
// then codec windows over the accumulated frames with a width ramp), and deterministic host forwards.
//
// The bytes a request produces depend on its seed (through the prefill's context and the decoded
// frames), on every frame, on the window boundaries and on the codec's recurrent state left by the
// previous window, so a state zeroed too early, a slot shared by two requests, or a frame read from
// another request changes them. A decode step reads each row's frame number from the positions the
// step's plan staged (position - prompt + 1), so a plan promoted for the wrong rows, or staged before
// the previous step committed, changes them too. reference_audio() computes the same bytes
// single-threaded, with no engine at all.
#pragma once

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/worker.hpp>

#include "qwen3_tts/tts_walk.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace worker_test {

// Test hooks of the codec pool: refuse or raise in the next admits, or hold an admit at a gate; and a
// global sequence so a test can tell whether a teardown started before an admit returned.
struct pool_hooks {
  static inline std::atomic<int> refuse_admits{0};
  static inline std::atomic<int> raise_admits{0};
  static inline std::atomic<int> raise_removes{0}; // the next teardowns of the codec pool throw
  static inline std::atomic<bool> gate_closed{false};
  static inline std::atomic<int> admits_at_gate{0};
  static inline std::atomic<std::uint64_t> sequence{0};
  static inline std::atomic<std::uint64_t> last_admit_exit{0};
  static inline std::atomic<std::uint64_t> first_remove_after_gate{0};
  static inline std::atomic<bool> watch_removes{false};
  static inline std::atomic<std::uint32_t> refuse_min_rows{0}; // refuse_admits counts only steps of this many rows
  static void reset() {
    refuse_admits = 0;
    refuse_min_rows = 0;
    raise_admits = 0;
    raise_removes = 0;
    gate_closed = false;
    admits_at_gate = 0;
    last_admit_exit = 0;
    first_remove_after_gate = 0;
    watch_removes = false;
  }
};

template <class Backend>
struct hooked_pool : mstar::recurrent_state_pool<Backend, float> {
  using base = mstar::recurrent_state_pool<Backend, float>;
  using base::base;
  std::optional<mstar::refusal> admit(const mstar::step_view& s) {
    struct exit_mark {
      ~exit_mark() { pool_hooks::last_admit_exit = ++pool_hooks::sequence; }
    } mark;
    if (pool_hooks::gate_closed.load()) {
      ++pool_hooks::admits_at_gate;
      while (pool_hooks::gate_closed.load())
        std::this_thread::yield();
    }
    if (s.rows.size() >= pool_hooks::refuse_min_rows.load() && pool_hooks::refuse_admits.load() > 0 &&
        pool_hooks::refuse_admits.fetch_sub(1) > 0)
      return mstar::refusal::make("codec_state", "injected refusal of the codec pool's admit");
    if (pool_hooks::raise_admits.load() > 0 && pool_hooks::raise_admits.fetch_sub(1) > 0)
      throw std::runtime_error("injected raise in the codec pool's admit");
    return base::admit(s);
  }
  void remove_request(mstar::request_ref r, typename Backend::stream_type st) {
    if (pool_hooks::watch_removes.load()) {
      std::uint64_t expected = 0;
      pool_hooks::first_remove_after_gate.compare_exchange_strong(expected, ++pool_hooks::sequence);
    }
    if (pool_hooks::raise_removes.load() > 0 && pool_hooks::raise_removes.fetch_sub(1) > 0)
      throw std::runtime_error("injected raise in the codec pool's teardown");
    base::remove_request(r, st);
  }
};

// clang-format off
using Positions = mstar::positions<"positions">;
using Attention = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;
using Sampler   = mstar::sampler<"sampler">;
struct CodecState : mstar::recurrent_pool<"codec_state", float, mstar::shape<2, 4>, /*layers=*/2, /*slots=*/5> {
  template <class Backend>
  using implementation = hooked_pool<Backend>;                                                   // 4 usable slots
};

// The model over a KV cache of KvBlocks blocks of 8 tokens (512: never full; a few: prefills park).
template <std::uint32_t KvBlocks>
struct tts_model {
  using Kv      = mstar::kv_cache<"kv_cache", mstar::blocks<KvBlocks>, mstar::block_tokens<8>>;
  using Prefill = mstar::node<"prefill", mstar::declares<Kv, Attention, Positions, Sampler>, mstar::walk::chain>;
  using Decode  = mstar::node<"decode", mstar::declares<Kv, Attention, Positions, Sampler>, mstar::walk::chain>;
  using Codec   = mstar::node<"codec", mstar::declares<CodecState>>;
  using type    = mstar::model<"worker_tts", mstar::worker<"w", mstar::group<"Talker", Prefill, Decode>,
                                                           mstar::group<"CodecGroup", mstar::side_stream, Codec>>>;
};
using Kv      = tts_model<512>::Kv;
using Prefill = tts_model<512>::Prefill;
using Decode  = tts_model<512>::Decode;
using Codec   = tts_model<512>::Codec;
using Model   = tts_model<512>::type;
// clang-format on

using Engine = mstar::engine<Model, mstar::host_backend>;

inline constexpr std::uint8_t prefill_node = Model::node_index<Prefill>;
inline constexpr std::uint8_t decode_node = Model::node_index<Decode>;
inline constexpr std::uint8_t codec_node = Model::node_index<Codec>;
inline constexpr qwen3_tts::tts_nodes nodes = qwen3_tts::nodes_of<Model, Prefill, Decode, Codec>;

inline constexpr std::uint32_t codes_per_frame = 4;
inline constexpr std::uint32_t bytes_per_frame = 8; // "audio" per frame
inline constexpr std::uint32_t state_elems = 8;     // shape<2, 4>
inline constexpr std::uint32_t state_mod = 65521;   // state values stay exact in float (< 2^24)
inline constexpr std::array<std::uint32_t, 4> ramp{1, 2, 4, 8};

inline mstar::engine_options options(std::uint32_t max_requests = 16) {
  mstar::engine_options o;
  o.max_batch = 8;
  o.max_tokens = 256;
  o.max_requests = max_requests;
  o.max_labels = 1;
  return o;
}

inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  return x;
}
inline std::uint32_t code_of(std::uint64_t context, std::uint32_t frame, std::uint32_t k) {
  return static_cast<std::uint32_t>(mix(mix(context, frame), k) & 0xffff);
}
inline std::uint64_t context_of(std::uint64_t seed, std::uint32_t prompt) { return mix(seed, prompt); }
inline std::uint32_t width_of(std::uint32_t chunk) { return ramp[std::min<std::size_t>(chunk, ramp.size() - 1)]; }

// One codec window over a request's state (8 elements per layer, 2 layers): the window's width enters
// the state first, then each frame's codes; each frame emits bytes_per_frame bytes of the state.
inline void codec_window(float* layer0, float* layer1, const std::uint32_t* codes, std::uint32_t first,
                         std::uint32_t width, std::uint8_t* audio) {
  float* layers[2] = {layer0, layer1};
  for (float* st : layers)
    st[0] = static_cast<float>((static_cast<std::uint32_t>(st[0]) + width) % state_mod);
  for (std::uint32_t t = first; t < first + width; ++t) {
    for (std::uint32_t l = 0; l < 2; ++l) {
      float* st = layers[l];
      for (std::uint32_t j = 0; j < state_elems; ++j) {
        const std::uint32_t v = static_cast<std::uint32_t>(st[j]);
        st[j] = static_cast<float>((v * 31u + codes[t * codes_per_frame + j % codes_per_frame] + j + l) % state_mod);
      }
    }
    for (std::uint32_t b = 0; b < bytes_per_frame; ++b) {
      const auto v = static_cast<std::uint32_t>(layers[b & 1][b]);
      audio[t * bytes_per_frame + b] = static_cast<std::uint8_t>((v ^ (v >> 8)) & 0xff);
    }
  }
}

struct tts_input {
  std::uint64_t seed = 0;
  std::uint32_t prompt_tokens = 8;
  std::uint32_t frames = 8;
};

// What a row carries to its forward.
struct tts_payload {
  std::uint64_t seed = 0;
  std::uint64_t* context = nullptr;  // prefill writes it; decode reads it
  std::uint32_t* codes = nullptr;    // the request's frames, codes_per_frame each
  std::uint8_t* audio = nullptr;     // the request's audio, bytes_per_frame per frame
  std::uint32_t first = 0;           // decode: the frame; codec: the window's first frame
  std::uint32_t width = 0;           // codec: frames in the window
  std::uint32_t prompt = 0;          // prompt tokens (decode: frame = planned position - prompt + 1)
};

// The single-threaded reference: the bytes a request must produce.
inline std::vector<std::uint8_t> reference_audio(const tts_input& in) {
  const auto context = context_of(in.seed, in.prompt_tokens);
  std::vector<std::uint32_t> codes(std::size_t(in.frames) * codes_per_frame);
  for (std::uint32_t f = 0; f < in.frames; ++f)
    for (std::uint32_t k = 0; k < codes_per_frame; ++k)
      codes[f * codes_per_frame + k] = code_of(context, f, k);
  std::vector<std::uint8_t> audio(std::size_t(in.frames) * bytes_per_frame);
  float l0[state_elems] = {}, l1[state_elems] = {};
  for (std::uint32_t coded = 0, chunk = 0; coded < in.frames; ++chunk) {
    const auto w = std::min(width_of(chunk), in.frames - coded);
    codec_window(l0, l1, codes.data(), coded, w, audio.data());
    coded += w;
  }
  return audio;
}

struct result {
  mstar::request_end how = mstar::request_end::failed;
  std::vector<std::uint8_t> audio;
  std::uint32_t windows = 0;
  std::string why; // the end hook's reason (failed requests)
};

// The Qwen3-TTS-shaped flow: the example's walk (widths 1, 2, 4, 8, 8, ...; the last window takes
// what is left), over the request's codes and audio.
struct tts_flow {
  struct request_state : qwen3_tts::tts_walk {
    tts_input in{};
    std::uint64_t context = 0;
    std::vector<std::uint32_t> codes;
    std::vector<std::uint8_t> audio;
  };
  using request_input = tts_input;
  using payload = tts_payload;

  void start(request_state& s, mstar::request_id, const tts_input& in) {
    s.in = in;
    s.prompt_tokens = in.prompt_tokens;
    s.frame_count = in.frames;
    s.codes.assign(std::size_t(in.frames) * codes_per_frame, 0);
    s.audio.assign(std::size_t(in.frames) * bytes_per_frame, 0);
  }
  bool ready(request_state& s, std::uint8_t node, mstar::row& r, tts_payload& p) {
    p.seed = s.in.seed;
    p.context = &s.context;
    p.codes = s.codes.data();
    p.audio = s.audio.data();
    p.prompt = s.in.prompt_tokens;
    qwen3_tts::tts_walk::window w;
    if (!s.ready(nodes, node, r, ramp, w)) return false;
    p.first = node == codec_node ? w.first : s.decoded;
    p.width = w.width;
    return true;
  }
  bool landed(request_state& s, std::uint8_t node, const tts_payload& p) { return s.landed(nodes, node, p.width); }
  bool finished(const request_state& s) const { return s.finished(); }
  void end(request_state& s, mstar::request_id id, mstar::request_end how, std::string_view why = {}) {
    std::lock_guard g(lock);
    auto& r = results[id];
    r.how = how;
    r.why = std::string(why);
    r.audio = std::move(s.audio);
    r.windows = s.chunks;
    s.codes.clear();
  }
  std::uint32_t batch_key(std::uint8_t node, const tts_payload& p) const {
    return qwen3_tts::tts_walk::batch_key(nodes, node, p.width, true);
  }

  std::mutex lock;
  std::map<mstar::request_id, result> results;
};

// The same flow with the optional continues() hook: a decode row continues unless it is the
// request's last frame, so the worker's prediction of the next decode step misses only on cancels.
struct tts_flow_predicting : tts_flow {
  bool continues(const request_state& s, std::uint8_t node, const tts_payload&) const {
    return s.continues(nodes, node);
  }
};
static_assert(!mstar::predicts_continuation<tts_flow>);
static_assert(mstar::predicts_continuation<tts_flow_predicting>);

// The same flow with the optional urgent() hook: a request's first codec window never waits for the codec's
// batch (the speech example's rule); `urgent_rows` counts the rows it called urgent (the GPU thread).
struct tts_flow_urgent : tts_flow {
  bool urgent(std::uint8_t node, const tts_payload& p) const {
    const bool first = node == codec_node && p.first == 0;
    if (first) urgent_rows.fetch_add(1, std::memory_order_relaxed);
    return first;
  }
  mutable std::atomic<std::uint64_t> urgent_rows{0};
};
static_assert(!mstar::flow_urgent_hook<tts_flow>);
static_assert(mstar::flow_urgent_hook<tts_flow_urgent>);

// A flow whose batch_key (GPU thread, outside any step) throws once armed: a fatal error for the
// worker (the codec must batch per_key for the hook to be read).
struct throwing_key_flow : tts_flow {
  mutable std::atomic<bool> armed{false};
  std::uint32_t batch_key(std::uint8_t node, const tts_payload& p) const {
    if (node == codec_node && armed.load()) throw std::runtime_error("injected batch_key failure");
    return tts_flow::batch_key(node, p);
  }
};

using Worker = mstar::threaded_worker<Model, mstar::host_backend, tts_flow>;
using PredictingWorker = mstar::threaded_worker<Model, mstar::host_backend, tts_flow_predicting>;

// The prefill's work, for rows p[0, n): each request's context from its prompt, and its first frame.
inline void prefill_rows(const tts_payload* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    *p[i].context = context_of(p[i].seed, p[i].prompt);
    for (std::uint32_t k = 0; k < codes_per_frame; ++k)
      p[i].codes[k] = code_of(*p[i].context, 0, k);
  }
}

// The prefill step's work, enqueued on the step's stream.
template <class Ctx>
inline void enqueue_prefill(mstar::host_backend& backend, const Ctx& ctx) {
  const tts_payload* p = ctx.payloads.data();
  const auto n = ctx.payloads.size();
  backend.enqueue(ctx.stream, [p, n] { prefill_rows(p, n); });
}

// The decode step's work: each row's frame from the planned position (device copy: stream-ordered);
// the prompt takes positions [0, prompt), and the first decode row decodes frame 1.
template <class Ctx>
inline void enqueue_decode(mstar::host_backend& backend, const Ctx& ctx) {
  const tts_payload* p = ctx.payloads.data();
  const auto n = ctx.payloads.size();
  const std::int32_t* pos = ctx.template plan<Positions>().positions;
  backend.enqueue(ctx.stream, [p, n, pos] {
    for (std::size_t i = 0; i < n; ++i) {
      const auto frame = static_cast<std::uint32_t>(pos[i]) - p[i].prompt + 1;
      for (std::uint32_t k = 0; k < codes_per_frame; ++k)
        p[i].codes[p[i].first * codes_per_frame + k] = code_of(*p[i].context, frame, k);
    }
  });
}

// The codec step's work: each row's window from its slot's state (device copy of the slots:
// stream-ordered, unlike the host staging).
template <class Ctx>
inline void enqueue_codec(mstar::host_backend& backend, const Ctx& ctx) {
  const auto& plan = ctx.template plan<CodecState>();
  const auto* pool = &ctx.template resource<CodecState>();
  const std::int32_t* slots = plan.slots;
  const std::uint32_t rows = plan.rows;
  const tts_payload* p = ctx.payloads.data();
  backend.enqueue(ctx.stream, [pool, slots, rows, p] {
    for (std::uint32_t i = 0; i < rows; ++i) {
      const auto slot = static_cast<std::uint32_t>(slots[i]);
      codec_window(pool->state(0, slot), pool->state(1, slot), p[i].codes, p[i].first, p[i].width, p[i].audio);
    }
  });
}

// The forwards, as host work enqueued on the step's stream.
template <class M = tts_model<512>, class W>
inline void install_forwards(W& w, mstar::host_backend& backend) {
  w.template forward<typename M::Prefill>([&backend](const auto& ctx) { enqueue_prefill(backend, ctx); });
  w.template forward<typename M::Decode>([&backend](const auto& ctx) { enqueue_decode(backend, ctx); });
  w.template forward<typename M::Codec>([&backend](const auto& ctx) { enqueue_codec(backend, ctx); });
}

// Every pool back to its full free count, and no request left in the table.
template <class E = Engine>
inline bool pools_full(E& engine, std::string* why = nullptr) {
  for (const auto& st : engine.stats())
    if (st.free != st.capacity) {
      if (why) *why = std::string(st.key) + " has " + std::to_string(st.free) + " of " + std::to_string(st.capacity) + " free";
      return false;
    }
  if (engine.requests().live() != 0) {
    if (why) *why = std::to_string(engine.requests().live()) + " requests still in the table";
    return false;
  }
  return true;
}

} // namespace worker_test
