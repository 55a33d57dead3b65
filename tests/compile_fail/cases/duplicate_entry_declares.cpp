// expect-rule: duplicate_entry
// expect-node: CodecChunk "codec_chunk"
// expect-resource: qwen3_tts::CodecState "codec_state"
// codec_chunk declares its state pool twice.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<qwen3_tts::CodecState, qwen3_tts::CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
