// The smallest complete mstar program, the one to copy first: a model of two nodes, the host backend,
// a flow that walks each request through them, a run of the threaded worker, and its output.
//
//   meson setup build -Dgpu=disabled && ninja -C build examples/00_minimal/mstar_minimal
//   build/examples/00_minimal/mstar_minimal            (prints one line per request; see expected.txt)
//
// "generate" is a chain node: one token per request per step, its position taken from the positions
// resource. "spell" is a side node on its own lane: once four tokens are ready (or the last ones), it
// turns them into letters, carrying a running sum from window to window in its recurrent state pool.
// A request's text depends only on its seed and length, never on which requests shared its steps or
// on whether the side node ran on the lane or the chain stream: the flow's payload carries only the
// request's own addresses, and each forward enqueues its work on the step's stream.
#include <mstar/backend/host.hpp>
#include <mstar/engine/engine.hpp>
#include <mstar/mstar.hpp>
#include <mstar/worker.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

// clang-format off
using Positions = mstar::positions<"positions">;                                       // each token's position
using SpellSum  = mstar::recurrent_pool<"spell_sum", float, mstar::shape<1, 1>,
                                        /*layers=*/1, /*slots=*/9>;                    // a running sum per request
using Generate  = mstar::node<"generate", mstar::declares<Positions>, mstar::walk::chain>;
using Spell     = mstar::node<"spell", mstar::declares<SpellSum>>;
using Model     = mstar::model<"minimal", mstar::worker<"w", mstar::group<"Chain", Generate>,
                                                           mstar::group<"Side", mstar::side_stream, Spell>>>;
// clang-format on

inline constexpr std::uint8_t generate_node = Model::node_index<Generate>;
inline constexpr std::uint8_t spell_node = Model::node_index<Spell>;
inline constexpr std::uint32_t window = 4;

struct input {
  std::uint32_t seed = 0, length = 0;
};

// What a row carries to its forward: the request's own buffers and the part of them the step covers.
struct payload {
  std::uint32_t seed = 0, first = 0, width = 0;
  std::uint32_t* tokens = nullptr; // generate writes them, spell reads them
  char* text = nullptr;            // spell writes it
};

std::uint32_t token_of(std::uint32_t seed, std::int32_t position) {
  return (seed * 2654435761u + static_cast<std::uint32_t>(position) * 40503u) >> 16;
}

struct minimal_flow {
  struct request_state {
    input in;
    std::vector<std::uint32_t> tokens;
    std::string text;
    std::uint32_t generated = 0, spelled = 0;
  };
  using request_input = input;
  using payload = ::payload;

  void start(request_state& s, mstar::request_id, const input& in) {
    s.in = in;
    s.tokens.assign(in.length, 0);
    s.text.assign(in.length, '?');
  }
  bool ready(request_state& s, std::uint8_t node, mstar::row& r, payload& p) {
    p = {s.in.seed, 0, 0, s.tokens.data(), s.text.data()};
    if (node == generate_node && s.generated < s.in.length) {
      r.tokens = 1;
      p.first = s.generated;
      return true;
    }
    const auto width = std::min(window, s.in.length - s.spelled);
    if (node == spell_node && width > 0 && s.generated - s.spelled >= width) {
      p.first = s.spelled;
      p.width = width;
      return true;
    }
    return false;
  }
  bool landed(request_state& s, std::uint8_t node, const payload& p) {
    if (node == generate_node) ++s.generated;
    if (node == spell_node) s.spelled += p.width;
    return node == spell_node; // a window of text is output for the client
  }
  bool finished(const request_state& s) const { return s.spelled == s.in.length; }
  void end(request_state& s, mstar::request_id id, mstar::request_end how) {
    std::lock_guard g(lock);
    texts[id] = how == mstar::request_end::completed ? s.text : "(not completed)";
  }
  std::uint32_t batch_key(std::uint8_t, const payload&) const { return 0; }

  std::mutex lock;
  std::map<mstar::request_id, std::string> texts; // written by end(), read after the run
};

int main() {
  mstar::host_backend backend;
  mstar::engine_options options;
  options.max_batch = 8;
  options.max_tokens = 64;
  options.max_requests = 16;
  mstar::engine<Model, mstar::host_backend> engine(backend, options);
  minimal_flow flow;
  mstar::threaded_worker<Model, mstar::host_backend, minimal_flow> worker(engine, flow);

  // Each forward enqueues its work on the step's stream; the host backend runs it on that stream's thread.
  worker.forward<Generate>([](const auto& ctx) {
    const payload* p = ctx.payloads.data();
    const auto rows = ctx.payloads.size();
    const std::int32_t* positions = ctx.template plan<Positions>().positions;
    ctx.backend->enqueue(ctx.stream, [p, rows, positions] {
      for (std::size_t i = 0; i < rows; ++i)
        p[i].tokens[p[i].first] = token_of(p[i].seed, positions[i]);
    });
  });
  worker.forward<Spell>([](const auto& ctx) {
    const payload* p = ctx.payloads.data();
    const auto& plan = ctx.template plan<SpellSum>();
    const auto* pool = &ctx.template resource<SpellSum>();
    const std::int32_t* slots = plan.slots;
    const std::uint32_t rows = plan.rows;
    ctx.backend->enqueue(ctx.stream, [p, pool, slots, rows] {
      for (std::uint32_t i = 0; i < rows; ++i) {
        float* sum = pool->state(0, static_cast<std::uint32_t>(slots[i])); // zero at the request's first window
        for (std::uint32_t t = p[i].first; t < p[i].first + p[i].width; ++t) {
          *sum = static_cast<float>((static_cast<std::uint32_t>(*sum) + p[i].tokens[t]) % 26);
          p[i].text[t] = static_cast<char>('a' + static_cast<std::uint32_t>(*sum));
        }
      }
    });
  });

  worker.start();
  for (std::uint32_t id = 0; id < 6; ++id)
    if (!worker.submit(id, input{.seed = 100 + id, .length = 5 + 3 * id}))
      return std::fprintf(stderr, "mstar_minimal: request %u was not accepted\n", id), 1;
  worker.wait_idle();
  worker.stop();

  for (const auto& [id, text] : flow.texts)
    std::printf("request %llu: %s\n", static_cast<unsigned long long>(id), text.c_str());
  // How the requests were batched depends on timing, so the step counts go to stderr, not to the output.
  const auto& c = worker.counters();
  std::fprintf(stderr, "steps: %llu on the chain, %llu on the side\n",
               static_cast<unsigned long long>(c.chain_steps.load()), static_cast<unsigned long long>(c.side_steps.load()));
  return 0;
}
