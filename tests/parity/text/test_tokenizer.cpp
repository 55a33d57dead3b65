// The text tokenizer against Hugging Face: the ids qwen_tts's own tokenizer (transformers 4.57.3,
// tokenizers 0.22, loaded as Qwen3TTSModel.from_pretrained loads it) gave for the committed corpus, the
// prompt ids of its wrapper, and the errors a broken checkpoint folder gets.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using qwen3_tts::split_regex;
using qwen3_tts::text_tokenizer;
using qwen3_tts::token_id;

const fs::path fixture = fs::path(MSTAR_SOURCE_ROOT) / "tests/fixtures/qwen3tts/text";

// The patterns the header documents; the fixture records which ones the reference used.
const std::string qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string mistral_fix_pattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::json reference() {
  std::ifstream in(fixture / "reference.json");
  return nlohmann::json::parse(in);
}

struct corpus_row {
  std::string kind, text;
  std::vector<token_id> ids, ids_qwen2;
};

std::vector<corpus_row> corpus() {
  std::vector<corpus_row> rows;
  std::ifstream in(fixture / "corpus.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    corpus_row r{j["kind"], j["text"], j["ids"], {}};
    r.ids_qwen2 = j.contains("ids_qwen2_regex") ? j["ids_qwen2_regex"].get<std::vector<token_id>>() : r.ids;
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    char buf[8];
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

std::string ids_text(const std::vector<token_id>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]); // appended apart: GCC 12 warns, wrongly, of an overlapping memcpy in "," + ...
  }
  return s + "]";
}

// Encodes every corpus string and reports the first few that differ, each with its kind and text.
void check_corpus(split_regex regex, bool use_qwen2_ids) {
  const auto tok = text_tokenizer::from_folder(fixture / "vocab", regex);
  const auto rows = corpus();
  REQUIRE(rows.size() >= 5000);
  std::size_t wrong = 0, tokens = 0;
  std::ostringstream first;
  for (const auto& r : rows) {
    const auto& want = use_qwen2_ids ? r.ids_qwen2 : r.ids;
    const auto got = tok.encode(r.text);
    tokens += want.size();
    if (got != want && wrong++ < 10)
      first << "  [" << r.kind << "] \"" << escaped(r.text) << "\"\n    want " << ids_text(want) << "\n    got  "
            << ids_text(got) << "\n";
  }
  INFO("regex ", qwen3_tts::regex_name(regex), ": ", wrong, " of ", rows.size(), " strings (", tokens,
       " tokens) differ; first ones:\n", first.str());
  CHECK(wrong == 0);
}

// A scratch checkpoint folder: the fixture's files, with one of them replaced.
struct scratch {
  fs::path dir;
  explicit scratch(const std::string& name) : dir(fs::temp_directory_path() / ("qwen3tts_text_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"})
      fs::copy_file(fixture / "vocab" / f, dir / f);
  }
  ~scratch() { fs::remove_all(dir); }
  void write(const char* file, const std::string& text) const { std::ofstream(dir / file, std::ios::trunc) << text; }
};

