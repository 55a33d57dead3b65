// The CUDA codec decoder (float32, double sums) against the reference's whole-sequence audio in the
// committed fixtures (tests/fixtures/qwen3tts/{tiny06,tiny17}/expected/codec.safetensors) and against the
// host decoder: streamed audio for several window ramps, rows of one step independent of each other,
// and the per-request state after each window the host decoder's state (the same layout, so the same
// bytes up to rounding). Every case is skipped without a CUDA device (tests/gpu/main.cpp's rule).
//
// Both codec_cuda_math choices. Tolerances: 1e-4 max absolute error against the reference's audio, the
// host parity test's bar (the double-sum kernel sums as the host does; only the order of the double sums
// and the device's float32 sin, exp, erf and cos differ; cuBLAS sums in float32, which a float32-GEMM
// emulation of the step put within 3e-6 of the reference on these fixtures). States: 1e-4 relative to
// the segment's largest value. Where the double-sum kernel promises the same bits (window splits, rows
// of a step), cuBLAS is held to 1e-5 and whether its bits agree too is printed.
//
// Graph replays (codec_cuda_launch::graph) are held to the bytes of the launch they replay: the eager step
// under double sums, the bucketed (padded, uncaptured) step under cuBLAS, whose GEMM shapes they share.
// The tensor-core maths (cuBLAS TF32, fp16, TF32 and fp16 with CUTLASS's convolutions) are checked against the
// reference's audio within a bf16-level bound (and, in an SM partition, against themselves on the whole GPU).
// CUTLASS's convolutions (codec_cuda_math::cutlass_tf32 and cutlass_fp16, only where the build has CUTLASS) are
// checked besides for what they change, each against the cuBLAS math of its operands (cublas_tf32, cublas_fp16): as
// close to float32 at the released size, that math's bytes where a step's rows differ in width (they fall back to its
// path) or a convolution gives fewer threadblocks than a wave, graph replays of steps padded with filler rows of their
// width. The fixtures' convolutions take both paths: tiny17's last block has 6 channels (not a multiple of 4 or 8),
// its block before 12 (a multiple of 4, not of 8), decoder_out 1.
#include "gpu_test.hpp"

#include "codec_cuda.hpp"
#include "codec_decoder.hpp"
#include "codec_fixture.hpp"
#include "codec_random.hpp"
#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "qwen3_tts/checkpoint/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using namespace qwen3_tts;
using namespace qwen3_tts::codec_fixture;
constexpr float audio_tolerance = 1e-4f;
constexpr float state_tolerance = 1e-4f; // relative to the segment's largest magnitude (at least 1)
constexpr float cublas_split_tolerance = 1e-5f;
constexpr int max_window = 24; // the fixtures' sequences have 7 and 23 frames
// codec_cuda_limits::cutlass_min_tiles for the tiny fixtures: CUTLASS takes every convolution it can, however few
// threadblocks it gives (by default a convolution needs one wave of the SMs, which no fixture's reaches).
constexpr int every_shape = 0;
constexpr codec_cuda_math maths[] = {codec_cuda_math::double_sums, codec_cuda_math::cublas_f32};
// The maths with CUTLASS's convolutions, each with the cuBLAS math of its operands (its path where CUTLASS does not
// take a convolution); none in a build without CUTLASS.
std::vector<std::pair<codec_cuda_math, codec_cuda_math>> cutlass_maths() {
  if (!codec_cutlass_available()) return {};
  return {{codec_cuda_math::cutlass_tf32, codec_cuda_math::cublas_tf32},
          {codec_cuda_math::cutlass_fp16, codec_cuda_math::cublas_fp16}};
}

// The same bits under double sums; within cublas_split_tolerance under cuBLAS (the bits' agreement printed).
bool agree(const std::vector<float>& a, const std::vector<float>& b, codec_cuda_math math, const char* what) {
  if (math == codec_cuda_math::double_sums) return same_bytes(a, b);
  const float err = max_abs_error(a, b);
  std::printf("codec cuda (cuBLAS f32) %s: max difference %.3g, bits %s\n", what, double(err),
              same_bytes(a, b) ? "identical" : "differ");
  return err <= cublas_split_tolerance;
}

struct codec_parts {
  codec_config config;
  codec_weights weights;
};

codec_parts load_parts(const std::string& fixture) {
  const auto folder = open_checkpoint(fixtures + fixture);
  codec_parts p{parse_codec_config(folder.codec_config, fixture + "/speech_tokenizer/config.json"), {}};
  p.weights = load_codec_weights(p.config, [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    return to_f32(folder.codec_weights.require(name, shape));
  });
  return p;
}

