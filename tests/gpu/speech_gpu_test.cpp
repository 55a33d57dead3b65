// The real Qwen3-TTS through mstar's engine and worker on the CUDA backend (the CUDA Talker, the CUDA codec),
// on the reference's fixtures (tests/fixtures/qwen3tts, written by tools/make_fixtures.py), and both models'
// per-request state under rows that move.
//
// Rules. Against the reference, greedy: the CUDA pipeline's codes equal the reference's until a first
// difference, which must fall on a decision the reference made by a margin within tol x max|logit| (tol 5e-2,
// max|logit| the largest reference logit recorded for the prompt), a flip bf16 is expected to cause, as
// talker_gpu_test's free-running rule; 32 identical frames are warned about, not failed. Moving rows,
// through talker_cuda directly: two runs with the same steps of the same row counts, one with rows and slots
// in request order, one with both shuffled at every step, give every request bit-identical codes (a GEMM's
// row does not depend on its position). Through the engine: a request among many of different lengths makes
// its codes alone, up to a low-margin flip (batches of other sizes change the GEMMs' summation order).
// Audio: the CUDA pipeline's speech for each request is within 1e-4 (max absolute error) of the host decoder's
// whole-sequence decode of the codes the pipeline made, which the parity suite holds equal to the reference
// decoder's forward; the codes may differ from the reference's (bf16), the audio is checked for the codes made.
// A codec state left in a reused slot, or given to another request's row, breaks that bound from its first
// window on.
// Without a GPU the speech service's backend choice still runs: auto serves on the host, cuda refuses.
#include <mstar/backend/cuda_impl.hpp> // this program's one definition of the CUDA backend

#include "gpu_test.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec_checkpoint.hpp"
#include "parity/talker/fixture_prompts.hpp"
#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "qwen3_tts/checkpoint/safetensors.hpp"
#include "speech_forwards_cuda.hpp"
#include "speech_model.hpp"
#include "speech_service_cuda.hpp"
#include "talker_checkpoint.hpp"

namespace {

using namespace qwen3_tts;
using namespace qwen3_tts::pipeline;
using qwen3_tts::testing::fixture_root;
using qwen3_tts::testing::prompt_of;

constexpr float tol = 5e-2f;
constexpr double audio_tol = 1e-4;
constexpr codec_cuda_math codec_maths[] = {codec_cuda_math::cublas_f32, codec_cuda_math::double_sums};

struct fixture {
  std::string dir;
  talker_host talker;
  codec_decoder codec;
  nlohmann::json prompts;
};

fixture load_fixture(const std::string& name) {
  const std::string dir = fixture_root + name;
  std::ifstream f(dir + "/expected/talker.json");
  const auto doc = nlohmann::json::parse(f);
  return {dir, load_talker(dir), load_codec_decoder(dir), doc.at("prompts")};
}

// The CUDA Talker of a fixture, its weights the checkpoint's bf16 bytes, as synth loads them.
std::unique_ptr<talker_cuda> cuda_talker(const fixture& c, const talker_cuda_limits& limits) {
  auto gpu = std::make_unique<talker_cuda>(cuda_dims(c.talker.config()), limits);
  const checkpoint_folder checkpoint = open_checkpoint(c.dir);
  gpu->load_weights(store_weight_source(checkpoint.weights));
  return gpu;
}

speech_request request_of(const nlohmann::json& p, std::uint32_t max_frames) {
  speech_request r;
  r.prompt = prompt_of(p);
  r.max_frames = max_frames;
  return r;
}

int first_difference(const std::vector<std::int32_t>& got, const std::vector<std::int32_t>& want, int groups) {
  const std::size_t n = std::min(got.size(), want.size());
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) return int(i / std::size_t(groups));
  return got.size() == want.size() ? -1 : int(n / std::size_t(groups));
}

