// The split topology on the host backend (examples/qwen3_tts/split.hpp): the Talker on one worker, the
// codec alone on another, the frames over an edge. The same requests as the colocated model (one
// worker, lane off and on), a share of them cancelled mid-stream: every request that was not cancelled
// completes with the colocated run's audio bytes, nothing fails, and afterwards every pool of both
// engines, every edge slot and every output buffer is back, with no ordering report.
#include <doctest/doctest.h>

#include <mstar/backend/host.hpp>

#include "qwen3_tts/loadgen.hpp"
#include "qwen3_tts/split.hpp"

#include <atomic>
#include <stdexcept>
#include <string>

namespace {

struct host_rig {
  mstar::host_backend backend;
  qwen3_tts::talker<mstar::host_backend> talker{backend, qwen3_tts::talker_config::host_small()};
  qwen3_tts::codec<mstar::host_backend> codec{backend, qwen3_tts::codec_config::host_small()};
};

mstar::engine_options engine_options() {
  mstar::engine_options o;
  o.max_batch = 16;
  o.max_tokens = 1024;
  o.max_requests = 24;
  o.max_labels = 1;
  o.sampler_seed = 11;
  return o;
}

qwen3_tts::forward_options forward_options() {
  qwen3_tts::forward_options f;
  f.max_batch = 16;
  f.max_window = 8;
  f.buffers = 2 * mstar::worker_options{}.step_records + 2;
  f.decode_buckets = {4, 8, 16}; // padding must not reach the audio
  return f;
}

qwen3_tts::load_options load(std::uint32_t requests, double cancel_rate, std::uint64_t seed) {
  qwen3_tts::load_options o;
  o.requests = requests;
  o.warmup = 0;
  o.concurrency = 16;
  o.frames_min = 2;
  o.frames_max = 14;
  o.prompt_min = 2;
  o.prompt_max = 12;
  o.seed = seed;
  o.cancel_rate = cancel_rate;
  o.flow.ramp = {2, 4, 8};
  return o;
}

// Every request that was not planned for cancellation completed in `got` with `want`'s bytes; a
// planned-cancelled one that completed anyway (its cancel came after its last chunk) matches too.
void check_same_audio(const qwen3_tts::arm_result& want, const qwen3_tts::arm_result& got) {
  std::size_t kept = 0, compared = 0;
  for (const auto& p : got.plan) {
    const auto g = got.digests.find(p.id), w = want.digests.find(p.id);
    if (!p.cancel) {
      ++kept;
      REQUIRE_MESSAGE(g != got.digests.end(), "request " << p.id << " did not complete in the split run");
      REQUIRE_MESSAGE(w != want.digests.end(), "request " << p.id << " did not complete in the colocated run");
    }
    if (g != got.digests.end() && w != want.digests.end()) {
      ++compared;
      CHECK_MESSAGE(g->second == w->second, "request " << p.id << ": the split run's audio differs");
    }
  }
  CHECK(kept > 0);
  CHECK(compared >= kept);
}

void check_all_back(const qwen3_tts::arm_result& r) {
  CHECK_MESSAGE(r.pools_full, r.pools_why);
  CHECK(r.buffers_free);
  CHECK(r.failed == 0);
  CHECK(r.failed_steps == 0);
}

} // namespace

TEST_CASE("Split.two workers joined by an edge give every request the colocated model's audio bytes, and give "
          "every pool, edge slot and buffer back") {
  host_rig rig;
  const auto lo = load(64, 0.0, 3);
  const auto eo = engine_options();
  const auto fo = forward_options();
  auto colo = lo;
  colo.lane = mstar::lane_mode::on;
  const auto colocated = qwen3_tts::run_arm(rig.backend, rig.talker, rig.codec, eo, fo, colo);
  const auto split = qwen3_tts::run_split_arm(rig.backend, rig.backend, rig.talker, rig.codec, eo, fo, lo);
  check_all_back(colocated);
  check_all_back(split);
  CHECK(split.completed == 64);
  check_same_audio(colocated, split);
  CHECK(split.edge_sends == split.prefill_steps + split.decode_steps); // one copy per Talker step
  CHECK(rig.backend.checker().violation_count() == 0);
}

TEST_CASE("Split.a thousand requests with random cancellations: the others complete with the colocated audio, "
          "and every pool on both workers is full afterwards") {
  host_rig rig;
  const auto lo = load(1000, 0.3, 17);
  const auto eo = engine_options();
  const auto fo = forward_options();
  auto colo = lo;
  colo.lane = mstar::lane_mode::off;
  const auto colocated = qwen3_tts::run_arm(rig.backend, rig.talker, rig.codec, eo, fo, colo);
  // A small ring: the Talker waits for the codec now and then (backpressure), and nothing deadlocks.
  qwen3_tts::split_options so;
  so.edge.slots = 24;
  const auto split = qwen3_tts::run_split_arm(rig.backend, rig.backend, rig.talker, rig.codec, eo, fo, lo, so);
  check_all_back(colocated);
  check_all_back(split);
  CHECK(split.cancelled > 100);
  CHECK(split.completed + split.cancelled == 1000);
  check_same_audio(colocated, split);
  CHECK(rig.backend.checker().violation_count() == 0);
  MESSAGE("split: " << split.completed << " completed, " << split.cancelled << " cancelled, " << split.edge_sends
                    << " edge sends, " << split.edge_full_waits << " sends that found the ring full");
}

TEST_CASE("Split.a request whose Talker step fails on the first worker ends failed and is cancelled on the second; "
          "nothing stays held on either") {
  host_rig rig;
  const auto lo = load(48, 0.0, 9);
  const auto eo = engine_options();
  const auto fo = forward_options();
  const auto colocated = qwen3_tts::run_arm(rig.backend, rig.talker, rig.codec, eo, fo, lo);
  qwen3_tts::split_options so;
  std::atomic<int> faults{0};
  so.talker_fault = [&](mstar::request_id id) { // request 20's second Talker step (its first decode) raises
    if (id == 20 && faults.fetch_add(1) == 1) throw std::runtime_error("planted fault in request 20");
  };
  const auto split = qwen3_tts::run_split_arm(rig.backend, rig.backend, rig.talker, rig.codec, eo, fo, lo, so);
  // The step's rows all fail (request 20 and those batched with it); the codec side of each was
  // cancelled, or the run would not have ended.
  REQUIRE(split.failed >= 1);
  CHECK(split.results.at(20).how == mstar::request_end::failed);
  CHECK(split.results.at(20).why.find("planted fault in request 20") != std::string::npos);
  CHECK(split.completed + split.failed == 48);
  for (const auto& [id, d] : split.digests)
    CHECK_MESSAGE(colocated.digests.at(id) == d, "request " << id << ": the split run's audio differs");
  CHECK_MESSAGE(split.pools_full, split.pools_why);
  CHECK(split.buffers_free);
  CHECK(rig.backend.checker().violation_count() == 0);
}