// A device buffer of floats, zeroed (a fresh codec state).
struct device_floats {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_floats(std::size_t count) : n(count) {
    MSTAR_CUDA_REQUIRE(cudaMalloc(&p, n * sizeof(float)));
    MSTAR_CUDA_REQUIRE(cudaMemset(p, 0, n * sizeof(float)));
  }
  ~device_floats() { cudaFree(p); }
  device_floats(const device_floats&) = delete;
  device_floats& operator=(const device_floats&) = delete;
  std::vector<float> read() const {
    std::vector<float> h(n);
    MSTAR_CUDA_REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  void zero() { MSTAR_CUDA_REQUIRE(cudaMemset(p, 0, n * sizeof(float))); }
  void fill_bytes(int byte) { MSTAR_CUDA_REQUIRE(cudaMemset(p, byte, n * sizeof(float))); }
};

// The launch whose bytes a graph replay must give under `math` (see the header).
codec_cuda_launch replayed_launch(codec_cuda_math math) {
  return math == codec_cuda_math::double_sums ? codec_cuda_launch::eager : codec_cuda_launch::bucketed;
}
const char* launch_name(codec_cuda_launch l) {
  return l == codec_cuda_launch::eager ? "eager" : l == codec_cuda_launch::graph ? "graph" : "bucketed";
}

// w frames of s from frame `first` on, cycling past its end (any valid codes will do where two launches are
// compared).
std::vector<std::int32_t> cycled_frames(const sequence& s, int first, int w) {
  std::vector<std::int32_t> out;
  for (int i = 0; i < w; ++i) {
    const auto f = std::span(s.frames).subspan(std::size_t((first + i) % s.n) * 16, 16);
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

// Requests in the slots of one state pool, each with its own audio buffer (frames * spf samples, then a
// guard of one frame's samples that no step may write), decoded by steps of (request, width) rows.
struct slot_pool {
  std::size_t state_floats, spf;
  device_floats states;
  std::vector<int> slot;    // of each request
  std::vector<int> decoded; // frames of each request so far
  std::vector<std::unique_ptr<device_floats>> audio;

  slot_pool(const codec_cuda& gpu, int slots, std::vector<int> request_slots, int frames_each)
      : state_floats(gpu.state_layout().total), spf(gpu.samples_per_frame()), states(std::size_t(slots) * state_floats),
        slot(std::move(request_slots)), decoded(slot.size(), 0) {
    for (std::size_t i = 0; i < slot.size(); ++i) {
      audio.push_back(std::make_unique<device_floats>(std::size_t(frames_each + 1) * spf));
      audio.back()->fill_bytes(0xff); // NaN: a guard sample written by a step shows
    }
  }
  float* state_of(int request) { return states.p + std::size_t(slot[std::size_t(request)]) * state_floats; }

  void step(codec_cuda& gpu, const sequence& s, const std::vector<std::pair<int, int>>& rows, codec_cuda_launch l) {
    std::vector<std::vector<std::int32_t>> frames;
    for (auto [request, w] : rows)
      frames.push_back(cycled_frames(s, 5 * request + decoded[std::size_t(request)], w));
    std::vector<codec_cuda::row> step;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const int request = rows[i].first;
      step.push_back({state_of(request), frames[i],
                      audio[std::size_t(request)]->p + std::size_t(decoded[std::size_t(request)]) * spf});
      decoded[std::size_t(request)] += rows[i].second;
    }
    gpu.decode_step(step, l);
  }
};

// A step of one request a width, request r in slot r: the slots and the step's (request, width) rows.
struct widths_step {
  std::vector<int> slots;
  std::vector<std::pair<int, int>> rows;
  explicit widths_step(const std::vector<int>& widths) {
    for (int r = 0; r < int(widths.size()); ++r) {
      slots.push_back(r);
      rows.push_back({r, widths[std::size_t(r)]});
    }
  }
  int size() const { return int(slots.size()); }
};

// Whether two pools ended with the same bytes: every slot's state, every request's audio and guard.
bool same_pools(const slot_pool& a, const slot_pool& b) {
  bool same = same_bytes(a.states.read(), b.states.read());
  for (std::size_t r = 0; r < a.audio.size(); ++r)
    same = same && same_bytes(a.audio[r]->read(), b.audio[r]->read());
  return same;
}

// Whether request r's guard samples (past its decoded frames) still hold the NaN pattern.
bool guards_untouched(const slot_pool& p) {
  for (std::size_t r = 0; r < p.audio.size(); ++r) {
    const auto samples = p.audio[r]->read();
    for (std::size_t i = std::size_t(p.decoded[r]) * p.spf; i < samples.size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &samples[i], sizeof bits);
      if (bits != 0xffffffffu) return false;
    }
  }
  return true;
}

// Three steps of `widths` (request r in slot r, widths[r] frames a step), replayed from graphs in one pool and
// launched as `reference` in another, on one decoder: the replays must give the reference's bytes and write no
// audio past a request's frames.
void check_replays(codec_cuda& gpu, const sequence& seq, const std::vector<int>& widths, codec_cuda_launch reference) {
  const widths_step step(widths);
  slot_pool replayed(gpu, step.size(), step.slots, 24), launched(gpu, step.size(), step.slots, 24);
  for (int i = 0; i < 3; ++i) {
    replayed.step(gpu, seq, step.rows, codec_cuda_launch::graph);
    launched.step(gpu, seq, step.rows, reference);
  }
  gpu.synchronize();
  CHECK(same_pools(replayed, launched));
  CHECK(guards_untouched(replayed));
}

// Four requests in slots 5, 1, 3 and 0 of a pool of seven, decoded step by step by `schedule` ((request, width)
// rows) replayed from graphs, and launched as `reference` in a second pool: the replays must give its bytes, one
// graph serving every step, write no audio past a request's frames, and leave the slots no request holds zero
// (padding rows decode into the decoder's own sinks).
void check_moving_slots(codec_cuda& gpu, const sequence& seq,
                        const std::vector<std::vector<std::pair<int, int>>>& schedule, codec_cuda_launch reference) {
  const std::vector<int> slots = {5, 1, 3, 0};
  slot_pool replayed(gpu, 7, slots, 12), launched(gpu, 7, slots, 12);
  for (const auto& rows : schedule) {
    replayed.step(gpu, seq, rows, codec_cuda_launch::graph);
    launched.step(gpu, seq, rows, reference);
  }
  gpu.synchronize();
  CHECK(gpu.graphs() == 1);
  CHECK(replayed.decoded == launched.decoded);
  CHECK(same_pools(replayed, launched));
  CHECK(guards_untouched(replayed));
  const auto states = replayed.states.read();
  for (const int unused : {2, 4, 6}) {
    CAPTURE(unused);
    const auto begin = states.begin() + std::ptrdiff_t(std::size_t(unused) * replayed.state_floats);
    CHECK(std::all_of(begin, begin + std::ptrdiff_t(replayed.state_floats), [](float v) { return v == 0; }));
  }
  for (const int used : slots) {
    const auto begin = states.begin() + std::ptrdiff_t(std::size_t(used) * replayed.state_floats);
    CHECK(std::any_of(begin, begin + std::ptrdiff_t(replayed.state_floats), [](float v) { return v != 0; }));
  }
}

// The window widths of a ramp over n frames: ramp[0], ramp[1], ..., the last repeating, the last window
// cut to what is left.
std::vector<int> widths_of(std::span<const int> ramp, int n) {
  std::vector<int> w;
  for (int done = 0, step = 0; done < n; ++step) {
    w.push_back(std::min(ramp[std::min<std::size_t>(std::size_t(step), ramp.size() - 1)], n - done));
    done += w.back();
  }
  return w;
}

// One request alone, window by window from a fresh state; the audio of every window, in order.
std::vector<float> cuda_ramp(codec_cuda& gpu, const sequence& s, std::span<const int> ramp) {
  const std::size_t spf = gpu.samples_per_frame();
  device_floats state(gpu.state_layout().total), audio(std::size_t(s.n) * spf);
  int done = 0;
  for (int w : widths_of(ramp, s.n)) {
    const codec_cuda::row r{state.p, std::span(s.frames).subspan(std::size_t(done) * 16, std::size_t(w) * 16),
                            audio.p + std::size_t(done) * spf};
    gpu.decode_step(std::span(&r, 1));
    done += w;
  }
  gpu.synchronize();
  return audio.read();
}

// Several requests decoded together, each window by window from a fresh state: step k gives every request with
// frames left its next window of `ramp`; the audio of each, in order.
std::vector<std::vector<float>> cuda_rows_together(codec_cuda& gpu, const std::vector<sequence>& seqs,
                                                   std::span<const int> ramp, codec_cuda_launch launch) {
  const std::size_t spf = gpu.samples_per_frame();
  std::vector<std::unique_ptr<device_floats>> states, audio;
  std::vector<std::vector<int>> widths;
  std::vector<int> done(seqs.size(), 0);
  for (const auto& s : seqs) {
    states.push_back(std::make_unique<device_floats>(gpu.state_layout().total));
    audio.push_back(std::make_unique<device_floats>(std::size_t(s.n) * spf));
    widths.push_back(widths_of(ramp, s.n));
  }
  for (std::size_t k = 0;; ++k) {
    std::vector<codec_cuda::row> step;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      if (k >= widths[i].size()) continue;
      const int w = widths[i][k];
      step.push_back({states[i]->p, std::span(seqs[i].frames).subspan(std::size_t(done[i]) * 16, std::size_t(w) * 16),
                      audio[i]->p + std::size_t(done[i]) * spf});
      done[i] += w;
    }
    if (step.empty()) break;
    gpu.decode_step(step, launch);
  }
  gpu.synchronize();
  std::vector<std::vector<float>> out;
  for (const auto& a : audio)
    out.push_back(a->read());
  return out;
}

