// CUTLASS's implicit-GEMM convolutions for the CUDA codec (codec_cuda_conv.hpp says what they compute). The CUTLASS
// 2.x convolution API (DefaultConv2dFprop, ImplicitGemmConvolution), compiled for sm_80's TF32 tensor-core MMA, which
// sm_90 runs: a causal convolution of a step is an NHWC image convolution with H = 1, one image a row.
//
// Two tiles, picked by the output channels (tile_for): 128 x 128 x 16 and 128 x 64 x 16, four stages, warps of
// 64 x 64 and 64 x 32, the TF32 instruction 16 x 8 x 8. The bias is the epilogue's source C, a tensor of zero strides
// (every output row reads the same `out` floats; CUTLASS's example 12_gemm_bias_relu does this with ldc = 0), beta 1.
#include "codec_cuda_conv.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#if QWEN3TTS_HAVE_CUTLASS
#include <cutlass/conv/conv2d_problem_size.h>
#include <cutlass/conv/device/implicit_gemm_convolution.h>
#include <cutlass/conv/kernel/default_conv2d_fprop.h>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>
#endif

namespace qwen3_tts::implicit_conv {

#if QWEN3TTS_HAVE_CUTLASS

namespace {

// One convolution kernel: float32 NHWC in, KRSC weights, NHWC out, TF32 on the tensor cores, the bias as C.
template <class Threadblock, class Warp>
using fprop = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dFprop<
    float, cutlass::layout::TensorNHWC,                                   // the extended input
    float, cutlass::layout::TensorNHWC,                                   // the weights, [out][1][taps][in]
    float, cutlass::layout::TensorNHWC,                                   // the output (and the bias, as C)
    float,                                                                // the accumulator
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,                  // float operands: TF32 MMA
    Threadblock, Warp, cutlass::gemm::GemmShape<16, 8, 8>,                // the tile, the warp's, the instruction's
    cutlass::epilogue::thread::LinearCombination<float, 4, float, float>, // alpha x product + beta x C, 4 a store
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,         // tiles in launch order
    4,                                                                    // pipeline stages
    cutlass::arch::OpMultiplyAdd,                                         // plain TF32 (not 3xTF32)
    cutlass::conv::IteratorAlgorithm::kOptimized,                         // taps <= 32
    cutlass::conv::StrideSupport::kUnity,                                 // stride 1
    channel_alignment, channel_alignment>::Kernel>;

using fprop_n128 = fprop<cutlass::gemm::GemmShape<128, 128, 16>, cutlass::gemm::GemmShape<64, 64, 16>>;
using fprop_n64 = fprop<cutlass::gemm::GemmShape<128, 64, 16>, cutlass::gemm::GemmShape<64, 32, 16>>;

template <class Conv>
typename Conv::Arguments arguments(const conv_shape& s, const float* ext, const float* w, const float* bias, float* y) {
  using cutlass::layout::TensorNHWC;
  const cutlass::conv::Conv2dProblemSize problem(s.rows, 1, s.context + s.width, s.in, // N, H, W, C
                                                 s.out, 1, s.taps,                     // K, R, S
                                                 1, s.width,                           // P, Q
                                                 0, 0,                                 // padding
                                                 1, 1,                                 // stride
                                                 1, s.dilation,                        // dilation
                                                 cutlass::conv::Mode::kCrossCorrelation);
  const TensorNHWC input = TensorNHWC::packed({s.rows, 1, s.context + s.width, s.in});
  const TensorNHWC filter = TensorNHWC::packed({s.out, 1, s.taps, s.in});
  const TensorNHWC output = TensorNHWC::packed({s.rows, 1, s.width, s.out});
  const TensorNHWC broadcast(TensorNHWC::Stride(0)); // every output position reads bias[0..out)
  return {problem,
          {const_cast<float*>(ext), input},
          {const_cast<float*>(w), filter},
          {const_cast<float*>(bias), broadcast},
          {y, output},
          {1.0f, 1.0f}}; // y = product + bias
}

template <class Conv>
const char* cutlass_refusal(const conv_shape& s) {
  // No pointers: can_implement reads only the sizes.
  const typename Conv::Arguments args = arguments<Conv>(s, nullptr, nullptr, nullptr, nullptr);
  switch (Conv::can_implement(args)) {
  case cutlass::Status::kSuccess: break;
  case cutlass::Status::kErrorMisalignedOperand: return "CUTLASS: a misaligned operand";
  case cutlass::Status::kErrorInvalidProblem:
    return "CUTLASS: an invalid problem (a tensor of 2 GiB or more, or a grid too large)";
  case cutlass::Status::kErrorNotSupported: return "CUTLASS: not supported (more than 32 taps)";
  default: return "CUTLASS: can_implement refused the problem";
  }
  // No workspace is passed: one split of the reduction needs none.
  if (Conv::get_workspace_size(args) != 0) return "CUTLASS: the convolution needs a workspace";
  return nullptr;
}

// The kernel's shared memory, dynamic: above 48 KiB it must be allowed once per device (prepare), as
// ImplicitGemmConvolution::initialize does before each launch.
template <class Conv>
constexpr int shared_bytes = int(sizeof(typename Conv::UnderlyingKernel::SharedStorage));

template <class Conv>
void allow_shared_memory() {
  if constexpr (shared_bytes<Conv> >= (48 << 10)) {
    const cudaError_t e = cudaFuncSetAttribute(cutlass::Kernel<typename Conv::UnderlyingKernel>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes<Conv>);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("qwen3_tts CUDA codec: cudaFuncSetAttribute (a CUTLASS convolution's ") +
                               std::to_string(shared_bytes<Conv>) +
                               " bytes of shared memory) failed: " + cudaGetErrorString(e));
  }
}

// ImplicitGemmConvolution::run's launch, without initialize's cudaFuncSetAttribute (prepare made it once): nothing
// but the kernel reaches the stream or the driver, so a capture sees one kernel node.
template <class Conv>
void launch(const conv_shape& s, const float* ext, const float* w, const float* bias, float* y, cudaStream_t st) {
  using kernel = typename Conv::UnderlyingKernel;
  const typename kernel::Params params(arguments<Conv>(s, ext, w, bias, y), nullptr);
  const dim3 grid = typename Conv::ThreadblockSwizzle().get_grid_shape(params.grid_tiled_shape);
  cutlass::Kernel<kernel><<<grid, dim3(32 * Conv::kWarpCount), shared_bytes<Conv>, st>>>(params);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts CUDA codec: the CUTLASS convolution of ") + std::to_string(s.in) +
                             " to " + std::to_string(s.out) + " channels, " + std::to_string(s.taps) +
                             " taps, failed to launch: " + cudaGetErrorString(e));
}

} // namespace

