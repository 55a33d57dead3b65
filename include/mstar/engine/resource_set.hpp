// A model's resources as one object: the implementation behind each resource policy, built in place
// at load in the descriptor's order, with compile-time iteration in dependency order (the validator's
// report.order) over all resources or over one node's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mstar/backend/backend.hpp"
#include "mstar/model/model.hpp"
#include "mstar/resources/attention.hpp"
#include "mstar/resources/kv_cache.hpp"
#include "mstar/resources/positions.hpp"
#include "mstar/resources/recurrent_state_pool.hpp"
#include "mstar/resources/resource.hpp"
#include "mstar/resources/sampler.hpp"

namespace mstar {

namespace detail {
template <class Policy, class Backend, resource_kind Kind = Policy::descriptor().kind>
struct implementation_of;
template <class Policy, class Backend>
struct implementation_of<Policy, Backend, resource_kind::kv_cache> {
  using type = paged_kv_cache<Backend>;
};
template <class Policy, class Backend>
struct implementation_of<Policy, Backend, resource_kind::positions> {
  using type = position_table<Backend>;
};
template <class Policy, class Backend>
struct implementation_of<Policy, Backend, resource_kind::attention> {
  using type = attention_metadata<Backend>;
};
template <class Policy, class Backend>
struct implementation_of<Policy, Backend, resource_kind::sampler> {
  using type = request_sampler<Backend>;
};
template <class Policy, class Backend>
struct implementation_of<Policy, Backend, resource_kind::recurrent_pool> {
  using type = recurrent_state_pool<Backend, typename Policy::element_type>;
};
} // namespace detail

// The implementation behind a resource policy: the policy's own `implementation<Backend>` when it
// names one (a custom resource, a test double), else the engine's for its kind.
template <class Policy, class Backend>
struct resource_implementation {
  using type = typename detail::implementation_of<Policy, Backend>::type;
};
template <class Policy, class Backend>
requires requires { typename Policy::template implementation<Backend>; }
struct resource_implementation<Policy, Backend> {
  using type = typename Policy::template implementation<Backend>;
};
template <class Policy, class Backend>
using resource_implementation_t = typename resource_implementation<Policy, Backend>::type;

template <class Model, device_backend Backend>
class resource_set {
  static constexpr auto built_ = Model::built::make(Model::name);

public:
  static constexpr std::size_t count = Model::descriptor.resources.size();

  template <std::size_t I>
  using policy = detail::nth_t<built_.resource_type[I], typename Model::built::resource_list>;
  template <std::size_t I>
  using implementation = resource_implementation_t<policy<I>, Backend>;

private:
  template <class Seq>
  struct tuple_of;
  template <std::size_t... I>
  struct tuple_of<std::index_sequence<I...>> {
    using type = std::tuple<implementation<I>...>;
  };

public:
  using tuple_type = typename tuple_of<std::make_index_sequence<count>>::type;

  static constexpr std::uint8_t index_of(std::string_view key) {
    return detail::resource_index(Model::descriptor, key);
  }
  static constexpr bool is_side(std::size_t i) { return Model::is_side_key(Model::descriptor.resources[i].key); }
  static constexpr bool preplans(std::size_t i) { return Model::descriptor.resources[i].preplans && !is_side(i); }

  template <class Node>
  static constexpr std::uint8_t node_index = Model::template node_index<Node>;

  // Node's resources in dependency order.
  template <class Node>
  static constexpr auto order = [] {
    static_vector<std::uint8_t, max_node_resources> v;
    const auto& node = Model::descriptor.nodes[Model::template node_index<Node>];
    for (auto i : Model::verdict.order)
      if (node.resources.contains(Model::descriptor.resources[i].key)) v.push_back(i);
    return v;
  }();

