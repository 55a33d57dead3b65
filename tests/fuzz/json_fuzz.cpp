// libFuzzer target for the JSON files of a checkpoint folder and of the CLI, read through the readers the
// program calls: config.json and speech_tokenizer/config.json (checkpoint/json_file.hpp's read_json_object,
// then talker/talker_config.hpp and codec/codec_config.hpp) and the codes file of `qwen3tts decode --codes`
// (codec/codes_json.hpp's read_codes_json). Built and run by run_fuzz.sh with clang++
// -fsanitize=fuzzer,address,undefined. Each input is written to one temp file, read as a config (both
// parsers) and as a codes file. Beyond "no crash, no hang, no leak", it checks their contract: a refusal is
// std::runtime_error or std::invalid_argument (anything else, such as a nlohmann/json exception, escapes and
// counts as a finding) whose message names the file; an accepted config holds values the model can be built
// from; accepted codes are whole frames of codes of the codebook.
#include "contract.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "codec_config.hpp"
#include "codes_json.hpp"
#include "qwen3_tts/checkpoint/json_file.hpp"
#include "talker_config.hpp"

namespace {
using mstar_fuzz::broken;

const std::string& temp_path() {
  static const std::string path = [] {
    std::atexit([] { std::remove(temp_path().c_str()); }); // libFuzzer ends a timed run with exit()
    return (std::filesystem::temp_directory_path() / ("mstar_json_fuzz_" + std::to_string(::getpid()) + ".json"))
        .string();
  }();
  return path;
}

void expect_named(const std::exception& e) {
  if (std::string(e.what()).find(temp_path()) != 0) broken("a message that does not name the file");
}

void check_configs(const std::string& path) {
  nlohmann::json doc;
  try {
    doc = qwen3_tts::read_json_object(path);
  } catch (const std::runtime_error& e) { // checkpoint_error
    expect_named(e);
    return;
  }
  try {
    const auto c = qwen3_tts::parse_talker_config(doc, path);
    for (const auto* s : {&c.talker, &c.predictor})
      if (s->hidden < 1 || s->layers < 1 || s->heads < 1 || s->kv_heads < 1 || s->heads % s->kv_heads != 0 ||
          s->head_dim < 2 || s->head_dim % 2 != 0)
        broken("an accepted Talker stack with an impossible shape");
    if (c.talker.vocab < 1024 || c.codec_eos < 0 || c.codec_eos >= c.talker.vocab || c.tts_pad < 0 ||
        c.tts_pad >= c.text_vocab)
      broken("an accepted Talker config with an id outside its vocabulary");
    for (const auto& [name, id] : c.spk_id)
      if (id < 0 || id >= c.talker.vocab) broken("a speaker id outside the codec vocabulary");
  } catch (const std::runtime_error& e) {
    expect_named(e);
  }
  try {
    const auto c = qwen3_tts::parse_codec_config(doc, path);
    if (c.samples_per_frame() < 1) broken("an accepted codec config with no samples a frame");
    for (std::size_t b = 0; b < c.upsample_rates.size(); ++b)
      if (c.block_out_dim(b) < 1) broken("an accepted codec config whose decoder blocks halve to nothing");
    if (c.codebook_dim % 2 != 0 || c.num_quantizers < 2 || c.head_dim % 2 != 0) broken("an accepted odd codec shape");
  } catch (const std::runtime_error& e) {
    expect_named(e);
  }
}

void check_codes(const std::string& path) {
  // The released codec (16 codebooks of 2048 codes) and a small one, so short inputs reach its checks too.
  for (const auto [nq, cb] : {std::pair{16, 2048}, std::pair{2, 4}}) {
    try {
      const auto codes = qwen3_tts::read_codes_json(path, nq, cb);
      if (codes.size() % std::size_t(nq) != 0) broken("codes that are not whole frames");
      for (const auto v : codes)
        if (v < 0 || v >= cb) broken("an accepted code outside the codebook");
    } catch (const std::invalid_argument& e) {
      expect_named(e);
    } catch (const std::runtime_error& e) {
      expect_named(e);
    }
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = temp_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) broken("cannot write the temp file");
  check_configs(path);
  check_codes(path);
  return 0;
}
