// Resource kinds as compile-time policies. Each is a small template over its key and options that
// carries its plain descriptor; a model description names them in its nodes' declares<...> lists.
//
//   using Kv        = mstar::kv_cache<"kv_cache", mstar::blocks<4096>, mstar::block_tokens<16>>;
//   using Positions = mstar::positions<"positions">;
//   using Attention = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;
//   using Sampler   = mstar::sampler<"sampler">;
//   using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>,
//                                            /*layers=*/8, /*slots=*/257>;
#pragma once

#include <cstdint>
#include <type_traits>

#include "mstar/descriptor.hpp"
#include "mstar/detail/fixed_string.hpp"

namespace mstar {

// Options. Each is an empty tag or a small template carrying constants; a resource applies the
// ones it is given to its descriptor, in order.
template <fixed_string... Keys>
struct depends_on {
  static constexpr void apply(resource_desc& d) { (d.depends_on.push_back(Keys.view()), ...); }
};
struct no_preplan {
  static constexpr void apply(resource_desc& d) { d.preplans = false; }
};
struct kv_keyed_snapshots {
  static constexpr void apply(resource_desc& d) { d.kv_keyed_snapshots = true; }
};
template <std::uint32_t N>
struct blocks {
  static constexpr void apply(resource_desc& d) { d.blocks = N; }
};
template <std::uint32_t N>
struct block_tokens {
  static constexpr void apply(resource_desc& d) { d.block_tokens = N; }
};
template <std::uint32_t... Dims>
struct shape {
  static constexpr void apply(resource_desc& d) { (d.state_shape.push_back(Dims), ...); }
  static constexpr std::size_t elements = (std::size_t{1} * ... * Dims);
  static_assert(sizeof...(Dims) >= 1 && sizeof...(Dims) <= max_state_rank,
                "mstar::shape: a per-slot state shape has 1 to 4 dimensions; flatten the inner ones.");
};

// Opt-in identity: a type is a resource policy when it says so (and carries a descriptor).
struct resource_identifier {};
template <class R>
concept resource_policy = requires {
  typename R::identifier;
  requires std::is_same_v<typename R::identifier, resource_identifier>;
  { R::descriptor() } -> std::same_as<resource_desc>;
};

namespace detail {
template <resource_kind Kind, fixed_string Key, class... Options>
struct resource_base {
  using identifier = resource_identifier;
  static constexpr std::string_view key = Key.view();
  static constexpr resource_desc descriptor() {
    resource_desc d{};
    d.key = Key.view();
    d.kind = Kind;
    (Options::apply(d), ...);
    return d;
  }
};
} // namespace detail

template <fixed_string Key, class... Options>
struct kv_cache : detail::resource_base<resource_kind::kv_cache, Key, Options...> {};
template <fixed_string Key, class... Options>
struct attention : detail::resource_base<resource_kind::attention, Key, Options...> {};
template <fixed_string Key, class... Options>
struct positions : detail::resource_base<resource_kind::positions, Key, Options...> {};
template <fixed_string Key, class... Options>
struct sampler : detail::resource_base<resource_kind::sampler, Key, Options...> {};

template <fixed_string Key, class Element, class Shape, std::uint32_t Layers, std::uint32_t Slots,
          class... Options>
struct recurrent_pool {
  using identifier = resource_identifier;
  using element_type = Element;
  static constexpr std::string_view key = Key.view();
  static constexpr std::uint32_t layers = Layers;
  static constexpr std::uint32_t slots = Slots;
  static constexpr std::size_t state_elements = Shape::elements;

  static constexpr resource_desc descriptor() {
    resource_desc d{};
    d.key = Key.view();
    d.kind = resource_kind::recurrent_pool;
    d.element = dtype_of<Element>::value;
    Shape::apply(d);
    d.layers = Layers;
    d.slots = Slots;
    (Options::apply(d), ...);
    return d;
  }
};

} // namespace mstar
