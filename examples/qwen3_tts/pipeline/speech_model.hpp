// The real Qwen3-TTS (12 Hz) as mstar policies: the Talker (prefill, decode) on the chain with a paged KV
// cache, attention metadata, positions and a seeded sampler, and the codec decoder (codec_chunk) on a
// side lane with each request's whole streaming state in one recurrent-pool slot.
//
// The Talker's own per-request generation state (the seed, the frame count, the codes chosen so far for the
// repetition penalty, the last frame, the last hidden state) lives in a second pool, talker_state, on the
// chain: the engine gives each request a slot for its life and every step addresses it through the slot of
// each row, so the state follows the request whichever row it lands on. The CUDA forward keeps it there
// (talker_cuda's state row, talker_cuda::state_bytes); the host forward carries it in the request instead
// (its code history is rebuilt every step) and leaves its slot unused.
//
// The codec's state is one flat float32 row per request (codec_state_layout in codec/codec_decoder.hpp:
// every causal convolution's left context, every transposed convolution's previous input, the
// pre-transformer's key/value window and a frame counter), so the pool has one layer whose shape is the
// state's length. Its length depends on the decoder's sizes, which are the same for every released 12 Hz
// model (released_codec_state_floats, checked against the layout by a test); a smaller decoder (the
// random-weight fixtures) uses the first floats of each row. KV blocks and codec slots are template
// parameters: the CUDA build sizes them for the GPU, the host build for a host's memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include <mstar/model/model.hpp>

namespace qwen3_tts::pipeline {

// Floats of one request's codec state at the released decoder's sizes (8 transformer layers of 16 x 64,
// window 72, decoder_dim 1536, upsampling 2 x 2 then 8 x 5 x 4 x 3): 5.2 MB in float32.
inline constexpr std::size_t released_codec_state_floats = 1298500;
// Floats of one request's Talker state at the largest released sizes (hidden 2048, codec vocabulary 3072, 16
// code groups): talker_cuda::state_bytes = 16 + 4 x 16 + 4 x 2048 + 3072 bytes, 11,344 bytes.
inline constexpr std::size_t released_talker_state_floats = 2836;

template <std::size_t CodecStateFloats, std::uint32_t CodecSlots, std::uint32_t KvBlocks>
struct speech_model {
  // clang-format off
  using KvCache    = mstar::kv_cache<"kv_cache", mstar::blocks<KvBlocks>, mstar::block_tokens<16>>;  // paged Talker KV
  using Positions  = mstar::positions<"positions">;                                                  // per-row positions
  using Attention  = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;      // attention metadata
  using Sampler    = mstar::sampler<"sampler">;                                                      // seeded per request
  using CodecState = mstar::recurrent_pool<"codec_state", float, mstar::shape<CodecStateFloats>,
                                           /*layers=*/1, CodecSlots>;                                // codec decoder state
  using TalkerState = mstar::recurrent_pool<"talker_state", float, mstar::shape<released_talker_state_floats>,
                                            /*layers=*/1, CodecSlots>;                               // Talker generation state

  using TalkerPrefill = mstar::node<"talker_prefill",
                                    mstar::declares<KvCache, Attention, Positions, Sampler, TalkerState>,
                                    mstar::walk::chain>;
  using TalkerDecode  = mstar::node<"talker_decode",
                                    mstar::declares<KvCache, Attention, Positions, Sampler, TalkerState>,
                                    mstar::walk::chain | mstar::walk::stop_checks>;
  using CodecChunk    = mstar::node<"codec_chunk", mstar::declares<CodecState>>;

  using Talker = mstar::group<"Talker", TalkerPrefill, TalkerDecode>;   // the chain
  using Codec  = mstar::group<"Codec", mstar::side_stream, CodecChunk>; // beside the chain
  using Gpu0   = mstar::worker<"gpu0", mstar::tp<1>, mstar::sp<1>, mstar::streams<1>, Talker, Codec>;
  using Model  = mstar::model<"qwen3_tts_speech", Gpu0>;
  // clang-format on

  static constexpr std::size_t codec_state_floats = CodecStateFloats;
  static constexpr std::size_t talker_state_floats = released_talker_state_floats;
  static constexpr std::uint32_t codec_slots = CodecSlots;
  static constexpr std::uint32_t kv_blocks = KvBlocks;
  static constexpr std::uint64_t kv_tokens = std::uint64_t(KvBlocks) * 16; // the most one request can hold
  static constexpr std::uint8_t prefill_node = Model::template node_index<TalkerPrefill>;
  static constexpr std::uint8_t decode_node = Model::template node_index<TalkerDecode>;
  static constexpr std::uint8_t codec_node = Model::template node_index<CodecChunk>;
  static_assert(Model::template is_side_node<CodecChunk>, "the codec runs beside the Talker's chain");
};

// The build of synth and serve, on either backend: up to 64 live requests' codec state (338 MB, in host memory
// or on the device) and 2048 KV blocks of 16 tokens (32,768 tokens, shared by the live requests: on the
// device at the 0.6B size 3.8 GB of bf16 K/V; the random-weight fixtures take a few MB).
using host_speech = speech_model<released_codec_state_floats, 65, 2048>;

} // namespace qwen3_tts::pipeline
