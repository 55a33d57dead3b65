// The CUDA Talker (bf16) against the host float32 Talker and against the reference's fixtures.
//
// Against the host: the same random weights -- every value a bf16 number, so both models hold identical
// weights and differ only by the CUDA side's bf16 roundings of activations and of the KV cache -- the
// same prompts, each model with its own scattered KV pages. Against the reference: the fixtures of
// tools/make_fixtures.py (tests/fixtures/qwen3tts/{tiny06,tiny17}), all prompts batched as rows.
//
// Measures. A logits vector agrees when max|cuda - ref| <= tol * max|ref| (tol 5e-2). A decision
// agrees when the CUDA model's argmax equals the reference code; it may differ only where the
// reference's own margin (top-1 minus top-2 after processing) is within tol * max|logit|, a flip bf16
// is expected to cause; each flip is printed with its frame, codebook and margin. Against the host's
// random heads such flips happen; the fixtures' heads are fitted to decide by at least 0.1 of
// max|logit| (tools/make_fixtures.py), so against the reference no decision may flip. So that one flip
// does not end the comparison, the CUDA model can be teacher-forced onto the reference's codes
// (talker_cuda::force_codes): its logits stay its own.
#include "gpu_test.hpp"
#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "qwen3_tts/checkpoint/json_file.hpp"
#include "talker_checkpoint.hpp"
#include "talker_cuda.hpp"
#include "talker_cuda_kernels.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace qwen3_tts;

constexpr float tol = 5e-2f;

float bf16_round(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint32_t hash_name(const std::string& s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s)
    h = (h ^ c) * 16777619u;
  return h;
}

// Deterministic weights by name: matrices uniform in +-1/sqrt(fan-in), embeddings +-1, norms near 1,
// biases small; all rounded to bf16.
std::vector<float> random_tensor(const std::string& name, const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape)
    n *= std::size_t(d);
  std::vector<float> t(n);
  std::uint64_t state = hash_name(name) * 0x9e3779b97f4a7c15ull + 1;
  const bool norm = name.find("norm") != std::string::npos;
  const bool bias = name.find("bias") != std::string::npos;
  const bool embedding = name.find("embedding") != std::string::npos;
  const float scale = norm ? 0.2f : bias ? 0.1f : embedding ? 1.0f : 1.0f / std::sqrt(float(shape.back()));
  for (auto& v : t) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = float(std::uint32_t(state >> 40)) / float(1u << 24) * 2.0f - 1.0f;
    v = bf16_round((norm ? 1.0f : 0.0f) + u * scale);
  }
  return t;
}

// A tiny config of the 1.7B's shape: the predictor narrower than the Talker (the projection runs),
// head_dim not hidden / heads, text width unlike the Talker's, GQA in both stacks.
talker_config tiny_config() {
  talker_config c;
  c.talker = {64, 96, 2, 4, 2, 32, 1e-6f, 10000.0, 1280};
  c.predictor = {48, 64, 2, 4, 2, 16, 1e-6f, 10000.0, 256};
  c.text_vocab = 600;
  c.text_hidden = 80;
  c.code_groups = 16;
  c.codec_eos = 1027; // inside the suppressed range [vocab - 1024, vocab): the end token stays allowed
  c.codec_think = 1030;
  c.codec_nothink = 1031;
  c.codec_think_bos = 1032;
  c.codec_think_eos = 1033;
  c.codec_pad = 1024;
  c.codec_bos = 1025;
  c.tts_pad = 590;
  c.tts_bos = 591;
  c.tts_eos = 592;
  c.im_start = 593;
  c.im_end = 594;
  return c;
}

talker_prompt make_prompt(int text_len, std::uint32_t salt, bool non_streaming) {
  talker_prompt p;
  p.input_ids = {593, 20, 21};
  for (int i = 0; i < text_len; ++i)
    p.input_ids.push_back(std::int32_t(30 + (salt * 131u + 17u * i) % 500u));
  for (int i = 0; i < 5; ++i)
    p.input_ids.push_back(std::int32_t(594 - (i % 2)));
  p.non_streaming = non_streaming;
  return p;
}

float rel_err(const float* a, const float* ref, std::size_t n) {
  float diff = 0, big = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isinf(ref[i]) && std::isinf(a[i])) continue;
    diff = std::max(diff, std::fabs(a[i] - ref[i]));
    big = std::max(big, std::fabs(ref[i]));
  }
  return big > 0 ? diff / big : diff;
}

// Top-1 minus top-2 and the scale max|x| of a (processed) logits vector, -inf entries ignored.
std::pair<float, float> margin_of(const float* x, std::size_t n) {
  float a = -INFINITY, b = -INFINITY, big = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isinf(x[i])) continue;
    big = std::max(big, std::fabs(x[i]));
    if (x[i] > a) {
      b = a;
      a = x[i];
    } else if (x[i] > b)
      b = x[i];
  }
  return {a - b, big};
}

// Index of the largest value, first on ties (torch.argmax's choice).
int argmax_of(const float* x, std::size_t n) { return int(std::max_element(x, x + n) - x); }

// Limits of a tiny model's test: `rows` rows, prefills of up to `prefill` tokens, `pages` KV blocks of 4 tokens (all
// a call may name), the library's defaults for the rest; each test then sets the knobs it is about.
talker_cuda_limits tiny_limits(int rows, int prefill = 128, int pages = 96) {
  talker_cuda_limits l;
  l.max_rows = rows;
  l.max_prefill_tokens = prefill;
  l.kv_blocks = pages;
  l.block_tokens = 4;
  l.max_pages = pages;
  return l;
}

struct rig {
  talker_config config = tiny_config();
  talker_host host{config, load_talker_weights(config, random_tensor)};
  talker_cuda gpu;
  // gemv_rows: talker_cuda_limits::gemv_rows (the decode step's products of at most so many rows on small_gemv);
  // gemv_norm: talker_cuda_limits::gemv_norm (the norms before them done by the products); pdl:
  // talker_cuda_limits::pdl (programmatic dependent launch); attention_chunk: talker_cuda_limits::attention_chunk;
  // tensor_cores: talker_cuda_limits::gemv_tensor_cores (products of 2 or more rows on the tensor-core kernel).
  explicit rig(int max_rows, int gemv_rows = talker_cuda_limits{}.gemv_rows,
               bool gemv_norm = talker_cuda_limits{}.gemv_norm, bool pdl = talker_cuda_limits{}.pdl,
               int attention_chunk = talker_cuda_limits{}.attention_chunk,
               bool tensor_cores = talker_cuda_limits{}.gemv_tensor_cores)
      : gpu(cuda_dims(config), [&] {
          talker_cuda_limits l = tiny_limits(max_rows);
          l.gemv_rows = gemv_rows;
          l.gemv_norm = gemv_norm;
          l.pdl = pdl;
          l.attention_chunk = attention_chunk;
          l.gemv_tensor_cores = tensor_cores;
          return l;
        }()) {
    gpu.load_weights(f32_weight_source(random_tensor));
  }
  rig(const talker_config& c, const talker_cuda_limits& limits) : config(c), gpu(cuda_dims(config), limits) {
    gpu.load_weights(f32_weight_source(random_tensor));
  }
};