// The largest absolute difference between a request's audio and the host decoder's whole-sequence decode of the
// codes it made (infinite where the lengths differ or a sample is not a number).
double audio_error(const fixture& c, const speech_result& r) {
  const std::size_t codes = std::size_t(r.frames) * std::size_t(c.talker.config().code_groups);
  if (r.codes.size() < codes) return INFINITY;
  const std::vector<float> want = c.codec.decode_all(std::span<const std::int32_t>(r.codes).first(codes));
  if (r.audio.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double(r.audio[i]) - double(want[i]));
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

// Checks every completed request's audio against the host decoder's for its codes; returns the largest error.
double check_completed_audio(const fixture& c, const speech_run_result& run) {
  double worst = 0;
  for (const auto& [id, r] : run.results) {
    if (r.how != mstar::request_end::completed) continue;
    CAPTURE(id);
    CHECK(r.frames > 0);
    const double e = audio_error(c, r);
    CHECK(e <= audio_tol);
    worst = std::max(worst, e);
  }
  return worst;
}

std::size_t count_ended(const speech_run_result& run, mstar::request_end how) {
  return std::size_t(std::count_if(run.results.begin(), run.results.end(),
                                   [&](const auto& kv) { return kv.second.how == how; }));
}

// count requests cycling through the fixture's prompts, request i making frames(i) frames at most.
template <class Frames>
std::vector<speech_request> cycled_requests(const fixture& c, std::size_t count, Frames frames) {
  std::vector<speech_request> out;
  for (std::size_t i = 0; i < count; ++i)
    out.push_back(request_of(c.prompts[i % c.prompts.size()], frames(i)));
  return out;
}

void check_pools_full(const speech_run_result& r) {
  CHECK(r.kv_free_blocks == r.kv_blocks);
  CHECK(r.codec_free_slots == r.codec_slots);
  CHECK(r.talker_free_slots == r.talker_slots);
  CHECK(r.buffers_free);
}

} // namespace

TEST_CASE("through the CUDA pipeline the greedy codes are the reference's on the fixtures for at least 32 frames "
          "(their decisions win by at least 0.1 of max|logit|)" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const char* name : {"tiny06", "tiny17"}) {
    CAPTURE(name);
    const fixture c = load_fixture(name);
    const int groups = c.talker.config().code_groups;
    std::vector<speech_request> requests;
    for (const auto& p : c.prompts)
      requests.push_back(request_of(p, p.at("generation").at("max_new_tokens").get<std::uint32_t>() - 1));
    speech_run_options o;
    o.sampling = talker_sampling::greedy();
    o.max_batch = 4; // fewer rows than prompts: requests wait, and rows change hands as others end
    auto gpu = cuda_talker(c, speech_talker_limits<host_speech>(o.max_batch));
    const auto run = run_speech_cuda<host_speech>(c.talker, *gpu, c.codec, requests, o);
    REQUIRE(run.results.size() == c.prompts.size());
    const safetensors_file logits(c.dir + "/expected/talker_logits.safetensors");
    std::printf("%s through the CUDA pipeline, frames identical per prompt:", name);
    for (std::size_t i = 0; i < c.prompts.size(); ++i) {
      const auto& p = c.prompts[i];
      const auto& r = run.results.at(i + 1);
      const std::string label = std::string(name) + " prompt " + std::to_string(i) + " (" +
                                p.at("name").get<std::string>() + ")";
      CAPTURE(label);
      REQUIRE(r.how == mstar::request_end::completed);
      std::vector<std::int32_t> want;
      for (const auto& frame : p.at("codes"))
        for (const auto& code : frame)
          want.push_back(code.get<std::int32_t>());
      const int n = p.at("frames").get<int>();
      const int at = first_difference(r.codes, want, groups);
      std::printf(" %d/%d", at < 0 ? n : at, n);
      CHECK(r.audio.size() == std::size_t(r.frames) * c.codec.samples_per_frame());
      if (at < 0) {
        CHECK(r.ended_by_token == p.at("stopped_on_eos").get<bool>());
        continue;
      }
      if (at >= n) { // every reference frame matched; the CUDA run went on (the end token flipped)
        std::printf("\n%s: the reference's %d frames matched and then the run went on past its end token\n",
                    label.c_str(), n);
        CHECK(at == n);
        continue;
      }
      // The first differing decision of frame `at`, and the reference's margin there.
      int g = 0;
      while (g < groups && std::size_t(at) * groups + std::size_t(g) < r.codes.size() &&
             r.codes[std::size_t(at) * groups + std::size_t(g)] == want[std::size_t(at) * groups + std::size_t(g)])
        ++g;
      g = std::min(g, groups - 1);
      const double margin = p.at("margins")[std::size_t(at)][std::size_t(g)].get<double>();
      double scale = 0;
      for (const char* tensor : {"talker_logits", "predictor_logits"})
        for (float v : to_f32(*logits.find("p" + std::to_string(i) + "." + tensor)))
          if (std::isfinite(v)) scale = std::max(scale, double(std::fabs(v)));
      std::printf("\n%s: frame %d codebook %d differs; reference margin %.3g (%.3g of max|logit|)\n", label.c_str(),
                  at, g, margin, margin / scale);
      INFO(label, ": frame ", at, " codebook ", g, " differs from the reference, whose margin there is ", margin,
           ", more than the tolerance ", tol, " x max|logit| ", scale);
      CHECK(margin <= tol * scale);
      CHECK_MESSAGE(at >= std::min(32, n), label, ": greedy codes identical for ", at, " of ", n,
                    " frames, short of 32, where every decision of the fixtures wins by at least 0.1 of max|logit|");
    }
    std::printf("\n");
    check_pools_full(run);
  }
}

