// `qwen3tts synth` and `qwen3tts decode` given bad arguments: each answers with a message and exit code 2 for
// a command line it cannot parse (as the cost model's main does) or whose voice or language the checkpoint does
// not have, or 1 for one it parsed but cannot run, before any audio is written.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode_cli.hpp"
#include "synth_cli.hpp"

namespace fs = std::filesystem;

namespace {

const std::string tiny = std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/tiny06";

// Runs a subcommand's main on these arguments (argv[0] is the subcommand's name, as qwen3tts passes it).
int run(int (*main_fn)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  return main_fn(int(args.size()), argv.data());
}

int synth(std::vector<std::string> args) {
  args.insert(args.begin(), "synth");
  return run(qwen3_tts::pipeline::synth_main, std::move(args));
}

int decode(std::vector<std::string> args) {
  args.insert(args.begin(), "decode");
  return run(qwen3_tts::decode_main, std::move(args));
}

// What a call wrote to stderr (std::cerr and stdio alike: file descriptor 2 goes to a file meanwhile), and its
// exit code.
struct answer {
  int rc = -1;
  std::string err;
};
template <class Call>
answer capture_stderr(Call call) {
  std::fflush(stderr);
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = ::dup(2);
  ::dup2(::fileno(file), 2);
  answer a;
  a.rc = call();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::rewind(file);
  for (int c; (c = std::fgetc(file)) != EOF;)
    a.err += char(c);
  std::fclose(file);
  return a;
}

fs::path scratch(const std::string& name) {
  static std::atomic<int> counter{0};
  return fs::temp_directory_path() /
         ("qwen3tts_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + name);
}

} // namespace

TEST_CASE("CLI.a command line that does not parse exits 2, not CLI11's internal code") {
  const auto out = scratch("a.wav").string();
  CHECK(synth({"--text-ids", "1,2", "--out", out}) == 2);                       // --model missing
  CHECK(synth({"--model", tiny, "--text-ids", "1", "--out", out, "--bogus"}) == 2); // an unknown option
  CHECK(synth({"--model", tiny, "--text-ids", "1", "--out", out, "--max-frames", "-3"}) == 2);
  CHECK(decode({"--model", tiny, "--out", out}) == 2);                          // --codes missing
  CHECK(decode({"--model", tiny, "--codes", "c.json", "--out", out, "--window", "x"}) == 2);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("CLI.arguments that parse but cannot be run exit 1 and write no audio") {
  const auto out = scratch("b.wav");
  const std::string o = out.string();
  CHECK(synth({"--model", "/nonexistent/qwen3tts", "--text-ids", "1,2", "--speaker", "x", "--out", o}) == 1);
  CHECK(synth({"--model", tiny, "--text", "", "--speaker", "vivian", "--out", o}) == 1);
  CHECK(synth({"--model", tiny, "--text-ids", "1,2", "--speaker", "vivian", "--window", "0", "--out", o}) == 1);
  CHECK(synth({"--model", tiny, "--text-ids", "1,2", "--speaker", "vivian", "--codec-math", "bf16", "--out", o}) == 1);
  CHECK(synth({"--model", tiny, "--text-ids", "1,2", "--speaker", "vivian", "--codec-math", "cudnn", "--out", o}) == 1);
  // A window so wide its output buffers could not be allocated (it ended in std::bad_alloc).
  CHECK(synth({"--model", tiny, "--text-ids", "1,2", "--speaker", "vivian", "--window", "1,100000000", "--out", o}) == 1);
  CHECK(synth({"--model", tiny, "--text-ids", "1,2", "--speaker", "vivian", "--out", fs::temp_directory_path().string()}) == 1); // a folder
  CHECK(decode({"--model", "/nonexistent/qwen3tts", "--codes", "c.json", "--out", o}) == 1);
  CHECK(decode({"--model", tiny, "--codes", "/nonexistent/codes.json", "--out", o}) == 1);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("CLI.synth names the checkpoint's type and its voices or languages when they do not fit, and exits 2") {
  const std::string tiny17 = std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/tiny17"; // VoiceDesign
  const auto out = scratch("v.wav");
  const std::string o = out.string();
  const auto said = [&](std::vector<std::string> args) {
    return capture_stderr([&] { return synth(std::move(args)); });
  };
  auto a = said({"--model", tiny, "--text-ids", "1,2", "--out", o});
  CHECK(a.rc == 2);
  CHECK_MESSAGE(a.err.find("--speaker is required: this is a CustomVoice checkpoint; its voices: dylan, vivian") !=
                    std::string::npos,
                a.err);
  a = said({"--model", tiny, "--text-ids", "1,2", "--speaker", "nobody", "--out", o});
  CHECK(a.rc == 2);
  CHECK_MESSAGE(a.err.find("--speaker \"nobody\" is not one of this checkpoint's voices: dylan, vivian") !=
                    std::string::npos,
                a.err);
  CHECK_MESSAGE(a.err.find("hook") == std::string::npos, a.err); // not the worker's wording
  a = said({"--model", tiny, "--text-ids", "1,2", "--speaker", "VIVIAN", "--language", "klingon", "--out", o});
  CHECK(a.rc == 2);
  CHECK_MESSAGE(a.err.find("--language \"klingon\" is not one of this checkpoint's languages: auto, beijing_dialect, "
                           "chinese, english, german, sichuan_dialect") != std::string::npos,
                a.err);
  a = said({"--model", tiny17, "--text-ids", "1,2", "--speaker", "vivian", "--out", o});
  CHECK(a.rc == 2);
  CHECK_MESSAGE(a.err.find("this is a VoiceDesign checkpoint, which has no voices: leave --speaker out and describe "
                           "the voice in --instruct") != std::string::npos,
                a.err);
  a = said({"--model", tiny17, "--text-ids", "1,2", "--out", o});
  CHECK(a.rc == 2);
  CHECK_MESSAGE(a.err.find("--instruct is required: this is a VoiceDesign checkpoint") != std::string::npos, a.err);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("CLI.decode refuses a codes file without frames, naming it, and writes no audio") {
  const auto codes = scratch("empty.json");
  std::ofstream(codes) << R"({"frames": []})";
  const auto out = scratch("e.wav");
  const auto a = capture_stderr([&] {
    return decode({"--model", tiny, "--codes", codes.string(), "--out", out.string()});
  });
  CHECK(a.rc == 1);
  CHECK_MESSAGE(a.err.find("no frames in " + codes.string()) != std::string::npos, a.err);
  CHECK_FALSE(fs::exists(out));
  fs::remove(codes);
}

TEST_CASE("CLI.synth and decode exit 1 for an --out they cannot write") {
  const std::string o = (scratch("no-such-dir") / "a.wav").string();
  CHECK(synth({"--model", tiny, "--text-ids", "1,2", "--speaker", "vivian", "--max-frames", "2", "--out", o}) == 1);
  const auto codes = scratch("codes.json");
  std::ofstream(codes) << R"({"frames": [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]})";
  CHECK(decode({"--model", tiny, "--codes", codes.string(), "--out", o}) == 1);
  const auto ok = scratch("ok.wav");
  CHECK(decode({"--model", tiny, "--codes", codes.string(), "--out", ok.string()}) == 0); // the same call, writable
  fs::remove(codes);
  fs::remove(ok);
}

TEST_CASE("CLI.synth --greedy keeps the checkpoint's repetition penalty, as the reference wrapper does") {
  // The wrapper's do_sample=False changes only the decision: repetition_penalty still comes from
  // generation_config.json. Two copies of tiny06 that differ only in that penalty must give different greedy
  // codes: a penalty of 0.01 multiplies an earlier code 0's positive logit by 100 (and brings a negative one
  // near 0), so code 0 repeats, which 1.05 over 24 frames of 256 codes does not make it do.
  const auto codes_with_penalty = [](double penalty) {
    const auto dir = scratch("model");
    fs::copy(tiny, dir, fs::copy_options::recursive);
    auto g = nlohmann::json::parse(std::ifstream(dir / "generation_config.json"));
    g["repetition_penalty"] = penalty;
    std::ofstream(dir / "generation_config.json", std::ios::trunc) << g.dump();
    const auto wav = scratch("g.wav"), codes = scratch("g.json");
    CHECK(synth({"--model", dir.string(), "--text-ids", "9,10,11,12", "--speaker", "vivian", "--greedy",
                 "--max-frames", "24", "--out", wav.string(), "--dump-codes", codes.string()}) == 0);
    std::ifstream in(codes);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::remove_all(dir);
    fs::remove(wav);
    fs::remove(codes);
    return text;
  };
  const auto mild = codes_with_penalty(1.05), strong = codes_with_penalty(0.01);
  CHECK_FALSE(mild.empty());
  CHECK(mild != strong);
}
