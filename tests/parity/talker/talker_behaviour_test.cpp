// The Talker's host forward against itself where the answer must not move: scattered KV pages, batching, seeds;
// and the sampler and config parser against hand-worked cases. Random weights made here (no fixture needed).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "talker.hpp"

using namespace qwen3_tts;

namespace {

nlohmann::json small_config() {
  using json = nlohmann::json;
  json predictor = {{"hidden_size", 24},        {"intermediate_size", 40},  {"num_hidden_layers", 2},
                    {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
                    {"vocab_size", 32},         {"num_code_groups", 16},    {"rope_theta", 10000}};
  json talker = {{"code_predictor_config", predictor},
                 {"vocab_size", 1024 + 32},
                 {"hidden_size", 32},
                 {"intermediate_size", 48},
                 {"num_hidden_layers", 2},
                 {"num_attention_heads", 4},
                 {"num_key_value_heads", 2},
                 {"head_dim", 8},
                 {"num_code_groups", 16},
                 {"text_hidden_size", 16},
                 {"text_vocab_size", 64},
                 {"rope_theta", 1000000},
                 {"rope_scaling", {{"mrope_section", {2, 1, 1}}, {"interleaved", true}, {"rope_type", "default"}}},
                 {"codec_eos_token_id", 1026},
                 {"codec_think_id", 1030},
                 {"codec_nothink_id", 1031},
                 {"codec_think_bos_id", 1032},
                 {"codec_think_eos_id", 1033},
                 {"codec_pad_id", 1024},
                 {"codec_bos_id", 1025},
                 {"spk_id", {{"Vivian", 1040}}},
                 {"spk_is_dialect", {{"Vivian", false}}},
                 {"codec_language_id", {{"english", 1050}}}};
  return {{"talker_config", talker}, {"tts_pad_token_id", 60}, {"tts_bos_token_id", 61}, {"tts_eos_token_id", 62},
          {"im_start_token_id", 58}, {"im_end_token_id", 59},  {"tts_model_size", "1b7"}};
}

// Deterministic values in [-0.5, 0.5) from the tensor's name and index; norms near 1.
tensor random_tensor(const std::string& name, const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : name)
    h = (h ^ std::uint8_t(ch)) * 1099511628211ull;
  tensor t(static_cast<std::size_t>(n));
  for (auto& v : t) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    v = float((h >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
    if (name.find("norm") != std::string::npos) v = 1.0f + 0.4f * v;
  }
  return t;
}

const talker_host& model() {
  static const talker_host m = [] {
    const talker_config c = parse_talker_config(small_config());
    return talker_host(c, load_talker_weights(c, random_tensor));
  }();
  return m;
}

talker_prompt prompt(std::vector<std::int32_t> text, bool non_streaming = false) {
  talker_prompt p;
  p.input_ids = {58, 1, 2};
  p.input_ids.insert(p.input_ids.end(), text.begin(), text.end());
  p.input_ids.insert(p.input_ids.end(), {59, 2, 58, 1, 2});
  p.speaker = "vivian";
  p.language = "English";
  p.non_streaming = non_streaming;
  return p;
}

talker_sampling sampled(int frames) {
  talker_sampling s; // the reference's sampling defaults
  s.max_frames = frames;
  return s;
}

} // namespace

TEST_CASE("Talker.scattered_kv_pages_give_the_codes_and_logits_of_contiguous_pages") {
  generate_options contiguous;
  contiguous.block_tokens = 16;
  contiguous.record_steps = 6;
  generate_options scattered = contiguous;
  scattered.block_tokens = 4; // a page boundary every 4 tokens, and blocks handed out in a shuffled order
  scattered.scatter_seed = 12345;
  const auto p = prompt({10, 11, 12, 13, 14});
  const auto a = generate(model(), p, sampled(24), 7, contiguous);
  const auto b = generate(model(), p, sampled(24), 7, scattered);
  REQUIRE(a.frames.size() == 24);
  CHECK(a.frames == b.frames);
  CHECK(a.talker_logits == b.talker_logits);
  CHECK(a.predictor_logits == b.predictor_logits);
}

TEST_CASE("Talker.a_request's_codes_do_not_depend_on_the_other_rows_of_its_batch") {
  const talker_prompt prompts[] = {prompt({10, 11, 12}), prompt({20, 21, 22, 23, 24, 25, 26}, true),
                                   prompt({30, 31, 32, 33})};
  const std::uint64_t seeds[] = {1, 2, 3};
  talker_sampling s = sampled(20);
  generate_options o;
  o.scatter_seed = 99;
  const auto together = generate_batch(model(), prompts, s, seeds, o);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    const auto alone = generate(model(), prompts[i], s, seeds[i]);
    CHECK(together[std::size_t(i)].frames == alone.frames);
  }
}

