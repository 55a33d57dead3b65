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

#include "mstar/model/descriptor.hpp"
#include "mstar/model/fixed_string.hpp"

namespace mstar {

// Options. Each is an empty tag or a small template carrying constants; a resource applies the
// ones it is given to its descriptor, in order. An option says which kinds it applies to, and a
// resource refuses the others at compile time, as the YAML loader refuses a key its kind does not
// have (blocks on a sampler, shape on a KV cache).
struct option_identifier {};
template <fixed_string... Keys>
struct depends_on {
  static_assert(sizeof...(Keys) <= max_dependencies,
                "mstar::depends_on: a resource depends on at most 8 keys (mstar::max_dependencies in "
                "descriptor.hpp), as a depends_on list in YAML. Way out: list fewer, or raise the limit and rebuild.");
  using identifier = option_identifier;
  static constexpr bool sizes_kv_cache = false;
  static constexpr void apply(resource_desc& d) { (d.depends_on.push_back(Keys.view()), ...); }
};
struct no_preplan {
  using identifier = option_identifier;
  static constexpr bool sizes_kv_cache = false;
  static constexpr void apply(resource_desc& d) { d.preplans = false; }
};
struct kv_keyed_snapshots {
  using identifier = option_identifier;
  static constexpr bool sizes_kv_cache = false;
  static constexpr void apply(resource_desc& d) { d.kv_keyed_snapshots = true; }
};
template <std::uint32_t N>
struct blocks {
  using identifier = option_identifier;
  static constexpr bool sizes_kv_cache = true;
  static constexpr void apply(resource_desc& d) { d.blocks = N; }
};
template <std::uint32_t N>
struct block_tokens {
  using identifier = option_identifier;
  static constexpr bool sizes_kv_cache = true;
  static constexpr void apply(resource_desc& d) { d.block_tokens = N; }
};
// A recurrent pool's per-slot state shape: its third template argument, not an option.
template <std::uint32_t... Dims>
struct shape {
  static constexpr void apply(resource_desc& d) { (d.state_shape.push_back(Dims), ...); }
  static constexpr std::size_t elements = (std::size_t{1} * ... * Dims);
  static_assert(sizeof...(Dims) >= 1 && sizeof...(Dims) <= max_state_rank,
                "mstar::shape: a per-slot state shape has 1 to 4 dimensions; flatten the inner ones.");
};

namespace detail {
template <class T>
concept resource_option = std::is_same_v<typename T::identifier, option_identifier>;
template <class T>
struct is_shape : std::false_type {};
template <std::uint32_t... Dims>
struct is_shape<shape<Dims...>> : std::true_type {};

template <class T>
concept kv_size_option = resource_option<T> && T::sizes_kv_cache;
template <resource_kind Kind, class Option>
inline constexpr bool option_fits = resource_option<Option> && (Kind == resource_kind::kv_cache || !kv_size_option<Option>);

// The option checks of every resource kind, as a base class so that they fire when the resource is
// instantiated. Each refused option is left out of the descriptor, so the static_assert stays the
// only error.
template <resource_kind Kind, class... Options>
struct option_checks {
  static_assert(((resource_option<Options> || is_shape<Options>::value) && ...),
                "mstar: a resource takes resource options only (mstar::depends_on<...>, mstar::no_preplan, "
                "mstar::kv_keyed_snapshots, and for a KV cache mstar::blocks<N> and mstar::block_tokens<N>). "
                "Way out: pass the option's type; a recurrent pool's dtype, shape, layers and slots are its "
                "own template arguments.");
  static_assert((!is_shape<Options>::value && ...),
                "mstar::shape is the state shape of a recurrent pool, given as its third template argument: no "
                "resource takes it as an option (a YAML file refuses 'shape' on any other kind alike). Way out: "
                "drop it, or describe the resource as mstar::recurrent_pool<Key, Dtype, mstar::shape<...>, "
                "Layers, Slots>.");
  static_assert(((Kind == resource_kind::kv_cache || !kv_size_option<Options>) && ...),
                "mstar::blocks and mstar::block_tokens size a KV cache only: attention, positions, a sampler and "
                "a recurrent pool hold no KV blocks (a YAML file refuses 'blocks' on them alike). Way out: drop "
                "the option from this resource.");

  static constexpr void apply(resource_desc& d) {
    (
        [&] {
          if constexpr (option_fits<Kind, Options>) Options::apply(d);
        }(),
        ...);
  }
};
} // namespace detail

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
struct resource_base : option_checks<Kind, Options...> {
  static_assert(is_valid_name(Key.view()), MSTAR_NAME_SENTENCE);
  using identifier = resource_identifier;
  static constexpr std::string_view key = Key.view();
  static constexpr resource_desc descriptor() {
    resource_desc d{};
    d.key = Key.view();
    d.kind = Kind;
    option_checks<Kind, Options...>::apply(d);
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
struct recurrent_pool : detail::option_checks<resource_kind::recurrent_pool, Options...> {
  static_assert(is_valid_name(Key.view()), MSTAR_NAME_SENTENCE);
  static_assert(requires { dtype_of<Element>::value; },
                "mstar::recurrent_pool<Key, Dtype, Shape, Layers, Slots>: the state's element type is one of float, "
                "mstar::f16, mstar::bf16, std::int32_t and std::uint8_t (dtype.hpp), as a YAML pool's dtype. Way "
                "out: pass one of them.");
  static_assert(detail::is_shape<Shape>::value,
                "mstar::recurrent_pool<Key, Dtype, Shape, Layers, Slots>: the third argument is the per-slot "
                "state shape. Way out: pass mstar::shape<dims...>, e.g. mstar::shape<16, 1024>.");
  using identifier = resource_identifier;
  using element_type = Element;
  static constexpr std::string_view key = Key.view();
  static constexpr std::uint32_t layers = Layers;
  static constexpr std::uint32_t slots = Slots;
  static constexpr std::size_t state_elements = [] {
    if constexpr (detail::is_shape<Shape>::value)
      return Shape::elements;
    else
      return std::size_t{0};
  }();

  static constexpr resource_desc descriptor() {
    resource_desc d{};
    d.key = Key.view();
    d.kind = resource_kind::recurrent_pool;
    if constexpr (requires { dtype_of<Element>::value; }) d.element = dtype_of<Element>::value;
    d.layers = Layers;
    d.slots = Slots;
    if constexpr (detail::is_shape<Shape>::value) Shape::apply(d);
    detail::option_checks<resource_kind::recurrent_pool, Options...>::apply(d);
    return d;
  }
};

} // namespace mstar
