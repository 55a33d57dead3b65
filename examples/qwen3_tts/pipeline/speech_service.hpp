// A long-lived Qwen3-TTS service: one engine, one threaded worker, one flow and its forward functions, started
// once, taking requests from any thread until it is destroyed. Each request has its own audio and end callbacks
// (run on the worker's main thread: they must not block). The server behind `qwen3tts serve` is one of these;
// run_speech (speech_run.hpp) stays the one-shot driver of synth and tests.
//
//   speech_service<host_speech> svc(talker, codec, {.sampling = sampling_from(dir), .max_live = 16});
//   auto id = svc.submit(req, {.on_chunk = [](std::span<const float> a) {...}, .on_end = [](auto& r) {...}});
//   svc.cancel(id);   // from any thread; the request ends as cancelled, its slot and KV blocks go back
//
// The backend is chosen at construction (speech_service_options::device): the host backend, or the CUDA Talker
// (its weights uploaded from the host Talker's) with the CUDA codec. The CUDA side is compiled only into
// programs built with it, which register it (register_cuda_service in speech_service_cuda.hpp); this header
// needs no CUDA, so a host-only program includes it as it is and gets the host backend.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/worker.hpp>

#include "speech_flow.hpp"
#include "speech_forwards.hpp"

namespace qwen3_tts::pipeline {

// The codec maths a command line may name (codec_math_named in codec_cuda.hpp says what each is).
inline const std::vector<std::string> codec_math_names = {"auto",   "tf32",      "cublas",   "fp16",
                                                          "double", "tf32-conv", "fp16-conv"};

struct speech_service_options {
  mstar::lane_mode lane = mstar::lane_mode::on;
  std::vector<std::uint32_t> ramp = {1, 2, 4, 8};
  talker_sampling sampling{};
  std::uint32_t max_batch = 16; // rows of a step
  // Requests the engine holds at once (a request index each); more wait in the worker's backlog. At most the
  // codec pool's slots less its sink, so that an admitted request never waits for a codec slot with its KV
  // blocks held.
  std::uint32_t max_live = 16;
  // Where the model runs: host, cuda (the CUDA Talker and codec) or auto (cuda when the program
  // was built with it and a CUDA device is present and the sampling is one it computes; host otherwise).
  std::string device = "auto";
  // The CUDA codec: its steps replayed from CUDA graphs (speech_forward_options::codec_graphs; a service batches
  // one window width a step, so a replay pads rows to their bucket only) and its sums in TF32 (cublas: float32,
  // tf32, fp16, double, tf32-conv, fp16-conv: codec_cuda_math; TF32 is within 0.006 of the reference's audio on the
  // fixtures), with CUTLASS's convolutions where the build has CUTLASS (auto: tf32-conv, else tf32). Each measured
  // faster through the engine than what it replaced (docs/benchmarks.md); run_speech keeps float32 eager.
  bool codec_graphs = true;
  std::string codec_math = "auto"; // one of codec_math_names
  // The CUDA Talker's decode-step graphs for every row count captured when the service starts
  // (speech_forward_options::talker_graphs_at_start), not when a row count first comes to a step: measured
  // faster under load (docs/benchmarks.md), for a second or two more at start.
  bool talker_graphs_at_start = true;
  // The CUDA Talker's own kernels launched with programmatic dependent launch (talker_cuda_limits::pdl, on there too).
  bool talker_pdl = true;
  // The CUDA Talker's decode products of 2 to 32 rows (gemv_rows) on the tensor-core small_gemv (talker_cuda_limits::
  // gemv_tensor_cores, on there too). Off: those on cuBLAS, 1-row products on the CUDA-core small_gemv.
  bool talker_gemv_tensor_cores = true;
  // SMs the CUDA codec's kernels may occupy beside the Talker (speech_forward_options::codec_sms; 0: the whole
  // GPU). Through the service on an H100, 32 SMs lowered the audio throughput (docs/benchmarks.md), hence 0.
  int codec_sms = 0;
  codec_wait_options codec_wait{}; // the codec's batching across time (none by default)
  // One codec step per window width (speech_flow_options::codec_per_width; the worker's per_key batching), or one
  // step for the windows of every width (a CUDA graph's replay then pads every row to the widest window).
  bool codec_per_width = true;
  // Events each worker thread's trace buffer holds (0: no trace); write_trace writes them.
  std::size_t trace_events = 0;
};

// Per-request callbacks; either may be empty.
struct speech_callbacks {
  std::function<void(std::span<const float>)> on_chunk;
  std::function<void(const speech_result&)> on_end;
};

// Counts since the service started, and what is in flight now.
struct speech_service_counts {
  std::uint64_t submitted = 0, completed = 0, cancelled = 0, failed = 0;
  std::uint32_t live = 0;   // admitted by the worker and not ended
  std::uint32_t queued = 0; // submitted, not admitted yet, not ended
};

namespace detail {

// The engine side of a speech_service, whatever its backend: engine, flow, forward functions and worker.
template <class Spec>
class service_runtime {
public:
  virtual ~service_runtime() = default;
  virtual speech_flow<Spec>& flow() = 0;
  virtual void start() = 0;
  virtual void submit(mstar::request_id id, speech_request in) = 0;
  virtual void cancel(mstar::request_id id) = 0;
  virtual void wait_idle() = 0;
  virtual void stop() noexcept = 0;
  virtual std::uint32_t kv_free_blocks() const = 0;
  virtual std::uint32_t codec_free_slots() const = 0;
  virtual std::uint32_t codec_slots() const = 0;
  virtual const mstar::worker_counters& counters() const = 0;
  virtual mstar::metrics::busy_tracker::live_reading busy_so_far() const = 0;
  virtual void write_trace(const std::string& path) const = 0;
};

template <class Spec, class Backend>
class service_runtime_on final : public service_runtime<Spec> {
  using Flow = speech_flow<Spec>;
  using Worker = mstar::threaded_worker<typename Spec::Model, Backend, Flow>;
  static_assert(mstar::flow_urgent_hook<Flow>, "the worker must see the flow's urgent hook (first codec windows)");

public:
  // make_forwards(backend, forward_options) gives the forward functions (a unique_ptr); `owned` is kept alive
  // until the worker and the forward functions are gone (the CUDA Talker).
  template <class MakeForwards>
  service_runtime_on(const talker_host& talker, const codec_decoder& codec, const speech_service_options& o,
                     const mstar::engine_options& eo, MakeForwards&& make_forwards, std::shared_ptr<void> owned = {})
      : owned_(std::move(owned)), engine_(backend_, eo),
        flow_(talker,
              speech_flow_options{
                  .ramp = o.ramp, .codec_per_width = o.codec_per_width, .keep_audio = false, .keep_results = false}) {
    flow_.set_samples_per_frame(codec.samples_per_frame());
    speech_forward_options fo;
    fo.max_batch = o.max_batch;
    fo.max_window = flow_.widest_window();
    fo.codec_graphs = o.codec_graphs;
    fo.codec_sms = o.codec_sms;
    fo.talker_graphs_at_start = o.talker_graphs_at_start;
    fwd_ = make_forwards(backend_, fo);
    if constexpr (requires { fwd_->prepare(engine_); }) fwd_->prepare(engine_);
    mstar::worker_options wo;
    wo.lane = o.lane;
    wo.nodes.resize(Spec::Model::descriptor.nodes.size());
    wo.nodes[Spec::codec_node].batch = o.codec_per_width ? mstar::batching::per_key : mstar::batching::every_key;
    o.codec_wait.apply(wo.nodes[Spec::codec_node]);
    wo.trace_events = o.trace_events;
    worker_.emplace(engine_, flow_, wo);
    fwd_->install(*worker_);
  }
  ~service_runtime_on() override {
    worker_.reset(); // before the forward functions and the engine it runs on
    fwd_.reset();
  }