// Runs prompts on both models for `frames` frames, the host greedily on its own, the CUDA model
// teacher-forced onto the host's codes, so that every CUDA decision (the argmax of its own logits) and
// every logits vector is compared on the same path. Prints the worst errors and the flips. pool_blocks: KV blocks of 4
// tokens each model's pages come from.
void compare_runs(rig& m, const std::vector<talker_prompt>& prompts, int frames, bool sample = false,
                  int pool_blocks = 96) {
  const auto& c = m.config;
  const int rows = int(prompts.size()), groups = c.code_groups, vocab = c.talker.vocab, pv = c.predictor.vocab;
  const std::size_t nrows = prompts.size();
  const talker_sampling settings = sample ? talker_sampling{} : talker_sampling::greedy();
  const talker_sampler sampler(c, settings);
  std::vector<std::uint64_t> seeds(nrows);
  for (std::size_t r = 0; r < nrows; ++r)
    seeds[r] = 77 + 1000 * r;
  m.gpu.set_sampling(settings);
  m.gpu.set_seeds(seeds);

  std::vector<built_prompt> built;
  std::vector<float> embeds;
  std::vector<int> lens;
  for (const auto& p : prompts) {
    built.push_back(m.host.build_prompt(p));
    embeds.insert(embeds.end(), built.back().prefill.begin(), built.back().prefill.end());
    lens.push_back(built.back().rows);
  }
  // Different scatterings for the two models: paging must not matter.
  kv_block_pool host_pool(pool_blocks, 4, 7), gpu_pool(pool_blocks, 4, 11);
  std::vector<row_pages> host_pages(nrows, row_pages{}), gpu_pages(nrows, row_pages{});
  std::vector<row_pages*> hp, gp;
  for (int r = 0; r < rows; ++r) {
    hp.push_back(&host_pages[std::size_t(r)]);
    gp.push_back(&gpu_pages[std::size_t(r)]);
  }
  paged_kv kv(m.host.kv_for(pool_blocks, 4));
  talker_step_output out;
  std::vector<std::vector<std::int32_t>> history(nrows);
  std::vector<float> host_processed; // [rows][vocab], the host's code-0 scores after processing
  std::vector<std::int32_t> forced(nrows * groups, -1);
  // The host's code 0 for each row from out.logits; forced for the CUDA step that chooses it.
  auto host_code0 = [&](int f) {
    host_processed = out.logits;
    for (int r = 0; r < rows; ++r) {
      std::span<float> l(host_processed.data() + std::size_t(r) * vocab, std::size_t(vocab));
      const std::int32_t code = sampler.pick_code0(l, history[std::size_t(r)], seeds[std::size_t(r)], std::uint32_t(f));
      history[std::size_t(r)].push_back(code);
      forced[std::size_t(r) * groups] = code;
    }
  };

  int decisions = 0, flips = 0;
  float worst_talker = 0, worst_predictor = 0;
  auto logits_agree = [&](const float* got, const float* ref, std::size_t n, float& worst, int r, int f,
                          const char* what) {
    const float e = rel_err(got, ref, n);
    worst = std::max(worst, e);
    INFO("row ", r, " frame ", f, " ", what, ": max|cuda - host| / max|host| = ", e);
    CHECK(e <= tol);
  };
  // The CUDA model's own choice against the host's, tolerated when the host's margin is within tol.
  // Sampled: the draws may differ where bf16 moved the CDF across the target; counted, not checked one by one.
  auto decide = [&](int r, int f, int codebook, int host_code, int got, const float* host_logits, std::size_t n) {
    ++decisions;
    if (got == host_code) return;
    ++flips;
    if (sample) return;
    const auto [margin, scale] = margin_of(host_logits, n);
    if (flips <= 5) // the first few; the summary counts them all
      std::printf("row %d frame %d codebook %d: host %d, cuda %d; host margin %.3g (%.3g of max|logit|)\n", r, f,
                  codebook, host_code, got, double(margin), double(margin / scale));
    INFO("row ", r, " frame ", f, " codebook ", codebook, ": codes differ (host ", host_code, ", cuda ", got,
         ") at a host margin of ", margin, " = ", margin / scale, " of max|logit|, above the tolerance ", tol);
    CHECK(margin <= tol * scale);
  };

  const step_tables ht = host_pool.plan(hp, lens), gt = gpu_pool.plan(gp, lens);
  m.host.prefill(embeds, ht.view(), kv, out);
  host_code0(0);
  m.gpu.force_codes(forced);
  m.gpu.prefill(embeds, gt.view());
  {
    const auto raw = m.gpu.talker_logits(rows);
    const auto own = m.gpu.own_choices(rows);
    for (int r = 0; r < rows; ++r) {
      const std::size_t at = std::size_t(r) * vocab;
      logits_agree(raw.data() + at, out.logits.data() + at, std::size_t(vocab), worst_talker, r, 0, "prefill logits");
      decide(r, 0, 0, forced[std::size_t(r) * groups], own[std::size_t(r) * groups], host_processed.data() + at,
             std::size_t(vocab));
    }
  }
  for (int f = 0; f < frames; ++f) {
    // Host: the predictor completes frame f, then the Talker's step chooses frame f + 1's code 0.
    std::vector<std::int32_t> codes(nrows * groups, 0);
    for (int r = 0; r < rows; ++r)
      codes[std::size_t(r) * groups] = history[std::size_t(r)].back();
    const std::vector<std::uint32_t> frame_ids(nrows, std::uint32_t(f));
    std::vector<float> host_pred;
    m.host.predict(out.hidden, codes, sampler, seeds, frame_ids, &host_pred);
    std::vector<float> next(nrows * c.talker.hidden);
    std::vector<std::int32_t> text_ids;
    for (int r = 0; r < rows; ++r) {
      m.host.decode_input(std::span(codes).subspan(std::size_t(r) * groups, std::size_t(groups)),
                          built[std::size_t(r)].text_row(f), next.data() + std::size_t(r) * c.talker.hidden);
      text_ids.push_back(trailing_text_id(prompts[std::size_t(r)], c, f));
    }
    const std::vector<int> one(nrows, 1);
    const step_tables hs = host_pool.plan(hp, one), gs = gpu_pool.plan(gp, one);
    m.host.decode(next, hs.view(), kv, out);
    const std::vector<std::int32_t> frame_codes = codes;
    host_code0(f + 1);
    for (int r = 0; r < rows; ++r)
      for (int g = 1; g < groups; ++g)
        forced[std::size_t(r) * groups + std::size_t(g)] = frame_codes[std::size_t(r) * groups + std::size_t(g)];
    // CUDA: the same step, one graph replay, on the host's codes.
    m.gpu.force_codes(forced);
    m.gpu.set_decode_inputs(gs.view(), text_ids);
    m.gpu.decode(rows);
    const auto g_frames = m.gpu.frames(rows);
    const auto g_pred = m.gpu.predictor_logits(rows);
    const auto g_raw = m.gpu.talker_logits(rows);
    const auto g_own = m.gpu.own_choices(rows);
    for (int r = 0; r < rows; ++r) {
      INFO("row ", r, " frame ", f, ": the forced frame is the host's");
      CHECK(std::equal(g_frames.begin() + std::ptrdiff_t(r * groups),
                       g_frames.begin() + std::ptrdiff_t((r + 1) * groups),
                       frame_codes.begin() + std::ptrdiff_t(r * groups)));
      for (int g = 1; g < groups; ++g) {
        const float* hl = host_pred.data() + (std::size_t(r) * (groups - 1) + std::size_t(g - 1)) * pv;
        const float* gl = g_pred.data() + (std::size_t(g - 1) * nrows + std::size_t(r)) * pv;
        logits_agree(gl, hl, std::size_t(pv), worst_predictor, r, f, "predictor logits");
        decide(r, f, g, frame_codes[std::size_t(r) * groups + std::size_t(g)],
               g_own[std::size_t(r) * groups + std::size_t(g)], hl, std::size_t(pv));
      }
      const std::size_t at = std::size_t(r) * vocab;
      logits_agree(g_raw.data() + at, out.logits.data() + at, std::size_t(vocab), worst_talker, r, f, "Talker logits");
      decide(r, f + 1, 0, forced[std::size_t(r) * groups], g_own[std::size_t(r) * groups], host_processed.data() + at,
             std::size_t(vocab));
    }
  }
  std::printf("host vs cuda, %s, %d rows x %d frames on the host's path: %d decisions, %d differ; worst relative "
              "logits error Talker %.3g, predictor %.3g\n",
              sample ? "sampled" : "greedy", rows, frames, decisions, flips, double(worst_talker),
              double(worst_predictor));
  if (sample) {
    // Identical seeds and nearly identical probabilities: a wrong counter or lane would make the draws
    // agree about as often as two independent top-50 draws (a few percent).
    INFO(flips, " of ", decisions, " sampled decisions differ from the host sampler's");
    CHECK(flips * 10 <= decisions);
  }
}

} // namespace

