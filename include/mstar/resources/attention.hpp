// Attention metadata (the runtime side of the mstar::attention policy): per step, the query offsets
// of the rows (qo_indptr [bucket + 1], from each row's new tokens) and each row's KV length after the
// step (kv_lens [bucket], from the positions it depends on), plus the largest of each for kernels
// that size their launch by them. It holds no per-request state; the page table is the KV cache's.
//
// It reads the committed positions of its dependency (bound at load by the engine), so it must be
// planned after positions: the runner visits resources in dependency order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "mstar/backend/backend.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar {

struct attention_plan {
  const std::int32_t* qo_indptr = nullptr; // device [bucket + 1]
  const std::int32_t* kv_lens = nullptr;   // device [bucket]
  std::span<const std::int32_t> host_qo_indptr;
  std::span<const std::int32_t> host_kv_lens;
  std::uint32_t rows = 0, bucket = 0, max_qo_len = 0, max_kv_len = 0;
};

template <device_backend Backend>
class attention_metadata
    : public detail::locked_resource<attention_metadata<Backend>, Backend, attention_plan, resource_kind::attention> {
  using base = typename attention_metadata::locked_resource;
  friend base;

public:
  using backend_type = Backend;
  using typename base::plan_type;
  using typename base::stream_type;

  explicit attention_metadata(const resource_context<Backend>& ctx) : base(ctx.desc->key) {}

  // Load time: the committed token count per request index (positions' committed()).
  void bind_positions(const std::uint32_t* committed) { committed_ = committed; }

  std::size_t staging_bytes(std::uint32_t max_rows, std::uint32_t) const {
    return plan_arena::padded((max_rows + 1) * 4u) + plan_arena::padded(max_rows * 4u) + plan_arena::alignment;
  }

private:
  bool row_current(const step_view& s, std::size_t i) const {
    return std::uint32_t(this->plans_.staged.host_kv_lens[i]) == committed_[s.rows[i].request.index] + s.rows[i].tokens;
  }
  plan_type fill(const step_view& s, plan_arena& arena, bool) {
    if (committed_ == nullptr)
      throw resource_error("mstar::attention_metadata " + std::string(this->key_) +
                           ": no positions bound; the engine binds the positions resource named in depends_on<...>");
    auto qo = arena.take<std::int32_t>(s.bucket + 1);
    auto kv = arena.take<std::int32_t>(s.bucket);
    const auto rows = static_cast<std::uint32_t>(s.rows.size());
    std::uint32_t max_qo = 0, max_kv = 0;
    qo.host[0] = 0;
    for (std::uint32_t k = 0; k < rows; ++k) {
      const auto& r = s.rows[k];
      const std::uint32_t len = committed_[r.request.index] + r.tokens;
      qo.host[k + 1] = qo.host[k] + static_cast<std::int32_t>(r.tokens);
      kv.host[k] = static_cast<std::int32_t>(len);
      max_qo = std::max(max_qo, r.tokens);
      max_kv = std::max(max_kv, len);
    }
    for (std::uint32_t k = rows; k < s.bucket; ++k) {
      qo.host[k + 1] = qo.host[k];
      kv.host[k] = 0;
    }
    return plan_type{qo.device, kv.device, qo.span(), kv.span(), rows, s.bucket, max_qo, max_kv};
  }

  const std::uint32_t* committed_ = nullptr;
};

} // namespace mstar
