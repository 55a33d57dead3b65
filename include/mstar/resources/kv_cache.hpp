// A paged KV cache: the block allocator and per-request block tables behind the mstar::kv_cache
// policy. The K/V tensors themselves belong to the model's forward; this resource decides which
// blocks each request owns and stages the page table a paged-attention kernel reads.
//
// Admit reserves the blocks the step's new tokens need (ceil((held tokens + new) / block_tokens)
// minus the blocks held), all rows or none, refusing with the count when too few are free; a request
// that would outgrow max_blocks_per_request is an error (waiting would never help). Blocks come from
// a LIFO free list and return to it on teardown (KV blocks are written before they are read, so they
// need no zeroing). Plan stages, per padded row, FlashInfer-style page_indptr [bucket + 1],
// page_indices [pages] and last_page_len [bucket]. Commit advances the request's token count and
// notes the blocks the step wrote for the ordering checker.
//
// Ask/reserve at readiness (the worker's main thread, before a row is queued): reserve_tokens() sets
// aside the blocks a request's next step needs beyond those it holds, out of the blocks free and not
// reserved for other requests, or refuses, so that the worker parks the row instead of queueing a step
// its admit would refuse. The reservation is consumed by the admit (or pre-admit) that allocates those
// blocks, and released by unreserve() and teardown. Admits count other requests' reservations as taken,
// so an unreserved row (a predicted row staged before it was ready, or direct use through engine::run,
// which reserves nothing and sees no difference) never takes blocks promised to a ready row.
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
#include "mstar/resources/resource.hpp"

