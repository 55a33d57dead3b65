// The 12 Hz codec decoder against the reference (qwen-tts 0.1.1): streaming window by window with the
// pooled state gives the reference's whole-sequence forward audio, for every ramp; a reused state, the
// rows of a batched step and the input checks behave as the recurrent pools need.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "codec_checkpoint.hpp"
#include "codec_fixture.hpp"
#include "codes_json.hpp"
#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "qwen3_tts/checkpoint/safetensors.hpp"
#include "wav.hpp"

namespace {

using namespace qwen3_tts;
using namespace qwen3_tts::codec_fixture;
constexpr float tolerance = 1e-4f;

} // namespace

TEST_CASE("codec: streaming any window ramp reproduces the reference's whole-sequence audio within 1e-4") {
  for (const std::string fixture : {"tiny06", "tiny17"}) {
    const auto decoder = load_codec_decoder(fixtures + fixture);
    for (const std::string name : {"short", "long"}) {
      const auto seq = load_sequence(fixture, name);
      const int n = int(seq.frames.size() / 16);
      REQUIRE(seq.audio.size() == std::size_t(n) * decoder.samples_per_frame());
      const std::vector<std::vector<int>> ramps = {{n}, {1}, {1, 2, 4, 8}, {3, 5}, {2}, {1, 1, 1, 7}};
      for (const auto& ramp : ramps) {
        CAPTURE(fixture);
        CAPTURE(name);
        CAPTURE(ramp);
        CHECK(max_abs_error(decode_ramp(decoder, seq.frames, ramp), seq.audio) <= tolerance);
      }
      CHECK(max_abs_error(decoder.decode_all(seq.frames), seq.audio) <= tolerance);
    }
  }
}

TEST_CASE("codec: every window split gives the same bits as one window of the whole sequence") {
  // Stronger than the 1e-4 bar above, which the fixtures' clamped audio (most samples at +-1) makes loose:
  // the carried state must reproduce each output sum exactly, not approximately.
  const auto decoder = load_codec_decoder(fixtures + "tiny06");
  const auto seq = load_sequence("tiny06", "long");
  const auto whole = decoder.decode_all(seq.frames);
  for (const auto& ramp : std::vector<std::vector<int>>{{1}, {1, 2, 4, 8}, {3, 5}, {4}, {5, 1}}) {
    CAPTURE(ramp);
    CHECK(same_bytes(decode_ramp(decoder, seq.frames, ramp), whole));
  }
  CHECK_THROWS_WITH_AS(decode_ramp(decoder, seq.frames, std::vector<int>{2, 0}), doctest::Contains("width 0"),
                       std::invalid_argument);
}

TEST_CASE("codec: a state buffer zeroed after a request decodes the next request as a fresh one does") {
  const auto decoder = load_codec_decoder(fixtures + "tiny17");
  const auto first = load_sequence("tiny17", "long"), second = load_sequence("tiny17", "short");
  std::vector<float> state(decoder.state_layout().total, 0.0f);
  decoder.decode_window(state, first.frames);
  CHECK(std::any_of(state.begin(), state.end(), [](float v) { return v != 0; }));
  std::fill(state.begin(), state.end(), 0.0f); // what the pool's teardown does to a released slot
  const auto reused = decoder.decode_window(state, second.frames);
  CHECK(same_bytes(reused, decoder.decode_all(second.frames)));
  CHECK(max_abs_error(reused, second.audio) <= tolerance);
}

