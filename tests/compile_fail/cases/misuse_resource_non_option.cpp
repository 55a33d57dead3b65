// clang-format off
// expect: mstar: a resource takes resource options only (mstar::depends_on<...>, mstar::no_preplan, mstar::kv_keyed_snapshots, and for a KV cache mstar::blocks<N> and mstar::block_tokens<N>). Way out: pass the option's type; a recurrent pool's dtype, shape, layers and slots are its own template arguments.
// expect-text: mstar::f16
// A recurrent pool given a second element type among its options.
#include "qwen3_tts/model.hpp"

using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, /*layers=*/8, /*slots=*/257, mstar::f16>;
using CodecChunk = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Codec      = mstar::group<"Codec", mstar::side_stream, CodecChunk>;
using Gpu0       = mstar::worker<"gpu0", qwen3_tts::Talker, Codec>;
using Model      = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
