// A program outside mstar that uses it the way a researcher would: include the umbrella header,
// describe a Qwen3-TTS-like model in a block of `using` lines, let the compiler validate it, and
// print each node's lane with its side-lane keys. run_consumers.py builds it against mstar found
// three ways (meson subproject, pkg-config, CMake find_package) and checks what it prints.
#include <mstar/mstar.hpp>

#include <cstdio>
#include <string_view>

// clang-format off
using KvCache    = mstar::kv_cache<"kv_cache", mstar::blocks<4096>, mstar::block_tokens<16>>;
using Positions  = mstar::positions<"positions">;
using Attention  = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;
using Sampler    = mstar::sampler<"sampler">;
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 257>;

using TalkerDecode = mstar::node<"talker_decode", mstar::declares<KvCache, Attention, Positions, Sampler>,
                                 mstar::walk::chain | mstar::walk::stop_checks>;
using CodecChunk   = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Talker       = mstar::group<"Talker", TalkerDecode>;
using Codec        = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Model        = mstar::model<"consumer_tts", mstar::worker<"gpu0", Talker, Codec>>;
// clang-format on

static_assert(Model::verdict.ok(), "the consumer's model must be valid");
static_assert(Model::is_side_node<CodecChunk>, "codec_chunk must take the side lane");

int main() {
  const auto& desc = Model::descriptor;
  std::printf("model %.*s: %s\n", static_cast<int>(Model::name.size()), Model::name.data(),
              Model::verdict.ok() ? "valid" : "refused");
  for (const auto& lane : Model::verdict.lanes) {
    const std::string_view name = desc.nodes[lane.node].name;
    std::printf("%.*s: %s [", static_cast<int>(name.size()), name.data(),
                lane.lane == mstar::lane::side ? "side" : "chain");
    const char* sep = "";
    for (std::string_view key : lane.side_keys) {
      std::printf("%s%.*s", sep, static_cast<int>(key.size()), key.data());
      sep = ", ";
    }
    std::printf("]\n");
  }
  return 0;
}
