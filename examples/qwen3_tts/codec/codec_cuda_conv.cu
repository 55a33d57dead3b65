// CUTLASS's implicit-GEMM convolutions for the CUDA codec (codec_cuda_conv.hpp says what they compute). The CUTLASS
// 2.x convolution API (DefaultConv2dFprop, ImplicitGemmConvolution), compiled for sm_80's tensor-core MMA, which sm_90
// runs: a causal convolution of a step is an NHWC image convolution with H = 1, one image a row.
//
// Two operand types: float32 through the TF32 instruction 16 x 8 x 8 (tiles 16 deep), and fp16 through the fp16
// instruction 16 x 8 x 16 (tiles 32 deep: the same bytes a stage). Two tiles each, picked by the output channels
// (tile_for): 128 x 128 and 128 x 64, four stages, warps of 64 x 64 and 64 x 32. Float32 sums and output under both.
// The bias is the epilogue's source C, a tensor of zero strides (every output row reads the same `out` floats;
// CUTLASS's example 12_gemm_bias_relu does this with ldc = 0), beta 1.
#include "codec_cuda_conv.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

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

// One convolution kernel: NHWC in of element E (float or cutlass::half_t), KRSC weights of E, float32 NHWC out, on
// the tensor cores (TF32 for float), the bias as C.
template <class E>
constexpr conv_operands operands_of = std::is_same_v<E, float> ? conv_operands::tf32 : conv_operands::fp16;
template <class E>
constexpr int instruction_k = operands_of<E> == conv_operands::tf32 ? 8 : 16;
template <class E, int N, int WarpN>
using fprop = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dFprop<
    E, cutlass::layout::TensorNHWC,                                       // the extended input
    E, cutlass::layout::TensorNHWC,                                       // the weights, [out][1][taps][in]
    float, cutlass::layout::TensorNHWC,                                   // the output (and the bias, as C)
    float,                                                                // the accumulator
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,                  // TF32 MMA for float, fp16 for half
    cutlass::gemm::GemmShape<128, N, 2 * instruction_k<E>>,               // the tile
    cutlass::gemm::GemmShape<64, WarpN, 2 * instruction_k<E>>,            // the warp's
    cutlass::gemm::GemmShape<16, 8, instruction_k<E>>,                    // the instruction's
    cutlass::epilogue::thread::LinearCombination<float, 4, float, float>, // alpha x product + beta x C, 4 a store
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,         // tiles in launch order
    4,                                                                    // pipeline stages
    cutlass::arch::OpMultiplyAdd,                                         // plain TF32 (not 3xTF32) or fp16
    cutlass::conv::IteratorAlgorithm::kOptimized,                         // taps <= 32
    cutlass::conv::StrideSupport::kUnity,                                 // stride 1
    channel_alignment(operands_of<E>), channel_alignment(operands_of<E>)>::Kernel>; // 16-byte reads

static_assert(tile_positions == 128, "the tiles' M above");
using fprop_n128 = fprop<float, 128, 64>;
using fprop_n64 = fprop<float, 64, 32>;
using fprop16_n128 = fprop<cutlass::half_t, 128, 64>;
using fprop16_n64 = fprop<cutlass::half_t, 64, 32>;

// E: the operands' element (Conv::ElementA), named as a parameter's type so that no argument deduces it.
template <class Conv, class E = typename Conv::ElementA>
typename Conv::Arguments arguments(const conv_shape& s, const std::type_identity_t<E>* ext,
                                   const std::type_identity_t<E>* w, const float* bias, float* y) {
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
          {const_cast<E*>(ext), input},
          {const_cast<E*>(w), filter},
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
template <class Conv, class E = typename Conv::ElementA>
void launch(const conv_shape& s, const std::type_identity_t<E>* ext, const std::type_identity_t<E>* w,
            const float* bias, float* y, cudaStream_t st) {
  using kernel = typename Conv::UnderlyingKernel;
  const typename kernel::Params params(arguments<Conv>(s, ext, w, bias, y), nullptr);
  const dim3 grid = typename Conv::ThreadblockSwizzle().get_grid_shape(params.grid_tiled_shape);
  cutlass::Kernel<kernel><<<grid, dim3(32 * Conv::kWarpCount), shared_bytes<Conv>, st>>>(params);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts CUDA codec: the CUTLASS ") +
                             (operands_of<E> == conv_operands::tf32 ? "TF32" : "fp16") + " convolution of " +
                             std::to_string(s.in) + " to " + std::to_string(s.out) + " channels, " +
                             std::to_string(s.taps) + " taps, failed to launch: " + cudaGetErrorString(e));
}