bool available() { return true; }

void prepare() {
  allow_shared_memory<fprop_n128>();
  allow_shared_memory<fprop_n64>();
}

const char* refusal(const conv_shape& s) {
  if (const char* why = shape_refusal(s)) return why;
  return tile_for(s.out) == conv_tile::n64 ? cutlass_refusal<fprop_n64>(s) : cutlass_refusal<fprop_n128>(s);
}

void run(const conv_shape& s, const float* ext, const float* w, const float* bias, float* y, cudaStream_t st) {
  if (const char* why = refusal(s))
    throw std::logic_error(std::string("qwen3_tts CUDA codec: a convolution CUTLASS does not take: ") + why);
  for (const void* p : {static_cast<const void*>(ext), static_cast<const void*>(w), static_cast<const void*>(bias),
                        static_cast<const void*>(y)})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::logic_error("qwen3_tts CUDA codec: a CUTLASS convolution's operand is not 16-byte aligned");
  if (tile_for(s.out) == conv_tile::n64)
    launch<fprop_n64>(s, ext, w, bias, y, st);
  else
    launch<fprop_n128>(s, ext, w, bias, y, st);
}

#else // no CUTLASS at build time: the math is refused where a decoder is built (codec_cuda's constructor)

bool available() { return false; }

void prepare() {
  throw std::invalid_argument("qwen3_tts CUDA codec: CUTLASS was not found at build time (bash scripts/cutlass.sh)");
}

const char* refusal(const conv_shape&) { return "CUTLASS was not found at build time"; }

void run(const conv_shape&, const float*, const float*, const float*, float*, cudaStream_t) {
  throw std::logic_error("qwen3_tts CUDA codec: a CUTLASS convolution in a build without CUTLASS");
}

#endif

} // namespace qwen3_tts::implicit_conv