TEST_CASE("Talker.seeded_sampling_repeats_per_seed_and_changes_with_the_seed") {
  const auto p = prompt({10, 11, 12, 13});
  const auto a = generate(model(), p, sampled(16), 42);
  const auto b = generate(model(), p, sampled(16), 42);
  const auto c = generate(model(), p, sampled(16), 43);
  CHECK(a.frames == b.frames);
  CHECK(a.frames != c.frames);
}

TEST_CASE("Talker.a_decode_step_refuses_a_row_with_more_than_one_token") {
  kv_block_pool pool(4, 16);
  paged_kv kv(model().kv_for(4, 16));
  row_pages row;
  row_pages* rows[] = {&row};
  const int two[] = {2};
  const step_tables t = pool.plan(rows, two);
  std::vector<float> x(2 * 32, 0.1f);
  talker_step_output out;
  CHECK_THROWS_WITH_AS(model().decode(x, t.view(), kv, out), doctest::Contains("exactly one a row"),
                       std::invalid_argument);
}

TEST_CASE("Talker.prompts_projected_on_many_threads_at_once_give_one_thread's_bits") {
  // A text width of 512 makes the projection's first product 40 x 512 x 512 multiply-adds, above the size that
  // is split over helper threads; eight callers at once share the process's helpers (some get none), and
  // every split sums each output in the same order.
  nlohmann::json config = small_config();
  config["talker_config"]["text_hidden_size"] = 512;
  const talker_config c = parse_talker_config(config);
  const talker_host wide(c, load_talker_weights(c, random_tensor));
  std::vector<std::int32_t> text;
  for (int i = 0; i < 34; ++i)
    text.push_back(3 + (i * 7) % 50);
  const talker_prompt p = prompt(text);
  const built_prompt alone = wide.build_prompt(p);
  REQUIRE(alone.rows + alone.trailing_rows >= 40);
  std::vector<built_prompt> together(8);
  {
    std::vector<std::thread> callers;
    for (auto& b : together)
      callers.emplace_back([&wide, &p, &b] {
        for (int k = 0; k < 3; ++k)
          b = wide.build_prompt(p);
      });
    for (auto& t : callers)
      t.join();
  }
  for (const auto& b : together) {
    CHECK(b.prefill == alone.prefill);
    CHECK(b.trailing == alone.trailing);
    CHECK(b.tts_pad == alone.tts_pad);
  }
}

TEST_CASE("Talker.the_prompt_refuses_an_unknown_speaker_or_language_by_name") {
  auto p = prompt({10, 11});
  p.speaker = "nobody";
  CHECK_THROWS_WITH(model().build_prompt(p), doctest::Contains("speaker \"nobody\""));
  p = prompt({10, 11});
  p.language = "Klingon";
  CHECK_THROWS_WITH(model().build_prompt(p), doctest::Contains("language \"Klingon\""));
}

TEST_CASE("Talker.sampler_greedy_still_applies_the_repetition_penalty_to_earlier_code0_ids") {
  const talker_config c = model().config();
  const talker_sampler s(c, talker_sampling::greedy());
  std::vector<float> logits(std::size_t(c.talker.vocab), -5.0f);
  logits[3] = 2.0f;
  logits[4] = 2.05f; // 2.05 / 1.05 = 1.952 < 2.0 once id 4 was generated
  auto copy = logits;
  const std::int32_t none[] = {9, 9};
  CHECK(s.pick_code0(copy, none, 0, 2) == 4);
  copy = logits;
  const std::int32_t seen[] = {4, 9};
  CHECK(s.pick_code0(copy, seen, 0, 2) == 3);
  // A negative logit is multiplied: -1.0 -> -1.05 falls below -1.04.
  std::vector<float> neg(std::size_t(c.talker.vocab), -9.0f);
  neg[5] = -1.0f;
  neg[6] = -1.04f;
  const std::int32_t seen5[] = {5, 9};
  CHECK(s.pick_code0(neg, seen5, 0, 2) == 6);
}

TEST_CASE("Talker.sampler_masks_the_end_token_for_two_frames_and_control_ids_always") {
  const talker_config c = model().config();
  const talker_sampler s(c, talker_sampling::greedy());
  std::vector<float> logits(std::size_t(c.talker.vocab), 0.0f);
  logits[std::size_t(c.codec_eos)] = 10.0f;
  logits[std::size_t(c.codec_bos)] = 20.0f; // a control id: never chosen
  logits[7] = 1.0f;
  auto l = logits;
  const std::int32_t one[] = {9};
  CHECK(s.pick_code0(l, one, 0, 1) == 7);
  l = logits;
  const std::int32_t two[] = {9, 9};
  CHECK(s.pick_code0(l, two, 0, 2) == c.codec_eos);
}

