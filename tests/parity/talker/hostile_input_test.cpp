// Hostile or mistaken checkpoint files on the Talker's side: config.json integers the int fields cannot hold,
// and generation_config.json sampling values the reference's generate() refuses. Each is refused with the file
// and the field, before a forward could compute with it.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "talker_config.hpp"
#include "talker_request.hpp"

namespace fs = std::filesystem;
using namespace qwen3_tts;

namespace {

// The committed tiny06 checkpoint's config.json (the official layout, so only the field under test is wrong).
nlohmann::json tiny_config() {
  std::ifstream f(std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/tiny06/config.json");
  return nlohmann::json::parse(f);
}

// A folder holding only a generation_config.json, removed at scope exit.
struct generation_folder {
  fs::path path;
  explicit generation_folder(const nlohmann::json& g) {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("qwen3tts_generation_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
    std::ofstream(path / "generation_config.json") << g.dump();
  }
  ~generation_folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

} // namespace

TEST_CASE("Talker.config_integers_past_the_int_range_are_refused_not_truncated") {
  auto cfg = tiny_config();
  const int hidden = cfg["talker_config"]["hidden_size"].get<int>();
  // 2^32 + hidden reads back as `hidden` through a 32-bit conversion: the config would then look valid.
  cfg["talker_config"]["hidden_size"] = (std::int64_t{1} << 32) + hidden;
  CHECK_THROWS_WITH(parse_talker_config(cfg), doctest::Contains("talker_config.hidden_size"));
  cfg = tiny_config();
  cfg["talker_config"]["code_predictor_config"]["num_hidden_layers"] = std::uint64_t{1} << 40;
  CHECK_THROWS_WITH(parse_talker_config(cfg), doctest::Contains("code_predictor_config.num_hidden_layers"));
  cfg = tiny_config();
  cfg["talker_config"]["codec_eos_token_id"] = (std::int64_t{1} << 32) + 1;
  CHECK_THROWS_WITH(parse_talker_config(cfg), doctest::Contains("talker_config.codec_eos_token_id"));
}

TEST_CASE("Talker.generation_config_sampling_values_the_reference_refuses_are_refused_naming_the_field") {
  const auto refused = [](nlohmann::json g, const std::string& field) {
    g["do_sample"] = true;
    g["subtalker_dosample"] = true;
    generation_folder dir(g);
    const std::string expected = "generation_config.json: " + field;
    CHECK_THROWS_WITH(sampling_from(dir.path.string()), doctest::Contains(expected.c_str()));
  };
  refused({{"temperature", 0.0}}, "temperature");
  refused({{"temperature", -0.5}}, "temperature");
  refused({{"subtalker_temperature", 0.0}}, "subtalker_temperature");
  refused({{"top_k", -3}}, "top_k");
  refused({{"top_p", 0.0}}, "top_p");
  refused({{"subtalker_top_p", -0.1}}, "subtalker_top_p");
  refused({{"repetition_penalty", 0.0}}, "repetition_penalty");
}

TEST_CASE("Talker.generation_config_temperature_0_is_fine_when_not_sampling") {
  // The reference adds the temperature warper only when sampling: greedy with temperature 0 is a valid config.
  generation_folder dir({{"do_sample", false}, {"subtalker_dosample", false}, {"temperature", 0.0},
                         {"subtalker_temperature", 0.0}});
  const auto s = sampling_from(dir.path.string());
  CHECK_FALSE(s.talker.do_sample);
  CHECK_FALSE(s.sub.do_sample);
}
