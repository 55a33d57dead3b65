// The Talker's host float32 forward against the reference (qwen-tts 0.1.1, float32 on CPU), on the committed
// fixtures that tools/make_fixtures.py wrote: per prompt, the prefill embeddings, the raw Talker logits of the
// prefill and first decode steps, the predictor's raw logits of the same frames, and the greedy codes of every
// recorded frame (64, or up to the end token for the stop prompt).
//
// Closeness of a vector a to the reference b is max_i |a_i - b_i| / max_i |b_i| (relative to the vector's
// largest magnitude, so near-zero entries do not inflate it); the bar is 1e-4.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "qwen3_tts/checkpoint/safetensors.hpp"
#include "talker.hpp"
#include "talker/fixture_prompts.hpp"
#include "talker_checkpoint.hpp"

using namespace qwen3_tts;
using qwen3_tts::testing::fixture_root;
using qwen3_tts::testing::prompt_of;

namespace {

constexpr double tolerance = 1e-4;

// The reference's recorded tensors, by name, as float32.
struct fixture_tensors {
  safetensors_file file;
  explicit fixture_tensors(const std::string& path) : file(path) {}
  std::vector<float> get(const std::string& name) const {
    const tensor_view* view = file.find(name);
    if (!view) FAIL(file.path().string() << " has no tensor " << name << " (regenerate with tools/make_fixtures.py)");
    return to_f32(*view);
  }
};

double closeness(const float* a, const float* b, std::size_t n) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return diff / scale;
}

// The settings the reference ran with, as the fixture records them.
talker_sampling sampling_of(const nlohmann::json& p, const talker_config& c) {
  const auto& g = p.at("generation");
  REQUIRE_FALSE(g.at("do_sample").get<bool>());
  REQUIRE_FALSE(g.at("subtalker_dosample").get<bool>());
  REQUIRE(p.at("eos_token_id").get<int>() == c.codec_eos);
  REQUIRE(p.at("suppressed_from").get<int>() == c.talker.vocab - 1024);
  talker_sampling s = talker_sampling::greedy();
  s.repetition_penalty = g.at("repetition_penalty").get<float>();
  s.min_new_tokens = g.at("min_new_tokens").get<int>();
  s.max_frames = g.at("max_new_tokens").get<int>() - 1; // N frames take N + 1 new tokens in the reference
  return s;
}

void check_case(const std::string& name) {
  const std::string dir = fixture_root + name;
  const talker_host model = load_talker(dir);
  const talker_config& c = model.config();
  std::ifstream f(dir + "/expected/talker.json");
  REQUIRE(f);
  const nlohmann::json expected = nlohmann::json::parse(f);
  const fixture_tensors logits(dir + "/expected/talker_logits.safetensors");
  const std::size_t vocab = std::size_t(c.talker.vocab), pvocab = std::size_t(c.predictor.vocab);
  const std::size_t groups = std::size_t(c.code_groups);

  int index = 0;
  for (const nlohmann::json& p : expected.at("prompts")) {
    std::string key = "p"; // piece by piece: GCC 12 warns, wrongly, of an overlapping memcpy in "p" + to_string
    key += std::to_string(index++);
    key += '.';
    CAPTURE(name);
    const std::string prompt_name = p.at("name").get<std::string>();
    CAPTURE(prompt_name);
    const talker_prompt prompt = prompt_of(p);

    const built_prompt built = model.build_prompt(prompt);
    const std::vector<float> embeds = logits.get(key + "prefill_embeds");
    REQUIRE(embeds.size() == built.prefill.size());
    CHECK(closeness(built.prefill.data(), embeds.data(), embeds.size()) < tolerance);

    const std::vector<float> talker_ref = logits.get(key + "talker_logits");       // [steps][vocab]
    const std::vector<float> predictor_ref = logits.get(key + "predictor_logits"); // [steps][15][pvocab]
    const int steps = int(talker_ref.size() / vocab);
    generate_options options;
    options.record_steps = steps;
    const generate_result got = generate(model, prompt, sampling_of(p, c), 0, options);

    REQUIRE(int(got.talker_logits.size()) >= std::min(steps, int(got.frames.size()) + 1));
    double worst_talker = 0.0, worst_predictor = 0.0;
    for (int s = 0; s < steps && s < int(got.talker_logits.size()); ++s)
      worst_talker = std::max(worst_talker, closeness(got.talker_logits[std::size_t(s)].data(),
                                                      talker_ref.data() + std::size_t(s) * vocab, vocab));
    for (int s = 0; s < steps && s < int(got.predictor_logits.size()); ++s)
      for (std::size_t g = 0; g + 1 < groups; ++g)
        worst_predictor = std::max(
            worst_predictor, closeness(got.predictor_logits[std::size_t(s)].data() + g * pvocab,
                                       predictor_ref.data() + (std::size_t(s) * (groups - 1) + g) * pvocab, pvocab));
    CHECK(worst_talker < tolerance);
    CHECK(worst_predictor < tolerance);
    MESSAGE(prompt_name << ": Talker logits within " << worst_talker << ", predictor within " << worst_predictor
                        << " over " << steps << " steps");

    const auto codes = p.at("codes").get<std::vector<std::vector<std::int32_t>>>();
    REQUIRE(int(codes.size()) == p.at("frames").get<int>());
    CHECK(got.frames.size() == codes.size());
    CHECK(got.stopped == p.at("stopped_on_eos").get<bool>());
    for (std::size_t fr = 0; fr < std::min(codes.size(), got.frames.size()); ++fr) {
      CAPTURE(fr);
      REQUIRE(got.frames[fr] == codes[fr]); // the first differing frame is the one to look at
    }
  }
}

} // namespace

TEST_CASE("Talker.parity_the_0.6B_shaped_fixture_matches_the_reference's_logits_and_greedy_codes") {
  check_case("tiny06");
}

TEST_CASE("Talker.parity_the_1.7B_shaped_fixture_with_a_predictor_projection_matches_the_reference") {
  check_case("tiny17");
}

TEST_CASE("Talker.load_talker_names_the_tensor_when_config.json_disagrees_with_the_weights") {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("talker_load_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fixture_root + "tiny06", tmp, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tmp / "config.json"));
  config["talker_config"]["intermediate_size"] = config["talker_config"]["intermediate_size"].get<int>() + 8;
  std::ofstream(tmp / "config.json") << config.dump();
  CHECK_THROWS_WITH(load_talker(tmp.string()), doctest::Contains("talker.model.layers.0.mlp.gate_proj.weight"));
  fs::remove_all(tmp);
}
