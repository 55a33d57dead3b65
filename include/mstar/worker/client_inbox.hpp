// The worker's client side: submit, cancel and wake from any thread, taken by the main thread in the
// order the client made them; the count of requests submitted and ended (wait_idle); and the
// worker's fatal error, which stops every thread and refuses later submits. One mutex guards it all;
// it is taken once per request, off the per-step path. `flag()` tells the main thread, without the
// lock, that something is waiting.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "mstar/detail/spsc_ring.hpp"
#include "mstar/engine/step_runner.hpp"
#include "mstar/resources/step_view.hpp"
#include "mstar/worker/metrics.hpp"

namespace mstar::detail {

// A request's entry in an unordered map or set goes into a node that an erase kept (erase_keeping), so
// that it allocates only when more requests are known at once than ever before. False, keeping the
// node, when the key is there already.
template <class Table>
bool insert_reusing(Table& table, std::vector<typename Table::node_type>& spare, typename Table::value_type v) {
  if (spare.empty()) return table.insert(std::move(v)).second;
  auto node = std::move(spare.back());
  spare.pop_back();
  if constexpr (requires { node.mapped(); }) {
    node.key() = v.first;
    node.mapped() = std::move(v.second);
  } else {
    node.value() = std::move(v);
  }
  auto r = table.insert(std::move(node));
  if (!r.inserted) spare.push_back(std::move(r.node));
  return r.inserted;
}
template <class Table>
void erase_keeping(Table& table, std::vector<typename Table::node_type>& spare, const typename Table::key_type& key) {
  if (auto node = table.extract(key)) spare.push_back(std::move(node));
}

template <class Input>
struct submission {
  request_id id = 0;
  Input input;
  metrics::nanos at = 0;
};

template <class Input>
class client_inbox {
public:
  using submission_type = submission<Input>;
  using cancel_type = std::pair<std::size_t, request_id>; // (submits queued before it, id)

  explicit client_inbox(std::size_t max_requests) {
    ids_.reserve(max_requests);
    spare_ids_.reserve(max_requests);
  }

  // ---- the client (any thread) ----
  // False when `id` is already live (submitted and not ended).
  bool submit(request_id id, Input input) {
    {
      std::lock_guard g(lock_);
      if (stopping_.load(std::memory_order_relaxed))
        throw std::logic_error("mstar::threaded_worker::submit: the worker is stopping");
      if (abort_.load(std::memory_order_relaxed))
        throw std::runtime_error("mstar::threaded_worker::submit: " + fatal_why_ + "; stop() it and start a new one");
      if (!insert_reusing(ids_, spare_ids_, id)) return false;
      submits_.push_back({id, std::move(input), metrics::now_ns()});
      ++submitted_;
      flag_.store(true, std::memory_order_release);
    }
    bell_.ring();
    return true;
  }
  void cancel(request_id id) {
    {
      std::lock_guard g(lock_);
      cancels_.push_back({submits_.size(), id});
      flag_.store(true, std::memory_order_release);
    }
    bell_.ring();
  }
  void wake(request_id id) {
    {
      std::lock_guard g(lock_);
      wakes_.push_back(id);
      flag_.store(true, std::memory_order_release);
    }
    bell_.ring();
  }
  // Blocks until every submitted request has ended, or a fatal error; rethrows that error.
  void wait_idle() {
    std::unique_lock g(lock_);
    idle_cv_.wait(g, [&] { return ended_ == submitted_ || abort_.load(std::memory_order_relaxed); });
    if (error_) std::rethrow_exception(error_);
  }
  // stop(): later submits are refused, and the main thread cancels what is live and ends.
  void request_stop() {
    {
      std::lock_guard g(lock_);
      stopping_.store(true, std::memory_order_release);
      flag_.store(true, std::memory_order_release);
    }
    bell_.ring();
  }
  // The first fatal error, once every thread has been joined (stop()).
  void rethrow_fatal() const {
    if (error_) std::rethrow_exception(error_);
  }

  // ---- the main thread ----
  bool flag() const noexcept { return flag_.load(std::memory_order_acquire); }
  // Rung by every submit, cancel, wake and stop after its flag is set, and by a fatal error: the main
  // thread's idle sleeps (backoff::pause_idle with still_idle = !flag() && !aborted()).
  detail::doorbell& bell() noexcept { return bell_; }
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }
  // Swaps what the client queued with the caller's (emptied) vectors, so the client's next submits
  // fill the capacity the last take left, with no allocation once it is large enough. Returns whether
  // the worker is stopping.
  bool take(std::vector<submission_type>& subs, std::vector<cancel_type>& cancels, std::vector<request_id>& wakes) {
    std::lock_guard g(lock_);
    flag_.store(false, std::memory_order_relaxed);
    subs.swap(submits_);
    cancels.swap(cancels_);
    wakes.clear();
    wakes.swap(wakes_);
    return stopping_.load(std::memory_order_relaxed);
  }
  // After a fatal error: every submission still queued (its cancels no longer matter).
  void take_all(std::vector<submission_type>& subs) {
    std::lock_guard g(lock_);
    subs.swap(submits_);
    cancels_.clear();
  }
  // A request ended (after its end hook): its id may be submitted again.
  void ended(request_id id) {
    std::lock_guard g(lock_);
    erase_keeping(ids_, spare_ids_, id);
    ++ended_;
    if (ended_ == submitted_) idle_cv_.notify_all();
  }

  // ---- any worker thread ----
  // An exception outside any one request's work: every loop stops (aborted()), wait_idle() and
  // stop() rethrow the first such error, and submits are refused with its message.
  void fatal(std::exception_ptr e) noexcept {
    {
      std::lock_guard g(lock_);
      if (!error_) {
        error_ = e;
        try {
          fatal_why_ = "the worker stopped on an error: " + what_of(e);
        } catch (...) { // no memory for the message: keep the default
        }
      }
      abort_.store(true, std::memory_order_release);
      idle_cv_.notify_all();
    }
    bell_.ring();
  }
  bool aborted() const noexcept { return abort_.load(std::memory_order_acquire); }
  // Why requests end failed after a fatal error (read once aborted() is seen: written before it).
  std::string_view fatal_why() const noexcept { return fatal_why_; }

private:
  std::mutex lock_;
  std::condition_variable idle_cv_;
  std::vector<submission_type> submits_;
  std::vector<cancel_type> cancels_;
  std::vector<request_id> wakes_;
  std::unordered_set<request_id> ids_; // submitted and not ended
  std::vector<typename std::unordered_set<request_id>::node_type> spare_ids_;
  std::atomic<bool> flag_{false}, stopping_{false};
  std::uint64_t submitted_ = 0, ended_ = 0;
  std::string fatal_why_ = "the worker stopped on an error"; // set with abort_, under lock_
  std::exception_ptr error_;
  std::atomic<bool> abort_{false};
  detail::doorbell bell_;
};

} // namespace mstar::detail