TEST_CASE("through the CUDA pipeline every fixture prompt's audio is the reference decoder's for the codes it made, "
          "within 1e-4, in both codec maths" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const char* name : {"tiny06", "tiny17"}) {
    const fixture c = load_fixture(name);
    std::vector<speech_request> requests;
    for (const auto& p : c.prompts)
      requests.push_back(request_of(p, p.at("generation").at("max_new_tokens").get<std::uint32_t>() - 1));
    speech_run_options o;
    o.sampling = talker_sampling::greedy();
    o.max_batch = 4;
    auto gpu = cuda_talker(c, speech_talker_limits<host_speech>(o.max_batch));
    for (const codec_cuda_math math : codec_maths) {
      CAPTURE(name);
      CAPTURE(codec_math_label(math));
      const auto run = run_speech_cuda<host_speech>(c.talker, *gpu, c.codec, requests, o, math);
      REQUIRE(run.results.size() == c.prompts.size());
      CHECK(count_ended(run, mstar::request_end::completed) == run.results.size());
      const double worst = check_completed_audio(c, run);
      std::printf("%s, codec %s: audio through the CUDA pipeline within %.3g of the reference decoder's for its "
                  "codes (%zu prompts)\n",
                  name, codec_math_label(math), worst, run.results.size());
      check_pools_full(run);
    }
  }
}

TEST_CASE("through the CUDA pipeline cancelled requests give every codec slot back and the requests that reuse "
          "the slots start from silence" *
          doctest::skip(!mstar::test::has_gpu())) {
  // More requests than codec_state slots (host_speech: 16 besides the sink), so slots are reused, some of
  // them after a request cancelled while its windows were in flight.
  const fixture c = load_fixture("tiny06");
  const auto requests = cycled_requests(c, 24, [](std::size_t i) { return 6 + 3 * std::uint32_t(i % 7); });
  speech_run_options o;
  o.sampling = talker_sampling::greedy();
  o.flow.ramp = {1, 2};
  o.max_batch = 4;
  o.concurrency = 6;
  o.cancel_after_chunks = {{2, 0}, {4, 1}, {7, 2}, {9, 3}, {13, 1}, {18, 2}};
  auto gpu = cuda_talker(c, speech_talker_limits<host_speech>(o.max_batch));
  const auto run = run_speech_cuda<host_speech>(c.talker, *gpu, c.codec, requests, o);
  REQUIRE(run.results.size() == requests.size());
  for (const auto& [id, r] : run.results) {
    CAPTURE(id);
    // A request may complete before its cancel arrives; one that did must still speak correctly.
    CHECK((r.how == mstar::request_end::completed ||
           (r.how == mstar::request_end::cancelled && o.cancel_after_chunks.count(id))));
  }
  CHECK(count_ended(run, mstar::request_end::cancelled) >= 4);
  check_completed_audio(c, run);
  check_pools_full(run);
}

