// The compile-time model description: nodes, groups, workers and the model, as policies. A model
// reads as a short block of `using` lines (see examples/qwen3_tts/model.hpp):
//
//   using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
//   using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
//   using Gpu0       = mstar::worker<"gpu0", Talker, Codec>;
//   using Qwen3Tts   = mstar::model<"qwen3_tts", Gpu0>;
//
// Instantiating mstar::model runs the validator (validate.hpp) inside static_asserts: a model the
// engine cannot run safely does not compile, and the diagnostic carries the rule's sentence and the
// offending node, resource, group and worker types.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "mstar/detail/type_list.hpp"
#include "mstar/model/descriptor.hpp"
#include "mstar/model/fixed_string.hpp"
#include "mstar/model/policies.hpp"
#include "mstar/model/validate.hpp"

namespace mstar {

// Walk flags, combined with |: node<"talker_decode", declares<...>, walk::chain | walk::stop_checks>.
enum class walk : std::uint8_t {
  none = 0,
  chain = 1,
  resident = 2,
  combined = 4,
  spans = 8,
  stop_checks = 16,
};
constexpr walk operator|(walk a, walk b) {
  return static_cast<walk>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr bool has(walk set, walk flag) {
  return (static_cast<std::uint8_t>(set) & static_cast<std::uint8_t>(flag)) != 0;
}

template <class... Resources>
struct declares {
  static_assert((resource_policy<Resources> && ...),
                "mstar::declares takes resource policies only (kv_cache, attention, positions, sampler, "
                "recurrent_pool): pass the resource's type, not its key or an instance.");
  static_assert(sizeof...(Resources) <= max_node_resources,
                "mstar::declares: a node declares at most 8 resources (mstar::max_node_resources in "
                "descriptor.hpp), as a node's resources list in YAML. Way out: declare fewer, or raise the limit "
                "and rebuild.");
  // After a misuse, an empty list: the static_assert above stays the only error.
  static constexpr bool well_formed = (resource_policy<Resources> && ...);
  using list = std::conditional_t<well_formed, detail::type_list<Resources...>, detail::type_list<>>;
  static constexpr void add_keys(node_desc& d) {
    if constexpr (well_formed) (d.resources.push_back(Resources::key), ...);
  }
};

struct node_identifier {};
struct group_identifier {};
struct worker_identifier {};

// A node: the resources it declares and its walk flags. (A primary template rather than a partial
// specialization on declares<...>: nvcc does not match partial specializations over class-type
// template parameters.)
template <fixed_string Name, class Declares = declares<>, walk Walks = walk::none>
struct node {
  static_assert(is_valid_name(Name.view()), MSTAR_NAME_SENTENCE);
  using identifier = node_identifier;
  using resources = typename Declares::list;
  static constexpr std::string_view name = Name.view();
  static constexpr walk walks = Walks;

  static constexpr node_desc descriptor() {
    node_desc d{};
    d.name = Name.view();
    Declares::add_keys(d);
    d.walks = {.chain = has(Walks, walk::chain),
               .resident = has(Walks, walk::resident),
               .combined = has(Walks, walk::combined),
               .spans = has(Walks, walk::spans),
               .stop_checks = has(Walks, walk::stop_checks)};
    return d;
  }
};

// Group and worker options.
struct side_stream {};
template <std::uint32_t N>
struct tp {
  static constexpr void apply(worker_desc& w) { w.tp = N; }
};
template <std::uint32_t N>
struct sp {
  static constexpr void apply(worker_desc& w) { w.sp = N; }
};
template <std::uint32_t N>
struct streams {
  static constexpr void apply(worker_desc& w) { w.streams = N; }
};

namespace detail {
template <class T, class Id>
struct has_identifier : std::false_type {};
template <class T, class Id>
  requires std::is_same_v<typename T::identifier, Id>
struct has_identifier<T, Id> : std::true_type {};
template <class T>
using is_node = has_identifier<T, node_identifier>;
template <class T>
using is_group = has_identifier<T, group_identifier>;
template <class T>
using is_worker = has_identifier<T, worker_identifier>;
template <class T>
struct is_worker_option : std::bool_constant<requires(worker_desc& w) { T::apply(w); }> {};
} // namespace detail

template <fixed_string Name, class... Members>
struct group {
  static_assert(((detail::is_node<Members>::value || std::is_same_v<Members, side_stream>) && ...),
                "mstar::group takes mstar::node types and the mstar::side_stream flag only.");
  static_assert(detail::filter_t<detail::is_node, Members...>::size <= max_group_nodes,
                "mstar::group: a group holds at most 8 nodes (mstar::max_group_nodes in descriptor.hpp), as a "
                "group's nodes list in YAML. Way out: split the group, or raise the limit and rebuild.");
  static_assert(is_valid_name(Name.view()), MSTAR_NAME_SENTENCE);
  using identifier = group_identifier;
  using nodes = detail::filter_t<detail::is_node, Members...>;
  static constexpr std::string_view name = Name.view();
  static constexpr bool is_side = (std::is_same_v<Members, side_stream> || ...);

  static constexpr group_desc descriptor() {
    group_desc d{};
    d.name = Name.view();
    d.side_stream = is_side;
    (
        [&] {
          if constexpr (detail::is_node<Members>::value) d.nodes.push_back(Members::name);
        }(),
        ...);
    return d;
  }
};

template <fixed_string Name, class... Members>
struct worker {
  static_assert(((detail::is_group<Members>::value || detail::is_worker_option<Members>::value) && ...),
                "mstar::worker takes mstar::group types and the options mstar::tp<N>, mstar::sp<N>, "
                "mstar::streams<N> only.");
  static_assert(detail::filter_t<detail::is_group, Members...>::size <= max_worker_groups,
                "mstar::worker: a worker runs at most 8 groups (mstar::max_worker_groups in descriptor.hpp), as a "
                "worker's groups list in YAML. Way out: merge groups, or raise the limit and rebuild.");
  static_assert(is_valid_name(Name.view()), MSTAR_NAME_SENTENCE);
  using identifier = worker_identifier;
  using groups = detail::filter_t<detail::is_group, Members...>;
  static constexpr std::string_view name = Name.view();

  static constexpr worker_desc descriptor() {
    worker_desc d{};
    d.name = Name.view();
    (
        [&] {
          if constexpr (detail::is_group<Members>::value)
            d.groups.push_back(Members::name);
          else if constexpr (detail::is_worker_option<Members>::value)
            Members::apply(d);
        }(),
        ...);
    return d;
  }
};

namespace detail {

template <class List>
struct groups_of;
template <class... Ws>
struct groups_of<type_list<Ws...>> {
  using type = concat_t<typename Ws::groups...>;
};
template <class List>
struct nodes_of;
template <class... Gs>
struct nodes_of<type_list<Gs...>> {
  using type = concat_t<typename Gs::nodes...>;
};
template <class List>
struct resources_of;
template <class... Ns>
struct resources_of<type_list<Ns...>> {
  using type = concat_t<typename Ns::resources...>;
};

template <class... Ts>
constexpr auto descriptors_of(type_list<Ts...>) {
  return std::array<decltype(nth_t<0, type_list<Ts...>>::descriptor()), sizeof...(Ts)>{Ts::descriptor()...};
}

// Appends each descriptor of all that is not already there (a policy type reached twice, e.g. a
// resource that several nodes declare or a group placed on two workers, is one entry), and records
// for each entry the index in all of the type it came from.
//
// This merges the model's lists of resources, nodes and groups only. The name lists inside the
// descriptors keep what was written: declares<R, R>, group<"G", N, N>, worker<"w", G, G> and
// depends_on<"k", "k"> list a name twice, and the validator refuses that (duplicate_entry), as it
// does for the same list in YAML. A type placed in two places (a node in two groups, a group on two
// workers) is one entry here, and node_placed_twice or group_placement refuses it.
// Returns false when `out` is full: the model holds more than the descriptor does.
template <class List, class Out, std::size_t N>
constexpr bool add_once(const List& all, Out& out, std::array<std::uint8_t, N>& type_of) {
  for (std::size_t i = 0; i < all.size(); ++i) {
    bool repeat = false;
    for (std::size_t j = 0; j < i; ++j) repeat = repeat || all[j] == all[i];
    if (!repeat) {
      if (out.size() == N) return false;
      type_of[out.size()] = static_cast<std::uint8_t>(i);
      out.push_back(all[i]);
    }
  }
  return true;
}

// A model's descriptor, and for each of its resources, nodes and groups the index of the policy
// type it came from (a type named twice appears once).
template <class Workers>
struct built {
  using worker_list = Workers;
  using group_list = typename groups_of<Workers>::type;
  using node_list = typename nodes_of<group_list>::type;
  using resource_list = typename resources_of<node_list>::type; // with repeats

  struct result {
    model_desc desc;
    std::array<std::uint8_t, max_resources> resource_type{};
    std::array<std::uint8_t, max_nodes> node_type{};
    std::array<std::uint8_t, max_groups> group_type{};
    bool fits = true; // every resource, node, group and worker found room in the descriptor
  };

  static constexpr result make(std::string_view name) {
    result r{};
    r.desc.name = name;
    if constexpr (resource_list::size > 0)
      r.fits = add_once(descriptors_of(resource_list{}), r.desc.resources, r.resource_type) && r.fits;
    if constexpr (node_list::size > 0) r.fits = add_once(descriptors_of(node_list{}), r.desc.nodes, r.node_type) && r.fits;
    if constexpr (group_list::size > 0)
      r.fits = add_once(descriptors_of(group_list{}), r.desc.groups, r.group_type) && r.fits;
    if constexpr (Workers::size > 0)
      for (const auto& d : descriptors_of(Workers{})) r.fits = r.desc.workers.push_back(d) && r.fits;
    return r;
  }
};

// One static_assert per rule, one per row of rules.def: the failing one prints its sentence, and
// the compiler's instantiation note names this template's arguments, the offending node, resource,
// group and worker types.
template <rule Rule, class Node, class Resource, class Group, class Worker>
struct model_rule_broken {
#define MSTAR_RULE(kind, id, sentence) static_assert(Rule != rule::id, sentence);
#include "mstar/model/rules.def"
#undef MSTAR_RULE
  static constexpr bool value = true;
};

// The findings as model_rule_broken types, one per finding. The list is sized to the findings and
// its ::value is read by all_rules_kept alone, so a model with one mistake instantiates one
// model_rule_broken, and its diagnostic prints the model's types once or twice, not once per index.
template <class Built, const auto& Result, const auto& Verdict, class Indices>
struct broken_rules;
template <class Built, const auto& Result, const auto& Verdict, std::size_t... I>
struct broken_rules<Built, Result, Verdict, std::index_sequence<I...>> {
  template <std::size_t J>
  static constexpr finding f = Verdict.findings[J];
  template <std::size_t J>
  using node_at = nth_t<f<J>.node == no_index ? no_index : Result.node_type[f<J>.node], typename Built::node_list>;
  template <std::size_t J>
  using resource_at =
      std::conditional_t<f<J>.resource == no_index, none,
                         nth_t<Result.resource_type[f<J>.resource == no_index ? 0 : f<J>.resource],
                               typename Built::resource_list>>;
  template <std::size_t J>
  using group_at = nth_t<f<J>.group == no_index ? no_index : Result.group_type[f<J>.group], typename Built::group_list>;
  template <std::size_t J>
  using worker_at = nth_t<f<J>.worker, typename Built::worker_list>;

  using type = type_list<model_rule_broken<f<I>.rule, node_at<I>, resource_at<I>, group_at<I>, worker_at<I>>...>;
};

template <class Broken>
struct all_rules_kept;
template <class... Broken>
struct all_rules_kept<type_list<Broken...>> : std::bool_constant<(Broken::value && ...)> {};

} // namespace detail

// A model: its workers (and through them its groups, nodes and resources). Instantiating it
// validates it; a refused model does not compile.
template <fixed_string Name, class... Workers>
struct model {
  static_assert((detail::is_worker<Workers>::value && ...), "mstar::model takes mstar::worker types only.");
  static_assert(sizeof...(Workers) >= 1, "mstar::model needs at least one worker.");
  static_assert(is_valid_name(Name.view()), MSTAR_NAME_SENTENCE);

  using built = detail::built<detail::type_list<Workers...>>;
  using workers = detail::type_list<Workers...>;
  using groups = typename built::group_list;
  using nodes = typename built::node_list;
  static constexpr std::string_view name = Name.view();

private:
  static constexpr typename built::result built_ = built::make(Name.view());

public:
  static_assert(built_.fits,
                "mstar::model: a model holds at most 16 resources, 16 nodes, 16 groups and 8 workers "
                "(mstar::max_resources, max_nodes, max_groups and max_workers in descriptor.hpp), as a YAML "
                "model does. Way out: describe fewer, or raise the limits and rebuild.");
  static constexpr model_desc descriptor = built_.desc;
  // A model that does not fit is not judged: its descriptor lacks what did not fit.
  static constexpr report verdict = built_.fits ? validate(descriptor) : report{};
  static_assert(detail::all_rules_kept<typename detail::broken_rules<
                    built, built_, verdict, std::make_index_sequence<verdict.findings.size()>>::type>::value);
  static_assert(!verdict.truncated, "mstar: the model breaks more rules than a report holds; fix the first ones.");

  // Node's index in the model's node order (descriptor.nodes: workers in order, each worker's groups
  // in order, each group's nodes in order): the `node` a flow's hooks receive and the index of
  // worker_options::nodes.
  template <class Node>
  static constexpr std::uint8_t node_index = [] {
    constexpr auto i = detail::named_index(descriptor.nodes, Node::name);
    static_assert(i != no_index, "mstar::model::node_index: the node is not part of this model");
    return i;
  }();
  // A node's name from its index, and its index from its name (no_index when the model has none): for
  // flow hooks, tests and tools that name a node at run time.
  static constexpr std::string_view node_name(std::uint8_t node) { return descriptor.nodes[node].name; }
  static constexpr std::uint8_t node_index_of(std::string_view node) { return detail::named_index(descriptor.nodes, node); }

  // Where Node runs (chain or side lane) and, on a side lane, the keys the lane owns.
  template <class Node>
  static constexpr const node_lane& lane_of() {
    return verdict.lanes[node_index<Node>];
  }
  template <class Node>
  static constexpr bool is_side_node = lane_of<Node>().lane == lane::side;

  // A side key is a resource that only side steps declare: the chain's stage never holds it.
  static constexpr bool is_side_key(std::string_view key) {
    for (const auto& l : verdict.lanes)
      if (l.side_keys.contains(key)) return true;
    return false;
  }
  template <class Resource>
  static constexpr bool is_side_resource = is_side_key(Resource::key);
};

// The descriptor of a model description without judging it (for tests and tools that want the
// report rather than a compile error). It takes the model type apart by deduction, and nvcc 13
// deduces no class-type template argument (the model's name), so under nvcc it is refused with a
// sentence rather than with "no instance of function template".
namespace detail {
template <fixed_string Name, class... Workers>
constexpr model_desc describe_unchecked(model<Name, Workers...>*) {
  return built<type_list<Workers...>>::make(Name.view()).desc;
}
template <class>
inline constexpr bool host_compiler = false;
} // namespace detail
#if defined(__NVCC__)
template <class Model>
inline constexpr model_desc describe = [] {
  static_assert(detail::host_compiler<Model>,
                "mstar::describe<Model> needs a host compiler: nvcc cannot deduce a model's name (a class-type "
                "template argument), so it cannot take a model apart without validating it. Way out: call "
                "describe from a .cpp translation unit, or read Model::descriptor, which validates the model.");
  return model_desc{};
}();
#else
template <class Model>
inline constexpr model_desc describe = detail::describe_unchecked(static_cast<Model*>(nullptr));
#endif

} // namespace mstar