TEST_CASE("codec: two requests in one batched step with different widths each get the audio they get alone") {
  const auto decoder = load_codec_decoder(fixtures + "tiny06");
  const auto a = load_sequence("tiny06", "long"), b = load_sequence("tiny06", "short");
  const std::size_t spf = decoder.samples_per_frame();
  std::vector<float> state_a(decoder.state_layout().total, 0.0f), state_b(state_a);
  std::vector<float> audio_a(a.audio.size()), audio_b(b.audio.size());
  // Widths per step: a takes 1, 2, 4, 8, 8; b takes 3, 1, 3 (then has no frames left).
  const std::vector<int> widths_a = {1, 2, 4, 8, 8}, widths_b = {3, 1, 3};
  std::size_t done_a = 0, done_b = 0;
  for (std::size_t step = 0; step < widths_a.size(); ++step) {
    std::vector<codec_decoder::row> rows;
    const auto add = [&](std::vector<float>& state, const sequence& s, std::vector<float>& audio, std::size_t& done,
                         std::size_t width) {
      width = std::min(width, s.frames.size() / 16 - done);
      if (width == 0)
        return;
      rows.push_back({state, std::span(s.frames).subspan(done * 16, width * 16),
                      std::span(audio).subspan(done * spf, width * spf)});
      done += width;
    };
    add(state_a, a, audio_a, done_a, widths_a[step]);
    if (step < widths_b.size())
      add(state_b, b, audio_b, done_b, widths_b[step]);
    decoder.decode_step(rows);
  }
  REQUIRE(done_a == a.frames.size() / 16);
  REQUIRE(done_b == b.frames.size() / 16);
  CHECK(same_bytes(audio_a, decode_ramp(decoder, a.frames, widths_a)));
  CHECK(same_bytes(audio_b, decode_ramp(decoder, b.frames, widths_b)));
  CHECK(max_abs_error(audio_a, a.audio) <= tolerance);
  CHECK(max_abs_error(audio_b, b.audio) <= tolerance);
}

TEST_CASE("codec: a control id or an out-of-range code is refused before the state is touched") {
  const auto decoder = load_codec_decoder(fixtures + "tiny06");
  const int size = decoder.config().codebook_size;
  auto frames = load_sequence("tiny06", "short").frames;
  frames[16 + 3] = size; // frame 1, codebook 3: the first control id
  std::vector<float> state(decoder.state_layout().total, 0.0f);
  CHECK_THROWS_WITH_AS(decoder.decode_window(state, frames),
                       doctest::Contains(("frame 1, codebook 3: code " + std::to_string(size)).c_str()), std::invalid_argument);
  CHECK(std::all_of(state.begin(), state.end(), [](float v) { return v == 0; }));
  frames[16 + 3] = -1;
  CHECK_THROWS_WITH_AS(decoder.decode_window(state, frames), doctest::Contains("code -1 is outside"),
                       std::invalid_argument);
  state[0] = 2.5f; // not a frame count: not a codec state
  frames[16 + 3] = 0;
  CHECK_THROWS_WITH_AS(decoder.decode_window(state, frames), doctest::Contains("frame counter"), std::invalid_argument);
}

