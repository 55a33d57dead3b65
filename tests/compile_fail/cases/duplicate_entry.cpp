// expect-rule: duplicate_entry
// expect-node: qwen3_tts::CodecChunk "codec_chunk"
// expect-group: Codec "Codec"
// codec_chunk listed twice in the Codec group: the model merges the repeated type into one node,
// and the validator refuses the list that names it twice, as it does for the same list in YAML.
#include "qwen3_tts/model.hpp"

// clang-format off
using Codec = mstar::group<"Codec", mstar::side_stream, qwen3_tts::CodecChunk, qwen3_tts::CodecChunk>;
using Gpu0  = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
