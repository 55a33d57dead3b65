// The Qwen3-TTS-shaped example on the host backend: the Talker's frames against an independent
// oracle (seed and step alone), the codec against its host reference (gather, decode, scatter) with
// rows of different widths in one step, audio byte-identical under every batching, the codec's
// dependence on its state (a corrupted or zeroed slot changes the audio after it, nothing before),
// bad calls refused with a sentence, and every pool full again after teardown.
#include <doctest/doctest.h>

#include "example/example_cases.hpp"
#include "qwen3_tts/audio_hash.hpp"
#include "qwen3_tts/flow.hpp"
#include "qwen3_tts/synth.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

using namespace example_test;

namespace {

using host_rig = rig<mstar::host_backend>;

host_rig make_rig(mstar::host_backend& b) {
  return host_rig(b, qwen3_tts::talker_config::host_small(), qwen3_tts::codec_config::host_small());
}

std::string describe(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines)
    s += l + "\n";
  return s;
}

} // namespace

TEST_CASE("Qwen3Tts.the Talker's frames depend on the request's seed and step alone") {
  mstar::host_backend backend;
  auto r = make_rig(backend);
  const auto specs = requests();
  for (const auto& b : batchings()) {
    auto o = b.options;
    o.keep_audio = true;
    const auto result = run_fresh(r, specs, o);
    for (const auto& s : specs) {
      const auto& frames = result.frames.at(s.id);
      REQUIRE(frames.size() == s.frames);
      // The oracle: step k of a request draws with (its seed, sampler step k) at position
      // prompt_tokens - 1 + k (the prefill's last token for k = 0, then one token per decode step).
      for (std::uint32_t k = 0; k < s.frames; ++k) {
        const mstar::sampler_row row{mstar::mix_seed(7, s.id), k, 0, 1.0f, 1.0f};
        INFO(b.name, ", request ", s.id, ", frame ", k);
        CHECK(frames[k] == qwen3_tts::synth::sample_frame(row, s.prompt_tokens - 1 + k));
      }
    }
  }
}

TEST_CASE("Qwen3Tts.a request's audio is byte-identical under every batching, row order, bucket and stream") {
  mstar::host_backend backend;
  auto r = make_rig(backend);
  const auto specs = requests();
  std::map<mstar::request_id, std::vector<std::int16_t>> first_audio;
  std::map<mstar::request_id, qwen3_tts::audio_digest> first;
  for (const auto& b : batchings()) {
    INFO(b.name);
    auto o = b.options;
    o.keep_audio = true;
    bool full = false;
    const auto result = run_fresh(r, specs, o, &full);
    CHECK(full);
    for (const auto& s : specs)
      CHECK(result.audio.at(s.id).size() == std::size_t(s.frames) * qwen3_tts::synth::samples_per_frame);
    if (first.empty()) {
      first = result.digests;
      first_audio = result.audio;
      // Different requests make different audio (the check below is not comparing constants).
      std::set<std::uint64_t> distinct;
      for (const auto& [id, d] : first)
        distinct.insert(d.hash);
      CHECK(distinct.size() == specs.size());
      continue;
    }
    const auto diff = qwen3_tts::compare_runs(first, result.digests);
    CHECK_MESSAGE(diff.empty(), describe(diff));
    CHECK(result.audio == first_audio);
  }
  CHECK(backend.checker().violation_count() == 0);
}

TEST_CASE("Qwen3Tts.the batchings do batch differently: several widths in one codec step, padded decode steps") {
  mstar::host_backend backend;
  auto r = make_rig(backend);
  const auto specs = requests();
  const auto all = batchings();
  const auto alone = run_fresh(r, specs, all[0].options);
  const auto together = run_fresh(r, specs, all[1].options);
  // One request at a time: one decode step per frame after the first; all together: far fewer.
  std::uint64_t frames = 0;
  for (const auto& s : specs)
    frames += s.frames;
  CHECK(alone.decode_steps == frames - specs.size());
  CHECK(together.decode_steps < alone.decode_steps / 2);
  CHECK(together.codec_steps < alone.codec_steps);
  CHECK(together.codec_rows > together.codec_steps); // several rows (of several widths) per codec step
}

