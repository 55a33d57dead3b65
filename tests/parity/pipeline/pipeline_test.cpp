// The real Qwen3-TTS end to end through mstar's engine and threaded worker on the host backend: the Talker's
// prefill and decode over the kv_cache / attention / positions plans, the codec on the side lane over each
// request's codec_state slot. Greedy codes and speech are compared with the reference's (fixtures written by
// tools/make_fixtures.py with qwen-tts 0.1.1); with sampling on, a request's bytes are compared across lane
// modes, codec batchings, concurrency and other requests' cancellation.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec_checkpoint.hpp"
#include "qwen3_tts/checkpoint/safetensors.hpp"
#include "speech_model.hpp"
#include "speech_run.hpp"
#include "talker/fixture_prompts.hpp"
#include "talker_checkpoint.hpp"

using namespace qwen3_tts;
using qwen3_tts::testing::fixture_root;
using qwen3_tts::testing::prompt_of;
using namespace qwen3_tts::pipeline;

namespace {


struct fixture_case {
  std::string dir;
  talker_host talker;
  codec_decoder codec;
  nlohmann::json prompts;
  std::vector<std::vector<float>> speech; // the reference decoder over each prompt's greedy codes
};

fixture_case load_case(const std::string& name) {
  const std::string dir = fixture_root + name;
  std::ifstream f(dir + "/expected/talker.json");
  const auto doc = nlohmann::json::parse(f);
  std::vector<std::vector<float>> speech;
  const safetensors_file audio(dir + "/expected/speech.safetensors");
  for (std::size_t i = 0; i < doc.at("prompts").size(); ++i)
    speech.push_back(to_f32(*audio.find("p" + std::to_string(i) + ".audio")));
  return {dir, load_talker(dir), load_codec_decoder(dir), doc.at("prompts"), std::move(speech)};
}

std::vector<std::int32_t> flat_codes(const nlohmann::json& p) {
  std::vector<std::int32_t> out;
  for (const auto& frame : p.at("codes"))
    for (const auto& c : frame)
      out.push_back(c.get<std::int32_t>());
  return out;
}

// Every fixture prompt of a case, as requests with the reference's frame limit.
std::vector<speech_request> requests_of(const fixture_case& c) {
  std::vector<speech_request> out;
  for (const auto& p : c.prompts) {
    speech_request r;
    r.prompt = prompt_of(p);
    r.max_frames = p.at("generation").at("max_new_tokens").get<std::uint32_t>() - 1;
    out.push_back(r);
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

void check_pools_full(const speech_run_result& r) {
  CHECK(r.kv_free_blocks == r.kv_blocks);
  CHECK(r.codec_free_slots == r.codec_slots);
  CHECK(r.buffers_free);
}

// A few sampled requests of tiny06, each with its own prompt, for the identity checks.
std::vector<speech_request> sampled_requests(const fixture_case& c, std::size_t n) {
  const auto base = requests_of(c);
  std::vector<speech_request> out;
  for (std::size_t i = 0; i < n; ++i) {
    speech_request r = base[i % base.size()];
    r.max_frames = 12 + std::uint32_t(i % 5) * 7;
    out.push_back(r);
  }
  return out;
}

} // namespace

TEST_CASE("Pipeline.through the worker, greedy codes and speech equal the reference's for every fixture prompt") {
  for (const char* name : {"tiny06", "tiny17"}) {
    CAPTURE(name);
    const auto c = load_case(name);
    speech_run_options o;
    o.sampling = talker_sampling::greedy();
    o.flow.ramp = {1, 2, 4, 8};
    const auto run = run_speech<host_speech>(c.talker, c.codec, requests_of(c), o);
    REQUIRE(run.results.size() == c.prompts.size());
    for (std::size_t i = 0; i < c.prompts.size(); ++i) {
      const auto& p = c.prompts[i];
      const auto& r = run.results.at(i + 1);
      CAPTURE(p.at("name").get<std::string>());
      REQUIRE(r.how == mstar::request_end::completed);
      CHECK(r.codes == flat_codes(p));
      CHECK(r.ended_by_token == p.at("stopped_on_eos").get<bool>());
      REQUIRE(r.audio.size() == c.speech[i].size());
      const double err = max_abs_diff(r.audio, c.speech[i]);
      CAPTURE(err);
      CHECK(err <= 1e-4);
    }
    check_pools_full(run);
  }
}

TEST_CASE("Pipeline.a request's codes and speech are byte-identical across lane modes, codec batchings, the "
          "codec's wait for rows and concurrency") {
  const auto c = load_case("tiny06");
  const auto requests = sampled_requests(c, 8);
  speech_run_options base;
  base.sampling = talker_sampling{}; // sampling on: top-k 50, temperature 0.9, the seeds decide
  base.seed = 77;
  base.flow.ramp = {1, 3, 5};
  base.max_batch = 8;
  const auto reference = run_speech<host_speech>(c.talker, c.codec, requests, base);
  for (const auto& [id, r] : reference.results) {
    REQUIRE(r.how == mstar::request_end::completed);
    REQUIRE(r.frames > 0);
  }
  struct arm {
    mstar::lane_mode lane;
    bool per_width;
    std::uint32_t concurrency;
    std::uint32_t codec_min_batch = 0; // with a wait of 50 ms
  };
  for (const arm a : {arm{mstar::lane_mode::off, true, 0}, arm{mstar::lane_mode::on, false, 0},
                      arm{mstar::lane_mode::automatic, true, 3}, arm{mstar::lane_mode::off, false, 1},
                      arm{mstar::lane_mode::on, true, 0, 4}, arm{mstar::lane_mode::off, false, 0, 3}}) {
    CAPTURE(int(a.lane));
    CAPTURE(a.per_width);
    CAPTURE(a.concurrency);
    CAPTURE(a.codec_min_batch);
    auto o = base;
    o.lane = a.lane;
    o.flow.codec_per_width = a.per_width;
    o.concurrency = a.concurrency;
    o.codec_wait = {a.codec_min_batch, std::chrono::milliseconds(50)};
    const auto run = run_speech<host_speech>(c.talker, c.codec, requests, o);
    for (const auto& [id, r] : reference.results) {
      CAPTURE(id);
      const auto& s = run.results.at(id);
      CHECK(s.how == mstar::request_end::completed);
      CHECK(s.codes == r.codes);
      CHECK(s.audio == r.audio);
    }
    check_pools_full(run);
  }
  // A different engine seed changes what sampling draws.
  auto other = base;
  other.seed = 78;
  const auto changed = run_speech<host_speech>(c.talker, c.codec, requests, other);
  int differ = 0;
  for (const auto& [id, r] : reference.results)
    differ += changed.results.at(id).codes != r.codes;
  CHECK(differ > 0);
}

TEST_CASE("Pipeline.cancelled requests give back every KV block and codec slot, and change no other request's "
          "speech") {
  const auto c = load_case("tiny06");
  const auto requests = sampled_requests(c, 10);
  speech_run_options o;
  o.seed = 5;
  o.flow.ramp = {1, 2};
  o.max_batch = 4;
  o.concurrency = 6;
  const auto whole = run_speech<host_speech>(c.talker, c.codec, requests, o);
  o.cancel_after_chunks = {{2, 0}, {4, 1}, {7, 2}, {9, 3}};
  const auto cut = run_speech<host_speech>(c.talker, c.codec, requests, o);
  for (const auto& [id, r] : whole.results) {
    CAPTURE(id);
    const auto& s = cut.results.at(id);
    if (o.cancel_after_chunks.count(id)) {
      CHECK(s.how == mstar::request_end::cancelled);
      CHECK(s.chunks <= o.cancel_after_chunks.at(id) + 2); // a window or two may land while the cancel travels
    } else {
      CHECK(s.how == mstar::request_end::completed);
      CHECK(s.audio == r.audio);
    }
  }
  check_pools_full(cut);
}

TEST_CASE("Pipeline.a request for a speaker the checkpoint lacks fails alone, naming the speaker") {
  const auto c = load_case("tiny06");
  auto requests = sampled_requests(c, 3);
  requests[1].prompt.speaker = "nobody";
  speech_run_options o;
  o.seed = 3;
  const auto run = run_speech<host_speech>(c.talker, c.codec, requests, o);
  CHECK(run.results.at(1).how == mstar::request_end::completed);
  CHECK(run.results.at(3).how == mstar::request_end::completed);
  const auto& bad = run.results.at(2);
  CHECK(bad.how == mstar::request_end::failed);
  CHECK(bad.why.find("nobody") != std::string::npos);
  check_pools_full(run);
}

TEST_CASE("Pipeline.a prompt of more than 4096 tokens is spoken, as the reference speaks it, not refused") {
  // The wrapper puts the whole text in the prompt: a long paragraph is one prefill row of its length. The KV
  // cache holds 16,384 tokens; the engine's per-step token limit must not refuse what the cache can hold.
  const auto c = load_case("tiny06");
  speech_request r = requests_of(c)[0];
  auto& ids = r.prompt.input_ids;
  const std::vector<std::int32_t> head(ids.begin(), ids.begin() + 3), tail(ids.end() - 5, ids.end());
  const std::vector<std::int32_t> text(ids.begin() + 3, ids.end() - 5);
  ids = head;
  while (ids.size() < 4200)
    ids.insert(ids.end(), text.begin(), text.end());
  ids.insert(ids.end(), tail.begin(), tail.end());
  r.prompt.non_streaming = true;
  r.max_frames = 2;
  const auto run = run_speech<host_speech>(c.talker, c.codec, {r}, {});
  const auto& res = run.results.at(1);
  CHECK_MESSAGE(res.how == mstar::request_end::completed, res.why);
  check_pools_full(run);
}

TEST_CASE("Pipeline.a request asking for more frames than the KV cache can hold fails alone, naming max_frames") {
  // A client's max_frames sizes the request's code buffer at start: 2^31 frames would ask for 128 GiB, and
  // any request past the cache's 16,384 tokens could never be given its last frames.
  const auto c = load_case("tiny06");
  auto requests = sampled_requests(c, 2);
  requests[0].max_frames = 1u << 31;
  speech_run_options o;
  o.seed = 3;
  const auto run = run_speech<host_speech>(c.talker, c.codec, requests, o);
  const auto& bad = run.results.at(1);
  CHECK(bad.how == mstar::request_end::failed);
  CHECK_MESSAGE(bad.why.find("max_frames") != std::string::npos, bad.why);
  CHECK(run.results.at(2).how == mstar::request_end::completed);
  check_pools_full(run);
}

TEST_CASE("Pipeline.the released decoder's state fits the compiled codec_state pool row exactly") {
  codec_config released; // the released speech_tokenizer/config.json's decoder
  released.hidden_size = 512;
  released.intermediate_size = 1024;
  released.head_dim = 64;
  released.codebook_dim = 512;
  CHECK(make_codec_state_layout(released).total == released_codec_state_floats);
  const auto tiny = load_case("tiny17");
  CHECK(tiny.codec.state_layout().total < released_codec_state_floats);
}

TEST_CASE("Pipeline.a Talker whose codes the codec's codebooks cannot hold is refused at setup, not mid-request") {
  // tiny06's Talker makes codes 0..255 (vocab 1280 less 1024 control ids, predictor vocab 256); tiny17's codec
  // has 16 codebooks of 64 entries. Both have 16 groups, so only the codebook sizes disagree: a run would fail
  // each request at its first code >= 64, after its Talker steps were spent.
  const std::string root = fixture_root;
  const talker_host talker = load_talker(root + "tiny06");
  const codec_decoder codec = load_codec_decoder(root + "tiny17");
  REQUIRE(talker.config().code_groups == codec.config().num_quantizers);
  mstar::host_backend backend;
  const auto make = [&] {
    speech_forwards<host_speech, mstar::host_backend> fwd(backend, talker, codec, talker_sampling::greedy(), {});
  };
  CHECK_THROWS_WITH_AS(make(), doctest::Contains("codebook_size"), std::invalid_argument);
}
