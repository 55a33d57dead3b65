// The synthetic Qwen3-TTS model's output arithmetic: how a Talker step turns (request seed, sampler
// step, position) into a 16-code frame, and how the codec turns frames into 24 kHz audio while
// carrying its decoder state from one frame to the next. Every function here is integer arithmetic,
// `__host__ __device__` under nvcc, so the CUDA kernels (forward_cuda.cu) and the host backend
// (forward.hpp) compute the same bytes, and no result depends on how rows are batched.
//
// Why integers: the realistic GPU cost of the model comes from cuBLAS GEMMs (forward_cuda.cu), and
// cuBLAS may pick a different algorithm or split-K for a different batch size M, which changes float
// results in the last bits. So nothing the client receives is derived from a GEMM: the codes come
// from Philox draws over an integer code distribution, the audio from an integer recurrence over
// the codec state. Integer sums are exact in any order, so a parallel reduction on the GPU and a
// serial loop on the host agree bit for bit.
#pragma once

#include <cstdint>

#include <mstar/resources/sampler.hpp> // philox4x32_10, sampler_row, MSTAR_HOST_DEVICE

namespace qwen3_tts::synth {

inline constexpr std::uint32_t vocab = 2048;         // codes per codebook (the 12 Hz tokenizer's codebook size)
inline constexpr std::uint32_t codebooks = 16;       // codes per frame
inline constexpr std::uint32_t codec_layers = 8;     // codec_state layers
inline constexpr std::uint32_t codec_channels = 16;  // codec_state shape<16, 1024>
inline constexpr std::uint32_t codec_width = 1024;
inline constexpr std::uint32_t layer_elems = codec_channels * codec_width;
inline constexpr std::uint32_t samples_per_frame = 1920; // 24 kHz / 12.5 frames per second

// One Talker output: 16 codes in [0, vocab).
struct frame {
  std::uint16_t code[codebooks];
  friend constexpr bool operator==(const frame&, const frame&) = default;
};
static_assert(sizeof(frame) == 32);

// lowbias32 (Chris Wellons' integer hash): a cheap, well-mixed 32-bit permutation.
MSTAR_HOST_DEVICE constexpr std::uint32_t hash32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// ---- the Talker's sampling head ----

// Unnormalized weight (1..256) of code k in codebook c for a token at position pos: the synthetic
// "logits", a different distribution for every codebook and for 64 position phases.
MSTAR_HOST_DEVICE constexpr std::uint32_t code_weight(std::uint32_t c, std::uint32_t pos, std::uint32_t k) {
  return 1u + (hash32((c << 22) ^ ((pos & 63u) << 16) ^ k ^ 0x5bd1e995u) >> 24);
}

// The 32-bit Philox draw for codebook c of a row's step: counter (step, c / 4, 'TALK', 0), key = the
// request's seed. It depends on the request's seed and sampler step alone, never on the row index.
MSTAR_HOST_DEVICE constexpr std::uint32_t code_draw(const mstar::sampler_row& r, std::uint32_t c) {
  const auto out = mstar::philox4x32_10(mstar::philox_block{{r.step, c / 4u, 0x54414c4bu, 0u}},
                                        std::uint32_t(r.seed), std::uint32_t(r.seed >> 32));
  return out.v[c % 4u];
}

// Where the inverse-CDF draw lands in [0, total): exact, 64-bit.
MSTAR_HOST_DEVICE constexpr std::uint32_t code_target(std::uint32_t draw, std::uint32_t total) {
  return std::uint32_t((std::uint64_t(draw) * total) >> 32);
}

// Host reference of the sampling head: the first code whose running weight exceeds the target.
// (The CUDA kernel computes the same with a warp scan: integer prefix sums are order-free.)
constexpr std::uint16_t sample_code(const mstar::sampler_row& r, std::uint32_t pos, std::uint32_t c) {
  std::uint32_t total = 0;
  for (std::uint32_t k = 0; k < vocab; ++k)
    total += code_weight(c, pos, k);
  const std::uint32_t target = code_target(code_draw(r, c), total);
  std::uint32_t acc = 0;
  for (std::uint32_t k = 0; k < vocab; ++k) {
    acc += code_weight(c, pos, k);
    if (target < acc) return static_cast<std::uint16_t>(k);
  }
  return static_cast<std::uint16_t>(vocab - 1);
}

constexpr frame sample_frame(const mstar::sampler_row& r, std::uint32_t pos) {
  frame f{};
  for (std::uint32_t c = 0; c < codebooks; ++c)
    f.code[c] = sample_code(r, pos, c);
  return f;
}

// ---- the codec ----
// State: 8 layers of [16 channels][1024] 16-bit words per request (the codec_state pool's bf16
// elements, used as integer words: the pool and its kernels copy bytes, and integer words keep the
// recurrence exact). Per frame, layer by layer: every word is replaced by a hash of its old value
// and an input (layer 0: the frame's code for its channel; layer l: two words of layer l's new
// predecessor, one permuted within the channel, one from the next channel), then the frame's 1920
// samples are read off the last layer. So every sample depends on every earlier frame through the
// state, and decoding a request window by window gives the same bytes however the windows are cut.

// Input of layer 0, channel c, word j, for code `code`.
MSTAR_HOST_DEVICE constexpr std::uint32_t codec_input(std::uint32_t code, std::uint32_t c, std::uint32_t j) {
  return hash32(code * codebooks + c) ^ (j * 0x9E3779B1u);
}

// Word j of channel c of layer l >= 1 reads these words of layer l - 1 (after its update).
MSTAR_HOST_DEVICE constexpr std::uint32_t codec_tap(std::uint32_t l, std::uint32_t j) {
  return (j * 389u + 7u * l) & (codec_width - 1u);
}

// Layer l >= 1's input from its predecessor's words `a` (channel c, codec_tap) and `b` (channel c + 1, j).
MSTAR_HOST_DEVICE constexpr std::uint32_t codec_mix(std::uint16_t a, std::uint16_t b) {
  return std::uint32_t(a) | (std::uint32_t(b) << 16);
}

// The new value of a state word.
MSTAR_HOST_DEVICE constexpr std::uint16_t codec_update(std::uint16_t old, std::uint32_t input, std::uint32_t l) {
  const std::uint32_t v = hash32((std::uint32_t(old) * 0x9E3Bu) ^ input ^ (l * 0x01000193u));
  return static_cast<std::uint16_t>(v ^ (v >> 16));
}

// Word of the last layer that sample t reads for channel c.
MSTAR_HOST_DEVICE constexpr std::uint32_t audio_tap(std::uint32_t t, std::uint32_t c) {
  return (t * 13u + c * 61u) & (codec_width - 1u);
}

// Sample t from the 16 words audio_tap(t, c) of the last layer (integer sum, clamped to int16).
MSTAR_HOST_DEVICE constexpr std::int16_t audio_sample(std::int32_t sum) {
  return static_cast<std::int16_t>(sum > 32767 ? 32767 : (sum < -32768 ? -32768 : sum));
}
MSTAR_HOST_DEVICE constexpr std::int32_t audio_term(std::uint16_t word) {
  return std::int32_t(std::int16_t(word)) / 16; // division, not a shift: defined the same everywhere
}

// Host reference: decode `width` frames for one row whose state is `state` ([layers][16 * 1024]
// words, layer l at state + l * layer_stride), writing width * 1920 samples to `audio`.
inline void codec_decode_row(std::uint16_t* state, std::size_t layer_stride, const frame* frames,
                             std::uint32_t width, std::int16_t* audio) {
  for (std::uint32_t f = 0; f < width; ++f) {
    for (std::uint32_t l = 0; l < codec_layers; ++l) {
      std::uint16_t* const s = state + l * layer_stride;
      const std::uint16_t* const p = l == 0 ? nullptr : state + (l - 1) * layer_stride;
      for (std::uint32_t c = 0; c < codec_channels; ++c)
        for (std::uint32_t j = 0; j < codec_width; ++j) {
          const std::uint32_t in =
              l == 0 ? codec_input(frames[f].code[c], c, j)
                     : codec_mix(p[c * codec_width + codec_tap(l, j)], p[((c + 1) % codec_channels) * codec_width + j]);
          s[c * codec_width + j] = codec_update(s[c * codec_width + j], in, l);
        }
    }
    const std::uint16_t* const last = state + (codec_layers - 1) * layer_stride;
    for (std::uint32_t t = 0; t < samples_per_frame; ++t) {
      std::int32_t sum = 0;
      for (std::uint32_t c = 0; c < codec_channels; ++c)
        sum += audio_term(last[c * codec_width + audio_tap(t, c)]);
      audio[std::size_t(f) * samples_per_frame + t] = audio_sample(sum);
    }
  }
}

} // namespace qwen3_tts::synth
