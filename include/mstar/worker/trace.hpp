// A timeline of a run as a Chrome trace event file (JSON Object Format), which opens in Perfetto
// (ui.perfetto.dev) and chrome://tracing: one process per worker, one track per thread (main, GPU,
// plan) and one per stream (chain, lane), "X" (complete) events for phases and steps, "i" (instant)
// events for points such as a cancel. docs/worker-primitives.md describes the file format.
//
// Recording is meant for the per-step path: each recording thread owns a buffer whose events are all
// allocated when it is made; an event is a store into that array and one release store of the count.
// Past capacity, events are dropped and counted (the file reports the count), never reallocated.
// An event names its track, so the GPU thread can record a stream's work into its own buffer.
//
// Setup (add_track, intern, add_buffer) happens before the recording threads start. write_json may
// run at any time: it takes each buffer's published events, so it is race-free while threads record.
//
//   mstar::trace::session t(/*pid=*/0, "worker 0");
//   auto gpu = t.add_track("GPU"), lane = t.add_track("lane stream");
//   auto decode = t.intern("talker_decode"), rows = t.intern("rows");
//   mstar::trace::buffer& b = t.add_buffer(1 << 16);             // the GPU thread's
//   b.complete(gpu, decode, t0, t1, {rows, 128});                 // on the GPU thread
//   mstar::trace::write_json("/tmp/run.trace.json", t);           // at the end
#pragma once

#include <mstar/detail/json.hpp>
#include <mstar/worker/metrics.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mstar::trace {

using nanos = metrics::nanos;
using track_id = std::uint16_t; // index of a track in its session
using name_id = std::uint32_t;  // an interned string; 0 is the empty string, i.e. "none"

// A numeric argument shown in the event's details ("rows": 128). name 0: no argument.
struct arg {
  name_id name = 0;
  std::int64_t value = 0;
};

struct event {
  enum class kind : std::uint8_t { complete, instant };
  nanos begin = 0;
  nanos duration = 0;
  name_id name = 0;
  name_id category = 0;
  track_id track = 0;
  kind type = kind::complete;
  arg args[2]{};
};

class buffer;

// Records a complete event from construction to destruction on one track.
class [[nodiscard]] scoped_event {
public:
  scoped_event(buffer* b, track_id track, name_id name, arg a0 = {}, arg a1 = {}) noexcept
      : b_(b), track_(track), name_(name), a0_(a0), a1_(a1), begin_(metrics::now_ns()) {}
  scoped_event(const scoped_event&) = delete;
  scoped_event& operator=(const scoped_event&) = delete;
  ~scoped_event();

private:
  buffer* b_;
  track_id track_;
  name_id name_;
  arg a0_, a1_;
  nanos begin_;
};

// One recording thread's events. Exactly one thread records into a buffer.
class buffer {
public:
  explicit buffer(std::size_t capacity) : events_(std::make_unique<event[]>(capacity)), capacity_(capacity) {}

  void complete(track_id track, name_id name, nanos begin, nanos end, arg a0 = {}, arg a1 = {},
                name_id category = 0) noexcept {
    push(event{.begin = begin,
               .duration = end > begin ? end - begin : 0,
               .name = name,
               .category = category,
               .track = track,
               .type = event::kind::complete,
               .args = {a0, a1}});
  }

  void instant(track_id track, name_id name, nanos at, arg a0 = {}, arg a1 = {}, name_id category = 0) noexcept {
    push(event{.begin = at,
               .duration = 0,
               .name = name,
               .category = category,
               .track = track,
               .type = event::kind::instant,
               .args = {a0, a1}});
  }

  scoped_event scope(track_id track, name_id name, arg a0 = {}, arg a1 = {}) noexcept {
    return scoped_event(this, track, name, a0, a1);
  }

  std::size_t capacity() const noexcept { return capacity_; }
  // Events published so far (acquire: the events below this count are fully written).
  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  const event& operator[](std::size_t i) const noexcept { return events_[i]; }

private:
  void push(const event& e) noexcept {
    const std::size_t n = size_.load(std::memory_order_relaxed);
    if (n == capacity_) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
    events_[n] = e;
    size_.store(n + 1, std::memory_order_release);
  }

