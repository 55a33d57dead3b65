// A sampler seeded per request (the runtime side of the mstar::sampler policy). Each request has a
// seed (by default mixed from engine_options.sampler_seed and the request's id, so a request samples
// the same tokens whatever batch it lands in and whenever it runs), a step counter advanced at every
// commit, and sampling parameters. Plan stages one sampler_row per padded row; the model's sampling
// kernel draws its random numbers from philox4x32_10(counter = (step, lane), key = seed), a
// counter-based generator, so draws need no state on the device. sample_uniform and
// sample_categorical are the host references.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/resources/resource.hpp"

#if defined(__CUDACC__)
#define MSTAR_HOST_DEVICE __host__ __device__
#else
#define MSTAR_HOST_DEVICE
#endif

namespace mstar {

struct sampling_params {
  float temperature = 1.0f;
  std::uint32_t top_k = 0; // 0: no limit
  float top_p = 1.0f;
};

// One padded row of a sampling step, as the kernel reads it (padding rows are all zero).
struct sampler_row {
  std::uint64_t seed = 0;
  std::uint32_t step = 0;
  std::uint32_t top_k = 0;
  float temperature = 0.0f;
  float top_p = 0.0f;
  friend constexpr bool operator==(const sampler_row&, const sampler_row&) = default;
};
static_assert(sizeof(sampler_row) == 24);

// Four 32-bit words: a Philox counter or output (a plain struct, usable in device code).
struct philox_block {
  std::uint32_t v[4];
};

// Philox4x32-10 (Salmon et al., SC'11), the generator cuRAND and PyTorch use.
MSTAR_HOST_DEVICE constexpr philox_block philox4x32_10(philox_block ctr, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t(m0) * ctr.v[0];
    const std::uint64_t p1 = std::uint64_t(m1) * ctr.v[2];
    ctr = philox_block{{std::uint32_t(p1 >> 32) ^ ctr.v[1] ^ key0, std::uint32_t(p1),
                        std::uint32_t(p0 >> 32) ^ ctr.v[3] ^ key1, std::uint32_t(p0)}};
    key0 += w0;
    key1 += w1;
  }
  return ctr;
}

// splitmix64's finalizer: mixes the engine seed with a request id into a request's seed.
MSTAR_HOST_DEVICE constexpr std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The `lane`-th uniform draw in [0, 1) of a row's step (4 draws per Philox block).
MSTAR_HOST_DEVICE constexpr float sample_uniform(const sampler_row& r, std::uint32_t lane) {
  const auto out =
      philox4x32_10(philox_block{{r.step, lane / 4, 0, 0}}, std::uint32_t(r.seed), std::uint32_t(r.seed >> 32));
  return float(out.v[lane % 4] >> 8) * (1.0f / 16777216.0f);
}

// Host reference of the sampling kernel: inverse-CDF draw over (unnormalized, non-negative)
// probabilities, restricted to the top_k largest when top_k > 0. Ties keep the lower index.
inline std::uint32_t sample_categorical(std::span<const float> probs, const sampler_row& r) {
  float total = 0.0f, threshold = -1.0f;
  if (r.top_k > 0 && r.top_k < probs.size()) {
    // the k-th largest value: probabilities below it are excluded
    std::vector<float> sorted(probs.begin(), probs.end());
    std::nth_element(sorted.begin(), sorted.begin() + (r.top_k - 1), sorted.end(), std::greater<float>());
    threshold = sorted[r.top_k - 1];
  }
  for (float p : probs)
    total += p >= threshold ? p : 0.0f;
  const float target = sample_uniform(r, 0) * total;
  float acc = 0.0f;
  for (std::uint32_t i = 0; i < probs.size(); ++i) {
    if (probs[i] < threshold) continue;
    acc += probs[i];
    if (target < acc) return i;
  }
  return static_cast<std::uint32_t>(probs.size() - 1);
}

struct sampler_plan {
  const sampler_row* rows_device = nullptr; // device [bucket]
  std::span<const sampler_row> host_rows;
  std::uint32_t rows = 0, bucket = 0;
};

template <device_backend Backend>
class request_sampler
    : public detail::locked_resource<request_sampler<Backend>, Backend, sampler_plan, resource_kind::sampler> {
  using base = typename request_sampler::locked_resource;
  friend base;
  using base::lock_;

public:
  using backend_type = Backend;
  using typename base::plan_type;
  using typename base::stream_type;

  explicit request_sampler(const resource_context<Backend>& ctx)
      : base(ctx.desc->key), requests_(ctx.requests), base_seed_(ctx.options->sampler_seed),
        state_(ctx.options->max_requests) {}

  std::size_t staging_bytes(std::uint32_t max_rows, std::uint32_t) const {
    return plan_arena::padded(max_rows * sizeof(sampler_row)) + plan_arena::alignment;
  }

  // ---- direct use (the main thread, at ingest) ----
  void set_seed(request_ref r, std::uint64_t seed) {
    std::lock_guard g(lock_);
    auto& st = state_.at(r.index);
    st.seed = seed;
    st.seeded = true;
  }
  void set_params(request_ref r, sampling_params p) {
    std::lock_guard g(lock_);
    state_.at(r.index).params = p;
  }
  // The row a step would stage for r now.
  sampler_row row_of(request_ref r) const {
    std::lock_guard g(lock_);
    const auto& st = state_.at(r.index);
    return sampler_row{st.seed, st.step, st.params.top_k, st.params.temperature, st.params.top_p};
  }

private:
  struct request_state {
    std::uint64_t seed = 0;
    std::uint32_t step = 0;
    bool seeded = false;
    sampling_params params{};
  };

  std::optional<refusal> admit_rows(const step_view& s) {
    for (const auto& r : s.rows) {
      auto& st = state_[r.request.index];
      if (!st.seeded) {
        st.seed = mix_seed(base_seed_, requests_->id_of(r.request));
        st.seeded = true;
      }
    }
    return std::nullopt;
  }
  void commit_rows(const step_view& s) {
    for (const auto& r : s.rows)
      ++state_[r.request.index].step;
  }
  bool row_current(const step_view& s, std::size_t i) const {
    const auto& st = state_[s.rows[i].request.index];
    const auto& staged = this->plans_.staged.host_rows[i];
    return staged.step == st.step && staged.seed == st.seed;
  }
  bool release(request_ref r) {
    if (r.index >= state_.size() || !state_[r.index].seeded) return false;
    state_[r.index] = request_state{};
    return true;
  }
  void fill_stats(resource_stats& st) const {
    st.capacity = static_cast<std::uint32_t>(state_.size());
    for (const auto& s : state_)
      st.requests += s.seeded ? 1 : 0;
    st.free = st.capacity - st.requests;
  }
  plan_type fill(const step_view& s, plan_arena& arena, bool) {
    auto rows = arena.take<sampler_row>(s.bucket);
    for (std::size_t k = 0; k < s.rows.size(); ++k) {
      const auto& st = state_[s.rows[k].request.index];
      rows.host[k] = sampler_row{st.seed, st.step, st.params.top_k, st.params.temperature, st.params.top_p};
    }
    for (std::size_t k = s.rows.size(); k < s.bucket; ++k)
      rows.host[k] = sampler_row{};
    return plan_type{rows.device, rows.span(), static_cast<std::uint32_t>(s.rows.size()), s.bucket};
  }

  const request_table* requests_;
  std::uint64_t base_seed_;
  std::vector<request_state> state_;
};

} // namespace mstar