// The error of loading a scratch copy of the fixture folder in which `file` holds `text` (or is missing).
std::string error_with(const char* file, const std::optional<std::string>& text) {
  scratch s(file);
  if (text) s.write(file, *text);
  else fs::remove(s.dir / file);
  try {
    (void)text_tokenizer::from_folder(s.dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("Text.the reference tokenizer used the regex that transformers swaps in under fix_mistral_regex") {
  const auto ref = reference();
  CHECK(ref["transformers"] == "4.57.3");
  CHECK(ref["loader_regex"].get<std::string>() == mistral_fix_pattern);
  CHECK(ref["qwen2_regex"].get<std::string>() == qwen2_pattern);
}

TEST_CASE("Text.every corpus string encodes to the ids of the reference's own tokenizer") {
  check_corpus(split_regex::mistral_fix, false);
}

TEST_CASE("Text.with Qwen2's own regex every corpus string encodes as Hugging Face encodes it with that regex") {
  check_corpus(split_regex::qwen2, true);
}

TEST_CASE("Text.the prompt ids equal the ones the reference wrapper builds from text and instruction") {
  const auto tok = text_tokenizer::from_folder(fixture / "vocab", split_regex::mistral_fix);
  const auto cases = reference()["chat"];
  REQUIRE(cases.size() >= 4);
  for (const auto& c : cases) {
    const std::string text = c["text"], instruct = c["instruct"];
    INFO("text \"", escaped(text), "\", instruction \"", escaped(instruct), "\"");
    CHECK(qwen3_tts::assistant_text_ids(tok, text) == c["input_ids"].get<std::vector<token_id>>());
    CHECK(qwen3_tts::ref_text_ids(tok, text) == c["ref_ids"].get<std::vector<token_id>>());
    const auto ins = qwen3_tts::instruct_ids(tok, instruct);
    if (c["instruct_ids"].is_null()) {
      CHECK_FALSE(ins.has_value());
    } else {
      REQUIRE(ins.has_value());
      CHECK(*ins == c["instruct_ids"].get<std::vector<token_id>>());
    }
  }
}

TEST_CASE("Text.the TTS control tokens have the ids the model's config names") {
  const auto tok = text_tokenizer::from_folder(fixture / "vocab");
  CHECK(tok.added_id("<|im_start|>") == 151644);
  CHECK(tok.added_id("<|im_end|>") == 151645);
  CHECK(tok.added_id("<tts_pad>") == 151671);
  CHECK(tok.added_id("<tts_text_bos>") == 151672);
  CHECK(tok.added_id("<tts_text_eod>") == 151673);
  CHECK_THROWS_WITH_AS(tok.added_id("<tts_nothing>"), doctest::Contains("<tts_nothing>"), std::runtime_error);
}

TEST_CASE("Text.the regex follows the loader's rule on the folder's config.json") {
  scratch s("rule");
  const std::size_t real_vocab = 151643;
  auto with_config = [&](const std::string& config) {
    s.write("config.json", config);
    return qwen3_tts::official_loader_regex(s.dir, real_vocab);
  };
  // The released checkpoints: transformers 4.57.3, model_type qwen3_tts.
  CHECK(with_config(R"({"model_type": "qwen3_tts", "transformers_version": "4.57.3"})") == split_regex::mistral_fix);
  CHECK(with_config(R"({"model_type": "qwen3_tts", "transformers_version": "4.57.2"})") == split_regex::qwen2);
  CHECK(with_config(R"({"model_type": "mistral", "transformers_version": "4.50.0"})") == split_regex::mistral_fix);
  CHECK(with_config(R"({"transformers_version": "4.40.0"})") == split_regex::mistral_fix);
  CHECK(with_config(R"({"model_type": "qwen3_tts"})") == split_regex::mistral_fix);
  CHECK(with_config(R"({"model_type": "qwen3_tts", "transformers_version": "5.0.0"})") == split_regex::qwen2);
  CHECK(with_config(R"({"model_type": "qwen3_tts", "transformers_version": "5.0.0rc1"})") == split_regex::mistral_fix);
  CHECK(qwen3_tts::official_loader_regex(s.dir, 100000) == split_regex::qwen2);  // vocabulary not over 100,000
  fs::remove(s.dir / "config.json");
  CHECK(qwen3_tts::official_loader_regex(s.dir, real_vocab) == split_regex::qwen2);
}

TEST_CASE("Text.a folder without vocab.json is refused with the file named") {
  const std::string e = error_with("vocab.json", std::nullopt);
  CHECK(contains(e, "vocab.json: cannot be opened"));
}

TEST_CASE("Text.a vocab.json that is not JSON is refused with the file and the parser's position") {
  const std::string e = error_with("vocab.json", "{\"a\": 1,\n \"b\": }\n");
  CHECK(contains(e, "vocab.json: is not valid JSON"));
  CHECK(contains(e, "line 2"));
}

TEST_CASE("Text.a vocab.json with a number past a double's range is refused naming the file") {
  // nlohmann/json reports 1e400 as out_of_range, not parse_error.
  const std::string e = error_with("vocab.json", "{\"a\": 1e400}\n");
  CHECK(contains(e, "vocab.json: is not valid JSON"));
  CHECK(contains(e, "1e400"));
}

TEST_CASE("Text.a merges line with one token is refused with the file and line") {
  const std::string e = error_with("merges.txt", "#version: 0.2\n\xc4\xa0 \xc4\xa0\ni\n");
  CHECK(contains(e, "merges.txt: line 3"));
  CHECK(contains(e, "found 1"));
}

TEST_CASE("Text.a merge whose part is not in the vocabulary is refused with the file, line and part") {
  const std::string e = error_with("merges.txt", "#version: 0.2\ni n\nzzqq x\n");
  CHECK(contains(e, "merges.txt: line 3"));
  CHECK(contains(e, "\"zzqq\" is not in vocab.json"));
}

TEST_CASE("Text.an added token with a flag the tokenizer does not implement is refused by name") {
  const std::string e = error_with(
      "tokenizer_config.json", R"({"added_tokens_decoder": {"151644": {"content": "<|im_start|>", "lstrip": true}}})");
  CHECK(contains(e, "tokenizer_config.json"));
  CHECK(contains(e, "\"lstrip\": true is not supported"));
}

TEST_CASE("Text.text that is not UTF-8 is refused with the byte offset") {
  const auto tok = text_tokenizer::from_folder(fixture / "vocab");
  CHECK_THROWS_WITH_AS(tok.encode("ok \xff no"), doctest::Contains("byte 3"), std::runtime_error);
}