// The worst segment of two states, relative to the segment's largest magnitude; its name in `where`.
float state_error(const codec_state_layout& layout, const std::vector<float>& a, const std::vector<float>& b,
                  std::string& where) {
  float worst = 0;
  for (const auto& seg : layout.segments) {
    float scale = 1, err = 0;
    for (std::size_t i = seg.offset; i < seg.offset + seg.size; ++i) {
      scale = std::max(scale, std::fabs(b[i]));
      err = std::max(err, std::fabs(a[i] - b[i]));
    }
    if (err / scale > worst) {
      worst = err / scale;
      where = seg.name;
    }
  }
  return worst;
}

// A math on the tensor cores (TF32, fp16; cuBLAS's or with CUTLASS's convolutions) against the reference's audio: ramps
// of both fixtures' sequences within bound times the audio's largest magnitude (at least 1); the worst error printed
// for docs/benchmarks.md.
void check_tensor_core_math(codec_cuda_math math, float bound) {
  const char* name = codec_math_label(math);
  for (const std::string fixture : {"tiny06", "tiny17"}) {
    const auto parts = load_parts(fixture);
    codec_cuda gpu(parts.config, parts.weights, {1, max_window, 0, every_shape}, math);
    for (const std::string seq_name : {"short", "long"}) {
      const auto seq = load_sequence(fixture, seq_name);
      float scale = 1, worst = 0;
      for (float v : seq.audio)
        scale = std::max(scale, std::fabs(v));
      for (const std::vector<int>& ramp : std::vector<std::vector<int>>{{seq.n}, {1}, {1, 2, 4, 8}, {3, 5}}) {
        CAPTURE(name);
        CAPTURE(fixture);
        CAPTURE(seq_name);
        CAPTURE(ramp);
        const float err = max_abs_error(cuda_ramp(gpu, seq, ramp), seq.audio);
        CHECK(err <= bound * scale);
        worst = std::max(worst, err);
      }
      std::printf("codec cuda (%s) %s/%s: max |cuda - reference| %.3g (audio up to %.3g)\n", name, fixture.c_str(),
                  seq_name.c_str(), double(worst), double(scale));
    }
  }
}

// The released codec's config, random weights and a window of `width` frames of codes, for the tests at that size.
struct released_codec {
  codec_config config = released_codec_config();
  codec_weights weights = load_codec_weights(config, random_codec_tensor);
  std::vector<std::int32_t> codes;
  explicit released_codec(int width) : codes(std::size_t(width) * config.num_quantizers) {
    for (std::size_t i = 0; i < codes.size(); ++i)
      codes[i] = std::int32_t((i * 2654435761u) % std::uint32_t(config.codebook_size));
  }

  // `rows` fresh requests decoding the same window twice (the second from the state the first left) under
  // `launch`; the audio of both steps, request after request.
  std::vector<float> decode(codec_cuda& gpu, int rows, codec_cuda_launch launch) const {
    const std::size_t spf = std::size_t(config.samples_per_frame()), width = codes.size() / config.num_quantizers,
                      state_floats = gpu.state_layout().total;
    device_floats states(std::size_t(rows) * state_floats), audio(std::size_t(rows) * 2 * width * spf);
    for (int step = 0; step < 2; ++step) {
      std::vector<codec_cuda::row> rs;
      for (int r = 0; r < rows; ++r)
        rs.push_back({states.p + std::size_t(r) * state_floats, std::span(codes),
                      audio.p + (std::size_t(r) * 2 + std::size_t(step)) * width * spf});
      gpu.decode_step(rs, launch);
    }
    gpu.synchronize();
    return audio.read();
  }
};

// The largest magnitude of some audio.
float peak(const std::vector<float>& audio) {
  float p = 0;
  for (float v : audio)
    p = std::max(p, std::fabs(v));
  return p;
}

} // namespace