TEST_CASE("Qwen3Tts.one codec step decodes rows of different widths, each from its own state, as the reference does") {
  mstar::host_backend backend;
  auto r = make_rig(backend);
  mstar::engine<qwen3_tts::Model, mstar::host_backend> engine(backend, engine_options());
  engine.set_side_stream<qwen3_tts::CodecChunk>(r.lane);
  using codec_step = mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>;
  using qwen3_tts::synth::frame;

  // Three requests with 9 frames each (any frames will do: the Talker's oracle gives them).
  std::vector<std::vector<frame>> frames(3);
  std::vector<mstar::row> rows;
  for (std::uint32_t i = 0; i < 3; ++i) {
    rows.push_back({*engine.add_request(i + 1)});
    for (std::uint32_t k = 0; k < 9; ++k)
      frames[i].push_back(qwen3_tts::synth::sample_frame(mstar::sampler_row{i * 31u + 5, k, 0, 1, 1}, k));
  }
  // The reference: each request decoded alone, frame by frame, from a zero state.
  const std::size_t stride = qwen3_tts::synth::layer_elems;
  std::vector<std::vector<std::int16_t>> want(3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    std::vector<std::uint16_t> state(qwen3_tts::synth::codec_layers * stride, 0);
    want[i].resize(9 * qwen3_tts::synth::samples_per_frame);
    qwen3_tts::synth::codec_decode_row(state.data(), stride, frames[i].data(), 9, want[i].data());
  }
  // Two steps, widths (3, 1, 5) then (6, 8, 4) in a bucket of 8, reading the state the first left.
  std::vector<std::vector<std::int16_t>> got(3);
  const std::uint32_t widths[2][3] = {{3, 1, 5}, {6, 8, 4}};
  std::uint32_t done[3] = {0, 0, 0};
  std::vector<std::int16_t> audio(20 * qwen3_tts::synth::samples_per_frame);
  for (const auto& w : widths) {
    std::vector<qwen3_tts::codec_window> windows;
    for (std::uint32_t i = 0; i < 3; ++i)
      windows.push_back({frames[i].data() + done[i], w[i]});
    REQUIRE(engine.run(codec_step{rows, 8}, r.lane, [&](const auto& ctx) { r.codec.chunk(ctx, windows, audio); }));
    backend.synchronize(r.lane);
    std::size_t offset = 0;
    for (std::uint32_t i = 0; i < 3; ++i) {
      const std::size_t n = std::size_t(w[i]) * qwen3_tts::synth::samples_per_frame;
      got[i].insert(got[i].end(), audio.begin() + std::ptrdiff_t(offset), audio.begin() + std::ptrdiff_t(offset + n));
      offset += n;
      done[i] += w[i];
    }
  }
  for (std::uint32_t i = 0; i < 3; ++i) {
    INFO("request ", i + 1);
    CHECK(got[i] == want[i]);
  }
  // The sink (padding rows) stayed zero.
  auto& pool = engine.resource<qwen3_tts::CodecState>();
  bool sink_zero = true;
  for (std::uint32_t l = 0; l < pool.layers(); ++l)
    for (std::size_t e = 0; e < pool.state_elements(); ++e)
      sink_zero = sink_zero && pool.state(l, 0)[e].bits == 0;
  CHECK(sink_zero);
  for (const auto& row : rows)
    engine.remove_request(row.request, r.chain);
  backend.synchronize(r.lane);
  for (const auto& st : engine.stats())
    CHECK(st.free == st.capacity);
}

