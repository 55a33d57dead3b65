// The Qwen3-TTS-shaped example on a GPU: the same requests under every batching give byte-identical
// audio on the CUDA backend (graphs, cuBLAS GEMMs of the default size, lane on and off), the CUDA
// audio equals the host backend's byte for byte (integer arithmetic on both; the host runs tiny
// GEMMs, so the GEMMs visibly do not reach the output), a corrupted codec_state slot changes the
// audio after it, one graph per decode bucket is replayed, and the pools are full after teardown.
// Exits 77 (skip) without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <mstar/backend/cuda.hpp>
#include <mstar/backend/host.hpp>

#include "example/example_cases.hpp"
#include "qwen3_tts/forward_cuda.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

using namespace example_test;

namespace {

bool has_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

std::string describe(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines)
    s += l + "\n";
  return s;
}

using cuda_rig = rig<mstar::cuda_backend>;

} // namespace

TEST_CASE("Qwen3TtsGpu.audio is byte-identical under every batching on CUDA, and equal to the host backend's" *
          doctest::skip(!has_gpu())) {
  const auto specs = requests();
  std::map<mstar::request_id, std::vector<std::int16_t>> host_audio;
  {
    mstar::host_backend host;
    rig<mstar::host_backend> hr(host, qwen3_tts::talker_config::host_small(), qwen3_tts::codec_config::host_small());
    auto o = batchings()[0].options;
    o.keep_audio = true;
    host_audio = run_fresh(hr, specs, o).audio;
  }
  mstar::cuda_backend gpu;
  qwen3_tts::talker_config tc; // the default (1.7B-sized) cost model
  tc.max_bucket = 64;
  tc.max_tokens = 1024;
  qwen3_tts::codec_config cc;
  cc.max_bucket = 64;
  cuda_rig r(gpu, tc, cc);
  std::map<mstar::request_id, qwen3_tts::audio_digest> first;
  std::set<std::uint32_t> buckets;
  for (const auto& b : batchings()) {
    INFO(b.name);
    auto o = b.options;
    o.keep_audio = true;
    bool full = false;
    const auto result = run_fresh(r, specs, o, &full);
    CHECK(full);
    for (const auto& s : specs) {
      INFO("request ", s.id);
      CHECK(result.audio.at(s.id) == host_audio.at(s.id));
    }
    if (first.empty()) {
      first = result.digests;
    } else {
      const auto diff = qwen3_tts::compare_runs(first, result.digests);
      CHECK_MESSAGE(diff.empty(), describe(diff));
    }
  }
  // Decode graphs: one per bucket seen (rows 1..6 unpadded, then 8, 16, 4, 64), reused afterwards.
  CHECK(r.talker.graphs() >= 4);
  CHECK(r.talker.graphs() <= 10);
}

TEST_CASE("Qwen3TtsGpu.graphs off (decode and prefill), or a full prefill-graph cache, gives the same audio as "
          "graphs on" *
          doctest::skip(!has_gpu())) {
  const auto specs = requests(4, 6);
  mstar::cuda_backend gpu;
  qwen3_tts::talker_config on;
  on.max_bucket = 64;
  on.max_tokens = 1024;
  on.layers = 4; // a smaller cost model: the bytes do not depend on it
  auto off = on;
  off.graphs = false;
  off.prefill_graphs = false;
  qwen3_tts::codec_config cc;
  cc.max_bucket = 64;
  cuda_rig a(gpu, on, cc), b(gpu, off, cc);
  // One at a time, so each prompt is prefilled alone: the four prompts (8, 13, 18, 23 tokens) give three
  // prefill sizes (token buckets 8, 16, 24), and the capped run below has sizes to run eagerly. All at
  // once (batchings()[1]) made a single prefill step of every prompt: one size, and the capped run was
  // the uncapped one (issue 20: "prefill sizes seen: 1" on every GPU run).
  const auto o = batchings()[0].options;
  const auto ra = run_fresh(a, specs, o), rb = run_fresh(b, specs, o);
  const auto diff = qwen3_tts::compare_runs(ra.digests, rb.digests);
  CHECK_MESSAGE(diff.empty(), describe(diff));
  CHECK(a.talker.graphs() > 0);
  CHECK(a.talker.prefill_graphs() > 0);
  CHECK(b.talker.graphs() == 0);
  CHECK(b.talker.prefill_graphs() == 0);
  // A full prefill-graph cache: sizes not in it run eagerly, with the same audio.
  auto capped = on;
  capped.max_prefill_graphs = 1;
  cuda_rig c(gpu, capped, cc);
  const auto rc = run_fresh(c, specs, o);
  const auto diff_c = qwen3_tts::compare_runs(ra.digests, rc.digests);
  CHECK_MESSAGE(diff_c.empty(), describe(diff_c));
  INFO("prefill sizes seen (graphs of the uncapped run): ", a.talker.prefill_graphs());
  CHECK(a.talker.prefill_graphs() >= 2); // so the capped run did run some prefill eagerly
  CHECK(c.talker.prefill_graphs() == 1);
}

TEST_CASE("Qwen3TtsGpu.a corrupted codec_state slot changes the audio after it and nothing before" *
          doctest::skip(!has_gpu())) {
  const auto specs = requests(3, 9);
  mstar::cuda_backend gpu;
  qwen3_tts::talker_config tc;
  tc.max_bucket = 64;
  tc.max_tokens = 1024;
  tc.layers = 2;
  tc.predictor_passes = 1;
  qwen3_tts::codec_config cc;
  cc.max_bucket = 64;
  cuda_rig r(gpu, tc, cc);
  auto o = batchings()[1].options;
  o.keep_audio = true;
  o.ramp = {2};
  const auto clean = run_fresh(r, specs, o);
  const auto victim = specs[1].id;
  mstar::engine<qwen3_tts::Model, mstar::cuda_backend> engine(gpu, engine_options(64));
  auto disturbed = o;
  disturbed.before_window = [&](const qwen3_tts::request_spec& s, mstar::request_ref ref, std::uint32_t window) {
    if (s.id != victim || window != 2) return;
    auto& pool = engine.resource<qwen3_tts::CodecState>();
    const auto h = pool.find(ref, 0);
    REQUIRE(h);
    for (std::uint32_t l = 0; l < pool.layers(); ++l) // one word per layer
      REQUIRE(cudaMemset(pool.state(l, std::uint32_t(h->slot)) + l * 97, 0x5a, 1) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  };
  const auto result = qwen3_tts::run_flow(engine, r.talker, r.codec, r.chain, r.lane, specs, disturbed);
  const std::size_t before = 4 * qwen3_tts::synth::samples_per_frame;
  const auto& a = clean.audio.at(victim);
  const auto& b = result.audio.at(victim);
  REQUIRE(a.size() == b.size());
  CHECK(std::equal(a.begin(), a.begin() + before, b.begin()));
  CHECK_FALSE(std::equal(a.begin() + before, a.end(), b.begin() + before));
  for (const auto& s : specs)
    if (s.id != victim) CHECK(clean.audio.at(s.id) == result.audio.at(s.id));
  for (const auto& st : engine.stats())
    CHECK(st.free == st.capacity);
}

int main(int argc, char** argv) {
  const bool gpu = has_gpu();
  if (!gpu) std::printf("no CUDA device: example GPU tests skipped\n");
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  return gpu ? 0 : 77;
}