TEST_CASE("on the host Talker's path with the decode products of up to 8 rows on the CUDA-core small_gemv every CUDA "
          "Talker decision and logit agrees with the host float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  rig m(2, 8, true, true, 0, false);
  compare_runs(m, {make_prompt(12, 1, false), make_prompt(7, 2, true)}, 32);
}

TEST_CASE("on the host Talker's path with every product on cuBLAS (gemv_rows 0) every CUDA Talker decision and logit "
          "agrees with the host float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  rig m(2, 0);
  compare_runs(m, {make_prompt(12, 1, false), make_prompt(7, 2, true)}, 32);
}

namespace {

// Five prompts of different lengths, streaming and not: the five-row tests' batch.
std::vector<talker_prompt> five_prompts() {
  return {make_prompt(12, 1, false), make_prompt(7, 2, true), make_prompt(9, 3, false), make_prompt(4, 5, false),
          make_prompt(6, 7, true)};
}

// tiny_config with its predictor (hidden 48) and text projection (80 inputs) widened to chunks of 32, so that every
// decode product -- both stacks' layers, the heads, the projections -- may run on the tensor-core kernel.
talker_config tensor_core_config() {
  talker_config c = tiny_config();
  c.predictor.hidden = 32;
  c.text_hidden = 96;
  return c;
}

} // namespace

TEST_CASE("on the host Talker's path at five rows, the predictor's first pass (10 tokens) on cuBLAS and the other "
          "decode products on the CUDA-core small_gemv, every CUDA Talker decision and logit agrees with the host "
          "float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  rig m(5, 8, true, true, 0, false);
  compare_runs(m, five_prompts(), 16);
}

TEST_CASE("on the host Talker's path at five rows with the decode products on the tensor cores every CUDA Talker "
          "decision and logit agrees with the host float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  talker_cuda_limits l = tiny_limits(5);
  l.gemv_rows = cuda::max_mma_gemv_rows;
  rig m(tensor_core_config(), l);
  compare_runs(m, five_prompts(), 16);
}

TEST_CASE("on the host Talker's path at twelve rows, the decode products on the tensor cores in two n-tiles, every "
          "CUDA Talker decision and logit agrees with the host float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  // The layers' and heads' products of 12 rows take the kernel's two n-tiles, the predictor's first pass (24
  // tokens) its four, with the default split and norms after the projections.
  talker_cuda_limits l = tiny_limits(12, 512, 256);
  l.gemv_norm_after_rows = cuda::max_mma_gemv_rows;
  rig m(tensor_core_config(), l);
  std::vector<talker_prompt> prompts;
  for (int r = 0; r < 12; ++r)
    prompts.push_back(make_prompt(4 + r % 7, std::uint32_t(11 + r), r % 3 == 0));
  compare_runs(m, prompts, 8);
}

TEST_CASE("on the host Talker's path at forty rows, the decode products on the tensor cores in eight n-tiles, every "
          "CUDA Talker decision and logit agrees with the host float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  // 33..64 rows: the layers' and heads' products take the kernel's eight n-tiles, with the default split and norms
  // after the projections; the predictor's first pass (80 tokens) goes to cuBLAS.
  talker_cuda_limits l = tiny_limits(40, 1024, 512);
  l.gemv_rows = cuda::max_mma_gemv_rows;
  l.gemv_norm_after_rows = cuda::max_mma_gemv_rows;
  rig m(tensor_core_config(), l);
  std::vector<talker_prompt> prompts;
  for (int r = 0; r < 40; ++r)
    prompts.push_back(make_prompt(3 + r % 5, std::uint32_t(41 + r), r % 5 == 0));
  compare_runs(m, prompts, 6, false, 512);
}

TEST_CASE("on the host Talker's path at twelve rows, the tensor-core products' tiles each shared among two blocks, "
          "every CUDA Talker decision and logit agrees with the host float32 Talker" *
          doctest::skip(!mstar::test::has_gpu())) {
  // talker_cuda_limits::gemv_k_split: the tiny model's products have fewer tiles of 16 outputs than any GPU has SMs,
  // so every tensor-core product of the decode step takes the split.
  talker_cuda_limits l = tiny_limits(12, 512, 256);
  l.gemv_k_split = 2;
  rig m(tensor_core_config(), l);
  std::vector<talker_prompt> prompts;
  for (int r = 0; r < 12; ++r)
    prompts.push_back(make_prompt(4 + r % 7, std::uint32_t(29 + r), r % 4 == 0));
  compare_runs(m, prompts, 8);
}

TEST_CASE("a CUDA Talker refuses a gemv_k_split outside 1..max_gemv_splits and a gemv_norm_after_rows outside "
          "0..max_mma_gemv_rows, before touching the device") {
  struct knob {
    int talker_cuda_limits::*field;
    const char* name;
    int lo, hi;
  };
  for (const knob& k :
       {knob{&talker_cuda_limits::gemv_k_split, "gemv_k_split", 1, cuda::max_gemv_splits},
        knob{&talker_cuda_limits::gemv_norm_after_rows, "gemv_norm_after_rows", 0, cuda::max_mma_gemv_rows}})
    for (const int v : {k.lo - 1, k.hi + 1}) {
      talker_cuda_limits l = tiny_limits(2);
      l.gemv_rows = 16;
      l.*k.field = v;
      const std::string why = std::string(k.name) + " " + std::to_string(v) + " outside [" + std::to_string(k.lo) +
                              ", " + std::to_string(k.hi) + "]";
      CHECK_THROWS_WITH_AS(talker_cuda(cuda_dims(tiny_config()), l), doctest::Contains(why.c_str()),
                           std::invalid_argument);
    }
}

TEST_CASE("a CUDA Talker refuses more small-rows product rows than small_gemv takes, before touching the device") {
  for (const bool tensor_cores : {true, false}) {
    talker_cuda_limits l = tiny_limits(2);
    l.gemv_rows = cuda::max_mma_gemv_rows + 1;
    l.gemv_tensor_cores = tensor_cores;
    const std::string why = "gemv_rows " + std::to_string(cuda::max_mma_gemv_rows + 1) + " outside [0, " +
                            std::to_string(cuda::max_mma_gemv_rows) + "]";
    CHECK_THROWS_WITH_AS(talker_cuda(cuda_dims(tiny_config()), l), doctest::Contains(why.c_str()),
                         std::invalid_argument);
  }
}

TEST_CASE("on the host Talker's path the CUDA Talker's sampled codes are the host sampler's draws" *
          doctest::skip(!mstar::test::has_gpu())) {
  rig m(2);
  compare_runs(m, {make_prompt(12, 1, false), make_prompt(7, 2, true)}, 8, true);
}