  resource_set(Backend& backend, const engine_options& options, const request_table& requests)
      : resource_set(backend, options, requests, std::make_index_sequence<count>{}) {
    for_each([&](auto i, auto& r) {
      constexpr std::size_t I = decltype(i)::value;
      static_assert(resource<implementation<I>>,
                    "mstar::resource_set: a resource's implementation does not model mstar::resource (see "
                    "resources/resource.hpp for the operations it needs)");
      bind<I>(r);
      for (std::size_t n = 0; n < Model::descriptor.nodes.size(); ++n)
        if (Model::descriptor.nodes[n].resources.contains(Model::descriptor.resources[I].key))
          r.declare(static_cast<std::uint8_t>(n));
    });
  }
  resource_set(const resource_set&) = delete;
  resource_set& operator=(const resource_set&) = delete;

  template <std::size_t I>
  implementation<I>& get() {
    return std::get<I>(tuple_);
  }
  template <std::size_t I>
  const implementation<I>& get() const {
    return std::get<I>(tuple_);
  }
  // By policy type (the model's own resource types).
  template <class Policy>
  auto& get() {
    constexpr auto i = index_of(Policy::key);
    static_assert(i != no_index, "mstar::resource_set::get: the model declares no resource with this policy's key");
    return std::get<i>(tuple_);
  }
  template <class Policy>
  const auto& get() const {
    constexpr auto i = index_of(Policy::key);
    static_assert(i != no_index, "mstar::resource_set::get: the model declares no resource with this policy's key");
    return std::get<i>(tuple_);
  }

  // f(std::integral_constant<size_t, I>, resource&) for every resource, in descriptor order.
  template <class F>
  void for_each(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f(std::integral_constant<std::size_t, I>{}, std::get<I>(tuple_)), ...);
    }
    (std::make_index_sequence<count>{});
  }
  // The same over every resource in dependency order, or its reverse (teardown: dependents first).
  template <class F>
  void for_each_ordered(F&& f) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (f(std::integral_constant<std::size_t, Model::verdict.order[K]>{}, std::get<Model::verdict.order[K]>(tuple_)),
       ...);
    }
    (std::make_index_sequence<count>{});
  }
  template <class F>
  void for_each_reverse(F&& f) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (f(std::integral_constant<std::size_t, Model::verdict.order[count - 1 - K]>{},
         std::get<Model::verdict.order[count - 1 - K]>(tuple_)),
       ...);
    }
    (std::make_index_sequence<count>{});
  }
  // Node's resources in dependency order; f may return bool (false stops the walk).
  template <class Node, class F>
  bool for_each_of(F&& f) {
    constexpr auto& ord = order<Node>;
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      bool go = true;
      ((go = go && call(f, std::integral_constant<std::size_t, ord[K]>{}, std::get<ord[K]>(tuple_))), ...);
      return go;
    }
    (std::make_index_sequence<ord.size()>{});
  }

  std::array<resource_stats, count> stats() const {
    std::array<resource_stats, count> out{};
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((out[I] = std::get<I>(tuple_).stats()), ...); }
    (std::make_index_sequence<count>{});
    return out;
  }

private:
  template <std::size_t... I>
  resource_set(Backend& backend, const engine_options& options, const request_table& requests,
               std::index_sequence<I...>)
      : tuple_(resource_context<Backend>{&backend, &Model::descriptor.resources[I], &options, &requests}...) {}

  template <class F, class I, class R>
  static bool call(F& f, I i, R& r) {
    if constexpr (std::is_same_v<decltype(f(i, r)), bool>)
      return f(i, r);
    else {
      f(i, r);
      return true;
    }
  }

  template <std::size_t I>
  static constexpr std::uint8_t positions_dependency() {
    for (auto key : Model::descriptor.resources[I].depends_on) {
      const auto j = index_of(key);
      if (j != no_index && Model::descriptor.resources[j].kind == resource_kind::positions) return j;
    }
    return no_index;
  }
  template <std::size_t I, class R>
  void bind(R& r) {
    if constexpr (requires { r.bind_positions(static_cast<const std::uint32_t*>(nullptr)); }) {
      constexpr auto j = positions_dependency<I>();
      static_assert(j != no_index, "mstar: attention metadata reads the committed positions of its rows; add the "
                                   "positions resource's key to the attention policy's depends_on<...>");
      r.bind_positions(std::get<j>(tuple_).committed());
    }
  }

  tuple_type tuple_;
};

} // namespace mstar
