// Reports a long weight load on stderr: nothing while it takes under a second (the tiny checkpoints, a warm
// page cache), then a bar redrawn at most ten times a second on a terminal, or one line at each quarter when
// stderr is a file or a pipe, and a last line with the bytes and the time taken.
//
//   load_progress progress("talker weights", total_bytes);
//   for (...) { load(tensor); progress.add(tensor.bytes.size()); }
//   progress.finish();   // also done by the destructor
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace qwen3_tts {

class load_progress {
public:
  using clock_fn = std::function<std::chrono::steady_clock::time_point()>;

  // `terminal`: redraw one line in place (default: whether `out` is a terminal). `clock`: for tests.
  load_progress(std::string label, std::uint64_t total_bytes, std::FILE* out = stderr, int terminal = -1,
                clock_fn clock = {});
  ~load_progress();
  load_progress(const load_progress&) = delete;
  load_progress& operator=(const load_progress&) = delete;

  void add(std::uint64_t bytes);
  void finish();
  bool shown() const noexcept { return shown_; } // printed anything (the load took over a second)

private:
  double elapsed() const;
  void draw(bool final);

  std::string label_;
  std::uint64_t total_, done_ = 0;
  std::FILE* out_;
  bool terminal_, shown_ = false, finished_ = false;
  clock_fn clock_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1.0;
  int last_quarter_ = 0;
};

} // namespace qwen3_tts