  Flow& flow() override { return flow_; }
  void start() override { worker_->start(); }
  void submit(mstar::request_id id, speech_request in) override { worker_->submit(id, std::move(in)); }
  void cancel(mstar::request_id id) override { worker_->cancel(id); }
  void wait_idle() override { worker_->wait_idle(); }
  void stop() noexcept override { worker_->stop(); }
  std::uint32_t kv_free_blocks() const override {
    return engine_.template resource<typename Spec::KvCache>().free_blocks();
  }
  std::uint32_t codec_free_slots() const override {
    return engine_.template resource<typename Spec::CodecState>().free_count();
  }
  std::uint32_t codec_slots() const override {
    return engine_.template resource<typename Spec::CodecState>().capacity();
  }
  const mstar::worker_counters& counters() const override { return worker_->counters(); }
  mstar::metrics::busy_tracker::live_reading busy_so_far() const override { return worker_->busy_so_far(); }
  void write_trace(const std::string& path) const override { worker_->write_trace(path); }

private:
  std::shared_ptr<void> owned_;
  Backend backend_;
  mutable mstar::engine<typename Spec::Model, Backend> engine_; // its pools' counts are read locked
  Flow flow_;
  std::unique_ptr<speech_forwards<Spec, Backend>> fwd_;
  std::optional<Worker> worker_;
};

} // namespace detail

// Where a CUDA-built program's speech services get their CUDA runtime (null: none was built in). Given the
// options and the engine options, it returns the runtime, or null where the host should serve (device auto and
// no CUDA device, or a sampling the CUDA Talker does not compute); device cuda with no device throws.
template <class Spec>
using cuda_service_factory = std::unique_ptr<detail::service_runtime<Spec>> (*)(
    const talker_host&, const codec_decoder&, const speech_service_options&, const mstar::engine_options&);
template <class Spec>
inline cuda_service_factory<Spec> cuda_service_runtime = nullptr;

template <class Spec>
class speech_service {
public:
  speech_service(const talker_host& talker, const codec_decoder& codec, const speech_service_options& o = {})
      : o_(o), talker_(&talker), runtime_(make_runtime(talker, codec, o)) {
    auto& flow = runtime_->flow();
    flow.on_start = [this](mstar::request_id id) {
      std::lock_guard g(lock_);
      if (auto it = calls_.find(id); it != calls_.end()) it->second.started = true;
    };
    flow.on_chunk = [this](mstar::request_id id, std::span<const float> audio) {
      std::function<void(std::span<const float>)>* f = nullptr;
      {
        std::lock_guard g(lock_);
        if (auto it = calls_.find(id); it != calls_.end()) f = &it->second.cb.on_chunk;
      }
      // The entry is erased only by on_end, on this same thread: f stays valid through the call.
      if (f && *f) (*f)(audio);
    };
    flow.on_end = [this](mstar::request_id id, const speech_result& r) {
      speech_callbacks cb;
      {
        std::lock_guard g(lock_);
        auto it = calls_.find(id);
        if (it == calls_.end()) return;
        cb = std::move(it->second.cb);
        calls_.erase(it);
        if (r.how == mstar::request_end::completed)
          ++counts_.completed;
        else if (r.how == mstar::request_end::cancelled)
          ++counts_.cancelled;
        else
          ++counts_.failed;
      }
      if (cb.on_end) cb.on_end(r);
    };
    runtime_->start();
  }
  speech_service(const speech_service&) = delete;
  speech_service& operator=(const speech_service&) = delete;
  ~speech_service() {
    // Live requests end as cancelled (their callbacks run) before the worker stops.
    std::vector<mstar::request_id> ids;
    {
      std::lock_guard g(lock_);
      for (const auto& [id, c] : calls_)
        ids.push_back(id);
    }
    for (auto id : ids)
      runtime_->cancel(id);
    try {
      runtime_->wait_idle();
    } catch (...) {
    }
    runtime_->stop();
  }