TEST_CASE("Qwen3Tts.the codec's audio depends on its state: a corrupted or zeroed slot changes what follows, not before") {
  mstar::host_backend backend;
  auto r = make_rig(backend);
  const auto specs = requests(3, 9);
  auto o = batchings()[1].options; // all at once
  o.keep_audio = true;
  o.ramp = {2};
  const auto clean = run_fresh(r, specs, o);
  const auto victim = specs[1].id;

  for (const bool zero : {false, true}) {
    INFO((zero ? "zeroed" : "corrupted"));
    mstar::engine<qwen3_tts::Model, mstar::host_backend>* current = nullptr;
    auto disturbed = o;
    disturbed.before_window = [&](const qwen3_tts::request_spec& s, mstar::request_ref ref, std::uint32_t window) {
      if (s.id != victim || window != 2) return;
      auto& pool = current->resource<qwen3_tts::CodecState>();
      const auto h = pool.find(ref, 0);
      REQUIRE(h);
      for (std::uint32_t l = 0; l < pool.layers(); ++l) {
        auto* st = pool.state(l, std::uint32_t(h->slot));
        if (zero)
          std::memset(static_cast<void*>(st), 0, pool.state_elements() * sizeof(mstar::bf16));
        else
          st[l * 97].bits ^= 0x0100; // one bit of one word per layer
      }
    };
    mstar::engine<qwen3_tts::Model, mstar::host_backend> engine(backend, engine_options());
    current = &engine;
    const auto result = qwen3_tts::run_flow(engine, r.talker, r.codec, r.chain, r.lane, specs, disturbed);
    const std::size_t before = 4 * qwen3_tts::synth::samples_per_frame; // windows 0 and 1: 2 frames each
    const auto& a = clean.audio.at(victim);
    const auto& b = result.audio.at(victim);
    REQUIRE(a.size() == b.size());
    CHECK(std::equal(a.begin(), a.begin() + before, b.begin()));
    // Every later frame differs somewhere (the disturbance travels with the state).
    for (std::size_t f = 4; f < specs[1].frames; ++f) {
      const auto at = a.begin() + std::ptrdiff_t(f * qwen3_tts::synth::samples_per_frame);
      const auto bt = b.begin() + std::ptrdiff_t(f * qwen3_tts::synth::samples_per_frame);
      CHECK_FALSE(std::equal(at, at + qwen3_tts::synth::samples_per_frame, bt));
    }
    for (const auto& s : specs)
      if (s.id != victim) CHECK(clean.audio.at(s.id) == result.audio.at(s.id));
  }
}

TEST_CASE("Qwen3Tts.a request's audio is the same on a reused engine, whose slots come back zeroed") {
  mstar::host_backend backend;
  auto r = make_rig(backend);
  const auto specs = requests();
  mstar::engine<qwen3_tts::Model, mstar::host_backend> engine(backend, engine_options());
  auto o = batchings()[2].options;
  const auto first = qwen3_tts::run_flow(engine, r.talker, r.codec, r.chain, r.lane, specs, o);
  const auto second = qwen3_tts::run_flow(engine, r.talker, r.codec, r.chain, r.lane, specs, o);
  const auto diff = qwen3_tts::compare_runs(first.digests, second.digests);
  CHECK_MESSAGE(diff.empty(), describe(diff));
  for (const auto& st : engine.stats())
    CHECK(st.free == st.capacity);
}

TEST_CASE("Qwen3Tts.a prefill graph's sizes cover the step, waste at most 1/8 of the tokens and 1/2 of the rows, "
          "and stay within the buffers") {
  std::set<std::uint32_t> token_sizes;
  for (std::uint32_t t = 1; t <= 8192; ++t) {
    const std::uint32_t b = qwen3_tts::prefill_token_bucket(t, 8192);
    INFO("tokens ", t, " -> ", b);
    CHECK(b >= t);
    CHECK(b <= 8192);
    if (t >= 64) CHECK(8 * std::uint64_t(b) <= 9 * std::uint64_t(t)); // <= 1/8 more
    if (t < 64) CHECK(b <= 64);
    CHECK(qwen3_tts::prefill_token_bucket(t + 1, 8192) >= b); // monotone
    token_sizes.insert(b);
  }
  CHECK(token_sizes.size() <= 8 * 10); // eight sizes an octave from 64 (eight below it)
  CHECK(qwen3_tts::prefill_token_bucket(0, 8192) == 8);
  CHECK(qwen3_tts::prefill_token_bucket(1000, 1000) == 1000); // capped at max_tokens
  CHECK(qwen3_tts::prefill_token_bucket(1000, 1010) == 1010);
  std::set<std::uint32_t> row_sizes;
  for (std::uint32_t r = 1; r <= 256; ++r) {
    const std::uint32_t b = qwen3_tts::prefill_row_bucket(r, 256);
    INFO("rows ", r, " -> ", b);
    CHECK(b >= r);
    CHECK(b <= 256);
    CHECK(2 * b <= 3 * r + 1); // <= 1/2 more
    row_sizes.insert(b);
  }
  CHECK(row_sizes == std::set<std::uint32_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256});
  CHECK(qwen3_tts::prefill_row_bucket(100, 100) == 100); // capped at max_bucket
  CHECK(qwen3_tts::prefill_row_bucket(4'000'000'000u, 256) == 4'000'000'000u); // no overflow past 2^31
  CHECK(qwen3_tts::prefill_row_bucket(0, 256) == 1);
}