// Where the operands are aligned as the kernels read them: 16 bytes.
void check_aligned(const void* ext, const void* w, const float* bias, const float* y) {
  for (const void* p : {ext, w, static_cast<const void*>(bias), static_cast<const void*>(y)})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::logic_error("qwen3_tts CUDA codec: a CUTLASS convolution's operand is not 16-byte aligned");
}

} // namespace

bool available() { return true; }

void prepare() {
  allow_shared_memory<fprop_n128>();
  allow_shared_memory<fprop_n64>();
  allow_shared_memory<fprop16_n128>();
  allow_shared_memory<fprop16_n64>();
}

const char* refusal(const conv_shape& s, conv_operands op) {
  if (const char* why = shape_refusal(s, op)) return why;
  const bool n64 = tile_for(s.out) == conv_tile::n64;
  if (op == conv_operands::fp16) return n64 ? cutlass_refusal<fprop16_n64>(s) : cutlass_refusal<fprop16_n128>(s);
  return n64 ? cutlass_refusal<fprop_n64>(s) : cutlass_refusal<fprop_n128>(s);
}

void run(const conv_shape& s, const float* ext, const float* w, const float* bias, float* y, cudaStream_t st) {
  if (const char* why = refusal(s))
    throw std::logic_error(std::string("qwen3_tts CUDA codec: a convolution CUTLASS does not take: ") + why);
  check_aligned(ext, w, bias, y);
  if (tile_for(s.out) == conv_tile::n64)
    launch<fprop_n64>(s, ext, w, bias, y, st);
  else
    launch<fprop_n128>(s, ext, w, bias, y, st);
}

void run(const conv_shape& s, const __half* ext, const __half* w, const float* bias, float* y, cudaStream_t st) {
  if (const char* why = refusal(s, conv_operands::fp16))
    throw std::logic_error(std::string("qwen3_tts CUDA codec: an fp16 convolution CUTLASS does not take: ") + why);
  check_aligned(ext, w, bias, y);
  // cutlass::half_t is __half's bits (a struct of one 16-bit storage member).
  static_assert(sizeof(cutlass::half_t) == sizeof(__half));
  const auto* e = reinterpret_cast<const cutlass::half_t*>(ext);
  const auto* f = reinterpret_cast<const cutlass::half_t*>(w);
  if (tile_for(s.out) == conv_tile::n64)
    launch<fprop16_n64>(s, e, f, bias, y, st);
  else
    launch<fprop16_n128>(s, e, f, bias, y, st);
}

#else // no CUTLASS at build time: the math is refused where a decoder is built (codec_cuda's constructor)

bool available() { return false; }

void prepare() {
  throw std::invalid_argument("qwen3_tts CUDA codec: CUTLASS was not found at build time (bash scripts/cutlass.sh)");
}

const char* refusal(const conv_shape&, conv_operands) { return "CUTLASS was not found at build time"; }

void run(const conv_shape&, const float*, const float*, const float*, float*, cudaStream_t) {
  throw std::logic_error("qwen3_tts CUDA codec: a CUTLASS convolution in a build without CUTLASS");
}

void run(const conv_shape&, const __half*, const __half*, const float*, float*, cudaStream_t) {
  throw std::logic_error("qwen3_tts CUDA codec: a CUTLASS convolution in a build without CUTLASS");
}

#endif

} // namespace qwen3_tts::implicit_conv