  // Any thread. The request's id; its callbacks run on the worker's main thread. Its prompt's rows are built here,
  // on the caller's thread; a prompt that cannot be built is left to the flow, where the request fails with the
  // reason.
  mstar::request_id submit(speech_request in, speech_callbacks cb) {
    in.submitted = mstar::metrics::now_ns();
    if (!in.built) {
      try {
        in.built = std::make_shared<const built_prompt>(talker_->build_prompt(in.prompt));
      } catch (const std::exception&) {
        // the flow builds it again at start and fails the request with the reason
      }
    }
    mstar::request_id id;
    {
      std::lock_guard g(lock_);
      id = ++last_id_;
      calls_[id] = call{std::move(cb), false};
      ++counts_.submitted;
    }
    runtime_->submit(id, std::move(in));
    return id;
  }
  // Any thread; a request that already ended is left alone.
  void cancel(mstar::request_id id) {
    {
      std::lock_guard g(lock_);
      if (!calls_.count(id)) return;
    }
    runtime_->cancel(id);
  }

  speech_service_counts counts() const {
    std::lock_guard g(lock_);
    speech_service_counts c = counts_;
    for (const auto& [id, x] : calls_)
      (x.started ? c.live : c.queued)++;
    return c;
  }
  std::uint32_t kv_free_blocks() const { return runtime_->kv_free_blocks(); }
  std::uint32_t kv_blocks() const { return Spec::kv_blocks; }
  std::uint32_t codec_free_slots() const { return runtime_->codec_free_slots(); }
  std::uint32_t codec_slots() const { return runtime_->codec_slots(); }
  // What a caller reads of the worker, whatever its backend.
  struct worker_view {
    const detail::service_runtime<Spec>* r;
    const mstar::worker_counters& counters() const { return r->counters(); }
    mstar::metrics::busy_tracker::live_reading busy_so_far() const { return r->busy_so_far(); }
  };
  worker_view worker() const { return {runtime_.get()}; }
  const speech_service_options& options() const { return o_; }
  // A Chrome trace (chrome://tracing, Perfetto) of the worker's threads and streams so far: one track per
  // thread and per stream, a step's GPU interval on its stream's track. Needs options().trace_events > 0; call it
  // while no request is in flight.
  void write_trace(const std::string& path) const {
    if (o_.trace_events == 0)
      throw std::invalid_argument("qwen3_tts::speech_service: write_trace, but trace_events is 0; give the "
                                  "service a buffer (speech_service_options::trace_events)");
    runtime_->write_trace(path);
  }
  bool on_cuda() const { return on_cuda_; }

private:
  struct call {
    speech_callbacks cb;
    bool started = false;
  };
  static mstar::engine_options engine_options_of(const speech_service_options& o) {
    if (o.max_live == 0 || o.max_live + 1 > Spec::codec_slots)
      throw std::invalid_argument("qwen3_tts::speech_service: max_live " + std::to_string(o.max_live) +
                                  " is outside 1.." + std::to_string(Spec::codec_slots - 1) +
                                  " (the codec pool's slots less its sink)");
    mstar::engine_options eo;
    eo.max_batch = o.max_batch;
    eo.max_requests = o.max_live;
    eo.max_tokens = std::uint32_t(Spec::kv_tokens); // a prefill row is a whole prompt: refuse none the KV cache holds
    return eo;
  }
  std::unique_ptr<detail::service_runtime<Spec>> make_runtime(const talker_host& talker, const codec_decoder& codec,
                                                               const speech_service_options& o) {
    const mstar::engine_options eo = engine_options_of(o);
    if (o.device != "host" && o.device != "cuda" && o.device != "auto")
      throw std::invalid_argument("qwen3_tts::speech_service: device \"" + o.device + "\" is not host, cuda or auto");
    if (o.device != "host") {
      if (const auto make = cuda_service_runtime<Spec>) {
        if (auto r = make(talker, codec, o, eo)) {
          on_cuda_ = true;
          return r;
        }
      } else if (o.device == "cuda") {
        throw std::invalid_argument("qwen3_tts::speech_service: device cuda, but this program was built without the "
                                    "CUDA Talker; use device host or auto");
      }
    }
    return std::make_unique<detail::service_runtime_on<Spec, mstar::host_backend>>(
        talker, codec, o, eo, [&](mstar::host_backend& b, const speech_forward_options& fo) {
          return std::make_unique<speech_forwards<Spec, mstar::host_backend>>(b, talker, codec, o.sampling, fo);
        });
  }

  speech_service_options o_;
  const talker_host* talker_;
  bool on_cuda_ = false;
  std::unique_ptr<detail::service_runtime<Spec>> runtime_;
  mutable std::mutex lock_;
  std::map<mstar::request_id, call> calls_;
  mstar::request_id last_id_ = 0;
  speech_service_counts counts_;
};

} // namespace qwen3_tts::pipeline
