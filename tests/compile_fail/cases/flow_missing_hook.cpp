// clang-format off
// expect: mstar::threaded_worker: the flow has no batch_key hook; add the member std::uint32_t batch_key(std::uint8_t node, const payload&) const (read only for a node that batches per_key).
// A flow that forgot its batch_key hook: the worker names the missing hook (a constrained template
// would leave nvcc to say only "no instance of").
#include "qwen3_tts/model.hpp"

#include <mstar/backend/host.hpp>
#include <mstar/worker.hpp>

struct no_batch_key_flow {
  struct request_state { int left = 0; };
  using request_input = int;
  struct payload { int frame = 0; };
  void start(request_state& s, mstar::request_id, const request_input& in) { s.left = in; }
  bool ready(request_state& s, std::uint8_t, mstar::row&, payload&) { return s.left > 0; }
  bool landed(request_state& s, std::uint8_t, const payload&) { return --s.left == 0; }
  bool finished(const request_state& s) const { return s.left == 0; }
  void end(request_state&, mstar::request_id, mstar::request_end) {}
};

using Worker = mstar::threaded_worker<qwen3_tts::Model, mstar::host_backend, no_batch_key_flow>;
[[maybe_unused]] constexpr auto size = sizeof(Worker);
// clang-format on
