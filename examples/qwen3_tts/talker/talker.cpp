// The Talker's host float32 forward: per-layer functions over token rows, named by what they compute, so the CUDA
// port can mirror them one kernel each.
#include "talker.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "mstar/resources/sampler.hpp"

namespace qwen3_tts {
namespace {

// y[t][o] = x[t] . W[o] (+ b[o]) for outputs [o0, o1); W is [out][in] row-major, as in the checkpoint. Tokens go
// in tiles so that a W row is read from memory once a tile rather than once a token; every (t, o) sum is
// computed in the same order whatever the tiling, so the results are the same bits.
void linear_part(const float* x, int tokens, int in, const float* w, const float* bias, int out, float* y, int o0,
                 int o1) {
  constexpr int tile = 8;
  for (int t0 = 0; t0 < tokens; t0 += tile) {
    const int t1 = std::min(tokens, t0 + tile);
    for (int o = o0; o < o1; ++o) {
      const float* wo = w + std::size_t(o) * in;
      for (int t = t0; t < t1; ++t) {
        const float* xt = x + std::size_t(t) * in;
        float acc[8] = {};
        int i = 0;
        for (; i + 8 <= in; i += 8)
          for (int u = 0; u < 8; ++u)
            acc[u] += xt[i + u] * wo[i + u];
        float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; i < in; ++i)
          sum += xt[i] * wo[i];
        y[std::size_t(t) * out + o] = bias ? sum + bias[o] : sum;
      }
    }
  }
}

// Helper threads the process's products may run at once beside their callers: one fewer than the cores, shared
// by every caller, so that many prompts projected at once (a service's submitting threads) do not start a
// core's worth of helpers each and crowd out the worker's threads.
class helper_budget {
public:
  static helper_budget& process() {
    static helper_budget b(int(std::max(1u, std::thread::hardware_concurrency())) - 1);
    return b;
  }
  // Up to `wanted` helpers, as many as are free now (maybe none).
  int take(int wanted) {
    int free = free_.load(std::memory_order_relaxed);
    while (wanted > 0 && free > 0) {
      const int n = std::min(wanted, free);
      if (free_.compare_exchange_weak(free, free - n, std::memory_order_acquire)) return n;
    }
    return 0;
  }
  void give(int n) { free_.fetch_add(n, std::memory_order_release); }

private:
  explicit helper_budget(int n) : free_(n) {}
  std::atomic<int> free_;
};

// linear_part over all outputs; a product of more than 2^22 multiply-adds is split by outputs over the caller and
// the helper threads free (helper_budget; a prompt's text projection, a prefill), which changes no bit of the
// result.
void linear(const float* x, int tokens, int in, const tensor& w, const float* bias, int out, float* y) {
  const double work = double(tokens) * in * out;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int wanted = work < double(1 << 22) ? 1 : int(std::min<unsigned>(cores, unsigned(std::max(1, out / 64))));
  const int helping = wanted > 1 ? helper_budget::process().take(wanted - 1) : 0;
  const int parts = 1 + helping;
  if (parts <= 1) {
    linear_part(x, tokens, in, w.data(), bias, out, y, 0, out);
    return;
  }
  struct give_back {
    int n;
    ~give_back() { helper_budget::process().give(n); }
  } returned{helping};
  std::vector<std::thread> helpers;
  helpers.reserve(std::size_t(parts - 1));
  const int step = (out + parts - 1) / parts;
  int p = 1;
  try {
    for (; p < parts; ++p) {
      const int o0 = p * step, o1 = std::min(out, o0 + step);
      if (o0 < o1) helpers.emplace_back(linear_part, x, tokens, in, w.data(), bias, out, y, o0, o1);
    }
  } catch (const std::system_error&) { // no thread to be had: the caller computes the parts left
  }
  for (; p < parts; ++p)
    linear_part(x, tokens, in, w.data(), bias, out, y, p * step, std::min(out, (p + 1) * step));
  linear_part(x, tokens, in, w.data(), bias, out, y, 0, std::min(out, step));
  for (auto& h : helpers)
    h.join();
}

// x * rsqrt(mean(x^2) + eps) * w over each `dim`-wide vector, in place.
void rms_norm(float* x, std::size_t vectors, int dim, const tensor& w, float eps) {
  for (std::size_t r = 0; r < vectors; ++r) {
    float* v = x + r * std::size_t(dim);
    float ss = 0.0f;
    for (int i = 0; i < dim; ++i)
      ss += v[i] * v[i];
    const float scale = 1.0f / std::sqrt(ss / float(dim) + eps);
    for (int i = 0; i < dim; ++i)
      v[i] = w[std::size_t(i)] * (v[i] * scale);
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// Half-rotation (NeoX) RoPE of `heads` vectors of one token; frequency j rotates dims j and j + d/2 by
// position * inv_freq[j]. The multimodal form picks one of three position streams per frequency; TTS tokens
// have all three equal, so the token's one position drives every stream.
void apply_rope(float* x, int heads, int d, const std::vector<float>& inv_freq, std::int32_t position) {
  const int half = d / 2;
  for (int j = 0; j < half; ++j) {
    const float angle = inv_freq[std::size_t(j)] * float(position);
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* v = x + std::size_t(h) * d;
      const float a = v[j], b = v[j + half];
      v[j] = a * c - b * s;
      v[j + half] = b * c + a * s;
    }
  }
}

std::vector<float> rope_inv_freq(const stack_config& s) {
  std::vector<float> f(std::size_t(s.head_dim / 2));
  for (std::size_t j = 0; j < f.size(); ++j)
    f[j] = 1.0f / std::pow(float(s.rope_theta), float(2 * j) / float(s.head_dim));
  return f;
}

struct row_span {
  int first = 0, qo_len = 0, kv_len = 0;
};

row_span row_of(const step_plan& p, std::size_t r, int block_tokens) {
  const int pages = p.page_indptr[r + 1] - p.page_indptr[r];
  row_span s{p.qo_indptr[r], p.qo_indptr[r + 1] - p.qo_indptr[r],
             pages == 0 ? 0 : (pages - 1) * block_tokens + p.last_page_len[r]};
  if (s.qo_len > s.kv_len)
    throw std::invalid_argument("step_plan row " + std::to_string(r) + ": " + std::to_string(s.qo_len) +
                                " new tokens but its pages hold only " + std::to_string(s.kv_len) +
                                " (page_indptr/last_page_len must cover the step's tokens)");
  return s;
}

// Where KV position `i` of row `r` lives.
std::pair<int, int> kv_slot(const step_plan& p, std::size_t r, int i, int block_tokens) {
  return {p.page_indices[std::size_t(p.page_indptr[r] + i / block_tokens)], i % block_tokens};
}

// Self-attention of one layer: projections, per-head q/k RMSNorm, RoPE, the new K/V written into the row's
// pages, then causal grouped-query attention over the row's pages, and the output projection added to x.
void attention_block(const stack_config& s, const decoder_layer_weights& w, int layer,
                     const std::vector<float>& inv_freq, float* x, int tokens, const step_plan& plan, paged_kv& kv) {
  const int hd = s.hidden, d = s.head_dim, qd = s.heads * d, kvd = s.kv_heads * d, bt = kv.shape().block_tokens;
  std::vector<float> h(x, x + std::size_t(tokens) * hd);
  rms_norm(h.data(), std::size_t(tokens), hd, w.input_layernorm, s.rms_eps);
  std::vector<float> q(std::size_t(tokens) * qd), k(std::size_t(tokens) * kvd), v(std::size_t(tokens) * kvd);
  linear(h.data(), tokens, hd, w.q_proj, nullptr, qd, q.data());
  linear(h.data(), tokens, hd, w.k_proj, nullptr, kvd, k.data());
  linear(h.data(), tokens, hd, w.v_proj, nullptr, kvd, v.data());
  rms_norm(q.data(), std::size_t(tokens) * s.heads, d, w.q_norm, s.rms_eps);
  rms_norm(k.data(), std::size_t(tokens) * s.kv_heads, d, w.k_norm, s.rms_eps);
  for (int t = 0; t < tokens; ++t) {
    apply_rope(q.data() + std::size_t(t) * qd, s.heads, d, inv_freq, plan.positions[std::size_t(t)]);
    apply_rope(k.data() + std::size_t(t) * kvd, s.kv_heads, d, inv_freq, plan.positions[std::size_t(t)]);
  }

  std::vector<float> attn(std::size_t(tokens) * qd), scores;
  const float scale = 1.0f / std::sqrt(float(d));
  const int group = s.heads / s.kv_heads;
  for (std::size_t r = 0; r < plan.rows(); ++r) {
    const row_span row = row_of(plan, r, bt);
    const int past = row.kv_len - row.qo_len;
    for (int t = 0; t < row.qo_len; ++t) {
      auto [block, slot] = kv_slot(plan, r, past + t, bt);
      std::copy_n(k.data() + std::size_t(row.first + t) * kvd, kvd, kv.k(layer, block, slot));
      std::copy_n(v.data() + std::size_t(row.first + t) * kvd, kvd, kv.v(layer, block, slot));
    }
    for (int t = 0; t < row.qo_len; ++t) {
      const int visible = past + t + 1; // causal: the row's earlier tokens and itself
      scores.resize(std::size_t(visible));
      for (int head = 0; head < s.heads; ++head) {
        const float* qv = q.data() + std::size_t(row.first + t) * qd + std::size_t(head) * d;
        const int kvh = head / group;
        float top = -std::numeric_limits<float>::infinity();
        for (int i = 0; i < visible; ++i) {
          auto [block, slot] = kv_slot(plan, r, i, bt);
          const float* kv_k = kv.k(layer, block, slot) + std::size_t(kvh) * d;
          float dot = 0.0f;
          for (int e = 0; e < d; ++e)
            dot += qv[e] * kv_k[e];
          scores[std::size_t(i)] = dot * scale;
          top = std::max(top, scores[std::size_t(i)]);
        }
        float total = 0.0f;
        for (float& sc : scores)
          total += (sc = std::exp(sc - top));
        float* o = attn.data() + std::size_t(row.first + t) * qd + std::size_t(head) * d;
        std::fill_n(o, d, 0.0f);
        for (int i = 0; i < visible; ++i) {
          auto [block, slot] = kv_slot(plan, r, i, bt);
          const float* kv_v = kv.v(layer, block, slot) + std::size_t(kvh) * d;
          const float p = scores[std::size_t(i)] / total;
          for (int e = 0; e < d; ++e)
            o[e] += p * kv_v[e];
        }
      }
    }
  }
  std::vector<float> o(std::size_t(tokens) * hd);
  linear(attn.data(), tokens, qd, w.o_proj, nullptr, hd, o.data());
  for (std::size_t i = 0; i < o.size(); ++i)
    x[i] += o[i];
}

// SwiGLU MLP on the post-attention norm, added to x.
void mlp_block(const stack_config& s, const decoder_layer_weights& w, float* x, int tokens) {
  const int hd = s.hidden, im = s.intermediate;
  std::vector<float> h(x, x + std::size_t(tokens) * hd);
  rms_norm(h.data(), std::size_t(tokens), hd, w.post_attention_layernorm, s.rms_eps);
  std::vector<float> gate(std::size_t(tokens) * im), up(std::size_t(tokens) * im), down(std::size_t(tokens) * hd);
  linear(h.data(), tokens, hd, w.gate_proj, nullptr, im, gate.data());
  linear(h.data(), tokens, hd, w.up_proj, nullptr, im, up.data());
  for (std::size_t i = 0; i < gate.size(); ++i)
    gate[i] = silu(gate[i]) * up[i];
  linear(gate.data(), tokens, im, w.down_proj, nullptr, hd, down.data());
  for (std::size_t i = 0; i < down.size(); ++i)
    x[i] += down[i];
}

// The decoder stack over a step's tokens, then the final norm of each row's last token into `last` [rows][hidden].
void run_stack(const stack_config& s, const std::vector<decoder_layer_weights>& layers, const tensor& norm,
               std::vector<float>& x, const step_plan& plan, paged_kv& kv, std::vector<float>& last) {
  const int tokens = int(x.size() / std::size_t(s.hidden));
  if (plan.qo_indptr.empty() || plan.qo_indptr.back() != tokens || plan.positions.size() != std::size_t(tokens))
    throw std::invalid_argument("step_plan: qo_indptr ends at " +
                                std::to_string(plan.qo_indptr.empty() ? -1 : plan.qo_indptr.back()) + " and has " +
                                std::to_string(plan.positions.size()) + " positions, but the step has " +
                                std::to_string(tokens) + " token rows (give one position per token)");
  const std::vector<float> inv_freq = rope_inv_freq(s);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    attention_block(s, layers[l], int(l), inv_freq, x.data(), tokens, plan, kv);
    mlp_block(s, layers[l], x.data(), tokens);
  }
  last.resize(plan.rows() * std::size_t(s.hidden));
  for (std::size_t r = 0; r < plan.rows(); ++r) {
    float* dst = last.data() + r * std::size_t(s.hidden);
    if (plan.qo_indptr[r + 1] == plan.qo_indptr[r]) { // a padding row
      std::fill_n(dst, s.hidden, 0.0f);
      continue;
    }
    std::copy_n(x.data() + std::size_t(plan.qo_indptr[r + 1] - 1) * s.hidden, s.hidden, dst);
  }
  rms_norm(last.data(), plan.rows(), s.hidden, norm, s.rms_eps);
}

void add_row(const tensor& table, int id, int width, float* out) {
  const float* src = table.data() + std::size_t(id) * width;
  for (int i = 0; i < width; ++i)
    out[i] += src[i];
}

std::string lower(std::string s) {
  for (char& ch : s)
    ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

} // namespace

// ---- paged KV -------------------------------------------------------------------------------------------------

paged_kv::paged_kv(kv_shape shape) : shape_(shape) {
  const std::size_t n = std::size_t(shape.layers) * shape.blocks * shape.block_tokens * shape.kv_heads * shape.head_dim;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

kv_block_pool::kv_block_pool(int blocks, int block_tokens, std::uint64_t scatter_seed) : block_tokens_(block_tokens) {
  free_.resize(std::size_t(blocks));
  std::iota(free_.rbegin(), free_.rend(), 0); // block 0 handed out first
  if (scatter_seed != 0) std::shuffle(free_.begin(), free_.end(), std::mt19937_64(scatter_seed));
}

step_tables kv_block_pool::plan(std::span<row_pages* const> rows, std::span<const int> new_tokens) {
  step_tables t;
  t.qo_indptr.push_back(0);
  t.page_indptr.push_back(0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    row_pages& row = *rows[r];
    const int total = row.tokens + new_tokens[r];
    const int want = (total + block_tokens_ - 1) / block_tokens_;
    while (int(row.blocks.size()) < want) {
      if (free_.empty())
        throw std::runtime_error("kv_block_pool: out of KV blocks (row " + std::to_string(r) + " needs " +
                                 std::to_string(want) + " blocks of " + std::to_string(block_tokens_) +
                                 " tokens); give the pool more blocks");
      row.blocks.push_back(free_.back());
      free_.pop_back();
    }
    for (int p = 0; p < want; ++p)
      t.page_indices.push_back(row.blocks[std::size_t(p)]);
    t.page_indptr.push_back(std::int32_t(t.page_indices.size()));
    t.last_page_len.push_back(want == 0 ? 0 : total - (want - 1) * block_tokens_);
    for (int i = row.tokens; i < total; ++i)
      t.positions.push_back(i);
    t.qo_indptr.push_back(t.qo_indptr.back() + new_tokens[r]);
    row.tokens = total;
  }
  return t;
}

void kv_block_pool::release(row_pages& row) {
  free_.insert(free_.end(), row.blocks.rbegin(), row.blocks.rend());
  row.blocks.clear();
  row.tokens = 0;
}

// ---- sampler --------------------------------------------------------------------------------------------------

std::int32_t talker_sampler::pick_code0(std::span<float> logits, std::span<const std::int32_t> history,
                                        std::uint64_t seed, std::uint32_t frame) const {
  if (s_.repetition_penalty != 1.0f) {
    std::vector<std::int32_t> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (std::int32_t id : seen) {
      float& l = logits[std::size_t(id)];
      l = l < 0.0f ? l * s_.repetition_penalty : l / s_.repetition_penalty;
    }
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  if (int(history.size()) < s_.min_new_tokens) logits[std::size_t(config_->codec_eos)] = ninf;
  for (int id = std::max(0, config_->talker.vocab - 1024); id < config_->talker.vocab; ++id)
    if (config_->suppressed(id)) logits[std::size_t(id)] = ninf;
  return pick(logits, s_.talker, seed, frame, 0);
}

std::int32_t talker_sampler::pick_sub(std::span<float> logits, std::uint64_t seed, std::uint32_t frame,
                                      int codebook) const {
  return pick(logits, s_.sub, seed, frame, codebook);
}

std::int32_t talker_sampler::pick(std::span<float> logits, const sampling_settings& s, std::uint64_t seed,
                                  std::uint32_t frame, int codebook) const {
  const float ninf = -std::numeric_limits<float>::infinity();
  if (s.do_sample) {
    for (float& l : logits)
      l /= s.temperature;
    if (s.top_k > 0 && std::size_t(s.top_k) < logits.size()) {
      std::vector<float> sorted(logits.begin(), logits.end());
      std::nth_element(sorted.begin(), sorted.begin() + (s.top_k - 1), sorted.end(), std::greater<float>());
      const float kth = sorted[std::size_t(s.top_k - 1)];
      for (float& l : logits)
        if (l < kth) l = ninf;
    }
    if (s.top_p < 1.0f) {
      // Drop the least likely ids whose probabilities sum to at most 1 - top_p (keeping the most likely one).
      std::vector<std::size_t> order(logits.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return logits[a] < logits[b]; });
      const float top = logits[order.back()];
      double total = 0.0;
      for (float l : logits)
        total += std::exp(double(l - top));
      double cum = 0.0;
      for (std::size_t i = 0; i + 1 < order.size(); ++i) {
        cum += std::exp(double(logits[order[i]] - top)) / total;
        if (cum > 1.0 - double(s.top_p)) break;
        logits[order[i]] = ninf;
      }
    }
  }
  const std::size_t best = std::size_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (!s.do_sample) return std::int32_t(best);
  const float top = logits[best];
  float total = 0.0f;
  for (float& l : logits)
    total += (l = std::exp(l - top)); // logits now hold unnormalised probabilities
  const mstar::sampler_row row{seed, frame, 0, 0.0f, 0.0f};
  const float target = mstar::sample_uniform(row, std::uint32_t(codebook)) * total;
  float acc = 0.0f;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    acc += logits[i];
    if (logits[i] > 0.0f && target < acc) return std::int32_t(i);
  }
  return std::int32_t(best);
}

// ---- talker_host ----------------------------------------------------------------------------------------------

talker_host::talker_host(talker_config config, talker_weights weights)
    : c_(std::move(config)), w_(std::move(weights)) {}

kv_shape talker_host::kv_for(int blocks, int block_tokens) const {
  return {c_.talker.layers, blocks, block_tokens, c_.talker.kv_heads, c_.talker.head_dim};
}

void talker_host::text_rows(std::span<const std::int32_t> ids, float* out) const {
  const int th = c_.text_hidden, n = int(ids.size());
  std::vector<float> e(std::size_t(n) * th), mid(std::size_t(n) * th);
  for (int i = 0; i < n; ++i) {
    const std::int32_t id = ids[std::size_t(i)];
    if (id < 0 || id >= c_.text_vocab)
      throw std::out_of_range("text id " + std::to_string(id) + " is outside the text vocabulary [0, " +
                              std::to_string(c_.text_vocab) + ") of this checkpoint");
    std::copy_n(w_.text_embedding.data() + std::size_t(id) * th, th, e.data() + std::size_t(i) * th);
  }
  linear(e.data(), n, th, w_.text_fc1_weight, w_.text_fc1_bias.data(), th, mid.data());
  for (float& m : mid)
    m = silu(m);
  linear(mid.data(), n, th, w_.text_fc2_weight, w_.text_fc2_bias.data(), c_.talker.hidden, out);
}

built_prompt talker_host::build_prompt(const talker_prompt& p) const {
  const int hd = c_.talker.hidden;
  const auto& ids = p.input_ids;
  if (ids.size() < 9)
    throw std::invalid_argument("talker_prompt.input_ids has " + std::to_string(ids.size()) +
                                " ids; it needs the 3-id assistant header, at least one text id and the 5-id tail");
  const std::string speaker = lower(p.speaker), language = lower(p.language);

  // The codec prefix: language tag (or none), then the speaker row, then pad and bos.
  std::vector<int> codec;
  int language_id = -1;
  if (language != "auto") {
    auto it = c_.codec_language_id.find(language);
    if (it == c_.codec_language_id.end())
      throw std::invalid_argument("language \"" + p.language +
                                  "\" is not in this checkpoint's codec_language_id; "
                                  "use \"auto\" or one of its languages");
    language_id = it->second;
  }
  int speaker_id = -1;
  if (!speaker.empty()) {
    auto it = c_.spk_id.find(speaker);
    if (it == c_.spk_id.end())
      throw std::invalid_argument("speaker \"" + p.speaker + "\" is not in this checkpoint's spk_id");
    speaker_id = it->second;
    if (language == "chinese" || language == "auto") {
      auto d = c_.spk_dialect.find(speaker);
      if (d == c_.spk_dialect.end())
        throw std::invalid_argument("speaker \"" + p.speaker + "\" has no spk_is_dialect entry in config.json");
      if (d->second) language_id = c_.codec_language_id.at(*d->second); // a dialect speaker forces its dialect
    }
  }
  if (language_id < 0)
    codec = {c_.codec_nothink, c_.codec_think_bos, c_.codec_think_eos};
  else
    codec = {c_.codec_think, c_.codec_think_bos, language_id, c_.codec_think_eos};
  if (speaker_id >= 0) codec.push_back(speaker_id);
  codec.push_back(c_.codec_pad);
  codec.push_back(c_.codec_bos);

  built_prompt b;
  const std::size_t n = ids.size();
  const std::span<const std::int32_t> text(ids.data() + 3, n - 8); // between the header and the tail
  const int instr = int(p.instruct_ids.size());
  const int codec_rows = int(codec.size()) - 1; // all but the final bos, which joins the first text row
  const int text_in_prompt = p.non_streaming ? int(text.size()) + 2 : 1;

  // Every text row the prompt uses, projected in one pass over the projection's weights (one call per group of
  // rows read them once a group): tts_bos, tts_eos, tts_pad, the instruction, the 3-id header, the text.
  std::vector<std::int32_t> all = {c_.tts_bos, c_.tts_eos, c_.tts_pad};
  all.insert(all.end(), p.instruct_ids.begin(), p.instruct_ids.end());
  all.insert(all.end(), ids.begin(), ids.begin() + 3);
  all.insert(all.end(), text.begin(), text.end());
  std::vector<float> projected(all.size() * std::size_t(hd));
  text_rows(all, projected.data());
  const auto at = [&](std::size_t i) { return projected.data() + i * std::size_t(hd); };
  const float* tts_bos = at(0);
  const float* tts_eos = at(1);
  const float* tts_pad = at(2);
  const float* text_row0 = at(6 + std::size_t(instr)); // text[i] at text_row0 + i * hd

  b.rows = instr + 3 + codec_rows + text_in_prompt;
  b.prefill.assign(std::size_t(b.rows) * hd, 0.0f);
  float* row = b.prefill.data();
  auto next = [&] {
    float* r = row;
    row += hd;
    return r;
  };

  // The instruction's rows, then the header's: consecutive in `projected` as in the prompt.
  std::copy_n(at(3), std::size_t(instr + 3) * hd, row);
  row += std::size_t(instr + 3) * hd;
  for (int i = 0; i < codec_rows; ++i) {
    float* r = next();
    std::copy_n(i + 1 < codec_rows ? tts_pad : tts_bos, hd, r);
    add_row(w_.codec_embedding, codec[std::size_t(i)], hd, r);
  }
  if (!p.non_streaming) {
    float* r = next();
    std::copy_n(text_row0, hd, r);
    add_row(w_.codec_embedding, c_.codec_bos, hd, r);
    b.trailing_rows = int(text.size()); // text after the first id, then tts_eos
    b.trailing.assign(std::size_t(b.trailing_rows) * hd, 0.0f);
    std::copy_n(text_row0 + hd, (text.size() - 1) * std::size_t(hd), b.trailing.data());
    std::copy_n(tts_eos, hd, b.trailing.data() + std::size_t(b.trailing_rows - 1) * hd);
  } else {
    std::copy_n(text_row0, text.size() * std::size_t(hd), row);
    for (std::size_t i = 0; i < text.size(); ++i)
      add_row(w_.codec_embedding, c_.codec_pad, hd, next());
    float* eos = next();
    std::copy_n(tts_eos, hd, eos);
    add_row(w_.codec_embedding, c_.codec_pad, hd, eos);
    float* bos = next();
    std::copy_n(tts_pad, hd, bos);
    add_row(w_.codec_embedding, c_.codec_bos, hd, bos);
    b.trailing_rows = 0; // every decode step adds tts_pad
  }
  b.tts_pad.assign(tts_pad, tts_pad + hd);
  return b;
}

void talker_host::forward(std::span<const float> embeds, const step_plan& plan, paged_kv& kv,
                          talker_step_output& out) const {
  const kv_shape& ks = kv.shape();
  if (ks.layers != c_.talker.layers || ks.kv_heads != c_.talker.kv_heads || ks.head_dim != c_.talker.head_dim)
    throw std::invalid_argument("paged_kv shape does not match the Talker (make it with talker_host::kv_for)");
  std::vector<float> x(embeds.begin(), embeds.end());
  run_stack(c_.talker, w_.layers, w_.norm, x, plan, kv, out.hidden);
  out.logits.resize(plan.rows() * std::size_t(c_.talker.vocab));
  linear(out.hidden.data(), int(plan.rows()), c_.talker.hidden, w_.codec_head, nullptr, c_.talker.vocab,
         out.logits.data());
}

void talker_host::prefill(std::span<const float> embeds, const step_plan& plan, paged_kv& kv,
                          talker_step_output& out) const {
  forward(embeds, plan, kv, out);
}

void talker_host::decode(std::span<const float> embeds, const step_plan& plan, paged_kv& kv,
                         talker_step_output& out) const {
  for (std::size_t r = 0; r < plan.rows(); ++r)
    if (plan.qo_indptr[r + 1] - plan.qo_indptr[r] != 1)
      throw std::invalid_argument("talker decode: row " + std::to_string(r) + " has " +
                                  std::to_string(plan.qo_indptr[r + 1] - plan.qo_indptr[r]) +
                                  " tokens; a decode step takes exactly one a row (use prefill)");
  forward(embeds, plan, kv, out);
}

void talker_host::predict(std::span<const float> hidden, std::span<std::int32_t> codes, const talker_sampler& sampler,
                          std::span<const std::uint64_t> seeds, std::span<const std::uint32_t> frames,
                          std::vector<float>* logits) const {
  const stack_config& ps = c_.predictor;
  const int groups = c_.code_groups, hd = c_.talker.hidden, ph = ps.hidden, pv = ps.vocab;
  const std::size_t rows = seeds.size();
  // A private contiguous KV: one block of `groups` tokens a row, fresh every frame.
  paged_kv kv({ps.layers, int(rows), groups, ps.kv_heads, ps.head_dim});
  std::vector<row_pages> pages(rows);
  std::vector<row_pages*> page_ptrs;
  for (std::size_t r = 0; r < rows; ++r) {
    pages[r].blocks = {std::int32_t(r)};
    page_ptrs.push_back(&pages[r]);
  }
  if (logits) logits->assign(rows * std::size_t(groups - 1) * pv, 0.0f);

  // Inputs of the Talker's width go through the projection into the predictor when the widths differ.
  auto project = [&](std::vector<float>& in, int n) {
    if (!w_.predictor.has_projection()) return std::move(in);
    std::vector<float> outv(std::size_t(n) * ph);
    linear(in.data(), n, hd, w_.predictor.projection_weight, w_.predictor.projection_bias.data(), ph, outv.data());
    return outv;
  };
  std::vector<float> last, head(static_cast<std::size_t>(pv));
  for (int step = 0; step + 1 < groups; ++step) {
    const int per_row = step == 0 ? 2 : 1;
    std::vector<float> x(rows * per_row * std::size_t(hd), 0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      float* dst = x.data() + r * per_row * hd;
      const std::int32_t* frame = codes.data() + r * groups;
      if (step == 0) {
        std::copy_n(hidden.data() + r * hd, hd, dst);
        add_row(w_.codec_embedding, frame[0], hd, dst + hd);
      } else {
        add_row(w_.predictor.codec_embedding[std::size_t(step - 1)], frame[step], hd, dst);
      }
    }
    x = project(x, int(rows) * per_row);
    // Tables for this step: rows' tokens at positions step + (0, 1) on step 0, then step + 1.
    step_tables t;
    t.qo_indptr.push_back(0);
    t.page_indptr.push_back(0);
    for (std::size_t r = 0; r < rows; ++r) {
      const int before = step == 0 ? 0 : step + 1;
      for (int i = 0; i < per_row; ++i)
        t.positions.push_back(before + i);
      t.qo_indptr.push_back(t.qo_indptr.back() + per_row);
      t.page_indices.push_back(std::int32_t(r));
      t.page_indptr.push_back(std::int32_t(r + 1));
      t.last_page_len.push_back(before + per_row);
    }
    run_stack(ps, w_.predictor.layers, w_.predictor.norm, x, t.view(), kv, last);
    for (std::size_t r = 0; r < rows; ++r) {
      linear(last.data() + r * ph, 1, ph, w_.predictor.lm_head[std::size_t(step)], nullptr, pv, head.data());
      if (logits) std::copy(head.begin(), head.end(), logits->begin() + std::ptrdiff_t((r * (groups - 1) + step) * pv));
      codes[r * groups + step + 1] = sampler.pick_sub(head, seeds[r], frames[r], step + 1);
    }
  }
}

void talker_host::decode_input(std::span<const std::int32_t> frame, const float* text_row, float* out) const {
  const int hd = c_.talker.hidden;
  std::fill_n(out, hd, 0.0f);
  add_row(w_.codec_embedding, frame[0], hd, out);
  for (int g = 1; g < c_.code_groups; ++g)
    add_row(w_.predictor.codec_embedding[std::size_t(g - 1)], frame[std::size_t(g)], hd, out);
  for (int i = 0; i < hd; ++i)
    out[i] += text_row[i];
}

// ---- generate -------------------------------------------------------------------------------------------------

namespace {

// The requests of one generate_batch call and where each stands. A request's life: one prefill step that
// yields code 0 of frame 0; then, per frame, the predictor's codes 1..15 and (unless the frame limit is
// reached) one decode step that yields the next frame's code 0; it ends when code 0 is the end token.
class batch_run {
public:
  batch_run(const talker_host& model, std::span<const talker_prompt> prompts, const talker_sampling& sampling,
            std::span<const std::uint64_t> seeds, const generate_options& options)
      : model_(model), c_(model.config()), sampler_(c_, sampling), seeds_(seeds), options_(options),
        max_frames_(sampling.max_frames), results_(prompts.size()), pages_(prompts.size()), history_(prompts.size()),
        code0_(prompts.size()) {
    int tokens = 0;
    for (const auto& p : prompts) {
      built_.push_back(model.build_prompt(p));
      tokens += built_.back().rows + max_frames_ + options.block_tokens;
    }
    const int blocks = tokens / options.block_tokens + int(prompts.size());
    pool_ = std::make_unique<kv_block_pool>(blocks, options.block_tokens, options.scatter_seed);
    kv_ = std::make_unique<paged_kv>(model.kv_for(blocks, options.block_tokens));
  }

