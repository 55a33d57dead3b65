// Which causal convolutions of the CUDA codec the CUTLASS implicit-GEMM path takes under
// codec_cuda_math::cutlass_tf32 and cutlass_fp16, and with which tile: plain C++, so that the host tests check the
// rules without a GPU (codec_cuda_conv.hpp runs the convolutions; CUTLASS's own can_implement is checked there, after
// these).
#pragma once

namespace qwen3_tts::implicit_conv {

// A causal convolution of one step as an image convolution: `rows` images of 1 x (context + width) positions of
// `in` channels, back to back (k::extend's extended input where every row of the step holds the same window), `out`
// filters of 1 x taps at `dilation`, stride 1, no padding; so rows x width outputs, the compact activation y.
struct conv_shape {
  int rows = 0;  // images: the step's rows, all of one width
  int width = 0; // output positions a row: its frames x the level's positions a frame
  int context = 0;
  int in = 0, out = 0;
  int taps = 1, dilation = 1;
};

// The operands' type: float32 rounded to TF32 by the tensor cores (cutlass_tf32), or fp16 (cutlass_fp16).
enum class conv_operands { tf32, fp16 };

// Channels one access moves (16 bytes: four floats, eight halves): CUTLASS reads the input channels in groups of
// it. The output is float32 under both.
constexpr int channel_alignment(conv_operands op) { return op == conv_operands::fp16 ? 8 : 4; }
inline constexpr int output_alignment = 4;

// The codec's reasons to keep a convolution on the im2col + cuBLAS path, or nullptr. Checked before CUTLASS's own
// (implicit_conv::refusal adds those): a step whose rows differ in width is no set of equal images (rows 0 here), one
// tap is a plain product, and CUTLASS's kernels read the input channels (of the input and of the filters) in 16-byte
// groups, four floats or eight halves, and write the float32 output four channels at a time.
constexpr const char* shape_refusal(const conv_shape& s, conv_operands op = conv_operands::tf32) {
  if (s.rows < 1) return "the step's rows differ in width (no equal images), or there are none";
  if (s.width < 1) return "no output positions";
  if (s.taps < 2) return "one tap: a plain product, not a convolution";
  if (s.context != (s.taps - 1) * s.dilation) return "the left context is not (taps - 1) x dilation positions";
  if (s.in % channel_alignment(op) != 0)
    return op == conv_operands::fp16 ? "the input channels are not a multiple of 8 (fp16 operands)"
                                     : "the input channels are not a multiple of 4";
  if (s.out % output_alignment != 0) return "the output channels are not a multiple of 4";
  return nullptr;
}

// CUTLASS's tile over the output channels: 128 a block, or 64 where that pads the last block less (192 channels:
// three full blocks of 64 against two of 128, the second half empty). A tie keeps 128 (fewer reads of the input).
enum class conv_tile { n128, n64 };
constexpr conv_tile tile_for(int out) {
  const int pad128 = (128 - out % 128) % 128, pad64 = (64 - out % 64) % 64;
  return pad64 < pad128 ? conv_tile::n64 : conv_tile::n128;
}

// The output positions a CUTLASS tile covers (its M: codec_cuda_conv.cu's threadblock shapes).
inline constexpr int tile_positions = 128;

// Threadblocks CUTLASS launches for the shape: its output positions over tile_positions, times its output channels
// over the tile's (tile_for). The kernels do not split the sums over the inputs, so a shape of few tiles leaves most
// SMs idle on long sums where cuBLAS's products would split them: the CUTLASS maths take a convolution only from a
// least tile count (codec_cuda_limits::cutlass_min_tiles).
constexpr long long tiles(const conv_shape& s) {
  const long long positions = static_cast<long long>(s.rows) * s.width;
  const int n = tile_for(s.out) == conv_tile::n64 ? 64 : 128;
  return (positions + tile_positions - 1) / tile_positions * ((s.out + n - 1) / n);
}

} // namespace qwen3_tts::implicit_conv