TEST_CASE("codec: a malformed codes file is refused with the frame and codebook at fault") {
  const auto parse = [](const char* text) { return parse_codes_json(nlohmann::json::parse(text), 4, 256, "codes.json"); };
  CHECK(parse(R"({"frames": [[1, 2, 3, 4], [255, 0, 0, 0]]})") == std::vector<std::int32_t>{1, 2, 3, 4, 255, 0, 0, 0});
  CHECK_THROWS_WITH_AS(parse(R"({"frames": [[1, 2, 3, 4], [256, 0, 0, 0]]})"),
                       doctest::Contains("codes.json: frame 1, codebook 0: 256 is not a code"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse(R"({"frames": [[1, 2, 3]]})"), doctest::Contains("frame 0 is [1,2,3], expected a list of 4"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse(R"({"frames": [[1, 2, 3.5, 4]]})"), doctest::Contains("codebook 2: 3.5 is not an integer"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse(R"([[1, 2, 3, 4]])"), doctest::Contains("expected an object {\"frames\""),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(read_codes_json(fixtures + "no-such-file.json", 4, 256), doctest::Contains("no-such-file.json"),
                       std::runtime_error);
}

TEST_CASE("codec: a codes file with a number past a double's range is refused naming the file") {
  // nlohmann/json reports 1e400 as out_of_range, not parse_error (found by tests/fuzz/json_fuzz.cpp).
  const auto path =
      std::filesystem::temp_directory_path() / ("qwen3tts_codes_overflow_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"frames": [[1, 2, 3, 1e400]]})";
  std::string message = "(no error)";
  try {
    read_codes_json(path.string(), 4, 256);
  } catch (const std::invalid_argument& e) {
    message = e.what();
  }
  std::filesystem::remove(path);
  INFO("message: " << message);
  CHECK(message.find(path.string() + ": not valid JSON") == 0);
  CHECK(message.find("1e400") != std::string::npos);
}

TEST_CASE("codec: the config parser names the field it cannot use") {
  auto config = nlohmann::json::parse(R"({"decoder_config": {"codebook_dim": 512, "hidden_size": "512"}})");
  CHECK_THROWS_WITH_AS(parse_codec_config(config, "config.json"),
                       doctest::Contains("config.json: decoder_config.hidden_size must be an integer"), std::runtime_error);
  config["decoder_config"].erase("hidden_size");
  config["decoder_config"].erase("codebook_dim");
  CHECK_THROWS_WITH_AS(parse_codec_config(config, "config.json"),
                       doctest::Contains("decoder_config.codebook_dim is missing"), std::runtime_error);
  config["decoder_config"]["codebook_dim"] = 512;
  config["decoder_config"]["hidden_act"] = "gelu";
  CHECK_THROWS_WITH_AS(parse_codec_config(config, "config.json"), doctest::Contains("decoder_config.hidden_act"),
                       std::runtime_error);
}

TEST_CASE("codec: weights whose shapes disagree with the config are refused naming the tensor") {
  const auto folder = open_checkpoint(fixtures + "tiny06");
  auto config = parse_codec_config(folder.codec_config, "tiny06");
  config.latent_dim += 1; // as if config.json and model.safetensors came from different models
  const auto source = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    return to_f32(folder.codec_weights.require(name, shape));
  };
  CHECK_THROWS_WITH_AS(load_codec_weights(config, source), doctest::Contains("decoder.pre_conv.conv.weight"),
                       checkpoint_error);
}

TEST_CASE("codec: the real-size state layout is 5,194,000 bytes a request, 16-byte aligned segments") {
  // The released decoder: 8 layers of hidden 512, 16 heads of 64, window 72, latent 1024, decoder_dim 1536.
  const auto config = parse_codec_config(nlohmann::json::parse(R"({"decoder_config": {
      "codebook_dim": 512, "codebook_size": 2048, "latent_dim": 1024, "hidden_size": 512, "intermediate_size": 1024,
      "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 64,
      "sliding_window": 72, "decoder_dim": 1536, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
      "num_quantizers": 16}})"),
                                         "released");
  CHECK(config.samples_per_frame() == 1920);
  const auto layout = make_codec_state_layout(config);
  // K and V of 71 frames x 1024 per layer, conv contexts by hand: pre_conv 2x512, two ConvNeXt and decoder.0
  // 6x1024 each, each block 1 x in + (6 + 18 + 54) x out, output conv 6 x 96; the counter padded to 4.
  CHECK(layout.find("pre_transformer.layers.7.self_attn.value").size == 71 * 1024);
  CHECK(layout.find("decoder.1.block.4.conv1").size == 54 * 768);
  CHECK(layout.total == 4 + 1024 + 16 * 71 * 1024 + 3 * 6144 + (1536 + 78 * 768) + (768 + 78 * 384) +
                            (384 + 78 * 192) + (192 + 78 * 96) + 576);
  CHECK(layout.total == codec_released_state_floats);
  for (const auto& s : layout.segments)
    CHECK(s.offset % 4 == 0);
}

TEST_CASE("codec: the WAV writer writes a 44-byte RIFF header and little-endian samples") {
  const std::vector<float> samples = {0.0f, 1.0f, -1.0f, 0.5f};
  const auto pcm = encode_wav(samples, 24000, wav_format::pcm16);
  REQUIRE(pcm.size() == 44 + 8);
  CHECK(std::string(pcm.begin(), pcm.begin() + 4) == "RIFF");
  CHECK(std::string(pcm.begin() + 36, pcm.begin() + 40) == "data");
  CHECK(pcm[22] == 1);                                      // mono
  CHECK((pcm[24] | pcm[25] << 8 | pcm[26] << 16) == 24000); // sample rate
  CHECK((pcm[46] | pcm[47] << 8) == 32767);                 // 1.0
  CHECK((pcm[48] | pcm[49] << 8) == 0x8001);                // -1.0 -> -32767
  CHECK((pcm[50] | pcm[51] << 8) == 16384);                 // 0.5 -> 16383.5 rounds away from zero
  const auto f32 = encode_wav(samples, 24000, wav_format::float32);
  CHECK(f32[20] == 3); // IEEE float
  float back;
  std::memcpy(&back, f32.data() + 44 + 12, 4);
  CHECK(back == 0.5f);
}
