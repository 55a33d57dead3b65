// The GPU thread's rows waiting for a step: per node, the ready queue and the held queue, and the
// forming of a step's rows from them (a plain batch, a prediction of the next chain step, and a
// predicted step formed again at launch). Owned by one thread; no atomics. What the forming needs
// from the worker (whether a row's request was cancelled, where a dropped row goes, a row's batch
// key) comes from an `env` argument, so that a test can form batches without a worker.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mstar/detail/batch_window.hpp"
#include "mstar/engine/step.hpp"
#include "mstar/worker/metrics.hpp"
#include "mstar/worker/options.hpp"

namespace mstar::detail {

// A fixed-capacity double-ended queue owned by one thread (the GPU thread's ready and held rows).
template <class T>
class row_queue {
public:
  explicit row_queue(std::size_t capacity = 0) : items_(std::bit_ceil(std::max<std::size_t>(capacity, 2))) {}
  std::size_t size() const noexcept { return tail_ - head_; }
  bool empty() const noexcept { return head_ == tail_; }
  T& operator[](std::size_t i) noexcept { return items_[(head_ + i) & (items_.size() - 1)]; }
  void push_back(const T& v) {
    check_room();
    items_[tail_++ & (items_.size() - 1)] = v;
  }
  void push_front(const T& v) {
    check_room();
    items_[--head_ & (items_.size() - 1)] = v;
  }
  T pop_front() noexcept { return items_[head_++ & (items_.size() - 1)]; }
  // Removes element i, keeping the order of the rest.
  void erase(std::size_t i) noexcept {
    for (std::size_t k = i; k > 0; --k)
      (*this)[k] = (*this)[k - 1];
    ++head_;
  }

private:
  void check_room() const {
    if (size() == items_.size())
      throw std::length_error("mstar::threaded_worker: a ready queue holds " + std::to_string(items_.size()) +
                              " rows and is full; this is a worker bug (each request has at most one row per node)");
  }
  std::vector<T> items_;
  std::size_t head_ = std::size_t{1} << 62, tail_ = std::size_t{1} << 62;
};

// A row the main thread made ready for a node.
template <class Payload>
struct ready_row {
  row r{};
  std::uint8_t node = 0;
  bool continues = true; // the flow's prediction: a row of the same node follows once this one lands
  Payload payload{};
  // When the GPU thread took it from the ring (only with a node's min_batch); 0 for rows handed back
  // by a refused step (ready_of), which count as having waited long enough.
  metrics::nanos since = 0;
};

// A step's rows, as formed (the worker's step record adds what its launch and landing need). Every
// vector holds max_batch entries from construction; `count` are in use.
template <class Payload>
struct step_rows {
  std::uint8_t node = 0;
  bool side = false;
  std::uint32_t count = 0;
  std::vector<row> rows;
  std::vector<Payload> payloads;
  std::vector<std::uint8_t> continues; // per row, from its ready_row
  // A staged step: `predicted` > 0 when its rows include rows that were not ready when it was
  // staged; `speculative` when its rows are a prediction left in the ready queue (formed at launch).
  std::uint32_t predicted = 0;
  bool speculative = false;

  void size_for(std::uint32_t max_batch) {
    rows.resize(max_batch);
    payloads.resize(max_batch);
    continues.resize(max_batch);
  }
  void take(const ready_row<Payload>& rr) {
    rows[count] = rr.r;
    payloads[count] = rr.payload;
    continues[count] = rr.continues;
    ++count;
  }
  ready_row<Payload> ready_of(std::uint32_t i) const { return ready_row<Payload>{rows[i], node, continues[i] != 0, payloads[i]}; }
};

template <class Payload, std::size_t N>
class ready_queues {
public:
  using row_type = ready_row<Payload>;
  static_assert(std::is_trivially_copyable_v<row_type>);