  std::vector<generate_result> run() {
    std::vector<std::size_t> live(results_.size());
    std::iota(live.begin(), live.end(), 0);
    std::vector<float> x;
    for (std::size_t r : live)
      x.insert(x.end(), built_[r].prefill.begin(), built_[r].prefill.end());
    talker_step(live, x, 0, true);
    for (int step = 0; !live.empty(); ++step) {
      std::erase_if(live, [&](std::size_t r) { return ended(r); });
      if (live.empty()) break;
      const std::vector<std::int32_t> codes = predict(live, step);
      x.assign(live.size() * std::size_t(c_.talker.hidden), 0.0f);
      std::vector<std::size_t> decoding;
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (int(results_[live[i]].frames.size()) == max_frames_) continue;
        model_.decode_input(std::span(codes).subspan(i * groups(), groups()), built_[live[i]].text_row(step),
                            x.data() + decoding.size() * std::size_t(c_.talker.hidden));
        decoding.push_back(live[i]);
      }
      live.swap(decoding);
      if (live.empty()) break;
      x.resize(live.size() * std::size_t(c_.talker.hidden));
      talker_step(live, x, step + 1, false);
    }
    for (auto& p : pages_)
      pool_->release(p);
    return std::move(results_);
  }

private:
  std::size_t groups() const { return std::size_t(c_.code_groups); }