TEST_CASE("the CUDA codec streams every window ramp to the reference's whole-sequence audio within 1e-4" *
          doctest::skip(!mstar::test::has_gpu())) {
  std::vector<int> one_to_max(max_window);
  for (int i = 0; i < max_window; ++i)
    one_to_max[std::size_t(i)] = i + 1;
  for (const auto math : maths)
    for (const std::string fixture : {"tiny06", "tiny17"}) {
      const auto parts = load_parts(fixture);
      const codec_decoder host(parts.config, parts.weights);
      codec_cuda gpu(parts.config, parts.weights, {1, max_window, 0, every_shape}, math);
      for (const std::string name : {"short", "long"}) {
        const auto seq = load_sequence(fixture, name);
        REQUIRE(seq.audio.size() == std::size_t(seq.n) * gpu.samples_per_frame());
        const std::vector<std::vector<int>> ramps = {{seq.n},      {1},    {2},          {4},       {8},
                                                     {1, 2, 4, 8}, {3, 5}, {1, 1, 1, 7}, one_to_max};
        float worst_ref = 0, worst_host = 0;
        for (const auto& ramp : ramps) {
          CAPTURE(codec_math_label(math));
          CAPTURE(fixture);
          CAPTURE(name);
          CAPTURE(ramp);
          const auto audio = cuda_ramp(gpu, seq, ramp);
          const float ref = max_abs_error(audio, seq.audio),
                      own = max_abs_error(audio, decode_ramp(host, seq.frames, ramp));
          CHECK(ref <= audio_tolerance);
          CHECK(own <= audio_tolerance);
          worst_ref = std::max(worst_ref, ref);
          worst_host = std::max(worst_host, own);
        }
        std::printf("codec cuda (%s) %s/%s: max |cuda - reference| %.3g, max |cuda - host| %.3g over %zu ramps\n",
                    codec_math_label(math), fixture.c_str(), name.c_str(), double(worst_ref), double(worst_host),
                    ramps.size());
      }
    }
}

TEST_CASE("the CUDA codec in TF32 streams every window ramp to the reference's whole-sequence audio within "
          "bf16 tolerance (1e-2 of the audio's largest magnitude)" *
          doctest::skip(!mstar::test::has_gpu())) {
  // TF32 rounds a GEMM's inputs to 10 mantissa bits (bf16 keeps 7): the bound is the one the GPU forward is held
  // to in bf16, not the float32 paths' 1e-4. The worst error is printed for docs/benchmarks.md.
  check_tensor_core_math(codec_cuda_math::cublas_tf32, 1e-2f);
}

TEST_CASE("the CUDA codec over fp16 operands streams every window ramp to the reference's whole-sequence audio "
          "within bf16 tolerance (1e-2 of the audio's largest magnitude)" *
          doctest::skip(!mstar::test::has_gpu())) {
  // fp16 keeps TF32's 10 mantissa bits in half the bytes; its narrower range is what could fail here.
  check_tensor_core_math(codec_cuda_math::cublas_fp16, 1e-2f);
}

TEST_CASE("the CUDA codec over fp16 operands says when a value left fp16's range, and not before" *
          doctest::skip(!mstar::test::has_gpu())) {
  const auto parts = load_parts("tiny06");
  const auto seq = load_sequence("tiny06", "short");
  const std::vector<int> whole = {seq.n};
  // The semantic codebook scaled up: the codebooks stay float32 on the GPU, so the first value out of range is a
  // finite one (about 1e9), at the conversion of the semantic projection's input. (Scaling a product's weights
  // would overflow them to infinity at their own fp16 upload, so the flag would only ever see infinities.)
  codec_weights loud = parts.weights;
  for (auto& book : loud.rvq_first.layers)
    for (float& v : book.embedding)
      v *= 1e9f;
  std::vector<codec_cuda_math> fp16_maths = {codec_cuda_math::cublas_fp16};
  if (codec_cutlass_available()) fp16_maths.push_back(codec_cuda_math::cutlass_fp16);
  for (const auto math : fp16_maths) {
    CAPTURE(codec_math_label(math));
    codec_cuda fine(parts.config, parts.weights, {1, max_window, 0, every_shape}, math);
    CHECK_FALSE(fine.fp16_out_of_range());
    cuda_ramp(fine, seq, whole);           // synchronizes
    CHECK_FALSE(fine.fp16_out_of_range()); // the fixture's values fit
    codec_cuda over(parts.config, loud, {1, max_window, 0, every_shape}, math);
    cuda_ramp(over, seq, whole);
    CHECK(over.fp16_out_of_range());
  }
  // The other maths never convert to fp16: no flag whatever the values.
  codec_cuda tf32(parts.config, loud, {1, max_window}, codec_cuda_math::cublas_tf32);
  cuda_ramp(tf32, seq, whole);
  CHECK_FALSE(tf32.fp16_out_of_range());
}

TEST_CASE("the CUDA codec in TF32 (and with CUTLASS's convolutions where built) and over fp16 decodes three requests "
          "a step, eager and replayed, each within bf16 tolerance of the reference's audio" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Rows of different lengths share the steps: later steps hold fewer rows, and a replay pads them with idle
  // and filler rows. Ramp 1, 2, 4, 8 gives every step rows of one width (CUTLASS's convolutions take them, a replay
  // padding with a filler row of that width), ramp 3, 5 a step of widths 4, 5, 4 (their im2col).
  const auto parts = load_parts("tiny17");
  const std::vector<sequence> seqs = {load_sequence("tiny17", "short"), load_sequence("tiny17", "long"),
                                      load_sequence("tiny17", "short")};
  std::vector<codec_cuda_math> tensor_maths = {codec_cuda_math::cublas_tf32, codec_cuda_math::cublas_fp16};
  for (const auto& [math, cublas] : cutlass_maths())
    tensor_maths.push_back(math);
  for (const auto math : tensor_maths) {
    CAPTURE(codec_math_label(math));
    codec_cuda gpu(parts.config, parts.weights, {4, max_window, 0, every_shape}, math);
    for (const auto launch : {codec_cuda_launch::eager, codec_cuda_launch::graph})
      for (const std::vector<int>& ramp : std::vector<std::vector<int>>{{1, 2, 4, 8}, {3, 5}}) {
        const auto audio = cuda_rows_together(gpu, seqs, ramp, launch);
        for (std::size_t i = 0; i < seqs.size(); ++i) {
          float scale = 1;
          for (float v : seqs[i].audio)
            scale = std::max(scale, std::fabs(v));
          CAPTURE(launch_name(launch));
          CAPTURE(ramp);
          CAPTURE(i);
          CHECK(max_abs_error(audio[i], seqs[i].audio) <= 1e-2f * scale);
        }
      }
  }
}

