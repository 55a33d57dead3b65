// Hostile or mistaken speech_tokenizer/config.json values: each is refused naming the file and the field,
// before a size computed from it overflows an int or sizes a buffer (the decode command and the engine's pool
// allocate a request's state from the config alone).
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "codec_config.hpp"

using namespace qwen3_tts;

namespace {

nlohmann::json tiny_codec_config() {
  std::ifstream f(std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/tiny06/speech_tokenizer/config.json");
  return nlohmann::json::parse(f);
}

void refused(const nlohmann::json& config, const std::string& field) {
  const std::string expected = "speech_tokenizer/config.json: decoder_config." + field;
  CHECK_THROWS_WITH_AS(parse_codec_config(config, "speech_tokenizer/config.json"),
                       doctest::Contains(expected.c_str()), std::runtime_error);
}

} // namespace

TEST_CASE("codec: the committed fixture's config parses (the base of the hostile cases below)") {
  const auto c = parse_codec_config(tiny_codec_config(), "speech_tokenizer/config.json");
  CHECK(c.samples_per_frame() > 0);
}

TEST_CASE("codec: a config integer past the int range is refused, not truncated into a valid one") {
  auto config = tiny_codec_config();
  // 2^32 + 2 reads back as 2 through a 32-bit conversion.
  config["decoder_config"]["upsample_rates"][0] = (std::int64_t{1} << 32) + 2;
  refused(config, "upsample_rates");
  config = tiny_codec_config();
  config["decoder_config"]["num_hidden_layers"] = (std::int64_t{1} << 32) + 1;
  refused(config, "num_hidden_layers");
}

TEST_CASE("codec: upsampling factors whose product overflows the samples per frame are refused") {
  auto config = tiny_codec_config();
  config["decoder_config"]["upsampling_ratios"] = {65536, 65536};
  refused(config, "upsampling_ratios");
  config = tiny_codec_config();
  config["decoder_config"]["upsample_rates"] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                                2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  refused(config, "upsample_rates");
}

TEST_CASE("codec: a sliding window that would make a request's state absurdly large is refused") {
  auto config = tiny_codec_config();
  // Released: 72 frames (5.2 MB of state a request). A billion frames would ask for terabytes per request.
  config["decoder_config"]["sliding_window"] = 1 << 30;
  refused(config, "sliding_window");
}