  ready_queues() = default;
  // `nodes` are the worker's resolved node options (max_batch set); a queue holds at most one row per
  // request.
  ready_queues(const std::array<node_options, N>& nodes, std::uint32_t max_requests, std::uint32_t max_batch,
               std::uint32_t max_tokens)
      : max_tokens_(max_tokens) {
    for (std::size_t n = 0; n < N; ++n) {
      max_batch_[n] = nodes[n].max_batch;
      keyed_[n] = nodes[n].batch == batching::per_key;
      windows_[n] = batch_window(nodes[n].min_batch, std::chrono::nanoseconds(nodes[n].max_wait).count());
      batch_limit_[n] = nodes[n].max_batch;
      ready_[n] = row_queue<row_type>(max_requests);
      held_[n] = row_queue<row_type>(max_requests);
    }
    // Sized here so that no step allocates: held rows (at most one per request and node) moved back
    // by release_held, and form_staged's scratch.
    scratch_.reserve(max_requests);
    slot_of_.assign(max_requests, 0);
    slot_stamp_.assign(max_requests, 0);
    found_.resize(max_batch);
    present_.resize(max_batch);
  }

  row_queue<row_type>& ready(std::uint8_t n) noexcept { return ready_[n]; }
  const row_queue<row_type>& held(std::uint8_t n) const noexcept { return held_[n]; }
  const batch_window& window(std::uint8_t n) const noexcept { return windows_[n]; }
  std::uint32_t batch_limit(std::uint8_t n) const noexcept { return batch_limit_[n]; }

  // A row from the main thread; `now` is read at most once per drain, and only for a node with a
  // min_batch.
  void arrive(row_type rr, metrics::nanos& now) {
    if (windows_[rr.node].waits()) {
      if (now == 0) now = metrics::now_ns();
      rr.since = now;
      windows_[rr.node].arrived(now);
    }
    ready_[rr.node].push_back(rr);
  }

  // After an admitted step: a batch limit lowered by a refusal (admit_action::limit_batch) doubles
  // back towards the node's max_batch.
  void admitted(std::uint8_t n) {
    if (batch_limit_[n] < max_batch_[n]) batch_limit_[n] = std::min(batch_limit_[n] * 2, max_batch_[n]);
  }

  // A refused step's rows change queues: held (back in front once something lands), or back in front
  // of the ready queue (retried now, or with a halved batch limit). The step is emptied.
  void refused(step_rows<Payload>& rec, admit_action action) {
    const auto n = rec.node;
    if (action == admit_action::hold) {
      for (std::uint32_t i = 0; i < rec.count; ++i)
        held_[n].push_back(rec.ready_of(i));
    } else {
      for (std::uint32_t i = rec.count; i-- > 0;)
        ready_[n].push_front(rec.ready_of(i));
    }
    if (action == admit_action::limit_batch) batch_limit_[n] = std::max<std::uint32_t>(1, rec.count / 2);
    rec.count = 0;
  }

  bool any_held() const {
    for (const auto& h : held_)
      if (!h.empty()) return true;
    return false;
  }

  // Held rows go back to the front of their ready queue, in the order they were held.
  void release_held() {
    for (std::size_t n = 0; n < N; ++n) {
      auto& h = held_[n];
      if (h.empty()) continue;
      scratch_.clear();
      while (!h.empty())
        scratch_.push_back(h.pop_front());
      for (auto it = scratch_.rbegin(); it != scratch_.rend(); ++it)
        ready_[n].push_front(*it);
    }
  }

  // Fills rec with up to the node's batch from its ready queue (handing cancelled rows to
  // env.drop). False when nothing is ready.
  template <class Env>
  bool form(std::uint8_t n, bool side, step_rows<Payload>& rec, Env& env) {
    rec.node = n;
    rec.side = side;
    rec.count = 0;
    rec.predicted = 0;
    rec.speculative = false;
    fill(n, rec, 0, env);
    return rec.count > 0;
  }

