// Per-request positions (the runtime side of the mstar::positions policy): how many tokens each
// request has committed, and per step the position id of every new token ([tokens], rows in order).
// Nothing to reserve beyond the request table, so admit never refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mstar/backend/backend.hpp"
#include "mstar/resources/resource.hpp"

namespace mstar {

struct position_plan {
  const std::int32_t* positions = nullptr; // device [tokens]
  std::span<const std::int32_t> host_positions;
  std::uint32_t rows = 0, bucket = 0, tokens = 0;
};

template <device_backend Backend>
class position_table
    : public detail::locked_resource<position_table<Backend>, Backend, position_plan, resource_kind::positions> {
  using base = typename position_table::locked_resource;
  friend base;

public:
  using backend_type = Backend;
  using typename base::plan_type;
  using typename base::stream_type;

  explicit position_table(const resource_context<Backend>& ctx)
      : base(ctx.desc->key), position_(ctx.options->max_requests, 0), staged_base_(ctx.options->max_batch, 0) {}

  std::size_t staging_bytes(std::uint32_t, std::uint32_t max_tokens) const {
    return plan_arena::padded(max_tokens * sizeof(std::int32_t)) + plan_arena::alignment;
  }

  std::uint32_t position_of(request_ref r) const {
    return this->locked([&] { return position_.at(r.index); });
  }
  // For resources that depend on positions (attention): per request index, tokens committed. Read
  // only for the rows of a step being planned, on the thread that plans it.
  const std::uint32_t* committed() const { return position_.data(); }

private:
  void commit_rows(const step_view& s) {
    for (const auto& r : s.rows)
      position_[r.request.index] += r.tokens;
  }
  bool row_current(const step_view& s, std::size_t i) const {
    return position_[s.rows[i].request.index] == staged_base_[i];
  }
  bool release(request_ref r) {
    if (r.index >= position_.size() || position_[r.index] == 0) return false;
    position_[r.index] = 0;
    return true;
  }
  void fill_stats(resource_stats& st) const {
    st.capacity = static_cast<std::uint32_t>(position_.size());
    for (auto p : position_)
      st.requests += p != 0 ? 1 : 0;
    st.free = st.capacity - st.requests;
  }
  plan_type fill(const step_view& s, plan_arena& arena, bool staging) {
    auto ids = arena.take<std::int32_t>(s.tokens);
    std::uint32_t at = 0;
    for (std::size_t k = 0; k < s.rows.size(); ++k) {
      const std::uint32_t p = position_[s.rows[k].request.index];
      if (staging) staged_base_[k] = p;
      for (std::uint32_t t = 0; t < s.rows[k].tokens; ++t)
        ids.host[at++] = static_cast<std::int32_t>(p + t);
    }
    return plan_type{ids.device, ids.span(), static_cast<std::uint32_t>(s.rows.size()), s.bucket, s.tokens};
  }

  std::vector<std::uint32_t> position_;
  std::vector<std::uint32_t> staged_base_;
};

} // namespace mstar
