// The chain's resources through the engine: the paged KV cache (blocks by need, page tables, refusal,
// teardown), positions, attention metadata and the per-request seeded sampler.
#include <doctest/doctest.h>

#include "engine/engine_test_model.hpp"

#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace engine_test;

namespace {
struct fixture {
  mstar::host_backend backend;
  Engine engine{backend, small_options()};
  mstar::host_stream chain = backend.create_stream();

  template <class Step>
  mstar::step_outcome run(const Step& step) {
    return engine.run(step, chain, [](const auto&) {});
  }
  // The device copy of a staged array, after the stream ran it.
  template <class T>
  std::vector<T> device(const T* p, std::size_t n) {
    backend.synchronize(chain);
    return std::vector<T>(p, p + n);
  }
};
} // namespace

TEST_CASE("Resources.the KV cache admits the blocks a step needs and stages its page table") {
  fixture f;
  auto a = *f.engine.add_request(1), b = *f.engine.add_request(2);
  auto& kv = f.engine.resource<Kv>();
  mstar::row prefill[] = {{a, 10}, {b, 3}}; // 3 blocks and 1 block of 4 tokens
  REQUIRE(f.run(PrefillStep{prefill, 4}));
  CHECK(kv.blocks_held(a) == 3);
  CHECK(kv.blocks_held(b) == 1);
  CHECK(kv.tokens_held(a) == 10);
  CHECK(kv.free_blocks() == 28);
  const auto& p = kv.current_plan();
  CHECK(f.device(p.page_indptr, 5) == std::vector<std::int32_t>{0, 3, 4, 4, 4});
  CHECK(f.device(p.last_page_len, 4) == std::vector<std::int32_t>{2, 3, 0, 0});
  CHECK(f.device(p.page_indices, 4) == std::vector<std::int32_t>{0, 1, 2, 3}); // LIFO from a fresh list

  mstar::row decode[] = {{a, 1}, {b, 1}};
  REQUIRE(f.run(DecodeStep{decode})); // a: 11 tokens, still 3 blocks; b: 4 tokens, 1 block
  CHECK(kv.free_blocks() == 28);
  REQUIRE(f.run(DecodeStep{decode})); // a: 12; b: 5 -> a second block
  CHECK(kv.blocks_held(b) == 2);
  CHECK(kv.free_blocks() == 27);
}

TEST_CASE("Resources.a full KV cache refuses with the block counts and reserves nothing") {
  fixture f;
  auto a = *f.engine.add_request(1), b = *f.engine.add_request(2), c = *f.engine.add_request(3);
  mstar::row big[] = {{a, 15 * 4}};
  REQUIRE(f.run(PrefillStep{big}));
  mstar::row big2[] = {{c, 15 * 4}};
  REQUIRE(f.run(PrefillStep{big2}));
  mstar::row two[] = {{b, 12}};
  const auto out = f.run(PrefillStep{two});
  REQUIRE(out.refused());
  CHECK(out.resource == Engine::resources_type::index_of("kv_cache"));
  CHECK(out.message().find("need 3 more block(s) and 2 of 32 are free") != std::string::npos);
  CHECK(f.engine.resource<Kv>().blocks_held(b) == 0);
  CHECK(f.engine.resource<Kv>().free_blocks() == 2);
}

TEST_CASE("Resources.a request outgrowing max_blocks_per_request fails its rows with the way out") {
  fixture f;
  mstar::engine_options o = small_options();
  o.max_blocks_per_request = 2;
  Engine engine(f.backend, o);
  auto a = *engine.add_request(1);
  mstar::row rows[] = {{a, 9}};
  const auto out = engine.run(PrefillStep{rows}, f.chain, [](const auto&) {});
  REQUIRE(out.failed());
  CHECK(out.message().find("raise engine_options.max_blocks_per_request") != std::string::npos);
}

TEST_CASE("Resources.teardown returns a request's KV blocks and clears its positions and sampler") {
  fixture f;
  auto a = *f.engine.add_request(1);
  mstar::row rows[] = {{a, 9}};
  REQUIRE(f.run(PrefillStep{rows}));
  CHECK(f.engine.resource<Kv>().free_blocks() == 29);
  CHECK(f.engine.remove_request(a, f.chain));
  CHECK_FALSE(f.engine.remove_request(a, f.chain)); // a second teardown is a no-op
  for (const auto& st : f.engine.stats())
    CHECK(st.requests == 0);
  CHECK(f.engine.resource<Kv>().free_blocks() == 32);
  CHECK(f.engine.requests().live() == 0);
  f.backend.synchronize(f.chain);
}

TEST_CASE("Resources.positions count each request's tokens and stage the new tokens' ids") {
  fixture f;
  auto a = *f.engine.add_request(1), b = *f.engine.add_request(2);
  mstar::row prefill[] = {{a, 3}, {b, 2}};
  REQUIRE(f.run(PrefillStep{prefill}));
  const auto& p = f.engine.resource<Positions>().current_plan();
  CHECK(f.device(p.positions, 5) == std::vector<std::int32_t>{0, 1, 2, 0, 1});
  mstar::row decode[] = {{b, 1}, {a, 1}};
  REQUIRE(f.run(DecodeStep{decode, 4}));
  const auto& d = f.engine.resource<Positions>().current_plan();
  CHECK(d.tokens == 2);
  CHECK(f.device(d.positions, 2) == std::vector<std::int32_t>{2, 3});
  CHECK(f.engine.resource<Positions>().position_of(a) == 4);
}

