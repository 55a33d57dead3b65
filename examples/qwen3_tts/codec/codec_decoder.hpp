// The 12 Hz codec decoder on the host in float32 (dot products and convolutions sum in double), computed
// as the reference (qwen-tts 0.1.1, Qwen3TTSTokenizerV2Decoder.forward) computes it, and streamed window
// by window with exact state.
//
// A request's whole carried state is one flat float32 buffer (codec_state_layout: named segments,
// each 16-byte aligned): a frame counter (RoPE positions and the attention window's fill), the left
// context of every causal convolution (the input frames its kernel still needs), the previous input
// frame of every overlapping transposed convolution (from which its overlap into this window is
// recomputed: fewer floats than the overlap itself, the same arithmetic), and the pre-transformer's
// keys and values of the last sliding_window - 1 frames per layer. An all-zero buffer is a fresh
// request: the reference pads every convolution with zeros on the left, and the counter at 0 says the
// key/value window is empty. Nothing of a request lives in the decoder object, so one decoder serves
// every row of every step, and rows of a step are independent.
//
// Each output sample is computed with the same operations in the same order whatever the window
// split, so streaming any ramp gives the same bits as decode_all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec_config.hpp"
#include "codec_weights.hpp"

namespace qwen3_tts {

struct codec_state_segment {
  std::string name;    // the checkpoint module it belongs to, e.g. "decoder.2.block.3.conv1"
  std::size_t offset;  // in floats from the start of the buffer (a multiple of 4: 16 bytes)
  std::size_t size;    // in floats
};

struct codec_state_layout {
  std::vector<codec_state_segment> segments;
  std::size_t total = 0; // floats per request
  std::size_t bytes() const { return total * sizeof(float); }
  const codec_state_segment& find(std::string_view name) const;
};

codec_state_layout make_codec_state_layout(const codec_config& config);

// The released 12 Hz decoder's state (8 layers of hidden 512, 16 key/value heads of 64, window 72,
// latent 1024, decoder_dim 1536, rates 8-5-4-3 after 2-2), for pools declared at compile time:
// 1,163,264 floats of keys and values (16 segments of 71 x 1024) and 135,236 of counter and
// convolution contexts (segments padded to 16 bytes). A test checks it against make_codec_state_layout.
inline constexpr std::size_t codec_released_state_floats = 1'298'500;

class codec_decoder {
public:
  // One row of a batched step: its state, its frames ([n][num_quantizers] codes) and room for
  // n * samples_per_frame() samples.
  struct row {
    std::span<float> state;
    std::span<const std::int32_t> frames;
    std::span<float> audio;
  };

  codec_decoder(codec_config config, codec_weights weights);

  const codec_config& config() const { return config_; }
  const codec_weights& weights() const { return weights_; } // what the CUDA decoder uploads
  const codec_state_layout& state_layout() const { return layout_; }
  std::size_t samples_per_frame() const { return std::size_t(config_.samples_per_frame()); }

  // Decodes the next frames of the request whose state this is, and advances the state. Throws,
  // naming the frame and codebook, on a code outside [0, codebook_size) (control ids such as the end
  // token must not reach the decoder); the state is left untouched then.
  void decode_window(std::span<float> state, std::span<const std::int32_t> frames, std::span<float> audio) const;
  std::vector<float> decode_window(std::span<float> state, std::span<const std::int32_t> frames) const;

  // The rows one after the other: each row's audio is what decode_window gives it alone.
  void decode_step(std::span<const row> rows) const;

  // The whole sequence from a fresh state: the reference's forward(codes) (not its chunked_decode).
  // Working memory grows with the window (at the released size about 4 MB a frame in the last
  // decoder block), so long requests go through windows (decode_ramp), as the engine runs them.
  std::vector<float> decode_all(std::span<const std::int32_t> frames) const;

  // Checks frames' shape and code range; throws with the frame, codebook and value at fault.
  void check_frames(std::span<const std::int32_t> frames) const;

private:
  codec_config config_;
  codec_weights weights_;
  codec_state_layout layout_;
  std::vector<float> inv_freq_; // RoPE: theta^(-2i / head_dim), as the reference rounds it (float32)
};

// Streams frames through one fresh state in windows of ramp[0], ramp[1], ... frames, the last width
// repeating (the codec_chunk node's width ramp); the audio of all windows, in order.
std::vector<float> decode_ramp(const codec_decoder& decoder, std::span<const std::int32_t> frames,
                               std::span<const int> ramp);

} // namespace qwen3_tts