TEST_CASE("a captured decode step gives the same frames as the same step launched eagerly" *
          doctest::skip(!mstar::test::has_gpu())) {
  auto run = [](bool graphs) {
    rig m(1);
    m.gpu.set_use_graphs(graphs);
    const talker_prompt p = make_prompt(9, 3, false);
    const built_prompt b = m.host.build_prompt(p);
    kv_block_pool pool(96, 4);
    row_pages pages;
    row_pages* ptr = &pages;
    const std::vector<int> len = {b.rows}, one = {1};
    const step_tables t = pool.plan(std::span(&ptr, 1), len);
    m.gpu.prefill(b.prefill, t.view());
    std::vector<std::int32_t> all;
    for (int f = 0; f < 12; ++f) {
      const step_tables s = pool.plan(std::span(&ptr, 1), one);
      const std::int32_t text = trailing_text_id(p, m.config, f);
      m.gpu.set_decode_inputs(s.view(), std::span(&text, 1));
      m.gpu.decode(1);
      const auto fr = m.gpu.frames(1);
      all.insert(all.end(), fr.begin(), fr.end());
    }
    return all;
  };
  const auto eager = run(false), graph = run(true);
  REQUIRE(eager.size() == graph.size());
  CHECK(eager == graph);
}

TEST_CASE("trailing_text_id names the text row that build_prompt gives each decode step") {
  // Needs no GPU: it checks the ids the CUDA decode projects against the host prompt builder's rows.
  const talker_config c = tiny_config();
  const talker_host host(c, load_talker_weights(c, random_tensor));
  for (const bool non_streaming : {false, true}) {
    const talker_prompt p = make_prompt(6, 5, non_streaming);
    const built_prompt b = host.build_prompt(p);
    for (int step = 0; step < 10; ++step) {
      const std::int32_t id = trailing_text_id(p, c, step);
      std::vector<float> row(std::size_t(c.talker.hidden));
      host.text_rows(std::span(&id, 1), row.data());
      INFO("non_streaming ", non_streaming, " step ", step, ": id ", id);
      CHECK(std::equal(row.begin(), row.end(), b.text_row(step)));
    }
  }
}

// ---- against the reference's fixtures (tests/fixtures/qwen3tts, written by tools/make_fixtures.py) ----------

namespace {

// A fixture tensor's name, "p<prompt>.<tensor>" (appended piece by piece: GCC 12 warns, wrongly, of an
// overlapping memcpy in `"p" + std::to_string(r) + ...`).
std::string prompt_tensor(int prompt, const std::string& tensor) {
  std::string name = "p";
  name += std::to_string(prompt);
  name += '.';
  name += tensor;
  return name;
}

// The expected tensors of a fixture case (float32), by name.
class fixture_tensors {
public:
  explicit fixture_tensors(const std::string& path) : file_(path) {}
  std::vector<float> get(const std::string& name) const {
    const tensor_view* t = file_.find(name);
    if (!t) throw std::runtime_error(file_.path().string() + " has no tensor " + name);
    return to_f32(*t);
  }

private:
  safetensors_file file_;
};

// A prompt of talker.json as the reference's generate received it.
talker_prompt prompt_from(const nlohmann::json& c) {
  talker_prompt p;
  p.input_ids = c.at("input_ids").get<std::vector<std::int32_t>>();
  if (!c.at("instruct_ids").is_null()) p.instruct_ids = c.at("instruct_ids").get<std::vector<std::int32_t>>();
  if (!c.at("speaker").is_null()) p.speaker = c.at("speaker").get<std::string>();
  p.language = c.at("language").get<std::string>();
  p.non_streaming = c.at("non_streaming_mode").get<bool>();
  return p;
}

std::string fixture_dir(const std::string& name) {
  return std::string(MSTAR_SOURCE_ROOT) + "/tests/fixtures/qwen3tts/" + name;
}

// One fixture case on the CUDA Talker, all prompts batched as rows. Free-running (forced = false): each
// row runs on its own codes; the first code that differs from the reference's is printed with the
// reference's margin there, and must be a decision within tolerance of a tie (the fixtures have none);
// every prompt's greedy codes must be the reference's for at least min(32, frames). Teacher-forced: every
// step takes the reference's codes, so every one of the model's own decisions (the argmax of its
// logits) is compared on the reference's path, and the recorded logits of the first 5 steps are
// compared whatever the earlier decisions were.
void check_against_reference(const std::string& name, bool forced) {
  const std::string dir = fixture_dir(name);
  const checkpoint_folder checkpoint = open_checkpoint(dir);
  const talker_host host = load_talker(dir); // the host Talker builds the prompts
  const talker_config& config = host.config();
  const fixture_tensors expected(dir + "/expected/talker_logits.safetensors");
  const auto cases = read_json_object(dir + "/expected/talker.json").at("prompts");

  std::vector<talker_prompt> prompts;
  std::vector<float> embeds;
  std::vector<int> lens, frames;
  for (const auto& c : cases) {
    const talker_prompt p = prompt_from(c);
    const built_prompt b = host.build_prompt(p);
    embeds.insert(embeds.end(), b.prefill.begin(), b.prefill.end());
    lens.push_back(b.rows);
    frames.push_back(c.at("frames").get<int>());
    prompts.push_back(p);
  }
  const int rows = int(prompts.size()), groups = config.code_groups, vocab = config.talker.vocab,
            pv = config.predictor.vocab;
  const int most = *std::max_element(frames.begin(), frames.end());
  auto ref_code = [&](int r, int f, int g) {
    return cases[std::size_t(r)].at("codes")[std::size_t(f)][std::size_t(g)].get<int>();
  };
  auto ref_margin = [&](int r, int f, int g) {
    return cases[std::size_t(r)].at("margins")[std::size_t(f)][std::size_t(g)].get<double>();
  };
  auto label = [&](int r) {
    return name + " prompt " + std::to_string(r) + " (" + cases[std::size_t(r)].at("name").get<std::string>() + ")";
  };

  talker_cuda gpu(
      cuda_dims(config),
      talker_cuda_limits{
          .max_rows = rows, .max_prefill_tokens = 512, .kv_blocks = 512, .block_tokens = 16, .max_pages = 512});
  gpu.load_weights(store_weight_source(checkpoint.weights)); // the files' bf16 bytes, as a real run loads them
  kv_block_pool pool(512, 16, 3);
  std::vector<row_pages> pages(prompts.size());
  std::vector<row_pages*> ptrs;
  for (auto& p : pages)
    ptrs.push_back(&p);

  // Forcing for the step that completes frame f (f = -1: the prefill): its codes 1..15, and code 0 of f + 1.
  auto force = [&](int f) {
    if (!forced) return;
    std::vector<std::int32_t> codes(std::size_t(rows) * groups, -1);
    for (int r = 0; r < rows; ++r) {
      for (int g = 1; g < groups && f >= 0 && f < frames[std::size_t(r)]; ++g)
        codes[std::size_t(r) * groups + std::size_t(g)] = ref_code(r, f, g);
      if (f + 1 < frames[std::size_t(r)]) codes[std::size_t(r) * groups] = ref_code(r, f + 1, 0);
    }
    gpu.force_codes(codes);
  };

  std::vector<int> first_mismatch(prompts.size(), -1);
  int decisions = 0, flips = 0;
  double largest_flip = 0;
  float worst_talker = 0, worst_predictor = 0;
  auto compare_logits = [&](int r, const float* got, const std::string& tensor, std::size_t at, std::size_t n,
                            float& worst, const std::string& what) {
    const auto ref = expected.get(prompt_tensor(r, tensor));
    const float e = rel_err(got, ref.data() + at * n, n);
    worst = std::max(worst, e);
    INFO(label(r), " ", what, ": max|cuda - reference| / max|reference| = ", e);
    CHECK(e <= tol);
  };
  // The model's decision `got` (its argmax, or its code when free-running) against the reference's.
  auto decide = [&](int r, int f, int g, int got, const float* logits, std::size_t n) {
    ++decisions;
    const int ref = ref_code(r, f, g);
    if (got == ref) return true;
    const double margin = ref_margin(r, f, g), scale = double(margin_of(logits, n).second);
    if (flips < 5 || first_mismatch[std::size_t(r)] < 0) // each prompt's first, and a few more; all counted
      std::printf("%s: frame %d codebook %d: reference %d, cuda %d; reference margin %.3g (%.3g of max|logit|; "
                  "smallest of the prompt %.3g of max|logit|)\n",
                  label(r).c_str(), f, g, ref, got, margin, margin / scale,
                  cases[std::size_t(r)].at("min_relative_margin").get<double>());
    INFO(label(r), " frame ", f, " codebook ", g, ": cuda chose ", got, ", the reference ", ref, " by a margin of ",
         margin, ", more than the tolerance ", tol, " x max|logit| ", scale);
    CHECK(margin <= tol * scale);
    ++flips;
    largest_flip = std::max(largest_flip, margin);
    if (first_mismatch[std::size_t(r)] < 0) first_mismatch[std::size_t(r)] = f;
    return false;
  };

  force(-1);
  gpu.prefill(embeds, pool.plan(ptrs, lens).view());
  {
    const auto raw = gpu.talker_logits(rows), processed = gpu.processed_logits(rows);
    const auto code0 = gpu.code0(rows);
    for (int r = 0; r < rows; ++r) {
      const float* pl = processed.data() + std::size_t(r) * vocab;
      compare_logits(r, raw.data() + std::size_t(r) * vocab, "talker_logits", 0, std::size_t(vocab), worst_talker,
                     "prefill Talker logits");
      decide(r, 0, 0, forced ? argmax_of(pl, std::size_t(vocab)) : code0[std::size_t(r)], pl, std::size_t(vocab));
    }
  }
  for (int f = 0; f < most; ++f) {
    std::vector<std::int32_t> text;
    for (int r = 0; r < rows; ++r)
      text.push_back(trailing_text_id(prompts[std::size_t(r)], config, f));
    const std::vector<int> one(prompts.size(), 1);
    const step_tables t = pool.plan(ptrs, one);
    force(f);
    gpu.set_decode_inputs(t.view(), text);
    gpu.decode(rows);
    const auto codes = gpu.frames(rows);
    const auto pred = gpu.predictor_logits(rows);
    const auto raw = gpu.talker_logits(rows), processed = gpu.processed_logits(rows);
    const auto code0 = gpu.code0(rows);
    for (int r = 0; r < rows; ++r) {
      const int n = frames[std::size_t(r)];
      const bool on_path = forced || first_mismatch[std::size_t(r)] < 0; // logits comparable with the reference's
      if (f >= n || !on_path) continue;
      for (int g = 1; g < groups; ++g) {
        const float* pl = pred.data() + (std::size_t(g - 1) * rows + std::size_t(r)) * pv;
        if (f < 5)
          compare_logits(r, pl, "predictor_logits", std::size_t(f) * (groups - 1) + std::size_t(g - 1), std::size_t(pv),
                         worst_predictor,
                         "frame " + std::to_string(f) + " predictor logits, codebook " + std::to_string(g));
        const int got = forced ? argmax_of(pl, std::size_t(pv)) : codes[std::size_t(r) * groups + std::size_t(g)];
        if (!decide(r, f, g, got, pl, std::size_t(pv)) && !forced) break;
      }
      if (!forced && first_mismatch[std::size_t(r)] >= 0) continue;
      const float* pl = processed.data() + std::size_t(r) * vocab;
      if (f + 1 < 5)
        compare_logits(r, raw.data() + std::size_t(r) * vocab, "talker_logits", std::size_t(f + 1), std::size_t(vocab),
                       worst_talker, "decode step " + std::to_string(f) + " Talker logits");
      const int choice = forced ? argmax_of(pl, std::size_t(vocab)) : code0[std::size_t(r)];
      if (f + 1 < n) {
        decide(r, f + 1, 0, choice, pl, std::size_t(vocab));
      } else if (cases[std::size_t(r)].at("stopped_on_eos").get<bool>()) {
        INFO(label(r), ": the reference stops after ", n, " frames; cuda's next code 0 is ", choice);
        CHECK(choice == config.codec_eos);
      }
    }
  }
  std::printf("%s vs reference, %s: %d decisions, %d low-margin flips (largest reference margin %.3g); worst "
              "relative logits error Talker %.3g, predictor %.3g (first 5 steps)",
              name.c_str(), forced ? "teacher-forced" : "free-running", decisions, flips, largest_flip,
              double(worst_talker), double(worst_predictor));
  if (!forced) {
    std::printf("; frames identical per prompt:");
    for (int r = 0; r < rows; ++r)
      std::printf(" %d/%d",
                  first_mismatch[std::size_t(r)] < 0 ? frames[std::size_t(r)] : first_mismatch[std::size_t(r)],
                  frames[std::size_t(r)]);
    for (int r = 0; r < rows; ++r) {
      const int n = frames[std::size_t(r)], a = first_mismatch[std::size_t(r)] < 0 ? n : first_mismatch[std::size_t(r)];
      INFO(label(r), ": greedy codes identical for ", a, " of ", n, " frames, short of min(32, ", n,
           "); the reference's margin at the flip is printed above");
      CHECK(a >= std::min(32, n));
    }
  }
  std::printf("\n");
}

} // namespace

