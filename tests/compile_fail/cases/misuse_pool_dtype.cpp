// clang-format off
// expect: mstar::recurrent_pool<Key, Dtype, Shape, Layers, Slots>: the state's element type is one of float, mstar::f16, mstar::bf16, std::int32_t and std::uint8_t (dtype.hpp), as a YAML pool's dtype. Way out: pass one of them.
// A recurrent pool of doubles: no dtype names them.
#include "qwen3_tts/model.hpp"

using CodecState = mstar::recurrent_pool<"codec_state", double, mstar::shape<16, 1024>, /*layers=*/8, /*slots=*/257>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
