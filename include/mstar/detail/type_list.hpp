// Minimal type-list helpers for walking a model description's policies at compile time.
#pragma once

#include <cstddef>
#include <type_traits>

namespace mstar::detail {

template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

// The type a finding points at when it names no node or resource.
struct none {};

template <std::size_t I, class List>
struct nth;
template <std::size_t I, class T, class... Ts>
struct nth<I, type_list<T, Ts...>> : nth<I - 1, type_list<Ts...>> {};
template <class T, class... Ts>
struct nth<0, type_list<T, Ts...>> {
  using type = T;
};
template <std::size_t I>
struct nth<I, type_list<>> {
  using type = none;
};
template <std::size_t I, class List>
using nth_t = typename nth<I, List>::type;

template <class... Lists>
struct concat;
template <>
struct concat<> {
  using type = type_list<>;
};
template <class... A>
struct concat<type_list<A...>> {
  using type = type_list<A...>;
};
template <class... A, class... B, class... Rest>
struct concat<type_list<A...>, type_list<B...>, Rest...> : concat<type_list<A..., B...>, Rest...> {};
template <class... Lists>
using concat_t = typename concat<Lists...>::type;

// Keeps the Ts for which Pred<T>::value holds, in order.
template <template <class> class Pred, class... Ts>
using filter_t = concat_t<std::conditional_t<Pred<Ts>::value, type_list<Ts>, type_list<>>...>;

} // namespace mstar::detail