  bool ended(std::size_t r) {
    if (code0_[r] != c_.codec_eos) return false;
    results_[r].stopped = true;
    return true;
  }

  // A Talker step over `live` (their prompts when prefilling, else one token each), then code 0 for each.
  void talker_step(const std::vector<std::size_t>& live, const std::vector<float>& x, int step, bool prefill) {
    std::vector<row_pages*> rows;
    std::vector<int> tokens;
    for (std::size_t r : live) {
      rows.push_back(&pages_[r]);
      tokens.push_back(prefill ? built_[r].rows : 1);
    }
    const step_tables t = pool_->plan(rows, tokens);
    if (prefill)
      model_.prefill(x, t.view(), *kv_, out_);
    else
      model_.decode(x, t.view(), *kv_, out_);
    hidden_.assign(results_.size() * std::size_t(c_.talker.hidden), 0.0f);
    const std::size_t vocab = std::size_t(c_.talker.vocab), hd = std::size_t(c_.talker.hidden);
    for (std::size_t i = 0; i < live.size(); ++i) {
      const std::size_t r = live[i];
      std::copy_n(out_.hidden.begin() + std::ptrdiff_t(i * hd), hd, hidden_.begin() + std::ptrdiff_t(r * hd));
      std::span<float> logits(out_.logits.data() + i * vocab, vocab);
      if (step < options_.record_steps) results_[r].talker_logits.emplace_back(logits.begin(), logits.end());
      code0_[r] = sampler_.pick_code0(logits, history_[r], seeds_[r], std::uint32_t(history_[r].size()));
      history_[r].push_back(code0_[r]);
    }
  }

