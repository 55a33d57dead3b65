#include "load_progress.hpp"

#include <algorithm>
#include <unistd.h>

namespace qwen3_tts {

load_progress::load_progress(std::string label, std::uint64_t total_bytes, std::FILE* out, int terminal,
                             clock_fn clock)
    : label_(std::move(label)), total_(total_bytes), out_(out),
      terminal_(terminal >= 0 ? terminal != 0 : (out && isatty(fileno(out)))),
      clock_(clock ? std::move(clock) : clock_fn([] { return std::chrono::steady_clock::now(); })),
      start_(clock_()) {}

load_progress::~load_progress() { finish(); }

double load_progress::elapsed() const { return std::chrono::duration<double>(clock_() - start_).count(); }

void load_progress::add(std::uint64_t bytes) {
  done_ += bytes;
  if (!out_ || finished_) return;
  const double t = elapsed();
  if (t < 1.0) return;
  if (terminal_) {
    if (last_draw_ < 0 || t - last_draw_ >= 0.1) draw(false);
    return;
  }
  const int quarter = total_ ? int(std::min<std::uint64_t>(done_ * 4 / total_, 4)) : 4;
  if (!shown_ || quarter > last_quarter_) {
    last_quarter_ = quarter;
    draw(false);
  }
}

void load_progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (out_ && shown_) draw(true);
}

void load_progress::draw(bool final) {
  shown_ = true;
  const double t = elapsed();
  last_draw_ = t;
  const double mb = double(done_) / 1e6, total_mb = double(total_) / 1e6;
  const double share = total_ ? std::min(1.0, double(done_) / double(total_)) : 1.0;
  if (final) {
    std::fprintf(out_, "%s%s: %.0f MB in %.1f s\n", terminal_ ? "\r\033[K" : "", label_.c_str(), mb, t);
  } else if (terminal_) {
    constexpr int width = 30;
    const int filled = int(share * width);
    std::fprintf(out_, "\r\033[K%s: [%.*s%*s] %3.0f%% (%.0f / %.0f MB)", label_.c_str(), filled,
                 "##############################", width - filled, "", share * 100, mb, total_mb);
  } else {
    std::fprintf(out_, "%s: %3.0f%% (%.0f / %.0f MB, %.1f s)\n", label_.c_str(), share * 100, mb, total_mb, t);
  }
  std::fflush(out_);
}

} // namespace qwen3_tts
