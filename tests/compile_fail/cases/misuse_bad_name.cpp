// clang-format off
// expect: mstar: a name (of a model, resource, node, group or worker) has 1 to 64 characters among letters, digits, '_', '.' and '-', as in YAML. Way out: rename it.
// A node whose name holds a space, which a YAML config refuses alike (bad_name).
#include "qwen3_tts/model.hpp"

using CodecChunk = mstar::node<"codec chunk", mstar::declares<qwen3_tts::CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
