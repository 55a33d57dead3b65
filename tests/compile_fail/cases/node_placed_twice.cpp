// expect-rule: node_placed_twice
// expect-node: qwen3_tts::CodecChunk "codec_chunk"
// expect-group: qwen3_tts::Codec "Codec"
// codec_chunk placed in the Talker group as well as in its own. (The model merges the node type
// reached twice into one node, so only node_placed_twice fires.)
#include "qwen3_tts/model.hpp"

// clang-format off
using Talker = mstar::group<"Talker", qwen3_tts::TalkerPrefill, qwen3_tts::TalkerDecode, qwen3_tts::CodecChunk>;
using Gpu0   = mstar::worker<"gpu0", Talker, qwen3_tts::Codec>;
using Model  = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
