// Several workers in one process: one mstar::threaded_worker per mstar::worker of a model, each
// with its own engine, threads, streams and resources (and device: each worker's backend may be its
// own), and a request that lives on every worker its walk touches. worker_set is the client's side
// of them: a submit reaches each worker (with that worker's input), a cancel reaches each, and a
// request ends once it ended on all of them; when it fails or is cancelled on one, it is cancelled
// on the others, so nothing of it stays held anywhere. The workers' flows report their ends
// (ended()), and move data between them through an edge (mstar/worker/edge.hpp), waking the consumer's
// request (threaded_worker::wake) when its next rows arrive.
//
//   using Talker = mstar::worker_model<SplitModel, 0>;   // a one-worker model per worker of the split
//   using Codec  = mstar::worker_model<SplitModel, 1>;
//   mstar::threaded_worker<Talker, B, talker_flow> w0(engine0, flow0, o0);
//   mstar::threaded_worker<Codec, B, codec_flow>   w1(engine1, flow1, o1);
//   mstar::worker_set<decltype(w0), decltype(w1)> set(w0, w1);
//   flow0.on_end = [&](auto id, auto how, auto why) { set.ended(0, id, how, why); };   // and flow1's: 1
//   set.on_end = [&](mstar::request_id id, mstar::request_end how, std::string_view why) { ... };
//   set.start();  set.submit(id, input0, input1);  set.cancel(id);  set.wait_idle();  set.stop();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "mstar/model/model.hpp"
#include "mstar/worker/flow.hpp"

namespace mstar {

namespace detail {
template <std::size_t I, fixed_string Name, class... Workers>
model<Name, nth_t<I, type_list<Workers...>>>* worker_model_of(model<Name, Workers...>*);
} // namespace detail

// The one-worker model of Model's worker I (its groups, nodes and resources, the same name): what
// that worker's engine and threaded_worker are built over. Validated as a model of its own.
template <class Model, std::size_t I>
using worker_model = std::remove_pointer_t<decltype(detail::worker_model_of<I>(static_cast<Model*>(nullptr)))>;

template <class... Workers>
class worker_set {
public:
  static constexpr std::size_t size = sizeof...(Workers);
  static_assert(size >= 1 && size <= 32, "mstar::worker_set takes 1 to 32 threaded_workers");

  explicit worker_set(Workers&... w) : workers_(&w...) {}
  worker_set(const worker_set&) = delete;
  worker_set& operator=(const worker_set&) = delete;

  // Called once per request when it ended on every worker: failed (with the first failure's reason)
  // when it failed on any, cancelled when cancelled on any, else completed. Runs on the main thread
  // of the worker that ended it last; it must not block.
  std::function<void(request_id, request_end, std::string_view)> on_end;

  void start() {
    std::apply([](auto*... w) { (w->start(), ...); }, workers_);
  }
  // Submits to every worker, the last worker first (a consumer knows the request before its producer
  // can send it anything). False, submitting nothing, when the id is live here.
  bool submit(request_id id, typename Workers::request_input... inputs) {
    {
      std::lock_guard g(m_);
      if (!live_.emplace(id, entry{}).second) return false;
    }
    submit_from<size - 1>(id, std::forward_as_tuple(inputs...));
    return true;
  }
  void cancel(request_id id) {
    std::apply([id](auto*... w) { (w->cancel(id), ...); }, workers_);
  }
  template <std::size_t I>
  void wake(request_id id) {
    std::get<I>(workers_)->wake(id);
  }
  template <std::size_t I>
  auto& worker() {
    return *std::get<I>(workers_);
  }

  // A worker's flow reports that `id` ended there (from its end hook).
  void ended(std::size_t worker, request_id id, request_end how, std::string_view why) {
    bool cancel_others = false, last = false;
    request_end final_how = request_end::completed;
    std::string final_why;
    {
      std::lock_guard g(m_);
      auto it = live_.find(id);
      if (it == live_.end()) return; // not submitted through the set
      auto& e = it->second;
      e.ended |= 1u << worker;
      if (how == request_end::failed && e.how != request_end::failed) {
        e.how = request_end::failed;
        e.why = std::string(why);
      } else if (how == request_end::cancelled && e.how == request_end::completed) {
        e.how = request_end::cancelled;
      }
      cancel_others = how != request_end::completed && !e.cancelled_others;
      e.cancelled_others |= cancel_others;
      last = e.ended == (1u << size) - 1;
      if (last) {
        final_how = e.how;
        final_why = std::move(e.why);
        live_.erase(it);
      }
    }
    if (cancel_others) cancel(id); // the worker it ended on ignores it (ended already)
    if (last && on_end) on_end(id, final_how, final_why);
  }

  void wait_idle() {
    std::apply([](auto*... w) { (w->wait_idle(), ...); }, workers_);
  }
  // Stops the workers in order: each cancels what is live on it, which cancels it on the later ones.
  void stop() {
    std::apply([](auto*... w) { (w->stop(), ...); }, workers_);
  }
  std::size_t live() {
    std::lock_guard g(m_);
    return live_.size();
  }

private:
  struct entry {
    std::uint32_t ended = 0; // a bit per worker
    request_end how = request_end::completed;
    std::string why;
    bool cancelled_others = false;
  };
  template <std::size_t I, class Tuple>
  void submit_from(request_id id, Tuple&& in) {
    std::get<I>(workers_)->submit(id, std::get<I>(in));
    if constexpr (I > 0) submit_from<I - 1>(id, std::forward<Tuple>(in));
  }

  std::tuple<Workers*...> workers_;
  std::mutex m_;
  std::unordered_map<request_id, entry> live_;
};

} // namespace mstar