TEST_CASE("the CUDA Talker's greedy codes are the reference's on the fixtures for at least 32 frames" *
          doctest::skip(!mstar::test::has_gpu())) {
  check_against_reference("tiny06", false);
  check_against_reference("tiny17", false);
}

TEST_CASE("on the reference's path every CUDA Talker decision and logit agrees with the reference's" *
          doctest::skip(!mstar::test::has_gpu())) {
  check_against_reference("tiny06", true);
  check_against_reference("tiny17", true);
}

TEST_CASE("the fixture prompts built by the host Talker are the reference's prefill embeddings") {
  // Needs no GPU: it checks the harness of the fixture cases above (prompt i is p{i}, its rows built
  // from talker.json's fields) against the reference's own prefill inputs.
  for (const std::string name : {"tiny06", "tiny17"}) {
    const std::string dir = fixture_dir(name);
    const talker_host host = load_talker(dir);
    const fixture_tensors expected(dir + "/expected/talker_logits.safetensors");
    int r = 0;
    const nlohmann::json cases = read_json_object(dir + "/expected/talker.json");
    for (const auto& c : cases.at("prompts")) {
      const talker_prompt p = prompt_from(c);
      const auto ref = expected.get(prompt_tensor(r, "prefill_embeds"));
      const built_prompt b = host.build_prompt(p);
      INFO(name, " prompt ", r);
      REQUIRE(b.prefill.size() == ref.size());
      CHECK(rel_err(b.prefill.data(), ref.data(), ref.size()) <= 1e-5f);
      ++r;
    }
  }
}

namespace {

// Row r of a [rows][vocab] matrix.
std::vector<float> row_of(const std::vector<float>& m, int r, int vocab) {
  return {m.begin() + std::ptrdiff_t(r) * vocab, m.begin() + std::ptrdiff_t(r + 1) * vocab};
}

// cuda::sample_rows over rows of device logits (each row's counter from counter, the given lane), one code a row
// into out, read back.
std::vector<std::int32_t> sample_on_device(const float* logits, int vocab, cuda::sample_settings settings,
                                           const std::uint64_t* seeds, const std::int32_t* counter, std::uint32_t lane,
                                           std::int32_t* out, int rows) {
  cuda::sample_rows(logits, vocab, settings, seeds, counter, 0, lane, out, 1, 0, nullptr, nullptr, rows, nullptr);
  std::vector<std::int32_t> got(static_cast<std::size_t>(rows));
  MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
  MSTAR_CUDA_REQUIRE(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost));
  return got;
}

} // namespace

