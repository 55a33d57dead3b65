// Per-request positions (the runtime side of the mstar::positions policy): how many tokens each
// request has committed, and per step the position id of every new token ([tokens], rows in order).
// Nothing to reserve beyond the request table, so admit never refuses.
#pragma once

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
class position_table {
public:
  using backend_type = Backend;
  using stream_type = typename Backend::stream_type;

  struct plan_type {
    const std::int32_t* positions = nullptr; // device [tokens]
    std::span<const std::int32_t> host_positions;
    std::uint32_t rows = 0, bucket = 0, tokens = 0;
  };

  explicit position_table(const resource_context<Backend>& ctx)
      : key_(ctx.desc->key), position_(ctx.options->max_requests, 0), staged_base_(ctx.options->max_batch, 0) {}
  position_table(const position_table&) = delete;
  position_table& operator=(const position_table&) = delete;

  std::string_view key() const { return key_; }
  void declare(std::uint8_t) {}
  std::optional<refusal> admit(const step_view&) {
    std::lock_guard g(lock_);
    ++counters_.admits;
    return std::nullopt;
  }
  void plan(const step_view& s, plan_arena& arena, stream_type) {
    std::lock_guard g(lock_);
    plans_.live = fill(s, arena, nullptr);
    ++counters_.plans;
  }
  void commit(const step_view& s) {
    std::lock_guard g(lock_);
    for (const auto& r : s.rows)
      position_[r.request.index] += r.tokens;
    ++counters_.commits;
  }
  std::optional<refusal> pre_admit(const step_view&) {
    std::lock_guard g(lock_);
    ++counters_.pre_admits;
    return std::nullopt;
  }
  void pre_plan(const step_view& s, plan_arena& arena) {
    std::lock_guard g(lock_);
    plans_.stage(fill(s, arena, staged_base_.data()), counters_);
  }
  bool promote(const step_view& s, stream_type) {
    std::lock_guard g(lock_);
    return plans_.promote(s.rows.size(), counters_,
                          [&](std::size_t i) { return position_[s.rows[i].request.index] == staged_base_[i]; });
  }
  void clear_preplan() {
    std::lock_guard g(lock_);
    plans_.clear(counters_);
  }
  void remove_request(request_ref r, stream_type) {
    std::lock_guard g(lock_);
    if (r.index >= position_.size() || position_[r.index] == 0) return;
    position_[r.index] = 0;
    ++counters_.removes;
  }
  resource_stats stats() const {
    std::lock_guard g(lock_);
    resource_stats st;
    st.key = key_;
    st.kind = resource_kind::positions;
    st.capacity = static_cast<std::uint32_t>(position_.size());
    for (auto p : position_)
      st.requests += p != 0 ? 1 : 0;
    st.free = st.capacity - st.requests;
    counters_.fill(st);
    st.staged = plans_.has_staged;
    return st;
  }
  std::size_t staging_bytes(std::uint32_t, std::uint32_t max_tokens) const {
    return plan_arena::padded(max_tokens * sizeof(std::int32_t)) + plan_arena::alignment;
  }
  const plan_type& current_plan() const { return plans_.live; }

  std::uint32_t position_of(request_ref r) const {
    std::lock_guard g(lock_);
    return position_.at(r.index);
  }
  // For resources that depend on positions (attention): per request index, tokens committed. Read
  // only for the rows of a step being planned, on the thread that plans it.
  const std::uint32_t* committed() const { return position_.data(); }

private:
  plan_type fill(const step_view& s, plan_arena& arena, std::uint32_t* base) {
    auto ids = arena.take<std::int32_t>(s.tokens);
    std::uint32_t at = 0;
    for (std::size_t k = 0; k < s.rows.size(); ++k) {
      const std::uint32_t p = position_[s.rows[k].request.index];
      if (base) base[k] = p;
      for (std::uint32_t t = 0; t < s.rows[k].tokens; ++t)
        ids.host[at++] = static_cast<std::int32_t>(p + t);
    }
    return plan_type{ids.device, ids.span(), static_cast<std::uint32_t>(s.rows.size()), s.bucket, s.tokens};
  }

  std::string_view key_;
  mutable detail::spin_lock lock_;
  std::vector<std::uint32_t> position_;
  detail::staged_plan<plan_type> plans_;
  std::vector<std::uint32_t> staged_base_;
  detail::resource_counters counters_;
};

} // namespace mstar