  // Codes 1..15 of each live request's current frame; the frames are appended to the results.
  std::vector<std::int32_t> predict(const std::vector<std::size_t>& live, int step) {
    const std::size_t hd = std::size_t(c_.talker.hidden);
    std::vector<std::int32_t> codes(live.size() * groups(), 0);
    std::vector<float> hidden;
    std::vector<std::uint64_t> seeds;
    std::vector<std::uint32_t> frames;
    for (std::size_t i = 0; i < live.size(); ++i) {
      const std::size_t r = live[i];
      codes[i * groups()] = code0_[r];
      hidden.insert(hidden.end(), hidden_.begin() + std::ptrdiff_t(r * hd),
                    hidden_.begin() + std::ptrdiff_t((r + 1) * hd));
      seeds.push_back(seeds_[r]);
      frames.push_back(std::uint32_t(results_[r].frames.size()));
    }
    std::vector<float> logits;
    model_.predict(hidden, codes, sampler_, seeds, frames, step < options_.record_steps ? &logits : nullptr);
    const std::size_t per_row = (groups() - 1) * std::size_t(c_.predictor.vocab);
    for (std::size_t i = 0; i < live.size(); ++i) {
      generate_result& res = results_[live[i]];
      res.frames.emplace_back(codes.begin() + std::ptrdiff_t(i * groups()),
                              codes.begin() + std::ptrdiff_t((i + 1) * groups()));
      if (!logits.empty())
        res.predictor_logits.emplace_back(logits.begin() + std::ptrdiff_t(i * per_row),
                                          logits.begin() + std::ptrdiff_t((i + 1) * per_row));
    }
    return codes;
  }