  std::unique_ptr<event[]> events_;
  std::size_t capacity_;
  std::atomic<std::size_t> size_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

inline scoped_event::~scoped_event() { b_->complete(track_, name_, begin_, metrics::now_ns(), a0_, a1_); }

namespace detail {

using mstar::detail::append_json_escaped; // detail/json.hpp: shared with mstar-validate --json

// Nanoseconds as microseconds with three decimals, in integer arithmetic (no float rounding).
inline void append_us(std::string& out, nanos ns) {
  char buf[40];
  const bool neg = ns < 0;
  const std::uint64_t a = neg ? std::uint64_t(0) - std::uint64_t(ns) : std::uint64_t(ns);
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", neg ? "-" : "", static_cast<unsigned long long>(a / 1000),
                static_cast<unsigned long long>(a % 1000));
  out += buf;
}

inline void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  out += buf;
}

} // namespace detail

// One worker: a process in the trace, with its tracks, its string table and its threads' buffers.
class session {
public:
  // Tracks of one session get trace tids pid * tid_stride + track + 1: Perfetto treats tids as unique
  // across the whole trace, so two workers must not share them.
  static constexpr int tid_stride = 1000;

  // epoch: the instant shown as time 0 (the file writes ts relative to the earliest epoch).
  session(int pid, std::string process_name, nanos epoch = metrics::now_ns())
      : pid_(pid), process_name_(std::move(process_name)), epoch_(epoch) {
    names_.emplace_back();
  }

  // A thread or stream track; sort_index orders tracks in the viewer (default: order of creation).
  track_id add_track(std::string name, int sort_index = -1) {
    if (tracks_.size() + 1 >= std::size_t(tid_stride))
      throw std::length_error("trace: session '" + process_name_ + "' already has " + std::to_string(tracks_.size()) +
                              " tracks; at most " + std::to_string(tid_stride - 1) + " fit one process");
    tracks_.push_back({std::move(name), sort_index < 0 ? int(tracks_.size()) : sort_index});
    return track_id(tracks_.size() - 1);
  }

  // Returns the id of name, adding it if new. Setup only: not safe against concurrent write_json.
  name_id intern(std::string_view name) {
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return name_id(i);
    names_.emplace_back(name);
    return name_id(names_.size() - 1);
  }

  // A buffer for one recording thread; the reference stays valid for the session's life.
  buffer& add_buffer(std::size_t capacity) { return buffers_.emplace_back(capacity); }

  int pid() const noexcept { return pid_; }
  nanos epoch() const noexcept { return epoch_; }
  const std::string& process_name() const noexcept { return process_name_; }
  std::size_t track_count() const noexcept { return tracks_.size(); }
  const std::string& track_name(track_id t) const { return tracks_.at(t).name; }
  const std::string& name(name_id n) const { return names_.at(n); }
  long long tid(track_id t) const noexcept { return (long long)pid_ * tid_stride + t + 1; }

  std::uint64_t dropped() const noexcept {
    std::uint64_t d = 0;
    for (const buffer& b : buffers_)
      d += b.dropped();
    return d;
  }
  std::size_t recorded() const noexcept {
    std::size_t n = 0;
    for (const buffer& b : buffers_)
      n += b.size();
    return n;
  }