TEST_CASE("Resources.attention metadata holds query offsets and KV lengths after the step") {
  fixture f;
  auto a = *f.engine.add_request(1), b = *f.engine.add_request(2);
  mstar::row prefill[] = {{a, 5}, {b, 2}};
  REQUIRE(f.run(PrefillStep{prefill, 4}));
  const auto& p = f.engine.resource<Attention>().current_plan();
  CHECK(f.device(p.qo_indptr, 5) == std::vector<std::int32_t>{0, 5, 7, 7, 7});
  CHECK(f.device(p.kv_lens, 4) == std::vector<std::int32_t>{5, 2, 0, 0});
  CHECK(p.max_qo_len == 5);
  CHECK(p.max_kv_len == 5);
  mstar::row decode[] = {{a, 1}, {b, 1}};
  REQUIRE(f.run(DecodeStep{decode}));
  CHECK(f.device(f.engine.resource<Attention>().current_plan().kv_lens, 2) == std::vector<std::int32_t>{6, 3});
}

// Random123's known answers for Philox4x32-10.
static_assert([] {
  const auto z = mstar::philox4x32_10(mstar::philox_block{{0, 0, 0, 0}}, 0, 0);
  const auto f = mstar::philox4x32_10(mstar::philox_block{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  const auto pi = mstar::philox4x32_10(mstar::philox_block{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                                       0xa4093822u, 0x299f31d0u);
  return z.v[0] == 0x6627e8d5u && z.v[1] == 0xe169c58du && z.v[2] == 0xbc57ac4cu && z.v[3] == 0x9b00dbd8u &&
         f.v[0] == 0x408f276du && f.v[1] == 0x41c83b0eu && f.v[2] == 0xa20bc7c6u && f.v[3] == 0x6d5451fdu &&
         pi.v[0] == 0xd16cfe09u && pi.v[1] == 0x94fdccebu && pi.v[2] == 0x5001e420u && pi.v[3] == 0x24126ea1u;
}());

TEST_CASE("Resources.a request's sampler rows depend on its id and step, not on its batch or its index") {
  mstar::host_backend backend;
  auto chain = backend.create_stream();
  auto o = small_options();
  o.sampler_seed = 1234;
  // Two engines: the same requests, admitted in different orders and batched differently.
  Engine e1(backend, o), e2(backend, o);
  auto x1 = *e1.add_request(77), y1 = *e1.add_request(88);
  auto filler = *e2.add_request(5);
  auto y2 = *e2.add_request(88), x2 = *e2.add_request(77);
  mstar::row r1[] = {{x1}, {y1}};
  mstar::row r2[] = {{filler}, {y2}, {x2}};
  auto noop = [](const auto&) {};
  for (int step = 0; step < 3; ++step) {
    REQUIRE(e1.run(DecodeStep{r1}, chain, noop));
    REQUIRE(e2.run(DecodeStep{r2}, chain, noop));
    const auto s1 = e1.resource<Sampler>().current_plan().host_rows;
    const auto s2 = e2.resource<Sampler>().current_plan().host_rows;
    CHECK(s1[0] == s2[2]); // request 77
    CHECK(s1[1] == s2[1]); // request 88
    CHECK(s1[0].step == static_cast<std::uint32_t>(step));
    CHECK(s1[0].seed == mstar::mix_seed(1234, 77));
    CHECK(s1[0].seed != s1[1].seed);
    CHECK(mstar::sample_uniform(s1[0], 0) == mstar::sample_uniform(s2[2], 0));
  }
  backend.synchronize(chain);
}

TEST_CASE("Resources.sampling parameters are staged per row and the host reference sampler follows them") {
  fixture f;
  auto a = *f.engine.add_request(1);
  f.engine.resource<Sampler>().set_params(a, {.temperature = 0.5f, .top_k = 1, .top_p = 0.9f});
  f.engine.resource<Sampler>().set_seed(a, 42);
  mstar::row rows[] = {{a}};
  REQUIRE(f.run(DecodeStep{rows, 2}));
  const auto& p = f.engine.resource<Sampler>().current_plan();
  const auto staged = f.device(p.rows_device, 2);
  CHECK(staged[0] == mstar::sampler_row{42, 0, 1, 0.5f, 0.9f});
  CHECK(staged[1] == mstar::sampler_row{}); // padding
  const float probs[] = {0.1f, 0.5f, 0.3f, 0.1f};
  for (std::uint32_t s = 0; s < 20; ++s) {
    auto r = staged[0];
    r.step = s;
    CHECK(mstar::sample_categorical(probs, r) == 1); // top_k = 1: always the most likely
  }
  // Without a top-k limit, each token turns up, and a draw depends only on (seed, step).
  std::set<std::uint32_t> seen;
  for (std::uint32_t s = 0; s < 200; ++s) {
    const mstar::sampler_row r{7, s, 0, 1.0f, 1.0f};
    seen.insert(mstar::sample_categorical(probs, r));
    CHECK(mstar::sample_categorical(probs, r) == mstar::sample_categorical(probs, r));
  }
  CHECK(seen.size() == 4);
}
