// Step I/O patterns every model's forward functions need under mstar's worker (the cost model and the real
// Qwen3-TTS share them):
//
//   stream_fence   orders an object's step after its previous one when the two ran on different streams
//                  (lane modes move a node between streams; the object's scratch buffers are shared)
//   staging_ring   host-side input buffers reused round robin, each refilled only after the step that read
//                  it has run (its event)
//   mailbox        where a row's output is in a step's output buffer, and that buffer's reference count
//   output_pool    a step's output buffers, handed out on the GPU thread and given back row by row by the
//                  flow's landed hook (or its end hook), so a buffer is reused only once every row was read
//   ramp_window    the codec's next window width under a width ramp
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <algorithm>
#include <span>
#include <thread>
#include <vector>

namespace qwen3_tts::detail {

// The next codec window of a request that has had `chunks` windows, `coded` frames decoded and `made` frames
// made by the Talker: the ramp's width for this window (the last width repeating), or what is left once the
// Talker is done; 0 while the frames it covers are not all made yet.
inline std::uint32_t ramp_window(std::span<const std::uint32_t> ramp, std::uint32_t chunks, std::uint32_t made,
                                 std::uint32_t coded, bool talker_done) {
  const std::uint32_t avail = made - coded;
  std::uint32_t w = ramp[std::min<std::size_t>(chunks, ramp.size() - 1)];
  if (talker_done) w = std::min(w, avail);
  return avail >= w ? w : 0;
}

// Orders a step on `stream` after the object's previous step when that ran on another stream.
template <class Backend>
class stream_fence {
public:
  explicit stream_fence(Backend& b) : backend_(&b), event_(b.create_event()) {}
  ~stream_fence() {
    drain();
    backend_->destroy_event(event_);
  }
  stream_fence(const stream_fence&) = delete;
  stream_fence& operator=(const stream_fence&) = delete;
  void enter(typename Backend::stream_type s) {
    if (has_last_ && !(last_ == s)) {
      backend_->record(event_, last_);
      backend_->wait(s, event_);
    }
    last_ = s;
    has_last_ = true;
  }
  // Waits for the work enqueued so far on the last stream (before scratch buffers are freed).
  void drain() noexcept {
    if (!has_last_) return;
    try {
      backend_->record(event_, last_);
      backend_->synchronize(event_);
    } catch (...) { // a failed step's error was reported to its caller; the buffers are freed all the same
    }
  }

private:
  Backend* backend_;
  typename Backend::event_type event_;
  typename Backend::stream_type last_{};
  bool has_last_ = false;
};

// Host-side input buffers of a codec step, reused round robin: a buffer is refilled only after the
// step that read it has run (its event).
template <class Backend>
class staging_ring {
public:
  staging_ring(Backend& b, std::uint32_t depth, std::size_t bytes) : backend_(&b), bytes_(bytes) {
    for (std::uint32_t i = 0; i < depth; ++i) {
      host_.push_back(static_cast<unsigned char*>(b.allocate_host(bytes)));
      events_.push_back(b.create_event());
    }
  }
  ~staging_ring() {
    for (std::size_t i = 0; i < host_.size(); ++i) {
      try {
        backend_->synchronize(events_[i]);
      } catch (...) { // a failed step's error was reported to its caller; the buffer is freed all the same
      }
      backend_->destroy_event(events_[i]);
      backend_->free_host(host_[i]);
    }
  }
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;

  // The next buffer, once the step that last read it has run.
  std::uint32_t acquire() {
    const std::uint32_t i = next_;
    next_ = (next_ + 1) % static_cast<std::uint32_t>(host_.size());
    backend_->synchronize(events_[i]);
    return i;
  }
  void release(std::uint32_t i, typename Backend::stream_type s) { backend_->record(events_[i], s); }
  unsigned char* host(std::uint32_t i) const { return host_[i]; }
  std::size_t bytes() const { return bytes_; }

private:
  Backend* backend_;
  std::size_t bytes_;
  std::vector<unsigned char*> host_;
  std::vector<typename Backend::event_type> events_;
  std::uint32_t next_ = 0;
};

// A share of a step's output buffer: where a row's output is, and the buffer's reference count.
struct mailbox {
  const void* at = nullptr;
  std::atomic<std::uint32_t>* refs = nullptr;
  void release() noexcept {
    if (refs) refs->fetch_sub(1, std::memory_order_release);
    refs = nullptr;
    at = nullptr;
  }
};

// Output buffers of steps, handed out on the GPU thread and given back share by share.
template <class Backend, class T>
class output_pool {
public:
  output_pool(Backend& b, std::size_t buffers, std::size_t elems)
      : backend_(&b), elems_(elems), refs_(buffers) {
    for (std::size_t i = 0; i < buffers; ++i)
      data_.push_back(static_cast<T*>(b.allocate_host(elems * sizeof(T))));
  }
  ~output_pool() {
    for (T* p : data_)
      backend_->free_host(p);
  }
  output_pool(const output_pool&) = delete;
  output_pool& operator=(const output_pool&) = delete;

  struct lease {
    T* data;
    std::atomic<std::uint32_t>* refs;
  };
  // A free buffer with `shares` shares out. Every buffer busy means the main thread holds shares of
  // steps it has not routed yet: it gives them back without waiting on this thread, so wait for it.
  lease acquire(std::uint32_t shares, std::size_t elems) {
    if (elems > elems_)
      throw std::invalid_argument("qwen3_tts::tts_forwards: a step writes " + std::to_string(elems) +
                                  " outputs, its buffers hold " + std::to_string(elems_) +
                                  "; raise forward_options max_batch / max_window");
    for (std::uint64_t spins = 0;; ++spins) {
      for (std::size_t k = 0; k < refs_.size(); ++k) {
        const std::size_t i = (next_ + k) % refs_.size();
        if (refs_[i].load(std::memory_order_acquire) == 0) {
          refs_[i].store(shares, std::memory_order_relaxed);
          next_ = (i + 1) % refs_.size();
          return {data_[i], &refs_[i]};
        }
      }
      if (spins > (std::uint64_t{1} << 22))
        throw std::runtime_error("qwen3_tts::tts_forwards: no output buffer came back in seconds; every buffer is "
                                 "held by requests that never landed or ended (a flow bug)");
      std::this_thread::yield();
    }
  }
  bool all_free() const {
    for (const auto& r : refs_)
      if (r.load(std::memory_order_acquire) != 0) return false;
    return true;
  }

private:
  Backend* backend_;
  std::size_t elems_;
  std::vector<T*> data_;
  std::vector<std::atomic<std::uint32_t>> refs_;
  std::size_t next_ = 0;
};

} // namespace qwen3_tts::detail
