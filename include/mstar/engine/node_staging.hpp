// A node's plan buffers: a small ring of (host, device) block pairs, each with an event recorded
// after its host-to-device copy. A plan writes one block and issues one copy for all of the step's
// resources. Reuse waits for the block's last copy to have read the host side (usually long done: a
// query), and a block reused on another stream than its last one is first fenced with an event,
// since a forward on that stream may still read the device side. Entries are preallocated at load:
// the per-step path never allocates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/detail/spin_lock.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar::detail {

template <device_backend Backend>
class node_staging {
public:
  using stream_type = typename Backend::stream_type;
  using event_type = typename Backend::event_type;

  struct entry {
    std::byte* host = nullptr;
    std::byte* device = nullptr;
    event_type done{};
    stream_type stream{};
    bool used = false;
  };

  node_staging() = default;
  node_staging(Backend& backend, std::size_t capacity, std::uint32_t depth) : backend_(&backend), capacity_(capacity) {
    entries_.resize(depth);
    for (auto& e : entries_) {
      if (capacity_ != 0) {
        e.host = static_cast<std::byte*>(backend.allocate_host(capacity_));
        e.device = static_cast<std::byte*>(backend.allocate_device(capacity_));
      }
      e.done = backend.create_event();
    }
    fence_ = backend.create_event();
  }
  ~node_staging() {
    if (backend_ == nullptr) return;
    for (auto& e : entries_) {
      if (e.used) {
        try {
          backend_->synchronize(e.done);
        } catch (...) { // an error of unrelated queued work; the buffers must be freed all the same
        }
      }
      backend_->destroy_event(e.done);
      if (e.host) backend_->free_host(e.host);
      if (e.device) backend_->free_device(e.device);
    }
    backend_->destroy_event(fence_);
  }
  node_staging(const node_staging&) = delete;
  node_staging& operator=(const node_staging&) = delete;

  // The next entry, free to write on the host and ordered on `stream` after its last use.
  entry& acquire(stream_type stream) {
    auto& e = entries_[cursor_.fetch_add(1, std::memory_order_relaxed) % entries_.size()];
    if (e.used) {
      for (std::uint32_t spins = 0; !done(e.done); ++spins)
        if (spins < 64)
          spin_pause();
        else
          std::this_thread::yield();
      if (!(e.stream == stream)) {
        backend_->record(fence_, e.stream);
        backend_->wait(stream, fence_);
      }
    }
    return e;
  }
  plan_arena arena(entry& e) const { return plan_arena(e.host, e.device, capacity_); }
  // Whether the entry's last use ran. An error of stream work before it (a failed step's kernel)
  // belongs to that step's own event, where the worker reports it: here it only means "ran".
  bool done(const event_type& e) const {
    try {
      return backend_->query(e);
    } catch (...) {
      return true;
    }
  }
  // One copy of the entry's first `bytes` to the device on `stream`, and its event.
  void submit(entry& e, std::size_t bytes, stream_type stream) {
    if (bytes != 0) backend_->copy_to_device(e.device, e.host, bytes, stream);
    backend_->record(e.done, stream);
    e.stream = stream;
    e.used = true;
  }
  std::size_t capacity() const { return capacity_; }

private:
  Backend* backend_ = nullptr;
  std::size_t capacity_ = 0;
  std::vector<entry> entries_;
  std::atomic<std::uint32_t> cursor_{0};
  event_type fence_{};
};

} // namespace mstar::detail
