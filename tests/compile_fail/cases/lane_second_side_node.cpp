// expect-rule: lane_second_side_node
// expect-node: CodecFlush "codec_flush"
// A second side node (a flush stage with a pool of its own) beside codec_chunk on the same worker:
// a worker has one side lane.
#include "qwen3_tts/model.hpp"

// clang-format off
using FlushState = mstar::recurrent_pool<"flush_state", mstar::bf16, mstar::shape<1024>, 1, 257>;
using CodecFlush = mstar::node<"codec_flush", mstar::declares<FlushState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, qwen3_tts::CodecChunk, CodecFlush>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
