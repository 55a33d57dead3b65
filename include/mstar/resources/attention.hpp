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
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/detail/spin_lock.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar {

template <device_backend Backend>
class attention_metadata {
public:
  using backend_type = Backend;
  using stream_type = typename Backend::stream_type;

  struct plan_type {
    const std::int32_t* qo_indptr = nullptr; // device [bucket + 1]
    const std::int32_t* kv_lens = nullptr;   // device [bucket]
    std::span<const std::int32_t> host_qo_indptr;
    std::span<const std::int32_t> host_kv_lens;
    std::uint32_t rows = 0, bucket = 0, max_qo_len = 0, max_kv_len = 0;
  };

  explicit attention_metadata(const resource_context<Backend>& ctx) : key_(ctx.desc->key) {}
  attention_metadata(const attention_metadata&) = delete;
  attention_metadata& operator=(const attention_metadata&) = delete;

  // Load time: the committed token count per request index (positions' committed()).
  void bind_positions(const std::uint32_t* committed) { committed_ = committed; }

  std::string_view key() const { return key_; }
  void declare(std::uint8_t) {}
  std::optional<refusal> admit(const step_view&) {
    std::lock_guard g(lock_);
    ++counters_.admits;
    return std::nullopt;
  }
  void plan(const step_view& s, plan_arena& arena, stream_type) {
    std::lock_guard g(lock_);
    plans_.live = fill(s, arena);
    ++counters_.plans;
  }
  void commit(const step_view&) {
    std::lock_guard g(lock_);
    ++counters_.commits;
  }
  std::optional<refusal> pre_admit(const step_view&) {
    std::lock_guard g(lock_);
    ++counters_.pre_admits;
    return std::nullopt;
  }
  void pre_plan(const step_view& s, plan_arena& arena) {
    std::lock_guard g(lock_);
    plans_.stage(fill(s, arena), counters_);
  }
  bool promote(const step_view& s, stream_type) {
    std::lock_guard g(lock_);
    return plans_.promote(s.rows.size(), counters_, [&](std::size_t i) {
      return std::uint32_t(plans_.staged.host_kv_lens[i]) == committed_[s.rows[i].request.index] + s.rows[i].tokens;
    });
  }
  void clear_preplan() {
    std::lock_guard g(lock_);
    plans_.clear(counters_);
  }
  void remove_request(request_ref, stream_type) {}
  resource_stats stats() const {
    std::lock_guard g(lock_);
    resource_stats st;
    st.key = key_;
    st.kind = resource_kind::attention;
    counters_.fill(st);
    st.staged = plans_.has_staged;
    return st;
  }
  std::size_t staging_bytes(std::uint32_t max_rows, std::uint32_t) const {
    return plan_arena::padded((max_rows + 1) * 4u) + plan_arena::padded(max_rows * 4u) + plan_arena::alignment;
  }
  const plan_type& current_plan() const { return plans_.live; }

private:
  plan_type fill(const step_view& s, plan_arena& arena) {
    if (committed_ == nullptr)
      throw resource_error("mstar::attention_metadata " + std::string(key_) +
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

  std::string_view key_;
  mutable detail::spin_lock lock_;
  const std::uint32_t* committed_ = nullptr;
  detail::staged_plan<plan_type> plans_;
  detail::resource_counters counters_;
};

} // namespace mstar