TEST_CASE("through the CUDA pipeline a request's codec state follows it to whatever row each codec step gives "
          "it, in both codec batchings, launched eagerly or replayed from graphs" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Requests of different lengths, more live than rows, a ramp of several widths: a request's codec rows
  // change position and step companions from window to window (and, from graphs, bucket padding beside them).
  const fixture c = load_fixture("tiny06");
  const auto requests = cycled_requests(c, 10, [](std::size_t i) { return 6 + 5 * std::uint32_t(i); });
  auto gpu = cuda_talker(c, speech_talker_limits<host_speech>(4));
  for (const auto& [per_width, graphs] : {std::pair{true, false}, {false, false}, {true, true}, {false, true}}) {
    CAPTURE(per_width);
    CAPTURE(graphs);
    speech_run_options o;
    o.codec_graphs = graphs;
    o.sampling = talker_sampling::greedy();
    o.flow.ramp = {1, 3, 2, 4};
    o.flow.codec_per_width = per_width;
    o.max_batch = 4;
    o.concurrency = 6;
    const auto run = run_speech_cuda<host_speech>(c.talker, *gpu, c.codec, requests, o);
    REQUIRE(run.results.size() == requests.size());
    CHECK(count_ended(run, mstar::request_end::completed) == run.results.size());
    for (const auto& [id, r] : run.results)
      CHECK(r.chunks > 1); // windows of 1 and then 3 frames at least
    const double worst = check_completed_audio(c, run);
    std::printf("CUDA pipeline, codec %s, %s, 10 requests of 6..51 frames on 4 rows: audio within %.3g of the "
                "reference decoder's, %llu codec steps\n", per_width ? "one step per width" : "every width a step",
                graphs ? "graphs" : "eager", worst, (unsigned long long)run.codec_steps);
    check_pools_full(run);
  }
}