  // Appends ready rows of node n to rec (which holds `tokens` tokens in rec.count rows already), in
  // queue order, up to the node's batch and max_tokens; cancelled rows are handed back. A per_key
  // node takes only rows of its first row's key.
  template <class Env>
  void fill(std::uint8_t n, step_rows<Payload>& rec, std::uint32_t tokens, Env& env) {
    auto& q = ready_[n];
    const auto limit = batch_limit_[n];
    const bool keyed = keyed_[n];
    std::uint32_t key = form_key_[n];
    bool have_key = std::exchange(has_form_key_[n], false); // batch_due's choice, for this step only
    for (std::size_t i = 0; i < q.size() && rec.count < limit;) {
      const row_type& rr = q[i];
      if (env.cancelled(rr.r)) {
        env.drop(rr);
        q.erase(i);
        continue;
      }
      if (keyed) {
        const std::uint32_t k = env.batch_key(n, rr.payload);
        if (!have_key) {
          key = k;
          have_key = true;
        } else if (k != key) {
          ++i;
          continue;
        }
      }
      if (tokens + rr.r.tokens > max_tokens_ && rec.count > 0) break;
      tokens += rr.r.tokens;
      rec.take(rr);
      q.erase(i);
    }
  }

  // The predicted next step of the node of chain step `src` (in flight): the node's rows ready now,
  // in queue order (they have waited longest), then `src`'s rows that continue, in `src`'s order;
  // up to the node's batch and max_tokens, a continued row carrying the same tokens and label. The
  // rows stay in the ready queue (a cancel still drops them there). False when the prediction is empty.
  template <class Env>
  bool predict(const step_rows<Payload>& src, step_rows<Payload>& rec, Env& env) {
    const auto n = src.node;
    rec.node = n;
    rec.side = false;
    rec.count = 0;
    rec.predicted = 0;
    rec.speculative = true;
    const auto limit = batch_limit_[n];
    std::uint32_t tokens = 0;
    auto add = [&](const row& r) {
      if (rec.count >= limit || (tokens + r.tokens > max_tokens_ && rec.count > 0)) return false;
      tokens += r.tokens;
      rec.rows[rec.count++] = r;
      return true;
    };
    auto& q = ready_[n];
    for (std::size_t i = 0; i < q.size(); ++i)
      if (!env.cancelled(q[i].r) && !add(q[i].r)) return rec.count > 0;
    for (std::uint32_t i = 0; i < src.count; ++i) {
      if (!src.continues[i] || env.cancelled(src.rows[i])) continue;
      if (!add(src.rows[i])) break;
      ++rec.predicted;
    }
    return rec.count > 0;
  }

  // Forms a predicted step at launch: its rows that are ready, in the predicted order, then the
  // node's other ready rows in queue order. When every predicted row came and nothing else, it is
  // the staged step. Cancelled rows are handed back. One pass over the ready queue (O(queue +
  // prediction), whatever the order the rows came in). False when nothing is ready.
  template <class Env>
  bool form_staged(step_rows<Payload>& rec, Env& env) {
    const auto n = rec.node;
    auto& q = ready_[n];
    const auto predicted = rec.count;
    if (++stamp_ == 0) {
      std::fill(slot_stamp_.begin(), slot_stamp_.end(), 0u);
      stamp_ = 1;
    }
    for (std::uint32_t i = 0; i < predicted; ++i) {
      slot_of_[rec.rows[i].request.index] = i;
      slot_stamp_[rec.rows[i].request.index] = stamp_;
      present_[i] = 0;
    }
    // Predicted rows out of the queue into their slots; the others rotate back in order.
    for (std::size_t k = q.size(); k-- > 0;) {
      const row_type rr = q.pop_front();
      const auto idx = rr.r.request.index;
      if (slot_stamp_[idx] == stamp_) {
        const auto slot = slot_of_[idx];
        const row& want = rec.rows[slot];
        if (!present_[slot] && want.request == rr.r.request && want.label == rr.r.label) {
          if (env.cancelled(rr.r)) {
            env.drop(rr);
          } else {
            found_[slot] = rr;
            present_[slot] = 1;
          }
          continue;
        }
      }
      q.push_back(rr);
    }
    const auto limit = batch_limit_[n];
    std::uint32_t tokens = 0;
    rec.count = 0;
    rec.speculative = false;
    std::uint32_t left = 0; // predicted rows that came but do not fit (the batch limit shrank): back in front
    for (std::uint32_t i = 0; i < predicted; ++i) {
      if (!present_[i]) continue; // not ready: cancelled, finished, parked or held
      const row_type& rr = found_[i];
      if (rec.count >= limit || (tokens + rr.r.tokens > max_tokens_ && rec.count > 0)) {
        found_[left++] = rr; // left <= i: never overwrites a slot still to read
        continue;
      }
      tokens += rr.r.tokens;
      rec.take(rr);
    }
    for (std::uint32_t i = left; i-- > 0;)
      q.push_front(found_[i]);
    fill(n, rec, tokens, env);
    return rec.count > 0;
  }