TEST_CASE("Qwen3Tts.a talker step with more rows than its bucket is refused with the fix") {
  qwen3_tts::talker_inputs in;
  in.rows = 5;
  in.bucket = 4;
  in.tokens = 5;
  try {
    qwen3_tts::detail::check_talker_call(in, 8, qwen3_tts::talker_config::host_small());
    FAIL("a 5-row step in a bucket of 4 was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("5 rows in a bucket of 4") != std::string::npos);
    CHECK(std::string(e.what()).find("bucket of at least the row count") != std::string::npos);
  }
  in.bucket = 5;
  CHECK_NOTHROW(qwen3_tts::detail::check_talker_call(in, 8, qwen3_tts::talker_config::host_small()));
}

TEST_CASE("Qwen3Tts.compare_runs names each request that differs, is missing, or is extra") {
  std::map<int, qwen3_tts::audio_digest> a, b;
  const std::int16_t x[] = {1, 2, 3}, y[] = {1, 2, 4};
  a[1].update(x);
  b[1].update(x);
  a[2].update(x);
  b[2].update(y);
  a[3].update(x);
  b[4].update(x);
  const auto diff = qwen3_tts::compare_runs(a, b);
  REQUIRE(diff.size() == 3);
  CHECK(diff[0].find("request 2: 3 samples, hash") == 0);
  CHECK(diff[1].find("request 3: in the first run only") == 0);
  CHECK(diff[2].find("request 4: in the second run only") == 0);
  // Streaming: chunk by chunk equals all at once.
  qwen3_tts::audio_digest whole, parts;
  const std::int16_t all[] = {5, -6, 7, 8};
  whole.update(all);
  parts.update(std::span(all, 1));
  parts.update(std::span(all + 1, 3));
  CHECK(whole == parts);
}

TEST_CASE("Qwen3Tts.bad codec and talker calls fail their step with a sentence, and nothing leaks") {
  mstar::host_backend backend;
  {
    auto r = make_rig(backend);
    mstar::engine<qwen3_tts::Model, mstar::host_backend> engine(backend, engine_options());
    engine.set_side_stream<qwen3_tts::CodecChunk>(r.lane);
    std::vector<mstar::row> rows = {{*engine.add_request(1)}, {*engine.add_request(2)}};
    std::vector<qwen3_tts::synth::frame> frames(4);
    std::vector<std::int16_t> audio(8 * qwen3_tts::synth::samples_per_frame);
    using codec_step = mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>;
    using decode_step = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerDecode>;

    const std::vector<qwen3_tts::codec_window> one = {{frames.data(), 2}};
    auto out = engine.run(codec_step{rows}, r.lane, [&](const auto& ctx) { r.codec.chunk(ctx, one, audio); });
    REQUIRE(out.failed());
    CHECK(out.message().find("1 windows for a 2-row step; give one window per row") != std::string::npos);

    const std::vector<qwen3_tts::codec_window> big = {{frames.data(), 4}, {frames.data(), 4}};
    out = engine.run(codec_step{rows}, r.lane,
                     [&](const auto& ctx) { r.codec.chunk(ctx, big, std::span(audio).first(100)); });
    REQUIRE(out.failed());
    CHECK(out.message().find("the audio buffer holds 100 samples, the step writes 15360") != std::string::npos);

    const std::vector<qwen3_tts::codec_window> none = {{nullptr, 1}, {frames.data(), 1}};
    out = engine.run(codec_step{rows}, r.lane, [&](const auto& ctx) { r.codec.chunk(ctx, none, audio); });
    REQUIRE(out.failed());
    CHECK(out.message().find("window 0 has width 1 and no frames") != std::string::npos);

    out = engine.run(decode_step{rows}, r.chain,
                     [&](const auto& ctx) { r.talker.decode(ctx, std::span(frames).first(1)); });
    REQUIRE(out.failed());
    CHECK(out.message().find("the output holds 1 frames for a 2-row step") != std::string::npos);

    for (const auto& row : rows)
      engine.remove_request(row.request, r.chain);
    backend.synchronize(r.lane);
    for (const auto& st : engine.stats())
      CHECK(st.free == st.capacity);
  }
  CHECK(backend.live_allocations() == 0);
}
