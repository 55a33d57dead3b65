// load_progress: silent for a load under a second, then a bar (terminal) or quarter lines (file), and a
// last line; a fake clock drives it.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "qwen3_tts/checkpoint/load_progress.hpp"

using namespace qwen3_tts;

namespace {

struct fake_clock {
  std::chrono::steady_clock::time_point now{};
  void advance(double s) {
    now += std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  }
};

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[512];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f))
    out.append(buf, n);
  return out;
}

} // namespace

TEST_CASE("Checkpoint.load progress stays silent for a load that takes under a second") {
  fake_clock c;
  std::FILE* f = std::tmpfile();
  {
    load_progress p("weights", 4'000'000, f, 0, [&] { return c.now; });
    for (int i = 0; i < 4; ++i) {
      c.advance(0.2);
      p.add(1'000'000);
    }
    CHECK(!p.shown());
  }
  CHECK(read_all(f).empty());
  std::fclose(f);
}

TEST_CASE("Checkpoint.load progress past a second prints each quarter once, then the total and the time") {
  fake_clock c;
  std::FILE* f = std::tmpfile();
  load_progress p("talker weights", 8'000'000, f, 0, [&] { return c.now; });
  for (int i = 0; i < 8; ++i) {
    c.advance(0.5);
    p.add(1'000'000);
  }
  p.finish();
  CHECK(p.shown());
  const std::string out = read_all(f);
  CAPTURE(out);
  // Half a second a megabyte: the second megabyte (1.0 s) is the first shown, then each new quarter once.
  CHECK(out.find("talker weights:  25% (2 / 8 MB, 1.0 s)\n") != std::string::npos);
  CHECK(out.find("talker weights:  50% (4 / 8 MB, 2.0 s)\n") != std::string::npos);
  CHECK(out.find("talker weights:  75% (6 / 8 MB, 3.0 s)\n") != std::string::npos);
  CHECK(out.find("talker weights: 100% (8 / 8 MB, 4.0 s)\n") != std::string::npos);
  CHECK(out.find("37%") == std::string::npos); // 1.5 s, within the first quarter line's quarter: no line
  CHECK(out.find("talker weights: 8 MB in 4.0 s\n") != std::string::npos);
  std::fclose(f);
}

TEST_CASE("Checkpoint.load progress on a terminal redraws one line at most ten times a second") {
  fake_clock c;
  std::FILE* f = std::tmpfile();
  load_progress p("codec", 100'000'000, f, 1, [&] { return c.now; });
  c.advance(1.0);
  for (int i = 0; i < 100; ++i) {
    c.advance(0.01);
    p.add(1'000'000);
  }
  p.finish();
  const std::string out = read_all(f);
  std::size_t redraws = 0;
  for (std::size_t at = out.find('\r'); at != std::string::npos; at = out.find('\r', at + 1))
    ++redraws;
  CHECK(redraws >= 10);
  CHECK(redraws <= 12); // one second of adds at 100 Hz: about ten redraws, and the final line
  CHECK(out.find("codec: [###") != std::string::npos); // a bar, redrawn in place
  CHECK(out.find("codec: 100 MB in 2.0 s\n") != std::string::npos);
  std::fclose(f);
}