TEST_CASE("a CUDA codec confined to some of the SMs gives the bytes of one on the whole GPU" *
          doctest::skip(!mstar::test::has_gpu())) {
  // codec_cuda_limits::sm_count puts the decoder's stream in a green context; under double sums every kernel's
  // sums are in one fixed order whatever SMs run it, so the audio is the same bytes (cuBLAS could pick another
  // algorithm for fewer SMs, hence double sums here).
  const auto parts = load_parts("tiny17");
  const auto seq = load_sequence("tiny17", "long");
  const std::vector<int> ramp = {1, 2, 4, 8};
  codec_cuda whole(parts.config, parts.weights, {1, max_window}, codec_cuda_math::double_sums);
  codec_cuda part(parts.config, parts.weights, {1, max_window, 16}, codec_cuda_math::double_sums);
  CHECK(whole.sm_count() == 0);
  CHECK(part.sm_count() >= 16);
  int sms = 0;
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(part.sm_count() < sms);
  std::printf("codec cuda on %d of %d SMs\n", part.sm_count(), sms);
  CHECK(same_bytes(cuda_ramp(part, seq, ramp), cuda_ramp(whole, seq, ramp)));
  CHECK_THROWS_WITH_AS(codec_cuda(parts.config, parts.weights, {1, max_window, sms + 1}, codec_cuda_math::double_sums),
                       doctest::Contains("the device has"), std::invalid_argument);
}

TEST_CASE("a CUDA codec confined to some of the SMs runs its library kernels at the released size" *
          doctest::skip(!mstar::test::has_gpu())) {
  // cuBLAS picks its kernels by the GEMM's size, and at the released size (unlike the tiny fixtures)
  // some of them are persistent kernels sized by the SM count: in a green context they must be sized by the
  // partition's. Eight rows of four frames, eager and as a graph, against the same math on the whole GPU.
  constexpr int rows = 8, width = 4;
  const released_codec released(width);
  int sms = 0;
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  std::vector<codec_cuda_math> tensor_maths = {codec_cuda_math::cublas_f32, codec_cuda_math::cublas_tf32,
                                               codec_cuda_math::cublas_fp16};
  for (const auto& [math, cublas] : cutlass_maths())
    tensor_maths.push_back(math);
  for (const auto math : tensor_maths) {
    CAPTURE(codec_math_label(math));
    codec_cuda whole(released.config, released.weights, {rows, width}, math);
    codec_cuda part(released.config, released.weights, {rows, width, std::min(32, sms / 2)}, math);
    REQUIRE(part.sm_count() < sms);
    const auto expected = released.decode(whole, rows, codec_cuda_launch::eager);
    CHECK(peak(expected) > 1e-4f); // audio to compare, not silence
    const float scale = std::max(peak(expected), 1e-3f);
    for (const auto launch : {codec_cuda_launch::eager, codec_cuda_launch::graph}) {
      CAPTURE(launch_name(launch));
      CHECK(max_abs_error(released.decode(part, rows, launch), expected) <= 1e-2f * scale);
    }
  }
}

TEST_CASE("a CUDA codec refuses a negative SM count before touching the device") {
  const auto parts = load_parts("tiny06");
  CHECK_THROWS_WITH_AS(codec_cuda(parts.config, parts.weights, {1, max_window, -1}), doctest::Contains("sm_count -1"),
                       std::invalid_argument);
}

TEST_CASE("on the CUDA codec every window split of a request gives the same bits (cuBLAS: within 1e-5)" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Each output sums its terms in one order whatever the window, as on the host: the carried state
  // must reproduce the whole-sequence decode exactly, not approximately.
  const auto parts = load_parts("tiny06");
  const auto seq = load_sequence("tiny06", "long");
  for (const auto math : maths) {
    codec_cuda gpu(parts.config, parts.weights, {1, max_window, 0, every_shape}, math);
    const auto whole = cuda_ramp(gpu, seq, std::vector<int>{seq.n});
    for (const auto& ramp : std::vector<std::vector<int>>{{1}, {1, 2, 4, 8}, {3, 5}, {4}, {5, 1}}) {
      CAPTURE(codec_math_label(math));
      CAPTURE(ramp);
      CHECK(agree(cuda_ramp(gpu, seq, ramp), whole, math, "a window split against the whole sequence"));
    }
  }
}

TEST_CASE("rows of one CUDA codec step with different widths each get the bits they get alone (cuBLAS: within 1e-5)" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const auto math : maths)
    for (const std::string fixture : {"tiny06", "tiny17"}) {
      CAPTURE(codec_math_label(math));
      CAPTURE(fixture);
      const auto parts = load_parts(fixture);
      codec_cuda gpu(parts.config, parts.weights, {4, 8, 0, every_shape}, math);
      const std::size_t spf = gpu.samples_per_frame(), state_floats = gpu.state_layout().total;
      // Three requests: the long sequence twice with different ramps, and the short one; per step each row
      // takes its next width, a finished row leaves the step.
      const auto a = load_sequence(fixture, "long"), b = load_sequence(fixture, "short");
      struct request {
        const sequence* seq;
        std::vector<int> widths;
        device_floats state, audio;
        int done = 0;
      };
      std::vector<std::unique_ptr<request>> reqs;
      for (auto [seq, ramp] : {std::pair{&a, std::vector<int>{1, 2, 4, 8}}, std::pair{&a, std::vector<int>{3, 5}},
                               std::pair{&b, std::vector<int>{2, 1, 8}}})
        reqs.push_back(std::unique_ptr<request>(
            new request{seq, widths_of(ramp, seq->n), device_floats(state_floats), device_floats(seq->n * spf)}));
      for (std::size_t step = 0;; ++step) {
        std::vector<codec_cuda::row> rows;
        for (auto& r : reqs)
          if (step < r->widths.size()) {
            const int w = r->widths[step];
            rows.push_back({r->state.p,
                            std::span(r->seq->frames).subspan(std::size_t(r->done) * 16, std::size_t(w) * 16),
                            r->audio.p + std::size_t(r->done) * spf});
            r->done += w;
          }
        if (rows.empty()) break;
        gpu.decode_step(rows);
      }
      gpu.synchronize();
      for (auto& r : reqs) {
        REQUIRE(r->done == r->seq->n);
        const auto together = r->audio.read();
        CHECK(agree(together, cuda_ramp(gpu, *r->seq, r->widths), math, "a row of a batched step against it alone"));
        CHECK(max_abs_error(together, r->seq->audio) <= audio_tolerance);
      }
    }
}