  // Appends this session's events (metadata first, then events by track and time) to a
  // "traceEvents" array; first says whether a comma is needed before the first one.
  void append_events(std::string& out, nanos epoch, bool& first) const {
    auto open = [&] {
      out += first ? "\n" : ",\n";
      first = false;
    };
    open();
    out += R"({"ph":"M","name":"process_name","pid":)";
    detail::append_int(out, pid_);
    out += R"(,"tid":0,"args":{"name":")";
    detail::append_json_escaped(out, process_name_);
    out += "\"}}";
    for (std::size_t t = 0; t < tracks_.size(); ++t) {
      for (int pass = 0; pass < 2; ++pass) {
        open();
        out +=
            pass == 0 ? R"({"ph":"M","name":"thread_name","pid":)" : R"({"ph":"M","name":"thread_sort_index","pid":)";
        detail::append_int(out, pid_);
        out += R"(,"tid":)";
        detail::append_int(out, tid(track_id(t)));
        if (pass == 0) {
          out += R"(,"args":{"name":")";
          detail::append_json_escaped(out, tracks_[t].name);
          out += "\"}}";
        } else {
          out += R"(,"args":{"sort_index":)";
          detail::append_int(out, tracks_[t].sort_index);
          out += "}}";
        }
      }
    }

    // Perfetto nests "X" events of one track by time; sorting by (track, begin, longer first) keeps
    // a parent before the children that start with it.
    std::vector<const event*> events;
    events.reserve(recorded());
    for (const buffer& b : buffers_) {
      const std::size_t n = b.size();
      for (std::size_t i = 0; i < n; ++i)
        events.push_back(&b[i]);
    }
    std::sort(events.begin(), events.end(), [](const event* a, const event* b) {
      if (a->track != b->track) return a->track < b->track;
      if (a->begin != b->begin) return a->begin < b->begin;
      return a->duration > b->duration;
    });
    for (const event* e : events) {
      open();
      out += e->type == event::kind::complete ? R"({"ph":"X","pid":)" : R"({"ph":"i","s":"t","pid":)";
      detail::append_int(out, pid_);
      out += R"(,"tid":)";
      detail::append_int(out, e->track < tracks_.size() ? tid(e->track) : (long long)pid_ * tid_stride);
      out += R"(,"ts":)";
      detail::append_us(out, e->begin - epoch);
      if (e->type == event::kind::complete) {
        out += R"(,"dur":)";
        detail::append_us(out, e->duration);
      }
      out += R"(,"name":")";
      detail::append_json_escaped(out, safe_name(e->name));
      out += '"';
      if (e->category != 0) {
        out += R"(,"cat":")";
        detail::append_json_escaped(out, safe_name(e->category));
        out += '"';
      }
      bool any = false;
      for (const arg& a : e->args) {
        if (a.name == 0) continue;
        out += any ? "," : R"(,"args":{)";
        any = true;
        out += '"';
        detail::append_json_escaped(out, safe_name(a.name));
        out += "\":";
        detail::append_int(out, a.value);
      }
      if (any) out += '}';
      out += '}';
    }
  }

private:
  struct track {
    std::string name;
    int sort_index;
  };
  // An id that was never interned prints as "?" rather than reading out of bounds.
  std::string_view safe_name(name_id n) const noexcept {
    if (n < names_.size()) return names_[n];
    return "?";
  }

  int pid_;
  std::string process_name_;
  nanos epoch_;
  std::vector<track> tracks_;
  std::vector<std::string> names_;
  std::deque<buffer> buffers_; // a deque: add_buffer never moves earlier buffers
};

// The whole file as a string: {"displayTimeUnit":"ns","traceEvents":[...],"otherData":{...}}.
// ts and dur are microseconds (the format's unit) with nanosecond decimals.
inline std::string to_json(std::span<const session* const> sessions) {
  nanos epoch = 0;
  bool have_epoch = false;
  for (const session* s : sessions)
    if (!have_epoch || s->epoch() < epoch) epoch = s->epoch(), have_epoch = true;
  std::string out = R"({"displayTimeUnit":"ns","traceEvents":[)";
  bool first = true;
  std::uint64_t dropped = 0;
  for (const session* s : sessions) {
    s->append_events(out, epoch, first);
    dropped += s->dropped();
  }
  out += "\n],\n\"otherData\":{\"producer\":\"mstar\",\"dropped_events\":";
  detail::append_int(out, std::int64_t(dropped));
  out += "}}\n";
  return out;
}

inline void write_json(const std::string& path, std::span<const session* const> sessions) {
  const std::string json = to_json(sessions);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    throw std::runtime_error("trace: cannot open '" + path + "' for writing: " + std::strerror(errno) +
                             "; check that the directory exists and is writable");
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok)
    throw std::runtime_error("trace: writing '" + path + "' failed: " + std::strerror(ok ? errno : err));
}

inline std::string to_json(const session& s) {
  const session* one[] = {&s};
  return to_json(std::span<const session* const>(one));
}
inline void write_json(const std::string& path, const session& s) {
  const session* one[] = {&s};
  write_json(path, std::span<const session* const>(one));
}

} // namespace mstar::trace