  const talker_host& model_;
  const talker_config& c_;
  talker_sampler sampler_;
  std::span<const std::uint64_t> seeds_;
  generate_options options_;
  int max_frames_;
  std::vector<built_prompt> built_;
  std::unique_ptr<kv_block_pool> pool_;
  std::unique_ptr<paged_kv> kv_;
  std::vector<generate_result> results_;
  std::vector<row_pages> pages_;
  std::vector<std::vector<std::int32_t>> history_; // code-0 ids so far, per request
  std::vector<std::int32_t> code0_;                // the latest code 0, per request
  std::vector<float> hidden_;                      // the latest post-norm hidden state, per request
  talker_step_output out_;
};

} // namespace

std::vector<generate_result> generate_batch(const talker_host& model, std::span<const talker_prompt> prompts,
                                            const talker_sampling& sampling, std::span<const std::uint64_t> seeds,
                                            const generate_options& options) {
  if (seeds.size() != prompts.size())
    throw std::invalid_argument("generate_batch: " + std::to_string(prompts.size()) + " prompts but " +
                                std::to_string(seeds.size()) + " seeds (give one seed a prompt)");
  if (sampling.max_frames < 1)
    throw std::invalid_argument("talker_sampling.max_frames is " + std::to_string(sampling.max_frames) +
                                "; give at least 1");
  return batch_run(model, prompts, sampling, seeds, options).run();
}

generate_result generate(const talker_host& model, const talker_prompt& prompt, const talker_sampling& sampling,
                         std::uint64_t seed, const generate_options& options) {
  return std::move(generate_batch(model, std::span(&prompt, 1), sampling, std::span(&seed, 1), options).front());
}

} // namespace qwen3_tts