TEST_CASE("Talker.sampler_draws_follow_the_softmax_and_top_k_keeps_only_the_best") {
  const talker_config c = model().config();
  talker_sampling settings;
  settings.sub.temperature = 1.0f;
  settings.sub.top_k = 0;
  const talker_sampler s(c, settings);
  int ones = 0;
  const int draws = 4000;
  for (int seed = 0; seed < draws; ++seed) {
    std::vector<float> l = {std::log(0.25f), std::log(0.75f), -std::numeric_limits<float>::infinity()};
    ones += s.pick_sub(l, std::uint64_t(seed), 3, 5) == 1;
  }
  CHECK(double(ones) / draws == doctest::Approx(0.75).epsilon(0.04));
  settings.sub.top_k = 1;
  const talker_sampler top1(c, settings);
  for (int seed = 0; seed < 200; ++seed) {
    std::vector<float> l = {0.5f, 0.4f, 0.3f};
    REQUIRE(top1.pick_sub(l, std::uint64_t(seed), 0, 1) == 0);
  }
}

TEST_CASE("Talker.config_errors_name_the_field") {
  auto cfg = small_config();
  cfg["talker_config"].erase("hidden_size");
  CHECK_THROWS_WITH(parse_talker_config(cfg), doctest::Contains("talker_config.hidden_size: missing"));
  cfg = small_config();
  cfg["talker_config"]["code_predictor_config"]["num_attention_heads"] = "four";
  CHECK_THROWS_WITH(parse_talker_config(cfg),
                    doctest::Contains("talker_config.code_predictor_config.num_attention_heads: expected an integer"));
  cfg = small_config();
  cfg["talker_config"]["rope_scaling"]["mrope_section"] = {2, 2, 2};
  CHECK_THROWS_WITH(parse_talker_config(cfg), doctest::Contains("mrope_section: sums to 6"));
  cfg = small_config();
  cfg["talker_config"]["use_sliding_window"] = true;
  CHECK_THROWS_WITH(parse_talker_config(cfg), doctest::Contains("use_sliding_window"));
}

TEST_CASE("Talker.weights_are_asked_for_by_checkpoint_name_with_the_shape_the_config_implies") {
  const talker_config c = parse_talker_config(small_config());
  std::map<std::string, std::vector<std::int64_t>> asked;
  auto source = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    asked[name] = shape;
    return random_tensor(name, shape);
  };
  load_talker_weights(c, source);
  // Talker: 4 heads and 2 KV heads of 8 over hidden 32; predictor hidden 24 behind a projection from 32.
  CHECK(asked.at("talker.model.layers.1.self_attn.k_proj.weight") == std::vector<std::int64_t>{16, 32});
  CHECK(asked.at("talker.model.layers.0.self_attn.o_proj.weight") == std::vector<std::int64_t>{32, 32});
  CHECK(asked.at("talker.text_projection.linear_fc2.weight") == std::vector<std::int64_t>{32, 16});
  CHECK(asked.at("talker.code_predictor.model.codec_embedding.14.weight") == std::vector<std::int64_t>{32, 32});
  CHECK(asked.at("talker.code_predictor.lm_head.0.weight") == std::vector<std::int64_t>{32, 24});
  CHECK(asked.at("talker.code_predictor.small_to_mtp_projection.weight") == std::vector<std::int64_t>{24, 32});
  CHECK(asked.count("talker.model.layers.2.input_layernorm.weight") == 0);
  auto same = small_config();
  same["talker_config"]["code_predictor_config"]["hidden_size"] = 32;
  asked.clear();
  load_talker_weights(parse_talker_config(same), source);
  CHECK(asked.count("talker.code_predictor.small_to_mtp_projection.weight") == 0);
}

TEST_CASE("Talker.a_padding_row_without_tokens_or_pages_changes_nothing_for_the_other_rows") {
  const auto built = model().build_prompt(prompt({10, 11, 12}));
  const int n = built.rows;
  auto run = [&](bool padded) {
    kv_block_pool pool(8, 16);
    paged_kv kv(model().kv_for(8, 16));
    row_pages a, pad, b;
    std::vector<row_pages*> rows = padded ? std::vector<row_pages*>{&a, &pad, &b} : std::vector<row_pages*>{&a, &b};
    std::vector<int> counts = padded ? std::vector<int>{n, 0, n} : std::vector<int>{n, n};
    const step_tables t = pool.plan(rows, counts);
    std::vector<float> x(built.prefill);
    x.insert(x.end(), built.prefill.begin(), built.prefill.end());
    talker_step_output out;
    model().prefill(x, t.view(), kv, out);
    return out;
  };
  const auto plain = run(false), padded = run(true);
  const std::size_t v = std::size_t(model().config().talker.vocab);
  REQUIRE(padded.logits.size() == 3 * v);
  CHECK(std::equal(plain.logits.begin(), plain.logits.begin() + std::ptrdiff_t(v), padded.logits.begin()));
  CHECK(std::equal(plain.logits.begin() + std::ptrdiff_t(v), plain.logits.end(),
                   padded.logits.begin() + std::ptrdiff_t(2 * v)));
  CHECK(std::all_of(padded.hidden.begin() + 32, padded.hidden.begin() + 64, [](float h) { return h == 0.0f; }));
}
