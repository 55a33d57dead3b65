// Which convolutions the CUDA codec's CUTLASS path takes under codec_cuda_math::cutlass_tf32 and cutlass_fp16
// (codec_conv_shape.hpp):
// host rules, checked here without a GPU or CUTLASS, at the released size and against the refusals that keep a
// convolution on the im2col path. CUTLASS's own can_implement comes after these (the GPU tests).
#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "codec_conv_shape.hpp"
#include "codec_random.hpp"
#include "codec_weights.hpp"

using namespace qwen3_tts;
using implicit_conv::conv_shape;
using implicit_conv::conv_tile;
using implicit_conv::shape_refusal;
using implicit_conv::tile_for;

namespace {

// A causal convolution of `taps` at `dilation` over a step of 8 rows of 4 frames at `level` positions a frame.
constexpr conv_shape step_of(int in, int out, int taps, int dilation, int level) {
  return {8, 4 * level, (taps - 1) * dilation, in, out, taps, dilation};
}

} // namespace

static_assert(shape_refusal(step_of(512, 1024, 3, 1, 1)) == nullptr, "the rules are constexpr");
static_assert(tile_for(192) == conv_tile::n64);

TEST_CASE("the CUTLASS path takes every multi-tap convolution of the released codec but the one-channel decoder_out") {
  // The decoder's multi-tap convolutions as codec_weights builds them: pre_conv (3 taps), decoder_in (7), each
  // block's residual units' conv1 (7 taps at dilations 1, 3, 9), decoder_out (7 taps to one channel).
  const codec_config c = released_codec_config();
  int level = 1;
  for (int r : c.upsampling_ratios)
    level *= r;
  CHECK(shape_refusal(step_of(c.codebook_dim, c.latent_dim, 3, 1, 1)) == nullptr);
  CHECK(shape_refusal(step_of(c.latent_dim, c.decoder_dim, 7, 1, level)) == nullptr);
  for (std::size_t b = 0; b < c.upsample_rates.size(); ++b) {
    level *= c.upsample_rates[b];
    for (int dilation : codec_unit_dilations) {
      CAPTURE(b);
      CAPTURE(dilation);
      CHECK(shape_refusal(step_of(c.block_out_dim(b), c.block_out_dim(b), 7, dilation, level)) == nullptr);
    }
  }
  CHECK(level == c.samples_per_frame());
  const int last = c.block_out_dim(c.upsample_rates.size() - 1);
  CHECK(last == 96);
  CHECK(std::string(shape_refusal(step_of(last, 1, 7, 1, level))).find("output channels") != std::string::npos);
}

TEST_CASE("a step of rows of different widths, one tap, a context other than (taps - 1) x dilation and channels not a "
          "multiple of 4 keep a convolution on the im2col path, each saying why") {
  const conv_shape fine = step_of(96, 96, 7, 9, 1920);
  REQUIRE(shape_refusal(fine) == nullptr);
  auto refused = [](conv_shape s, const char* why) {
    CAPTURE(why);
    const char* said = shape_refusal(s);
    REQUIRE(said != nullptr);
    CHECK(std::string(said).find(why) != std::string::npos);
  };
  conv_shape s = fine;
  s.rows = 0; // row_table::uniform_rows of a step of several widths
  refused(s, "differ in width");
  s = fine;
  s.width = 0;
  refused(s, "no output positions");
  s = fine;
  s.taps = 1;
  s.context = 0;
  refused(s, "one tap");
  s = fine;
  s.context = 6 * 9 - 1;
  refused(s, "(taps - 1) x dilation");
  s = fine;
  s.in = 6; // tiny17's last block
  refused(s, "input channels");
  s = fine;
  s.out = 6;
  refused(s, "output channels");
}

TEST_CASE("over fp16 operands the CUTLASS path takes the released codec's multi-tap convolutions and wants the input "
          "channels in eights") {
  using implicit_conv::conv_operands;
  const codec_config c = released_codec_config();
  int level = 1;
  for (int r : c.upsampling_ratios)
    level *= r;
  CHECK(shape_refusal(step_of(c.codebook_dim, c.latent_dim, 3, 1, 1), conv_operands::fp16) == nullptr);
  CHECK(shape_refusal(step_of(c.latent_dim, c.decoder_dim, 7, 1, level), conv_operands::fp16) == nullptr);
  for (std::size_t b = 0; b < c.upsample_rates.size(); ++b) {
    level *= c.upsample_rates[b];
    CAPTURE(b);
    CHECK(shape_refusal(step_of(c.block_out_dim(b), c.block_out_dim(b), 7, 1, level), conv_operands::fp16) == nullptr);
  }
  // 12 input channels (tiny17's third block): four-float groups, not eight-half ones.
  const conv_shape twelve = step_of(12, 12, 7, 1, 12);
  CHECK(shape_refusal(twelve) == nullptr);
  const char* said = shape_refusal(twelve, conv_operands::fp16);
  REQUIRE(said != nullptr);
  CHECK(std::string(said).find("multiple of 8 (fp16 operands)") != std::string::npos);
  // The output is float32 under both: 12 output channels from 16 input channels are taken.
  CHECK(shape_refusal(step_of(16, 12, 7, 1, 12), conv_operands::fp16) == nullptr);
  CHECK(implicit_conv::channel_alignment(conv_operands::tf32) == 4);
  CHECK(implicit_conv::channel_alignment(conv_operands::fp16) == 8);
}

TEST_CASE("CUTLASS's tile over the output channels is the one that pads the last block least, 128 on a tie") {
  CHECK(tile_for(1536) == conv_tile::n128);
  CHECK(tile_for(1024) == conv_tile::n128);
  CHECK(tile_for(768) == conv_tile::n128);
  CHECK(tile_for(384) == conv_tile::n128);
  CHECK(tile_for(192) == conv_tile::n64); // three blocks of 64, not two of 128 with one half empty
  CHECK(tile_for(96) == conv_tile::n128); // 32 channels of padding either way
  CHECK(tile_for(32) == conv_tile::n64);  // the fixtures' sizes
  CHECK(tile_for(24) == conv_tile::n64);
  CHECK(tile_for(8) == conv_tile::n64);
}

TEST_CASE("a convolution's CUTLASS threadblocks: its positions over 128 times its output channels over the tile's") {
  using implicit_conv::tiles;
  const codec_config c = released_codec_config();
  const int last = c.block_out_dim(c.upsample_rates.size() - 1); // 96 channels: one tile of 128 (a tie keeps 128)
  // One row of one frame at the last level: 1,920 positions, 15 tiles; the widest convolution at that step, under
  // any GPU's wave of SMs (so the codec leaves every convolution of it to cuBLAS by default).
  CHECK(tiles({1, c.samples_per_frame(), 6, last, last, 7, 1}) == 15);
  // 8 rows of 4 frames: 61,440 positions, 480 tiles.
  CHECK(tiles(step_of(last, last, 7, 1, c.samples_per_frame())) == 480);
  // pre_conv at 8 rows of 4 frames: 32 positions (one tile of 128) x 1,024 channels (8 tiles of 128).
  CHECK(tiles(step_of(c.codebook_dim, c.latent_dim, 3, 1, 1)) == 8);
  // 192 channels take tiles of 64: three of them; 129 positions take two of 128.
  CHECK(tiles({1, 129, 6, 192, 192, 7, 1}) == 6);
  // Past 2^31 positions x tiles the count does not wrap.
  CHECK(tiles({65535, 65535, 6, 1024, 1024, 7, 1}) == (65535LL * 65535 + 127) / 128 * 8);
}
