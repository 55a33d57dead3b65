// The engine: a model loaded on a backend. It builds the model's resources (handing the runner the
// side resources, known from the model policy), owns the request table and the step runner, registers
// side-lane streams, tears requests down (side keys on the lane's stream) and runs a step's whole
// lifecycle for callers that do not split it across threads (tests, examples; the worker does).
//
//   mstar::host_backend backend;
//   mstar::engine<qwen3_tts::Model, mstar::host_backend> engine(backend);
//   auto chain = backend.create_stream();
//   auto lane = backend.create_stream(mstar::stream_priority::high);
//   engine.set_side_stream<qwen3_tts::CodecChunk>(lane);      // codec teardown runs on the lane
//   auto r = *engine.add_request(/*id=*/42);
//   mstar::row rows[] = {{r}};
//   auto out = engine.run(mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>{rows}, lane,
//                         [&](const auto& ctx) { /* kernels on ctx.stream, reading ctx.plan<CodecState>() */ });
//   engine.remove_request(r, chain);                           // codec_state's slot is zeroed on `lane`
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "mstar/backend/backend.hpp"
#include "mstar/engine/resource_set.hpp"
#include "mstar/engine/step.hpp"
#include "mstar/engine/step_runner.hpp"
#include "mstar/model/model.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar {

// What a forward function gets: the step's stream and view, and the live plan of each resource its
// node declares.
template <class Model, device_backend Backend, class Node>
class step_context {
public:
  using resources_type = resource_set<Model, Backend>;
  using stream_type = typename Backend::stream_type;

  step_context(resources_type& resources, stream_type s, const step_view& v)
      : stream(s), view(v), resources_(&resources) {}

  template <class Policy>
  const auto& plan() const {
    return resource<Policy>().current_plan();
  }
  template <class Policy>
  auto& resource() const {
    constexpr auto i = resources_type::index_of(Policy::key);
    static_assert(
        i != no_index &&
            Model::descriptor.nodes[resources_type::template node_index<Node>].resources.contains(Policy::key),
        "mstar::step_context: the node does not declare this resource; add it to the node's declares<...>");
    return resources_->template get<i>();
  }

  stream_type stream;
  step_view view;

private:
  resources_type* resources_;
};

template <class Model, device_backend Backend>
class engine {
public:
  using model_type = Model;
  using backend_type = Backend;
  using stream_type = typename Backend::stream_type;
  using resources_type = resource_set<Model, Backend>;
  using runner_type = step_runner<Model, Backend>;

  explicit engine(Backend& backend, engine_options options = {})
      : backend_(&backend), options_(checked(options)), requests_(options_.max_requests),
        resources_(backend, options_, requests_), runner_(backend, resources_, requests_, options_) {}
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // ---- requests (the main thread) ----
  // nullopt when max_requests requests are live.
  std::optional<request_ref> add_request(request_id id) { return requests_.add(id); }
  // Retires r (a step naming it from now on fails), waits for the steps in flight to settle, tears
  // every resource down (side keys on the lane's stream once registered, the rest on
  // `stream`) and frees r's index. False when r was not live (already removed). When a resource's
  // teardown throws, the others are still torn down, the index is quarantined (never handed out
  // again: that resource may still hold state under it, which a new request there would inherit;
  // quarantined() counts them, and max_requests shrinks by one each) and the first error is rethrown.
  bool remove_request(request_ref r, stream_type stream) {
    if (!requests_.retire(r)) return false;
    try {
      runner_.remove_request(r, stream);
    } catch (...) {
      quarantined_.fetch_add(1, std::memory_order_relaxed);
      throw;
    }
    requests_.release(r);
    return true;
  }
  // Request indices held back after a failed teardown (see remove_request).
  std::uint32_t quarantined() const noexcept { return quarantined_.load(std::memory_order_relaxed); }

  // ---- side lanes ----
  template <class Node>
  requires runs_beside_the_stage<Model, Node>
  void set_side_stream(stream_type stream) { runner_.template set_side_stream<Node>(stream); }
  // By the node's index in the model (Model::node_index<Node>, Model::node_index_of(name)).
  void set_side_stream(std::uint8_t node, stream_type stream) { runner_.set_side_stream(node, stream); }
  void set_side_stream(std::string_view node, stream_type stream) {
    const auto n = Model::node_index_of(node);
    if (n == no_index)
      throw std::invalid_argument("mstar::engine::set_side_stream: the model has no node " + std::string(node));
    runner_.set_side_stream(n, stream);
  }

  // ---- one step, whole: declare, admit, plan, forward, commit ----
  // A refusal or a raise ends the step with its outcome (the rows go back to the caller's admit-failure
  // handler or fail); forward runs only for an admitted and planned step, and commit only after it.
  template <step S, class Forward>
  step_outcome run(const S& step, stream_type stream, Forward&& forward) {
    using Node = typename S::node_type;
    (void)runner_type::declare(step);
    if (auto a = runner_.admit(step); !a) return a;
    auto p = runner_.plan(step, stream);
    if (!p) return p;
    try {
      const step_context<Model, Backend, Node> context(resources_, stream, runner_type::view(step));
      forward(context);
    } catch (...) {
      runner_.abandon(step);
      return step_outcome::fail(no_index, std::current_exception());
    }
    auto c = runner_.commit(step);
    c.promoted = p.promoted;
    return c;
  }

  runner_type& runner() noexcept { return runner_; }
  resources_type& resources() noexcept { return resources_; }
  request_table& requests() noexcept { return requests_; }
  Backend& backend() noexcept { return *backend_; }
  const engine_options& options() const noexcept { return options_; }
  template <class Policy>
  auto& resource() {
    return resources_.template get<Policy>();
  }
  auto stats() const { return resources_.stats(); }

private:
  static engine_options checked(engine_options o) {
    o.check();
    return o;
  }

  Backend* backend_;
  engine_options options_;
  request_table requests_;
  std::atomic<std::uint32_t> quarantined_{0};
  resources_type resources_;
  runner_type runner_;
};

} // namespace mstar
