// Steps as types. A step is its node, its rows and its CUDA-graph batch bucket; the node's lane, known
// to the model policy at compile time, picks the step's type:
//
//   mstar::chain_step<Model, Node>   a node on the chain: it may promote the staged pre-plan (when it
//                                    is the staged step) and drops it otherwise
//   mstar::side_step<Model, Node>    a side-lane node (every key a side key): it runs beside the
//                                    stage and cannot reach the stage's promote, drop or clear at all;
//                                    those take a chain_step, and naming a side step there does not
//                                    compile (invariant 1, by construction)
//
// Each type exists only for the nodes of its lane (a constraint, so `chain_step<Model, CodecChunk>`
// is refused with runs_on_the_chain<Model, CodecChunk> unsatisfied). A side node run on the chain
// stream (lane mode off) is still a side_step: beside-stage is about its keys, not its stream.
//
//   using Decode = mstar::chain_step<qwen3_tts::Model, qwen3_tts::TalkerDecode>;
//   using Codec  = mstar::side_step<qwen3_tts::Model, qwen3_tts::CodecChunk>;
//   mstar::step_for<qwen3_tts::Model, qwen3_tts::CodecChunk> step{rows};   // the same as Codec
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "mstar/model/model.hpp"
#include "mstar/resources/step_view.hpp"

namespace mstar {

// Node is one of Model's nodes.
template <class Model, class Node>
concept node_of =
    detail::is_node<Node>::value && detail::named_index(Model::descriptor.nodes, Node::name) != no_index;

// Node runs on Model's chain.
template <class Model, class Node>
concept runs_on_the_chain = node_of<Model, Node> && !Model::template is_side_node<Node>;

// Node runs on a side lane: every key it declares is a side key, so its steps are beside the stage.
template <class Model, class Node>
concept runs_beside_the_stage = node_of<Model, Node> && Model::template is_side_node<Node>;

namespace detail {
// What every step is: its node, its rows and its bucket. chain_step and side_step add only their
// constraint, and with it the distinct type that the stage's mutators accept or refuse.
template <class Model, class Node, bool BesideStage>
struct step_of {
  using model_type = Model;
  using node_type = Node;
  static constexpr bool beside_stage = BesideStage;
  static constexpr std::uint8_t node = Model::template node_index<Node>;

  std::span<const row> rows;
  std::uint32_t bucket = 0; // the batch the step's CUDA graph replays (rows padded to it); 0: rows.size()
};
} // namespace detail

template <class Model, class Node>
requires runs_on_the_chain<Model, Node>
struct chain_step : detail::step_of<Model, Node, false> {};

template <class Model, class Node>
requires runs_beside_the_stage<Model, Node>
struct side_step : detail::step_of<Model, Node, true> {};

namespace detail {
template <class Model, class Node, bool Side = Model::template is_side_node<Node>>
struct step_for_impl {
  using type = chain_step<Model, Node>;
};
template <class Model, class Node>
struct step_for_impl<Model, Node, true> {
  using type = side_step<Model, Node>;
};
template <class T>
struct is_step : std::false_type {};
template <class M, class N>
struct is_step<chain_step<M, N>> : std::true_type {};
template <class M, class N>
struct is_step<side_step<M, N>> : std::true_type {};
} // namespace detail

// The step type of Node: side_step for a side-lane node, chain_step otherwise.
template <class Model, class Node>
requires node_of<Model, Node>
using step_for = typename detail::step_for_impl<Model, Node>::type;

template <class S>
concept step = detail::is_step<std::remove_cvref_t<S>>::value;

// The smallest bucket that holds `rows` rows, from a sorted list of CUDA-graph batch sizes; rows
// itself when the list is empty or every bucket is smaller (the step then runs without a graph).
constexpr std::uint32_t bucket_for(std::uint32_t rows, std::span<const std::uint32_t> buckets) {
  for (auto b : buckets)
    if (b >= rows) return b;
  return rows;
}

} // namespace mstar
