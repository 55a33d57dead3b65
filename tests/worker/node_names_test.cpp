// Naming a node: a model turns a node's index into its name and back (what a flow hook receives is
// the index), and the lane stream is registered with the engine by the side node's index.
#include <doctest/doctest.h>

#include "worker/tts_flow.hpp"

#include <stdexcept>

using namespace worker_test;

TEST_CASE("a model names its nodes by index and finds them by name, in the order its hooks see them") {
  static_assert(Model::node_index_of("prefill") == Model::node_index<Prefill>);
  static_assert(Model::node_index_of("codec") == Model::node_index<Codec>);
  for (std::uint8_t n = 0; n < Model::descriptor.nodes.size(); ++n)
    CHECK(Model::node_index_of(Model::node_name(n)) == n);
  CHECK(Model::node_name(Model::node_index<Decode>) == "decode");
  CHECK(Model::node_index_of("no_such_node") == mstar::no_index);
}

TEST_CASE("the lane stream registered by the side node's index owns the side node's resources") {
  mstar::host_backend backend;
  Engine engine(backend, options());
  const auto lane = backend.create_stream();
  const auto codec_state = Engine::resources_type::index_of("codec_state");
  CHECK_FALSE(engine.runner().owner_stream(codec_state).has_value());
  engine.set_side_stream(Model::node_index<Codec>, lane);
  REQUIRE(engine.runner().owner_stream(codec_state).has_value());
  CHECK(*engine.runner().owner_stream(codec_state) == lane);
  CHECK_THROWS_AS(engine.set_side_stream(Model::node_index<Decode>, lane), std::invalid_argument);
  CHECK_THROWS_WITH_AS(engine.set_side_stream("no_such_node", lane),
                       "mstar::engine::set_side_stream: the model has no node no_such_node", std::invalid_argument);
  backend.destroy_stream(lane);
}
