// The model-specific part of a worker: a request's flow through the nodes (the hook object a user
// supplies), and what a forward function sees of a step.
//
// A flow is a plain object with three types and six hooks. The worker owns one request_state per live
// request (reset to request_state{} when the request starts) and calls the hooks in this order (a
// hook's `node` is the node's index in the model's node order, Model::node_index<Node>):
//
//   start(state, id, input)          main thread; the request got a place in the engine
//   ready(state, node, row, payload) main thread; called for each node the request has no row queued or
//                                    in flight for: return true when it is ready for `node` now, after
//                                    setting row.tokens / row.label (row.request is the worker's) and the
//                                    payload the forward will read. Called again after each of the
//                                    request's steps lands.
//   landed(state, node, payload)     main thread; that row's step landed (its forward's work is done and
//                                    visible); update the state, and return true when the step produced
//                                    an output for the client (first-output latency and gaps count these)
//   finished(state)                  main thread; true when nothing is left to run
//   end(state, id, how)              main thread; the request's last hook: completed, cancelled or failed
//                                    (its resources are torn down already). A flow may take a fourth
//   end(state, id, how, why)         argument, a std::string_view: for a failed request, why it failed
//                                    (the message of the forward, resource, stream task or flow hook
//                                    that raised, or the stall breaker's); empty otherwise. The view
//                                    lives until the hook returns.
//   batch_key(node, payload)         GPU thread, const: rows of a node with different keys never share a
//                                    step when the node batches per_key (one codec step per chunk width)
//
// Two optional hooks (a flow without them compiles and runs unchanged):
//
//   continues(state, node, payload)  main thread, when a row of a chain node is handed to the GPU thread
//                                    (right after ready() returned true for it, or when it is unparked):
//                                    true when, once this row's step lands, the request will at once be
//                                    ready for `node` again with a row of the same tokens and label (a
//                                    decode row that is not the request's last). The worker stages the
//                                    chain's next step from it while the current one runs (see
//                                    threaded_worker.hpp); without the hook it predicts that every row
//                                    continues. A wrong answer costs only a dropped pre-plan, never a
//                                    wrong result. (mstar::predicts_continuation)
//   urgent(node, payload)            GPU thread, const: true when this row must not wait for its node's
//                                    batch (node_options::min_batch, max_wait): a request's first output,
//                                    whose latency a client sees. A waiting node with an urgent ready row
//                                    forms its step at once (for a per_key node, one of the urgent row's
//                                    key, which the key's other ready rows join). Without the hook no row
//                                    is urgent. (mstar::flow_urgent_hook)
//
// The payload is per row, trivially copyable, and travels with the step: the forward reads it on the
// GPU thread (and its stream work may read it until the step lands), so it carries the row's input and
// output addresses (a codec window's first frame and width, where its audio goes). A flow must be
// deterministic: a row's payload may depend on the request's state only, never on timing or on which
// other rows share its step, so that output bytes do not depend on the lane mode or on cancellations
// of other requests.
//
// A forward function per node is a callable taking `const mstar::step_context<Model, Backend, Node>&`
// (the same as engine::run's) or the worker's richer `const worker_step_context<...>&` (a step_context
// that adds the rows' payloads and the backend); it enqueues the step's work on ctx.stream.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "mstar/engine/engine.hpp"
#include "mstar/resources/step_view.hpp"

namespace mstar {

enum class request_end : std::uint8_t { completed, cancelled, failed };

// A flow, piece by piece (threaded_worker names the piece a flow lacks): its three types, then each
// hook as the table above writes it.
template <class F>
concept flow_types = requires {
  typename F::request_state;
  typename F::request_input;
  typename F::payload;
  requires std::is_default_constructible_v<typename F::request_state>;
  requires std::is_move_assignable_v<typename F::request_state>;
  requires std::is_trivially_copyable_v<typename F::payload>;
  requires std::is_default_constructible_v<typename F::payload>;
  requires std::is_move_constructible_v<typename F::request_input>;
};
template <class F>
concept flow_start_hook = flow_types<F> && requires(F& f, typename F::request_state& s,
                                                    const typename F::request_input& in, request_id id) {
  f.start(s, id, in);
};
template <class F>
concept flow_ready_hook = flow_types<F> && requires(F& f, typename F::request_state& s, std::uint8_t node, row& r,
                                                    typename F::payload& p) {
  { f.ready(s, node, r, p) } -> std::same_as<bool>;
};
template <class F>
concept flow_landed_hook = flow_types<F> && requires(F& f, typename F::request_state& s, std::uint8_t node,
                                                     const typename F::payload& cp) {
  { f.landed(s, node, cp) } -> std::same_as<bool>;
};
template <class F>
concept flow_finished_hook = flow_types<F> && requires(const F& cf, const typename F::request_state& cs) {
  { cf.finished(cs) } -> std::same_as<bool>;
};
template <class F>
concept flow_end_hook = flow_types<F> && requires(F& f, typename F::request_state& s, request_id id, request_end how) {
  requires requires { f.end(s, id, how); } || requires { f.end(s, id, how, std::string_view{}); };
};
template <class F>
concept flow_batch_key_hook = flow_types<F> && requires(const F& cf, std::uint8_t node, const typename F::payload& cp) {
  { cf.batch_key(node, cp) } -> std::convertible_to<std::uint32_t>;
};

template <class F>
concept worker_flow = flow_types<F> && flow_start_hook<F> && flow_ready_hook<F> && flow_landed_hook<F> &&
                      flow_finished_hook<F> && flow_end_hook<F> && flow_batch_key_hook<F>;

namespace detail {
// The flow's end hook, with the reason where it takes one.
template <class F>
void flow_end(F& f, typename F::request_state& s, request_id id, request_end how, std::string_view why) {
  if constexpr (requires { f.end(s, id, how, why); })
    f.end(s, id, how, why);
  else
    f.end(s, id, how);
}
} // namespace detail

// The optional continues() hook: the flow says which rows will be followed by a row of the same node.
template <class F>
concept predicts_continuation = requires(F& f, const typename F::request_state& s, std::uint8_t node,
                                         const typename F::payload& p) {
  { f.continues(s, node, p) } -> std::convertible_to<bool>;
};

// The optional urgent() hook: the flow says which ready rows may not wait for their node's batch.
template <class F>
concept flow_urgent_hook = flow_types<F> && requires(const F& cf, std::uint8_t node, const typename F::payload& cp) {
  { cf.urgent(node, cp) } -> std::convertible_to<bool>;
};

// What the worker hands a forward function: the engine's step_context plus the rows' payloads (one per
// row, in row order) and the backend, so a host-backend forward can enqueue work on ctx.stream.
template <class Model, device_backend Backend, class Node, class Payload>
class worker_step_context : public step_context<Model, Backend, Node> {
public:
  using base = step_context<Model, Backend, Node>;
  worker_step_context(typename base::resources_type& resources, typename base::stream_type s, const step_view& v,
                      std::span<const Payload> p, Backend& b)
      : base(resources, s, v), payloads(p), backend(&b) {}

  std::span<const Payload> payloads;
  Backend* backend;
};

} // namespace mstar