  // Whether node n's ready rows make a step now (batch_window; `now` read at most once a pick). A
  // waiting node's cancelled rows go back at once (their teardown frees what they hold), not when the
  // node next forms a step; a pass over a waiting node is told to env.batch_waited().
  // A per_key node counts the rows of each key: one key's min_batch rows make a step of that key (the
  // next fill takes it), else the oldest row's wait makes one of its key. An urgent ready row (Env::urgent,
  // where the environment has it) makes a step of its key at once.
  template <class Env>
  bool batch_due(std::uint8_t n, metrics::nanos& now, Env& env) {
    if (!windows_[n].waits()) return true;
    auto& q = ready_[n];
    if (now == 0) now = metrics::now_ns();
    if (due_now(n, now, env)) return true;
    for (std::size_t i = 0; i < q.size();) {
      if (env.cancelled(q[i].r)) {
        env.drop(q[i]);
        q.erase(i);
      } else {
        ++i;
      }
    }
    if (!q.empty() && due_now(n, now, env)) return true;
    env.batch_waited();
    return false;
  }

private:
  // Keys a per_key node's wait tells apart (rows of further keys are not counted towards a batch; the
  // oldest row's wait still forms theirs).
  static constexpr std::size_t max_waiting_keys = 8;

  template <class Env>
  bool due_now(std::uint8_t n, metrics::nanos now, Env& env) {
    const auto& w = windows_[n];
    auto& q = ready_[n];
    has_form_key_[n] = false;
    // A row the environment calls urgent (the flow's urgent hook) never waits: a step forms now, of its key.
    if constexpr (requires(const Payload& p) {
                    { env.urgent(n, p) } -> std::convertible_to<bool>;
                  }) {
      for (std::size_t i = 0; i < q.size(); ++i) {
        if (!env.urgent(n, q[i].payload)) continue;
        if (keyed_[n]) {
          form_key_[n] = env.batch_key(n, q[i].payload);
          has_form_key_[n] = true;
        }
        return true;
      }
    }
    if (!keyed_[n]) return w.due(q.size(), q[0].since, now);
    std::array<std::uint32_t, max_waiting_keys> keys{};
    std::array<std::uint32_t, max_waiting_keys> counts{};
    std::size_t distinct = 0, best = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      const std::uint32_t k = env.batch_key(n, q[i].payload);
      std::size_t j = 0;
      while (j < distinct && keys[j] != k)
        ++j;
      if (j == distinct) {
        if (distinct == max_waiting_keys) continue;
        keys[distinct++] = k;
      }
      if (++counts[j] > counts[best]) best = j;
    }
    if (counts[best] >= w.min_batch()) {
      form_key_[n] = keys[best];
      has_form_key_[n] = true;
      return true;
    }
    return w.due(counts[best], q[0].since, now);
  }

  std::uint32_t max_tokens_ = 0;
  std::array<std::uint32_t, N> max_batch_{};
  std::array<bool, N> keyed_{};
  std::array<row_queue<row_type>, N> ready_;
  std::array<row_queue<row_type>, N> held_;
  std::array<std::uint32_t, N> batch_limit_{};
  std::array<batch_window, N> windows_{}; // each node's min_batch wait
  std::array<std::uint32_t, N> form_key_{}; // a per_key node's key batch_due chose, when has_form_key_
  std::array<bool, N> has_form_key_{};
  std::vector<row_type> scratch_;
  // form_staged's scratch: per request index, its row's slot in the prediction (valid when its
  // stamp is current); per slot, the ready row found for it.
  std::vector<std::uint32_t> slot_of_, slot_stamp_;
  std::uint32_t stamp_ = 0;
  std::vector<row_type> found_;
  std::vector<std::uint8_t> present_;
};

} // namespace mstar::detail