TEST_CASE("a request's CUDA Talker state follows it to whatever row and slot each step gives it" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Four requests of different lengths, the last joining after three steps; every step the same requests in
  // both runs (so the same row counts), the second run with rows shuffled and slots scrambled. Sampled, so
  // that each request's seed and frame count must follow it too.
  const fixture c = load_fixture("tiny06");
  const talker_config& config = c.talker.config();
  const int groups = config.code_groups;
  const std::vector<int> frames = {12, 7, 10, 5};
  const int requests = int(frames.size()), joins_at = 3;
  std::vector<talker_prompt> prompts;
  std::vector<built_prompt> built;
  for (int i = 0; i < requests; ++i) {
    prompts.push_back(prompt_of(c.prompts[std::size_t(i)]));
    built.push_back(c.talker.build_prompt(prompts.back()));
  }
  talker_cuda_limits limits{
      .max_rows = 4, .max_prefill_tokens = 512, .kv_blocks = 256, .block_tokens = 16, .max_pages = 256};
  limits.state_slots = 9;
  auto gpu = cuda_talker(c, limits);
  gpu->set_sampling(talker_sampling{}); // top-k 50, temperature 0.9: draws keyed by each request's seed

  auto run = [&](bool shuffled) {
    kv_block_pool pool(256, 16, shuffled ? 5 : 3);
    std::vector<row_pages> pages(static_cast<std::size_t>(requests));
    std::vector<std::vector<std::int32_t>> codes(static_cast<std::size_t>(requests));
    std::vector<int> made(std::size_t(requests), 0);
    auto slot_of = [&](int q) { return shuffled ? 8 - 2 * q : q + 1; };
    // The step's frames, row r's to request rows[r].
    auto take = [&](const std::vector<int>& rows) {
      const auto out = gpu->frames(int(rows.size()));
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const int q = rows[r];
        codes[std::size_t(q)].insert(codes[std::size_t(q)].end(), out.begin() + std::ptrdiff_t(r * groups),
                                     out.begin() + std::ptrdiff_t((r + 1) * groups));
        ++made[std::size_t(q)];
      }
    };
    auto prefill = [&](std::vector<int> rows) {
      if (shuffled) std::reverse(rows.begin(), rows.end());
      std::vector<row_pages*> ptrs;
      std::vector<int> lens;
      std::vector<float> embeds;
      std::vector<std::uint64_t> seeds;
      std::vector<std::int32_t> slots;
      for (int q : rows) {
        ptrs.push_back(&pages[std::size_t(q)]);
        lens.push_back(built[std::size_t(q)].rows);
        embeds.insert(embeds.end(), built[std::size_t(q)].prefill.begin(), built[std::size_t(q)].prefill.end());
        seeds.push_back(1000 + 77 * std::uint64_t(q));
        slots.push_back(slot_of(q));
      }
      gpu->set_seeds(seeds);
      gpu->prefill_frame(embeds, pool.plan(ptrs, lens).view(), slots);
      take(rows);
    };
    prefill({0, 1, 2});
    for (int step = 1;; ++step) {
      if (step == joins_at) prefill({3});
      std::vector<int> rows;
      for (int q = 0; q < requests; ++q)
        if (made[std::size_t(q)] > 0 && made[std::size_t(q)] < frames[std::size_t(q)]) rows.push_back(q);
      if (rows.empty()) break;
      if (shuffled) std::rotate(rows.begin(), rows.begin() + std::ptrdiff_t(step % rows.size()), rows.end());
      std::vector<row_pages*> ptrs;
      std::vector<std::int32_t> text, slots;
      for (int q : rows) {
        ptrs.push_back(&pages[std::size_t(q)]);
        text.push_back(trailing_text_id(prompts[std::size_t(q)], config, made[std::size_t(q)] - 1));
        slots.push_back(slot_of(q));
      }
      const std::vector<int> one(rows.size(), 1);
      gpu->set_decode_inputs(pool.plan(ptrs, one).view(), text, slots);
      gpu->decode_frame(int(rows.size()));
      take(rows);
    }
    return codes;
  };
  const auto still = run(false), moved = run(true);
  for (int q = 0; q < requests; ++q) {
    INFO("request ", q, " (", frames[std::size_t(q)], " frames): its codes in fixed rows and in shuffled rows and "
         "slots differ from frame ", first_difference(moved[std::size_t(q)], still[std::size_t(q)], groups));
    CHECK(still[std::size_t(q)].size() == std::size_t(frames[std::size_t(q)]) * groups);
    CHECK(moved[std::size_t(q)] == still[std::size_t(q)]);
  }
}

TEST_CASE("through the CUDA pipeline a request among many of different lengths makes its codes alone, up to a "
          "low-margin flip" *
          doctest::skip(!mstar::test::has_gpu())) {
  const fixture c = load_fixture("tiny06");
  const int groups = c.talker.config().code_groups;
  const auto requests = cycled_requests(c, 10, [](std::size_t i) { return 6 + 5 * std::uint32_t(i); });
  speech_run_options o;
  o.sampling = talker_sampling::greedy();
  o.max_batch = 4;
  o.concurrency = 6; // more live requests than rows: rows change hands every few steps
  auto gpu = cuda_talker(c, speech_talker_limits<host_speech>(o.max_batch));
  const auto together = run_speech_cuda<host_speech>(c.talker, *gpu, c.codec, requests, o);
  check_pools_full(together);
  int identical = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto alone = run_speech_cuda<host_speech>(c.talker, *gpu, c.codec, {requests[i]}, o);
    const auto& a = alone.results.at(1);
    const auto& t = together.results.at(i + 1);
    REQUIRE(a.how == mstar::request_end::completed);
    REQUIRE(t.how == mstar::request_end::completed);
    const int n = int(a.codes.size()) / groups;
    const int at = first_difference(t.codes, a.codes, groups);
    identical += at < 0;
    // A request given another's state differs from its second frame on (its first comes from its prefill).
    INFO("request ", i + 1, ": its codes among others differ from its codes alone at frame ", at, " of ", n);
    CHECK((at < 0 || at >= std::min(4, n)));
    WARN_MESSAGE(at < 0, "request ", i + 1, ": codes among others equal its codes alone for ", at, " of ", n,
                 " frames only (a low-margin flip under another batch size's GEMMs?)");
  }
  std::printf("CUDA pipeline, %zu requests of 6..51 frames, 4 rows, 6 live: %d make exactly their codes alone\n",
              requests.size(), identical);
}