TEST_CASE("the CUDA codec's state after each window is the host decoder's state after the same window" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const auto math : maths)
    for (const std::string fixture : {"tiny06", "tiny17"}) {
      const auto parts = load_parts(fixture);
      const codec_decoder host(parts.config, parts.weights);
      codec_cuda gpu(parts.config, parts.weights, {1, max_window, 0, every_shape}, math);
      REQUIRE(gpu.state_layout().total == host.state_layout().total);
      const auto seq = load_sequence(fixture, "long");
      const std::size_t spf = gpu.samples_per_frame();
      device_floats state(gpu.state_layout().total), audio(std::size_t(max_window) * spf);
      std::vector<float> host_state(host.state_layout().total, 0.0f);
      // Widths 1, 3, 5, 1, 6 and 7: the key/value window (3 frames here) fills, then shifts by less and by
      // more than its length.
      int done = 0;
      for (int w : {1, 3, 5, 1, 6, 7}) {
        CAPTURE(codec_math_label(math));
        CAPTURE(fixture);
        CAPTURE(done);
        CAPTURE(w);
        const auto frames = std::span(seq.frames).subspan(std::size_t(done) * 16, std::size_t(w) * 16);
        const codec_cuda::row r{state.p, frames, audio.p};
        gpu.decode_step(std::span(&r, 1));
        host.decode_window(host_state, frames);
        gpu.synchronize();
        const auto device_state = state.read();
        CHECK(device_state[0] == host_state[0]); // the frame counter, exactly
        std::string where;
        const float err = state_error(host.state_layout(), device_state, host_state, where);
        CAPTURE(where);
        CHECK(err <= state_tolerance);
        done += w;
      }
      REQUIRE(done == seq.n);
    }
}

TEST_CASE("a CUDA codec state zeroed after a request decodes the next request as a fresh one does" *
          doctest::skip(!mstar::test::has_gpu())) {
  const auto parts = load_parts("tiny17");
  codec_cuda gpu(parts.config, parts.weights, {1, max_window});
  const auto first = load_sequence("tiny17", "long"), second = load_sequence("tiny17", "short");
  const std::size_t spf = gpu.samples_per_frame();
  device_floats state(gpu.state_layout().total), audio(std::size_t(max_window) * spf);
  const codec_cuda::row one{state.p, first.frames, audio.p};
  gpu.decode_step(std::span(&one, 1));
  gpu.synchronize();
  const auto used = state.read();
  CHECK(std::any_of(used.begin(), used.end(), [](float v) { return v != 0; }));
  state.zero(); // what the pool's teardown does to a released slot
  const codec_cuda::row two{state.p, second.frames, audio.p};
  gpu.decode_step(std::span(&two, 1));
  gpu.synchronize();
  auto reused = audio.read();
  reused.resize(second.audio.size());
  CHECK(same_bytes(reused, cuda_ramp(gpu, second, std::vector<int>{second.n})));
  CHECK(max_abs_error(reused, second.audio) <= audio_tolerance);
}

TEST_CASE("the CUDA codec refuses a bad code, a window too wide and too many rows before enqueueing anything" *
          doctest::skip(!mstar::test::has_gpu())) {
  const auto parts = load_parts("tiny06");
  codec_cuda gpu(parts.config, parts.weights, {2, 4});
  const int size = parts.config.codebook_size;
  auto frames = load_sequence("tiny06", "short").frames; // 7 frames
  device_floats state(gpu.state_layout().total), audio(std::size_t(8) * gpu.samples_per_frame());
  frames[16 + 3] = size; // frame 1, codebook 3: the first control id
  const codec_cuda::row bad{state.p, std::span(frames).first(4 * 16), audio.p};
  CHECK_THROWS_WITH_AS(gpu.decode_step(std::span(&bad, 1)),
                       doctest::Contains(("frame 1, codebook 3: code " + std::to_string(size)).c_str()),
                       std::invalid_argument);
  frames[16 + 3] = 0;
  const codec_cuda::row wide{state.p, std::span(frames).first(5 * 16), audio.p};
  CHECK_THROWS_WITH_AS(gpu.decode_step(std::span(&wide, 1)), doctest::Contains("a window is 1 to 4 frames"),
                       std::invalid_argument);
  const codec_cuda::row ok{state.p, std::span(frames).first(16), audio.p};
  const std::vector<codec_cuda::row> three(3, ok);
  CHECK_THROWS_WITH_AS(gpu.decode_step(three), doctest::Contains("at most 2"), std::invalid_argument);
  gpu.synchronize();
  const auto untouched = state.read();
  CHECK(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == 0; }));
}

TEST_CASE("a CUDA codec step replayed from its graph gives the bytes of audio and state of the launch it replays, "
          "for several buckets and widths" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Each shape runs three steps, replayed but for the first step of a new key (eager, then captured). Rows
  // fewer than their bucket leave idle rows; widths below the widest leave frames to the filler row. The
  // five-row shape's graph serves the eight-row shape (both bucket 8, width 8).
  const std::vector<std::vector<int>> shapes = {
      {1}, {3, 3}, {8, 8, 8}, {1, 2, 4, 8, 3}, {2, 2, 2, 2}, {5, 1, 7, 2, 8, 3, 6, 4}, {8}};
  for (const auto math : maths)
    for (const std::string fixture : {"tiny06", "tiny17"}) {
      CAPTURE(codec_math_label(math));
      CAPTURE(fixture);
      const auto parts = load_parts(fixture);
      const auto seq = load_sequence(fixture, "long");
      codec_cuda gpu(parts.config, parts.weights, {8, 8, 0, every_shape}, math);
      std::set<std::pair<int, int>> keys; // (bucket, width)
      for (const auto& widths : shapes) {
        CAPTURE(widths);
        check_replays(gpu, seq, widths, replayed_launch(math));
        const int rows = int(widths.size());
        const int width = *std::max_element(widths.begin(), widths.end());
        CHECK(gpu.bucket_of(rows) == std::min(8, int(std::bit_ceil(unsigned(rows)))));
        keys.insert({gpu.bucket_of(rows), width});
        CHECK(gpu.graphs() == keys.size());
        std::printf("codec cuda (%s) %s: %d rows of widths up to %d (bucket %d): graph replays give the %s step's "
                    "bytes\n",
                    codec_math_label(math), fixture.c_str(), rows, width, gpu.bucket_of(rows),
                    launch_name(replayed_launch(math)));
      }
    }
}