namespace mstar {

struct kv_cache_plan {
  const std::int32_t* page_indptr = nullptr;   // device [bucket + 1]
  const std::int32_t* page_indices = nullptr;  // device [pages]
  const std::int32_t* last_page_len = nullptr; // device [bucket]
  std::span<const std::int32_t> host_page_indptr;
  std::span<const std::int32_t> host_page_indices;
  std::span<const std::int32_t> host_last_page_len;
  std::uint32_t rows = 0, bucket = 0, pages = 0, block_tokens = 0;
};

template <device_backend Backend>
class paged_kv_cache
    : public detail::locked_resource<paged_kv_cache<Backend>, Backend, kv_cache_plan, resource_kind::kv_cache> {
  using base = typename paged_kv_cache::locked_resource;
  friend base;
  using base::key_;
  using base::lock_;
  using base::locked;

public:
  using backend_type = Backend;
  using typename base::plan_type;
  using typename base::stream_type;

  explicit paged_kv_cache(const resource_context<Backend>& ctx)
      : base(ctx.desc->key), backend_(ctx.backend), blocks_(ctx.desc->blocks), block_tokens_(ctx.desc->block_tokens),
        max_per_request_(ctx.options->blocks_per_request(blocks_)),
        tokens_(ctx.options->max_requests, 0), held_(ctx.options->max_requests, 0),
        reserved_(ctx.options->max_requests, 0),
        table_(std::size_t(ctx.options->max_requests) * max_per_request_, -1), free_(blocks_, 0),
        staged_base_(ctx.options->max_batch, 0),
        written_(std::size_t(ctx.options->max_tokens) + 2u * ctx.options->max_batch, 0) {
    if (ctx.desc->kind != resource_kind::kv_cache || blocks_ == 0 || block_tokens_ == 0)
      throw std::invalid_argument("mstar::paged_kv_cache: resource " + std::string(key_) +
                                  " needs blocks<N> and block_tokens<N> above 0");
    if ((block_tokens_ & (block_tokens_ - 1)) == 0)
      while ((1u << (shift_ + 1)) <= block_tokens_)
        ++shift_;
    else
      shift_ = -1;
    for (std::uint32_t b = 0; b < blocks_; ++b)
      free_[b] = static_cast<std::int32_t>(blocks_ - 1 - b);
    top_ = blocks_;
    region_ = backend_->track_region(key_, blocks_);
  }

  std::size_t staging_bytes(std::uint32_t max_rows, std::uint32_t) const {
    const std::size_t pages = std::min<std::size_t>(blocks_, std::size_t(max_rows) * max_per_request_);
    return plan_arena::padded((max_rows + 1) * 4u) + plan_arena::padded(pages * 4) + plan_arena::padded(max_rows * 4u) +
           plan_arena::alignment;
  }

  // ---- direct use ----
  std::uint32_t free_blocks() const {
    std::lock_guard g(lock_);
    return top_;
  }
  std::uint32_t blocks_held(request_ref r) const {
    std::lock_guard g(lock_);
    return held_.at(r.index);
  }
  std::uint32_t tokens_held(request_ref r) const {
    std::lock_guard g(lock_);
    return tokens_.at(r.index);
  }
  // Would `blocks` more blocks fit now, next to the blocks reserved for ready rows?
  bool ask(std::uint32_t blocks) const {
    std::lock_guard g(lock_);
    return top_ - reserved_total_ >= blocks;
  }
  // Reserves, for request r, the blocks a step of `tokens` new tokens needs beyond those it holds (none
  // when they fit in its last block). Idempotent per request: a second call keeps the larger of the two
  // needs. False (and the reason in *why) when they exceed the blocks free and not reserved for other
  // requests; a request that would outgrow max_blocks_per_request is an error, as at admit.
  bool reserve_tokens(request_ref r, std::uint32_t tokens, refusal* why = nullptr) {
    std::lock_guard g(lock_);
    const auto i = r.index;
    const std::uint32_t want = blocks_for(tokens_.at(i) + tokens);
    check_fits(i, tokens, want);
    const std::uint32_t need = want > held_[i] ? want - held_[i] : 0;
    if (need <= reserved_[i]) return true;
    const std::uint32_t available = top_ - (reserved_total_ - reserved_[i]);
    if (need > available) {
      ++reserve_refusals_;
      if (why)
        *why = refusal::make(key_,
                              "kv cache %.*s is full: request index %u needs %u more block(s) for %u token(s) and %u "
                              "of %u are free and not reserved; the row parks until requests finish",
                              int(key_.size()), key_.data(), i, need, tokens, available, blocks_);
      return false;
    }
    reserved_total_ += need - reserved_[i];
    reserved_[i] = need;
    return true;
  }
  // Gives back request r's reservation (a row parked or cancelled before its admit).
  void unreserve(request_ref r) {
    std::lock_guard g(lock_);
    if (r.index < reserved_.size()) release_reservation(r.index);
  }
  // Blocks reserved in all, for r, and reservations refused (rows parked on this cache).
  std::uint32_t reserved_blocks() const { return locked([&] { return reserved_total_; }); }
  std::uint32_t reserved_for(request_ref r) const { return locked([&] { return reserved_.at(r.index); }); }
  std::uint64_t reserve_refusals() const { return locked([&] { return reserve_refusals_; }); }
  std::uint32_t block_tokens() const { return block_tokens_; }
  std::uint32_t max_blocks_per_request() const { return max_per_request_; }

private:
  void commit_rows(const step_view& s) {
    const bool note = backend_->checking();
    std::size_t n = 0;
    for (const auto& r : s.rows) {
      const auto i = r.request.index;
      const std::uint32_t before = tokens_[i];
      tokens_[i] += r.tokens;
      if (!note || r.tokens == 0) continue;
      // The blocks this step wrote (the checker treats them as accessed; older blocks were only read).
      for (std::uint32_t b = blocks_for(before + 1) - 1; b < blocks_for(tokens_[i]) && n < written_.size(); ++b)
        written_[n++] = table_[std::size_t(i) * max_per_request_ + b];
    }
    if (note) backend_->note_accesses(planned_stream_, region_, std::span<const std::int32_t>(written_.data(), n));
  }
  bool row_current(const step_view& s, std::size_t i) const {
    const auto idx = s.rows[i].request.index;
    return tokens_[idx] == staged_base_[i] && held_[idx] >= blocks_for(tokens_[idx] + s.rows[i].tokens);
  }
  void planned_on(stream_type stream) { planned_stream_ = stream; }
  bool release(request_ref r) {
    if (r.index >= held_.size()) return false;
    release_reservation(r.index);
    if (held_[r.index] == 0 && tokens_[r.index] == 0) return false;
    for (std::uint32_t b = held_[r.index]; b-- > 0;)
      free_[top_++] = table_[std::size_t(r.index) * max_per_request_ + b];
    held_[r.index] = 0;
    tokens_[r.index] = 0;
    return true;
  }
  void fill_stats(resource_stats& st) const {
    st.capacity = blocks_;
    st.free = top_;
    for (auto h : held_)
      st.requests += h != 0 ? 1 : 0;
  }

  // A shift when block_tokens is a power of two (the usual 16): this runs several times per row.
  std::uint32_t blocks_for(std::uint32_t tokens) const {
    return shift_ >= 0 ? (tokens + block_tokens_ - 1) >> shift_ : (tokens + block_tokens_ - 1) / block_tokens_;
  }

  void check_fits(std::uint32_t i, std::uint32_t tokens, std::uint32_t want) const {
    if (want > max_per_request_)
      throw resource_error("mstar::paged_kv_cache " + std::string(key_) + ": request index " + std::to_string(i) +
                           " would hold " + std::to_string(tokens_[i] + tokens) + " tokens, " + std::to_string(want) +
                           " blocks, beyond max_blocks_per_request (" + std::to_string(max_per_request_) +
                           "); stop the request earlier or raise engine_options.max_blocks_per_request");
  }

  void release_reservation(std::uint32_t i) {
    reserved_total_ -= reserved_[i];
    reserved_[i] = 0;
  }

  std::optional<refusal> admit_rows(const step_view& s) {
    std::uint32_t need = 0, own = 0; // own: the step's rows' reservations, theirs to take
    for (const auto& r : s.rows) {
      const auto i = r.request.index;
      const std::uint32_t want = blocks_for(tokens_[i] + r.tokens);
      check_fits(i, r.tokens, want);
      need += want > held_[i] ? want - held_[i] : 0;
      own += reserved_[i];
    }
    const std::uint32_t available = top_ - (reserved_total_ - own);
    if (need > available)
      return refusal::make(key_,
                           "kv cache %.*s is full: the step's %zu row(s) need %u more block(s) and %u of %u are free "
                           "and not reserved for other rows; the rows wait until requests finish (or give the cache "
                           "more blocks)",
                           int(key_.size()), key_.data(), s.rows.size(), need, available, blocks_);
    for (const auto& r : s.rows) {
      const auto i = r.request.index;
      const std::uint32_t want = blocks_for(tokens_[i] + r.tokens);
      while (held_[i] < want)
        table_[std::size_t(i) * max_per_request_ + held_[i]++] = free_[--top_];
      release_reservation(i); // consumed: the blocks are held now
    }
    return std::nullopt;
  }

  plan_type fill(const step_view& s, plan_arena& arena, bool staging) {
    const auto rows = static_cast<std::uint32_t>(s.rows.size());
    std::uint32_t pages = 0;
    for (const auto& r : s.rows) {
      const auto i = r.request.index;
      const std::uint32_t want = blocks_for(tokens_[i] + r.tokens);
      if (want > held_[i])
        throw resource_error("mstar::paged_kv_cache " + std::string(key_) + ": request index " + std::to_string(i) +
                             " holds " + std::to_string(held_[i]) + " block(s) but the step needs " +
                             std::to_string(want) + "; admit the step before planning it");
      pages += want;
    }
    auto indptr = arena.take<std::int32_t>(s.bucket + 1);
    auto indices = arena.take<std::int32_t>(pages);
    auto last = arena.take<std::int32_t>(s.bucket);
    std::uint32_t at = 0;
    indptr.host[0] = 0;
    for (std::uint32_t k = 0; k < rows; ++k) {
      const auto i = s.rows[k].request.index;
      const std::uint32_t total = tokens_[i] + s.rows[k].tokens;
      const std::uint32_t want = blocks_for(total);
      std::copy_n(table_.data() + std::size_t(i) * max_per_request_, want, indices.host + at);
      at += want;
      indptr.host[k + 1] = static_cast<std::int32_t>(at);
      last.host[k] = want == 0 ? 0 : static_cast<std::int32_t>(total - (want - 1) * block_tokens_);
      if (staging) staged_base_[k] = tokens_[i];
    }
    for (std::uint32_t k = rows; k < s.bucket; ++k) {
      indptr.host[k + 1] = static_cast<std::int32_t>(at);
      last.host[k] = 0;
    }
    return plan_type{indptr.device, indices.device, last.device, indptr.span(), indices.span(),
                     last.span(),   rows,           s.bucket,    pages,         block_tokens_};
  }

  Backend* backend_;
  std::uint32_t blocks_;
  std::uint32_t block_tokens_;
  int shift_ = 0; // log2(block_tokens_), or -1 when it is not a power of two
  std::uint32_t max_per_request_;
  std::vector<std::uint32_t> tokens_; // per request index: tokens committed
  std::vector<std::uint32_t> held_;   // per request index: blocks held
  std::vector<std::uint32_t> reserved_; // per request index: blocks reserved at readiness, not yet allocated
  std::uint32_t reserved_total_ = 0;    // sum of reserved_ (<= top_)
  std::uint64_t reserve_refusals_ = 0;
  std::vector<std::int32_t> table_;   // [request index][max_per_request_]
  std::vector<std::int32_t> free_;
  std::uint32_t top_ = 0;
  region_id region_;
  std::vector<std::uint32_t> staged_base_;
  std::vector<std::int32_t> written_;
  stream_type planned_stream_{};
};

} // namespace mstar