TEST_CASE("the CUDA sampler draws the host sampler's codes from the same logits" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Identical inputs on both sides, so only the order of float additions differs (the CDF's total): a
  // draw may differ only when it lands within rounding of a boundary, which 256 draws should not see twice.
  const talker_config c = tiny_config();
  const int rows = 64, vocab = c.talker.vocab; // 1280: code 0's vocabulary, control ids suppressed
  std::uint64_t state = 12345;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(std::uint32_t(state >> 40)) / float(1u << 24);
  };
  std::vector<float> logits(std::size_t(rows) * vocab);
  for (auto& l : logits)
    l = uniform() * 8.0f - 4.0f;
  std::vector<std::uint64_t> seeds(rows);
  std::vector<std::int32_t> generated(rows);
  std::vector<std::vector<std::int32_t>> history(rows);
  std::vector<std::uint8_t> seen(std::size_t(rows) * vocab, 0);
  for (int r = 0; r < rows; ++r) {
    seeds[std::size_t(r)] = 1000 + 7919ull * std::uint64_t(r);
    for (int i = 0; i < r % 5; ++i) { // earlier code-0 ids: the repetition penalty's input
      const std::int32_t id = (37 * r + 11 * i) % 256;
      history[std::size_t(r)].push_back(id);
      seen[std::size_t(r) * vocab + std::size_t(id)] = 1;
    }
    generated[std::size_t(r)] = std::int32_t(history[std::size_t(r)].size());
  }
  float* d_logits = nullptr;
  float* d_processed = nullptr;
  std::uint64_t* d_seeds = nullptr;
  std::int32_t *d_generated = nullptr, *d_out = nullptr;
  std::uint8_t* d_seen = nullptr;
  MSTAR_CUDA_REQUIRE(cudaMalloc(&d_logits, logits.size() * 4));
  MSTAR_CUDA_REQUIRE(cudaMalloc(&d_processed, logits.size() * 4));
  MSTAR_CUDA_REQUIRE(cudaMalloc(&d_seeds, seeds.size() * 8));
  MSTAR_CUDA_REQUIRE(cudaMalloc(&d_generated, generated.size() * 4));
  MSTAR_CUDA_REQUIRE(cudaMalloc(&d_out, std::size_t(rows) * 4));
  MSTAR_CUDA_REQUIRE(cudaMalloc(&d_seen, seen.size()));
  MSTAR_CUDA_REQUIRE(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
  MSTAR_CUDA_REQUIRE(cudaMemcpy(d_seeds, seeds.data(), seeds.size() * 8, cudaMemcpyHostToDevice));

  for (const int top_k : {50, 0}) {
    talker_sampling s; // the reference's defaults: sampling, top_k 50, top_p 1, temperature 0.9
    s.talker.top_k = s.sub.top_k = top_k;
    const talker_sampler sampler(c, s);
    const cuda::sample_settings settings{s.sub.temperature, top_k};
    // Predictor codes: raw logits, counter = frame, lane = codebook 3.
    MSTAR_CUDA_REQUIRE(cudaMemcpy(d_generated, generated.data(), generated.size() * 4, cudaMemcpyHostToDevice));
    std::vector<std::int32_t> got = sample_on_device(d_logits, vocab, settings, d_seeds, d_generated, 3, d_out, rows);
    int same = 0;
    for (int r = 0; r < rows; ++r) {
      std::vector<float> l = row_of(logits, r, vocab); // the host sampler processes it in place
      same += sampler.pick_sub(l, seeds[std::size_t(r)], std::uint32_t(generated[std::size_t(r)]), 3) ==
              got[std::size_t(r)];
    }
    // Code 0: penalty, minimum tokens, suppression, then the draw (counter = codes so far, lane 0).
    MSTAR_CUDA_REQUIRE(cudaMemcpy(d_seen, seen.data(), seen.size(), cudaMemcpyHostToDevice));
    cuda::sample_code0(d_logits, d_processed, vocab, d_seen, d_generated, d_out, nullptr, nullptr, 1, rows,
                       s.repetition_penalty, s.min_new_tokens, c.codec_eos, vocab - 1024,
                       cuda::sample_settings{s.talker.temperature, top_k}, d_seeds, nullptr);
    MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
    MSTAR_CUDA_REQUIRE(cudaMemcpy(got.data(), d_out, got.size() * 4, cudaMemcpyDeviceToHost));
    int same0 = 0;
    for (int r = 0; r < rows; ++r) {
      std::vector<float> l = row_of(logits, r, vocab);
      same0 += sampler.pick_code0(l, history[std::size_t(r)], seeds[std::size_t(r)],
                                  std::uint32_t(history[std::size_t(r)].size())) == got[std::size_t(r)];
    }
    std::printf("sampling, top_k %d: %d/%d predictor draws and %d/%d code-0 draws equal the host sampler's\n", top_k,
                same, rows, same0, rows);
    INFO("top_k ", top_k, ": ", same, " predictor and ", same0, " code-0 draws of ", rows, " equal the host's");
    CHECK(same + same0 >= 2 * rows - 1);
  }
  cudaFree(d_logits);
  cudaFree(d_processed);
  cudaFree(d_seeds);
  cudaFree(d_generated);
  cudaFree(d_out);
  cudaFree(d_seen);
}

TEST_CASE("the CUDA sampler's top-k keeps the host sampler's candidates on rows of ties, -inf and more than 4096 "
          "entries" *
          doctest::skip(!mstar::test::has_gpu())) {
  // block_kth_largest's radix select: many logits equal to the k-th (all of them stay candidates), rows with
  // -inf entries (suppressed ids) and with fewer finite entries than k, and rows longer than the 16 keys a
  // thread keeps in registers (read again each pass). The draws equal the host sampler's but where one lands
  // within rounding of a boundary of the CDF (its total summed in another order).
  const talker_config c = tiny_config();
  std::uint64_t state = 777;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(std::uint32_t(state >> 40)) / float(1u << 24);
  };
  const int rows = 32;
  for (const int vocab : {1280, 5000}) {
    for (const int pattern : {0, 1, 2}) {
      // 0: integers in [-3, 3] (ties at the k-th); 1: as 0 with every 3rd entry -inf; 2: all -inf but 20 entries.
      std::vector<float> logits(std::size_t(rows) * vocab);
      for (std::size_t i = 0; i < logits.size(); ++i) {
        const float v = std::floor(uniform() * 7.0f) - 3.0f;
        const bool dropped = (pattern == 1 && i % 3 == 0) || (pattern == 2 && i % std::size_t(vocab) >= 20);
        logits[i] = dropped ? -INFINITY : v;
      }
      std::vector<std::uint64_t> seeds(rows);
      std::vector<std::int32_t> frame(rows);
      for (int r = 0; r < rows; ++r) {
        seeds[std::size_t(r)] = 99 + 104729ull * std::uint64_t(r);
        frame[std::size_t(r)] = r % 7;
      }
      float* d_logits = nullptr;
      std::uint64_t* d_seeds = nullptr;
      std::int32_t *d_frame = nullptr, *d_out = nullptr;
      MSTAR_CUDA_REQUIRE(cudaMalloc(&d_logits, logits.size() * 4));
      MSTAR_CUDA_REQUIRE(cudaMalloc(&d_seeds, seeds.size() * 8));
      MSTAR_CUDA_REQUIRE(cudaMalloc(&d_frame, frame.size() * 4));
      MSTAR_CUDA_REQUIRE(cudaMalloc(&d_out, std::size_t(rows) * 4));
      MSTAR_CUDA_REQUIRE(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
      MSTAR_CUDA_REQUIRE(cudaMemcpy(d_seeds, seeds.data(), seeds.size() * 8, cudaMemcpyHostToDevice));
      MSTAR_CUDA_REQUIRE(cudaMemcpy(d_frame, frame.data(), frame.size() * 4, cudaMemcpyHostToDevice));
      talker_sampling s; // sampling, top_k 50, temperature 0.9
      const talker_sampler sampler(c, s);
      const std::vector<std::int32_t> got = sample_on_device(
          d_logits, vocab, cuda::sample_settings{s.sub.temperature, s.sub.top_k}, d_seeds, d_frame, 5, d_out, rows);
      int same = 0;
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> row = row_of(logits, r, vocab);
        std::vector<float> l = row; // the host sampler processes it in place
        same +=
            sampler.pick_sub(l, seeds[std::size_t(r)], std::uint32_t(frame[std::size_t(r)]), 5) == got[std::size_t(r)];
        // Whatever the rounding, a draw is an entry the host kept: finite, and not below the k-th largest.
        std::vector<float> sorted = row;
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        REQUIRE(got[std::size_t(r)] >= 0);
        REQUIRE(got[std::size_t(r)] < vocab);
        CHECK(std::isfinite(row[std::size_t(got[std::size_t(r)])]));
        CHECK(row[std::size_t(got[std::size_t(r)])] >= sorted[std::size_t(s.sub.top_k - 1)]);
      }
      INFO("vocab ", vocab, ", pattern ", pattern, ": ", same, " of ", rows, " draws equal the host's");
      CHECK(same >= rows - 1);
      cudaFree(d_logits);
      cudaFree(d_seeds);
      cudaFree(d_frame);
      cudaFree(d_out);
    }
  }
}