TEST_CASE("one CUDA codec graph serves rows whose slots change between replays, and its padding rows write no "
          "caller's state or audio" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Each step takes three of the four requests in another order (bucket 4: one idle row), widths 1 or 2 with a 2 in
  // every step, so every step is the key (4, 2).
  const std::vector<std::vector<std::pair<int, int>>> schedule = {{{0, 2}, {1, 1}, {2, 2}}, {{2, 1}, {3, 2}, {0, 2}},
                                                                  {{1, 2}, {0, 1}, {3, 1}}, {{3, 2}, {2, 2}, {1, 2}},
                                                                  {{0, 1}, {3, 1}, {2, 2}}, {{1, 1}, {2, 1}, {0, 2}}};
  for (const auto math : maths) {
    CAPTURE(codec_math_label(math));
    const auto parts = load_parts("tiny06");
    const auto seq = load_sequence("tiny06", "long");
    codec_cuda gpu(parts.config, parts.weights, {4, 2, 0, every_shape}, math);
    check_moving_slots(gpu, seq, schedule, replayed_launch(math));
  }
}

TEST_CASE("the CUDA codec with CUTLASS's TF32 convolutions streams every window ramp to the reference's whole-sequence "
          "audio within bf16 tolerance (1e-2 of the audio's largest magnitude)" *
          doctest::skip(!mstar::test::has_gpu() || !codec_cutlass_available())) {
  // TF32 as cublas_tf32, with the multi-tap convolutions' windows read in place: the same bound. The worst error is
  // printed for docs/benchmarks.md.
  check_tensor_core_math(codec_cuda_math::cutlass_tf32, 1e-2f);
}

TEST_CASE("the CUDA codec with CUTLASS's fp16 convolutions streams every window ramp to the reference's whole-sequence "
          "audio within bf16 tolerance (1e-2 of the audio's largest magnitude)" *
          doctest::skip(!mstar::test::has_gpu() || !codec_cutlass_available())) {
  // cublas_fp16's operands (the extend rounds the extended input as the im2col would), summed by CUTLASS where the
  // input channels are a multiple of 8: the same bound. The worst error is printed for docs/benchmarks.md.
  check_tensor_core_math(codec_cuda_math::cutlass_fp16, 1e-2f);
}

TEST_CASE("at the released size CUTLASS's convolutions keep the audio as close to float32's as cuBLAS over the same "
          "operands does, for steps of equal rows eager and replayed" *
          doctest::skip(!mstar::test::has_gpu() || !codec_cutlass_available())) {
  // The released channel counts (1024, 1536, 768 down to 96) reach CUTLASS's two tiles; 8 rows fill their bucket,
  // 5 leave a replay three filler rows. Each CUTLASS math and the cuBLAS math of its operands (TF32, fp16) round the
  // same operands to 10 mantissa bits and sum in float32, in other orders (and cuBLAS may round otherwise): the
  // CUTLASS math is held to at most twice the cuBLAS math's distance from cuBLAS float32 (plus 1e-4 of the audio's
  // largest magnitude), and to 1e-2 of it from the cuBLAS math.
  constexpr int width = 4;
  const released_codec released(width);
  codec_cuda f32(released.config, released.weights, {8, width}, codec_cuda_math::cublas_f32);
  for (const auto& [math, cublas_math] : cutlass_maths()) {
    CAPTURE(codec_math_label(math));
    codec_cuda cublas(released.config, released.weights, {8, width}, cublas_math);
    codec_cuda conv(released.config, released.weights, {8, width}, math);
    for (const int rows : {8, 5}) {
      const auto expected = released.decode(f32, rows, codec_cuda_launch::eager);
      CHECK(peak(expected) > 1e-4f); // audio to compare, not silence
      const float scale = std::max(peak(expected), 1e-3f);
      for (const auto launch : {codec_cuda_launch::eager, codec_cuda_launch::graph}) {
        CAPTURE(rows);
        CAPTURE(launch_name(launch));
        const auto by_cublas = released.decode(cublas, rows, launch), by_cutlass = released.decode(conv, rows, launch);
        const float cublas_err = max_abs_error(by_cublas, expected), cutlass_err = max_abs_error(by_cutlass, expected),
                    between = max_abs_error(by_cutlass, by_cublas);
        std::printf("codec cuda at the released size, %d rows x %d frames, %s: max |%s - f32| %.3g, max |%s - f32| "
                    "%.3g; max |%s - %s| %.3g (audio up to %.3g)\n",
                    rows, width, launch_name(launch), codec_math_label(cublas_math), double(cublas_err),
                    codec_math_label(math), double(cutlass_err), codec_math_label(math), codec_math_label(cublas_math),
                    double(between), double(scale));
        CHECK(cutlass_err <= 2 * cublas_err + 1e-4f * scale);
        CHECK(between <= 1e-2f * scale);
        // CUTLASS ran: a step that fell back to the im2col whole would give the cuBLAS math's bytes (an H100 gave
        // 1.6e-3 for TF32).
        CHECK(between > 0.0f);
      }
    }
  }
}

TEST_CASE("at the released size CUTLASS's convolutions leave a convolution of less than a wave of threadblocks to "
          "cuBLAS over the same operands (its bytes at one row of one frame), and take it with cutlass_min_tiles 0" *
          doctest::skip(!mstar::test::has_gpu() || !codec_cutlass_available())) {
  // One row of one frame: the widest convolution (the last block's, 96 channels over 1,920 positions) is 15 tiles of
  // CUTLASS's 128 positions, under any GPU's wave, so by default every convolution takes the im2col and the bytes are
  // the cuBLAS math's (TF32 or fp16). With cutlass_min_tiles 0 the same step runs CUTLASS's convolutions: other
  // bytes, as close.
  constexpr int width = 1;
  const released_codec released(width);
  for (const auto& [math, cublas_math] : cutlass_maths()) {
    CAPTURE(codec_math_label(math));
    codec_cuda cublas(released.config, released.weights, {1, width}, cublas_math);
    codec_cuda by_default(released.config, released.weights, {1, width}, math);
    codec_cuda every(released.config, released.weights, {1, width, 0, every_shape}, math);
    CHECK_THROWS_WITH_AS(codec_cuda(released.config, released.weights, {1, width, 0, -2}, math),
                         doctest::Contains("cutlass_min_tiles -2"), std::invalid_argument);
    for (const auto launch : {codec_cuda_launch::eager, codec_cuda_launch::graph}) {
      CAPTURE(launch_name(launch));
      const auto expected = released.decode(cublas, 1, launch);
      CHECK(peak(expected) > 1e-4f); // audio to compare, not silence
      CHECK(same_bytes(released.decode(by_default, 1, launch), expected));
      const auto forced = released.decode(every, 1, launch);
      const float between = max_abs_error(forced, expected);
      CHECK(between > 0.0f);
      CHECK(between <= 1e-2f * std::max(peak(expected), 1e-3f));
    }
  }
}

