// expect-compiles
// What README.md says of when the rules fire: the lane_kv_cache case's model, named by an alias that
// nothing uses, compiles (an alias instantiates nothing); lane_kv_cache.cpp, which reads
// Model::verdict, is refused.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<qwen3_tts::CodecState, qwen3_tts::KvCache>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on