namespace {

// `rows` prompts (the first two of 10 and 5 text ids, the others of 3..9) prefilled on m, then `frames` decode steps
// of every row: every step's frames, Talker logits and predictor logits.
struct two_row_run {
  std::vector<std::int32_t> frames;
  std::vector<float> talker, predictor;
};
// sample: the reference's default sampling (seeds 77, 1077, ...) instead of greedy choices.
two_row_run run_rows(rig& m, int rows, int frames, bool sample = false) {
  std::vector<talker_prompt> prompts = {make_prompt(10, 4, false), make_prompt(5, 6, false)};
  for (int r = 2; r < rows; ++r)
    prompts.push_back(make_prompt(3 + r % 7, std::uint32_t(101 + r), r % 3 == 0));
  prompts.resize(std::size_t(rows), prompts[0]);
  if (sample) {
    m.gpu.set_sampling(talker_sampling{});
    std::vector<std::uint64_t> seeds;
    for (int r = 0; r < rows; ++r)
      seeds.push_back(77 + 1000 * std::uint64_t(r));
    m.gpu.set_seeds(seeds);
  }
  std::vector<float> embeds;
  std::vector<int> lens;
  for (const auto& p : prompts) {
    const built_prompt b = m.host.build_prompt(p);
    embeds.insert(embeds.end(), b.prefill.begin(), b.prefill.end());
    lens.push_back(b.rows);
  }
  kv_block_pool pool(48 * rows, 4, 5);
  std::vector<row_pages> pages(static_cast<std::size_t>(rows));
  std::vector<row_pages*> ptrs;
  for (auto& pg : pages)
    ptrs.push_back(&pg);
  m.gpu.prefill(embeds, pool.plan(ptrs, lens).view());
  two_row_run out;
  for (int f = 0; f < frames; ++f) {
    const std::vector<int> one(std::size_t(rows), 1);
    const step_tables t = pool.plan(ptrs, one);
    std::vector<std::int32_t> text;
    for (const auto& p : prompts)
      text.push_back(trailing_text_id(p, m.config, f));
    m.gpu.set_decode_inputs(t.view(), text);
    m.gpu.decode(rows);
    const auto fr = m.gpu.frames(rows);
    const auto tl = m.gpu.talker_logits(rows);
    const auto pl = m.gpu.predictor_logits(rows);
    out.frames.insert(out.frames.end(), fr.begin(), fr.end());
    out.talker.insert(out.talker.end(), tl.begin(), tl.end());
    out.predictor.insert(out.predictor.end(), pl.begin(), pl.end());
  }
  return out;
}
two_row_run run_two_rows(rig& m, int frames, bool sample = false) { return run_rows(m, 2, frames, sample); }
// Two runs' frames equal and their Talker and predictor logits the same bits.
void check_same_bits(const two_row_run& a, const two_row_run& b) {
  CHECK(a.frames == b.frames);
  REQUIRE(a.talker.size() == b.talker.size());
  REQUIRE(a.predictor.size() == b.predictor.size());
  CHECK(std::memcmp(a.talker.data(), b.talker.data(), a.talker.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(a.predictor.data(), b.predictor.data(), a.predictor.size() * sizeof(float)) == 0);
}

} // namespace

TEST_CASE("on small_gemv, the decode step with the norms done by the products gives the same bits as without" *
          doctest::skip(!mstar::test::has_gpu())) {
  // gemv_norm takes rms_norm's sums in rms_norm's order: codes and logits are equal, not merely close.
  rig with_norm(2, 8, true, true, 0, false), without(2, 8, false, true, 0, false);
  const two_row_run a = run_two_rows(with_norm, 6), b = run_two_rows(without, 6);
  check_same_bits(a, b);
}

TEST_CASE("on the tensor cores, the decode step with the norms after the o and down projections done by them gives "
          "the same bits as without, at 2, 12 and 40 rows, each split" *
          doctest::skip(!mstar::test::has_gpu())) {
  // gemv_norm_after takes rms_norm's sums in rms_norm's order: codes and logits are equal, not merely close. 12 rows
  // take two n-tiles and 40 rows eight, so every warp of the last block has rows to norm; the predictor's hidden of
  // 32 leaves most of a norm's eight sums a lane at zero, the Talker's of 64 fewer.
  for (const int rows : {2, 12, 40})
    for (const int split : {1, 2, qwen3_tts::cuda::max_gemv_splits}) {
      talker_cuda_limits l = tiny_limits(rows, 1024, 48 * rows);
      l.gemv_rows = cuda::max_mma_gemv_rows;
      l.gemv_k_split = split;
      l.gemv_norm_after_rows = 0;
      rig without(tensor_core_config(), l);
      l.gemv_norm_after_rows = qwen3_tts::cuda::max_mma_gemv_rows;
      rig with_after(tensor_core_config(), l);
      const two_row_run a = run_rows(with_after, rows, 6), b = run_rows(without, rows, 6);
      INFO("rows ", rows, ", split ", split);
      check_same_bits(a, b);
    }
}

TEST_CASE("a Talker wider than the norm after takes keeps rms_norm: its decode step at 2 rows with the norms after "
          "on gives the bits of the step without" *
          doctest::skip(!mstar::test::has_gpu())) {
  // The last block normalises rows of at most cuda::max_gemv_norm_after_out values; a Talker of more must not ask
  // small_gemv for it (which would refuse in the middle of a step) but keep its rms_norm launches, while its code
  // predictor (hidden 32) takes the norm after, which gives rms_norm's bits.
  talker_config c = tensor_core_config();
  c.talker.hidden = cuda::max_gemv_norm_after_out + 32;
  talker_cuda_limits l = tiny_limits(2);
  l.gemv_norm_after_rows = 0;
  rig without(c, l);
  l.gemv_norm_after_rows = cuda::max_mma_gemv_rows;
  rig with_after(c, l);
  const two_row_run a = run_rows(with_after, 2, 4), b = run_rows(without, 2, 4);
  check_same_bits(a, b);
}

TEST_CASE("programmatic dependent launch gives the decode step and the prefill the same bits as ordinary launches" *
          doctest::skip(!mstar::test::has_gpu())) {
  // Every kernel waits for its predecessors before touching their outputs, so the overlap of launches changes no
  // value. Small_gemv at 2 rows on the CUDA cores and on the tensor cores (each with its weight prefetch before the
  // wait), then cuBLAS at 2 rows (programmatic launches after cuBLAS's kernels, ordinary ones after ours), greedy
  // and sampled; 24 frames, so that a race has many steps to show in. The captured graphs must hold programmatic
  // edges with it and none without, or the comparison would be of two ordinary runs.
  for (const auto& [gemv_rows, tensor_cores] : {std::pair{8, false}, std::pair{16, true}, std::pair{1, false}}) {
    for (const bool sample : {false, true}) {
      INFO("gemv_rows ", gemv_rows, tensor_cores ? " on the tensor cores" : "", ", sampled ", sample);
      rig with_pdl(2, gemv_rows, true, true, 0, tensor_cores), without(2, gemv_rows, true, false, 0, tensor_cores);
      const two_row_run a = run_two_rows(with_pdl, 24, sample), b = run_two_rows(without, 24, sample);
      CHECK(with_pdl.gpu.graph_programmatic_edges(2) > 0);
      CHECK(without.gpu.graph_programmatic_edges(2) == 0);
      check_same_bits(a, b);
    }
  }
}

TEST_CASE("programmatic dependent launch gives the decode step at 40 rows the same bits as ordinary launches, the "
          "products on the tensor cores in eight n-tiles with the default split and the norms after" *
          doctest::skip(!mstar::test::has_gpu())) {
  // The eight-tile kernel, its split's last-block sums and the norm after each o and down projection, each waiting
  // for its predecessor under programmatic launches; greedy, 12 frames.
  talker_cuda_limits l = tiny_limits(40, 1024, 48 * 40);
  l.gemv_rows = cuda::max_mma_gemv_rows;
  l.gemv_norm_after_rows = cuda::max_mma_gemv_rows;
  rig with_pdl(tensor_core_config(), l);
  l.pdl = false;
  rig without(tensor_core_config(), l);
  const two_row_run a = run_rows(with_pdl, 40, 12), b = run_rows(without, 40, 12);
  CHECK(with_pdl.gpu.graph_programmatic_edges(40) > 0);
  CHECK(without.gpu.graph_programmatic_edges(40) == 0);
  check_same_bits(a, b);
}

TEST_CASE("decode-step graphs captured up front for every row count are replayed with the bits of graphs captured "
          "on first use" *
          doctest::skip(!mstar::test::has_gpu())) {
  rig ahead(2), lazy(2);
  CHECK_THROWS_WITH_AS(ahead.gpu.capture_decode_graphs(3, false), doctest::Contains("max_rows is 2"),
                       std::invalid_argument);
  ahead.gpu.capture_decode_graphs(2, false);
  CHECK(ahead.gpu.decode_graphs() == 2);
  CHECK(ahead.gpu.graph_nodes(1) > 0);
  CHECK(ahead.gpu.graph_nodes(2) > 0);
  const two_row_run a = run_two_rows(ahead, 6), b = run_two_rows(lazy, 6);
  CHECK(ahead.gpu.decode_graphs() == 2); // the steps replayed what was captured, capturing nothing more
  CHECK(lazy.gpu.decode_graphs() == 1);
  check_same_bits(a, b);
}

TEST_CASE("the fused decode attention in shares of a few tokens, or of one block a row, gives the equal shares' codes "
          "and logits" *
          doctest::skip(!mstar::test::has_gpu())) {
  // talker_cuda_limits::attention_chunk: both rows' prompts are 8 tokens, so the 10 steps attend over 9 to 18. Chunks
  // of 1 take 9 to 16 blocks a row (more than the 8 equal shares: the scratch of max_decode_splits; from 17 tokens
  // the 16 equal shares of 2 tokens exceed the chunk), chunks of 4 take 3 to 5 (merged in scratch) and chunks of 64
  // one block and no merge. The sums run in another order than the 8 equal shares', so the bound is the fused
  // test's below; the greedy codes are the same.
  auto run = [](int chunk) {
    rig m(2, talker_cuda_limits{}.gemv_rows, talker_cuda_limits{}.gemv_norm, talker_cuda_limits{}.pdl, chunk);
    return run_two_rows(m, 10);
  };
  const two_row_run equal = run(0);
  for (const int chunk : {1, 4, 64}) {
    CAPTURE(chunk);
    const two_row_run chunked = run(chunk);
    REQUIRE(chunked.talker.size() == equal.talker.size());
    const float talker_err = rel_err(chunked.talker.data(), equal.talker.data(), equal.talker.size());
    const float predictor_err = rel_err(chunked.predictor.data(), equal.predictor.data(), equal.predictor.size());
    std::printf("decode attention in chunks of %d against equal shares, 2 rows x 10 frames: relative logits "
                "difference Talker %.3g, predictor %.3g\n",
                chunk, double(talker_err), double(predictor_err));
    CHECK(talker_err <= 4e-3f);
    CHECK(predictor_err <= 4e-3f);
    CHECK(chunked.frames == equal.frames);
  }
}

TEST_CASE("a CUDA Talker refuses a negative attention chunk before touching the device") {
  talker_cuda_limits l = tiny_limits(2);
  l.attention_chunk = -1;
  CHECK_THROWS_WITH_AS(talker_cuda(cuda_dims(tiny_config()), l), doctest::Contains("attention_chunk -1"),
                       std::invalid_argument);
}

TEST_CASE("the fused decode attention with a row's shares dealt to fewer blocks gives the bits of one block a share" *
          doctest::skip(!mstar::test::has_gpu())) {
  // talker_cuda_limits::attention_grid: the tiny Talker has 2 KV heads, so a grid of 100 blocks leaves 2 rows at 8
  // blocks a row and deals 12 rows' 8 shares to 4 blocks, and a grid of 1 deals every row's to one block. The same
  // sums in the same order: codes and logits equal, not merely close; greedy, 12 frames.
  for (const int grid : {1, 100}) {
    for (const int rows : {2, 12}) {
      INFO("grid ", grid, ", rows ", rows);
      talker_cuda_limits l = tiny_limits(rows, 1024, 48 * rows);
      l.attention_grid = 0;
      rig one_a_share(tiny_config(), l);
      l.attention_grid = grid;
      rig dealt(tiny_config(), l);
      check_same_bits(run_rows(dealt, rows, 12), run_rows(one_a_share, rows, 12));
    }
  }
}

TEST_CASE("a CUDA Talker refuses a negative attention grid before touching the device") {
  talker_cuda_limits l = tiny_limits(2);
  l.attention_grid = -1;
  CHECK_THROWS_WITH_AS(talker_cuda(cuda_dims(tiny_config()), l), doctest::Contains("attention_grid -1"),
                       std::invalid_argument);
}

TEST_CASE("a decode step with fused attention gives the two-launch step's codes and logits" *
          doctest::skip(!mstar::test::has_gpu())) {
  // The same attention summed in another order (the fused launch shares each row's context among the Talker's 8
  // splits and merges them; prompts of 10 and 5 ids give contexts of more than 8 tokens, so the merge runs). The
  // float sums differ in their last bits, and where such a difference crosses a bf16 rounding boundary of the
  // attention output one element moves by a bf16 step (2^-8 relative); measured on the H100: Talker 0, predictor
  // 1.4e-3. The bound is one bf16 step of the largest logit (the parity tests allow 5e-2); the greedy codes are the
  // same.
  auto run = [](bool fused) {
    rig m(2);
    m.gpu.set_fused_decode(fused);
    return run_two_rows(m, 10);
  };
  const two_row_run split = run(false), fused = run(true);
  REQUIRE(split.talker.size() == fused.talker.size());
  const float talker_err = rel_err(fused.talker.data(), split.talker.data(), split.talker.size());
  const float predictor_err = rel_err(fused.predictor.data(), split.predictor.data(), split.predictor.size());
  std::printf("fused vs split decode attention, 2 rows x 10 frames: relative logits difference Talker %.3g, "
              "predictor %.3g\n",
              double(talker_err), double(predictor_err));
  CHECK(talker_err <= 4e-3f);
  CHECK(predictor_err <= 4e-3f);
  CHECK(fused.frames == split.frames);
}