TEST_CASE("under CUTLASS's convolutions a step of rows of different widths takes the cuBLAS path of the same "
          "operands, to its bytes" *
          doctest::skip(!mstar::test::has_gpu() || !codec_cutlass_available())) {
  // Rows of several widths are no set of equal images: every convolution falls back to the im2col and the cuBLAS math
  // of its operands (cublas_tf32, cublas_fp16), so the audio and the state are that math's bytes, eager and replayed
  // (the padded steps' layout is the same too).
  const std::vector<std::vector<int>> shapes = {{1, 2, 4, 8, 3}, {5, 1, 7, 2, 8, 3, 6, 4}, {2, 1}};
  for (const auto& [math, cublas_math] : cutlass_maths())
    for (const std::string fixture : {"tiny06", "tiny17"}) {
      const auto parts = load_parts(fixture);
      const auto seq = load_sequence(fixture, "long");
      codec_cuda conv(parts.config, parts.weights, {8, 8, 0, every_shape}, math);
      codec_cuda cublas(parts.config, parts.weights, {8, 8}, cublas_math);
      for (const auto& widths : shapes)
        for (const auto launch : {codec_cuda_launch::eager, codec_cuda_launch::graph}) {
          CAPTURE(codec_math_label(math));
          CAPTURE(fixture);
          CAPTURE(widths);
          CAPTURE(launch_name(launch));
          const widths_step step(widths);
          slot_pool by_cutlass(conv, step.size(), step.slots, 24), by_cublas(cublas, step.size(), step.slots, 24);
          for (int i = 0; i < 3; ++i) {
            by_cutlass.step(conv, seq, step.rows, launch);
            by_cublas.step(cublas, seq, step.rows, launch);
          }
          conv.synchronize();
          cublas.synchronize();
          CHECK(same_pools(by_cutlass, by_cublas));
        }
    }
}

TEST_CASE("under CUTLASS's convolutions a graph replay gives the bytes of the bucketed launch, steps of one width "
          "padded with filler rows of that width that write no caller's state or audio" *
          doctest::skip(!mstar::test::has_gpu() || !codec_cutlass_available())) {
  // Steps of one width take their own graph (bucket, width, one width), padded with filler rows of that width over
  // the filler state; steps of several widths the usual one. Each shape runs three steps, as the double-sum and
  // cuBLAS f32 test above does.
  const std::vector<std::vector<int>> shapes = {
      {1}, {3, 3}, {8, 8, 8}, {2, 2, 2, 2}, {1, 2, 4, 8, 3}, {4, 4, 4, 4, 4}, {8, 4, 8}, {8}};
  for (const auto& [math, cublas_math] : cutlass_maths()) {
    CAPTURE(codec_math_label(math));
    for (const std::string fixture : {"tiny06", "tiny17"}) {
      CAPTURE(fixture);
      const auto parts = load_parts(fixture);
      const auto seq = load_sequence(fixture, "long");
      codec_cuda gpu(parts.config, parts.weights, {8, 8, 0, every_shape}, math);
      std::set<std::tuple<int, int, bool>> keys; // (bucket, width, one width)
      for (const auto& widths : shapes) {
        CAPTURE(widths);
        check_replays(gpu, seq, widths, codec_cuda_launch::bucketed);
        const auto [narrowest, widest] = std::minmax_element(widths.begin(), widths.end());
        keys.insert({gpu.bucket_of(int(widths.size())), *widest, *narrowest == *widest});
        CHECK(gpu.graphs() == keys.size());
      }
    }
    // Three of four requests a step in another order, all two frames wide: one graph (bucket 4, width 2, one width)
    // whose filler row decodes into the decoder's own sinks.
    const std::vector<std::vector<std::pair<int, int>>> schedule = {
        {{0, 2}, {1, 2}, {2, 2}}, {{2, 2}, {3, 2}, {0, 2}}, {{1, 2}, {0, 2}, {3, 2}}, {{3, 2}, {2, 2}, {1, 2}}};
    const auto parts = load_parts("tiny06");
    const auto seq = load_sequence("tiny06", "long");
    codec_cuda gpu(parts.config, parts.weights, {4, 2, 0, every_shape}, math);
    check_moving_slots(gpu, seq, schedule, codec_cuda_launch::bucketed);
  }
}

TEST_CASE("a CUDA codec asked for CUTLASS's convolutions in a build without CUTLASS says how to get it, before "
          "touching the device") {
  if (codec_cutlass_available()) {
    CHECK(codec_math_named("tf32-conv") == codec_cuda_math::cutlass_tf32);
    CHECK(codec_math_named("fp16-conv") == codec_cuda_math::cutlass_fp16);
    return; // this build has it: the cases above run the maths
  }
  const auto parts = load_parts("tiny06");
  CHECK_THROWS_WITH_AS(codec_cuda(parts.config, parts.weights, {1, max_window}, codec_cuda_math::cutlass_tf32),
                       doctest::Contains("CUTLASS, which was not found at build time: run scripts/setup.sh"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(codec_cuda(parts.config, parts.weights, {1, max_window}, codec_cuda_math::cutlass_fp16),
                       doctest::Contains("fp16-conv (CUTLASS fp16 convolutions) needs CUTLASS"), std::invalid_argument);
}

TEST_CASE("codec math auto (the speech service's default) is tf32-conv where the build has CUTLASS, else tf32") {
  CHECK(codec_math_named("auto") ==
        (codec_cutlass_available() ? codec_cuda_math::cutlass_tf32 : codec_cuda_math::cublas_tf32));
  CHECK_THROWS_WITH_AS(codec_math_named("tf64"), doctest::Contains("auto (tf32-conv where"), std::invalid_argument);
}
