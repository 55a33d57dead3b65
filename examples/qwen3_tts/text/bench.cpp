// Encoding speed of the text tokenizer over the parity corpus: tokens per second on one thread,
// printed (not a test). With no argument it uses the committed reduced vocabulary; give a checkpoint
// folder to time its full vocabulary on the same corpus.
//
//   build/examples/qwen3tts_text_bench [checkpoint_dir] [repeats]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer.hpp"

int main(int argc, char** argv) {
  const std::string fixture = std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/text";
  const std::string folder = argc > 1 ? argv[1] : fixture + "/vocab";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  // The reduced vocabulary is too small for the loader's rule to pick the regex the corpus was made with.
  const auto tok = argc > 1 ? qwen3_tts::text_tokenizer::from_folder(folder)
                            : qwen3_tts::text_tokenizer::from_folder(folder, qwen3_tts::split_regex::mistral_fix);
  std::vector<std::string> texts;
  std::size_t bytes = 0;
  std::ifstream in(fixture + "/corpus.jsonl");
  for (std::string line; std::getline(in, line);) {
    texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
    bytes += texts.back().size();
  }
  std::vector<qwen3_tts::token_id> ids;
  std::size_t tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r)
    for (const auto& t : texts) {
      ids.clear();
      tok.encode(t, ids);
      tokens += ids.size();
    }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s (%s regex, %zu vocab entries): %zu strings x %d, %.2f Mtokens/s, %.1f MB/s, %.2f us/string\n",
              folder.c_str(), qwen3_tts::regex_name(tok.regex()), tok.vocab_size(), texts.size(), repeats, tokens / s / 1e6,
              bytes * double(repeats) / s / 1e6, s / (double(texts.size()) * repeats) * 1e6);

  // Growth with length: one long piece (a run of one symbol, of letters, of spaces) and long mixed text.
  const std::pair<const char*, std::string> units[] = {
      {"'-' run", "-"}, {"letter run", "a"}, {"space run", " "}, {"emoji", "\xf0\x9f\x98\x80"}, {"sentence", "Hello, world. "}};
  for (const auto& [what, unit] : units) {
    std::printf("%-10s", what);
    for (std::size_t len : {1000, 10000, 100000}) {
      std::string text;
      while (text.size() < len) text += unit;
      const auto t0 = std::chrono::steady_clock::now();
      ids.clear();
      tok.encode(text, ids);
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  %6zu bytes: %7.1f ns/byte", text.size(), dt / double(text.size()) * 1e9);
    }
    std::printf("\n");
  }
}
