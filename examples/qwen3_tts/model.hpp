// The Qwen3-TTS-shaped model as compile-time policies: a Talker (prefill and decode, on the chain)
// and a Codec (codec_chunk, on a side lane) colocated on one worker. configs/qwen3tts.yaml describes
// the same model; tests/core/config_test.cpp checks that the two descriptors are equal.
//
// Sizes follow the Qwen3-TTS 12 Hz models: 12.5 codec frames per second, 16 codebooks per frame,
// 24 kHz audio (1920 samples per frame). The codec's recurrent state per request: 8 decoder layers
// of a [16 x 1024] bf16 state (a causal conv/attention cache), 32 KiB per layer.
#pragma once

#include <mstar/model/model.hpp>

namespace qwen3_tts {

inline constexpr double frames_per_second = 12.5;
inline constexpr int codebooks = 16;
inline constexpr int sample_rate = 24000;
inline constexpr int samples_per_frame = 1920;

// clang-format off
using KvCache    = mstar::kv_cache<"kv_cache", mstar::blocks<8192>, mstar::block_tokens<16>>;  // paged Talker KV
using Positions  = mstar::positions<"positions">;                                               // per-row positions
using Attention  = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;   // attention metadata
using Sampler    = mstar::sampler<"sampler">;                                                   // seeded per request
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>,
                                         /*layers=*/8, /*slots=*/257>;                          // codec decoder state

using TalkerPrefill = mstar::node<"talker_prefill", mstar::declares<KvCache, Attention, Positions, Sampler>,
                                  mstar::walk::chain>;
using TalkerDecode  = mstar::node<"talker_decode", mstar::declares<KvCache, Attention, Positions, Sampler>,
                                  mstar::walk::chain | mstar::walk::stop_checks>;
using CodecChunk    = mstar::node<"codec_chunk", mstar::declares<CodecState>>;

using Talker = mstar::group<"Talker", TalkerPrefill, TalkerDecode>;                // the chain
using Codec  = mstar::group<"Codec", mstar::side_stream, CodecChunk>;             // beside the chain
using Gpu0   = mstar::worker<"gpu0", mstar::tp<1>, mstar::sp<1>, mstar::streams<1>, Talker, Codec>;
using Model  = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

} // namespace qwen3_tts