TEST_CASE("a speech service serves on the CUDA Talker where a CUDA device is present, on the host otherwise, and "
          "its Talker graphs captured at start give the codes of graphs captured on first use") {
  // Runs without a GPU too: then device auto must fall back to the host and still speak (and ignore
  // talker_graphs_at_start).
  register_cuda_service<host_speech>();
  const fixture c = load_fixture("tiny06");
  const int groups = c.talker.config().code_groups;
  std::vector<std::int32_t> want;
  for (std::size_t f = 0; f < 8; ++f)
    for (const auto& code : c.prompts[0].at("codes")[f])
      want.push_back(code.get<std::int32_t>());
  std::vector<std::int32_t> codes[2];
  for (const bool at_start : {false, true}) {
    INFO("talker_graphs_at_start ", at_start);
    speech_service_options so;
    so.sampling = talker_sampling::greedy();
    so.max_live = 4;
    so.max_batch = 4;
    so.talker_graphs_at_start = at_start;
    speech_service<host_speech> svc(c.talker, c.codec, so);
    CHECK(svc.on_cuda() == mstar::test::has_gpu());
    std::mutex m;
    std::condition_variable cv;
    std::optional<speech_result> got;
    speech_callbacks callbacks;
    callbacks.on_end = [&](const speech_result& r) {
      std::lock_guard g(m);
      got = r;
      cv.notify_one();
    };
    svc.submit(request_of(c.prompts[0], 8), std::move(callbacks));
    std::unique_lock g(m);
    REQUIRE(cv.wait_for(g, std::chrono::seconds(120), [&] { return got.has_value(); }));
    REQUIRE(got->how == mstar::request_end::completed);
    CHECK(got->frames == 8);
    const int at = first_difference(got->codes, want, groups);
    std::printf("speech service on the %s%s: %d of 8 frames equal the reference's\n",
                svc.on_cuda() ? "CUDA Talker" : "host", at_start ? " (Talker graphs captured at start)" : "",
                at < 0 ? 8 : at);
    if (!svc.on_cuda()) CHECK(got->codes == want); // the host float32 Talker is exact on the fixtures
    codes[at_start] = got->codes;
  }
  CHECK(codes[true] == codes[false]);
}

TEST_CASE("a speech service asked for device cuda where no CUDA device is usable refuses, naming the way out" *
          doctest::skip(mstar::test::has_gpu())) {
  register_cuda_service<host_speech>();
  const fixture c = load_fixture("tiny06");
  speech_service_options so;
  so.device = "cuda";
  CHECK_THROWS_WITH_AS(speech_service<host_speech>(c.talker, c.codec, so),
                       "qwen3_tts::speech_service: device cuda, but no CUDA device is usable here; use device host (or "
                       "auto)",
                       std::invalid_argument);
  so.device = "gpu";
  CHECK_THROWS_WITH_AS(speech_service<host_speech>(c.talker, c.codec, so),
                       "qwen3_tts::speech_service: device \"gpu\" is not host, cuda or auto", std::invalid_argument);
}
