#include "cudnn_conv.hpp"

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#if MSTAR_HAVE_CUDNN
#include <cudnn.h>
#include <dlfcn.h>
#endif

namespace qwen3_tts {

#if MSTAR_HAVE_CUDNN
namespace {

constexpr const char* how_to_get =
    "install cuDNN 9 (pip install nvidia-cudnn-cu13, or the CUDA toolkit's cuDNN) and put libcudnn.so.9 on the "
    "loader's path or its full path in MSTAR_CUDNN_LIB; or choose another codec math (tf32)";

// The entry points used, looked up once in libcudnn.so.9 (cuDNN 9's dispatching library, which loads its
// convolution sub-library itself).
struct library {
  std::string error; // empty when every entry point was found
  void* handle = nullptr;
#define MSTAR_CUDNN_FN(name) decltype(&::name) name = nullptr;
#define MSTAR_CUDNN_FNS(X)                                                                                             \
  X(cudnnGetVersion)                                                                                                   \
  X(cudnnGetErrorString)                                                                                               \
  X(cudnnCreate)                                                                                                       \
  X(cudnnDestroy)                                                                                                      \
  X(cudnnSetStream)                                                                                                    \
  X(cudnnCreateTensorDescriptor)                                                                                       \
  X(cudnnSetTensor4dDescriptor)                                                                                        \
  X(cudnnDestroyTensorDescriptor)                                                                                      \
  X(cudnnCreateFilterDescriptor)                                                                                       \
  X(cudnnSetFilter4dDescriptor)                                                                                        \
  X(cudnnDestroyFilterDescriptor)                                                                                      \
  X(cudnnCreateConvolutionDescriptor)                                                                                  \
  X(cudnnSetConvolution2dDescriptor)                                                                                   \
  X(cudnnSetConvolutionMathType)                                                                                       \
  X(cudnnDestroyConvolutionDescriptor)                                                                                 \
  X(cudnnGetConvolutionForwardAlgorithm_v7)                                                                            \
  X(cudnnGetConvolutionForwardWorkspaceSize)                                                                           \
  X(cudnnConvolutionForward)
  MSTAR_CUDNN_FNS(MSTAR_CUDNN_FN)
#undef MSTAR_CUDNN_FN

  library() {
    std::string tried;
    auto open = [&](const std::string& path) {
      if (handle == nullptr && !path.empty()) {
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        tried += (tried.empty() ? "" : ", ") + path;
      }
    };
    if (const char* env = std::getenv("MSTAR_CUDNN_LIB")) open(env);
    open("libcudnn.so.9");
    open(std::string(MSTAR_CUDNN_LIBDIR).empty() ? "" : std::string(MSTAR_CUDNN_LIBDIR) + "/libcudnn.so.9");
    if (handle == nullptr) {
      error = "cuDNN 9 could not be loaded (tried " + tried + "): " + how_to_get;
      return;
    }
#define MSTAR_CUDNN_SYM(name)                                                                                          \
  if ((name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name))) == nullptr && error.empty())                  \
    error = std::string("cuDNN's library has no ") + #name + ": " + how_to_get;
    MSTAR_CUDNN_FNS(MSTAR_CUDNN_SYM)
#undef MSTAR_CUDNN_SYM
    if (error.empty() && cudnnGetVersion() < 90000)
      error = "cuDNN " + std::to_string(cudnnGetVersion()) + " is older than 9: " + how_to_get;
  }
};

const library& lib() {
  static const library l;
  return l;
}

} // namespace

struct cudnn_conv::impl {
  const library& l = lib();
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  void* workspace = nullptr;
  std::size_t bytes = 0;
  // (positions, in, out, taps, dilation) -> the algorithm chosen for it and the workspace it needs, asked once.
  struct choice {
    cudnnConvolutionFwdAlgo_t algo;
    std::size_t workspace;
  };
  std::map<std::tuple<int, int, int, int, int>, choice> chosen;

  void check(cudnnStatus_t s, const char* call) const {
    if (s != CUDNN_STATUS_SUCCESS)
      throw std::runtime_error(std::string("qwen3_tts cuDNN convolution: ") + call +
                               " failed: " + l.cudnnGetErrorString(s));
  }
  ~impl() {
    if (conv) l.cudnnDestroyConvolutionDescriptor(conv);
    if (w) l.cudnnDestroyFilterDescriptor(w);
    if (y) l.cudnnDestroyTensorDescriptor(y);
    if (x) l.cudnnDestroyTensorDescriptor(x);
    if (handle) l.cudnnDestroy(handle);
  }
};

cudnn_conv::cudnn_conv(cudaStream_t stream, bool tensor_cores, void* workspace, std::size_t bytes)
    : p_(std::make_unique<impl>()) {
  impl& p = *p_;
  if (!p.l.error.empty()) throw std::runtime_error("qwen3_tts cuDNN convolution: " + p.l.error);
  p.check(p.l.cudnnCreate(&p.handle), "cudnnCreate");
  p.check(p.l.cudnnSetStream(p.handle, stream), "cudnnSetStream");
  p.check(p.l.cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor");
  p.check(p.l.cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor");
  p.check(p.l.cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor");
  p.check(p.l.cudnnCreateConvolutionDescriptor(&p.conv), "cudnnCreateConvolutionDescriptor");
  p.math = tensor_cores ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  p.workspace = workspace;
  p.bytes = bytes;
}

cudnn_conv::~cudnn_conv() = default;

void cudnn_conv::forward(const float* x, int positions, int in, const float* w, int out, int taps, int dilation,
                         float* y) {
  impl& p = *p_;
  const int outputs = positions - (taps - 1) * dilation;
  if (outputs < 1)
    throw std::logic_error("qwen3_tts cuDNN convolution: " + std::to_string(positions) +
                           " positions are fewer than the filter's reach of " +
                           std::to_string((taps - 1) * dilation + 1));
  // One image of one row: NHWC with H = 1, W = positions; the filter KRSC = [out][1][taps][in].
  p.check(p.l.cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, in, 1, positions),
          "cudnnSetTensor4dDescriptor (input)");
  p.check(p.l.cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, out, 1, outputs),
          "cudnnSetTensor4dDescriptor (output)");
  p.check(p.l.cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, out, in, 1, taps),
          "cudnnSetFilter4dDescriptor");
  p.check(
      p.l.cudnnSetConvolution2dDescriptor(p.conv, 0, 0, 1, 1, 1, dilation, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "cudnnSetConvolution2dDescriptor");
  p.check(p.l.cudnnSetConvolutionMathType(p.conv, p.math), "cudnnSetConvolutionMathType");
  const auto key = std::tuple{positions, in, out, taps, dilation};
  auto it = p.chosen.find(key);
  if (it == p.chosen.end()) {
    // cuDNN's heuristics rank the algorithms without running any: the first that fits the workspace.
    constexpr int asked = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    cudnnConvolutionFwdAlgoPerf_t perf[asked];
    int returned = 0;
    p.check(p.l.cudnnGetConvolutionForwardAlgorithm_v7(p.handle, p.x, p.w, p.conv, p.y, asked, &returned, perf),
            "cudnnGetConvolutionForwardAlgorithm_v7");
    int pick = -1;
    for (int i = 0; i < returned && pick < 0; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= p.bytes &&
          (p.math == CUDNN_TENSOR_OP_MATH || perf[i].mathType != CUDNN_TENSOR_OP_MATH))
        pick = i;
    if (pick < 0)
      throw std::runtime_error("qwen3_tts cuDNN convolution: no algorithm for " + std::to_string(positions) +
                               " positions of " + std::to_string(in) + " -> " + std::to_string(out) + " channels, " +
                               std::to_string(taps) + " taps, dilation " + std::to_string(dilation) + " fits " +
                               std::to_string(p.bytes >> 20) + " MiB of workspace");
    std::size_t need = 0;
    p.check(p.l.cudnnGetConvolutionForwardWorkspaceSize(p.handle, p.x, p.w, p.conv, p.y, perf[pick].algo, &need),
            "cudnnGetConvolutionForwardWorkspaceSize");
    if (need > p.bytes)
      throw std::logic_error("qwen3_tts cuDNN convolution: its algorithm needs " + std::to_string(need) +
                             " bytes of workspace, " + std::to_string(p.bytes) + " were given");
    it = p.chosen.emplace(key, impl::choice{perf[pick].algo, need}).first;
  }
  const float one = 1.0f, zero = 0.0f;
  p.check(p.l.cudnnConvolutionForward(p.handle, &one, p.x, x, p.w, w, p.conv, it->second.algo, p.workspace,
                                      it->second.workspace, &zero, p.y, y),
          "cudnnConvolutionForward");
}

bool cudnn_conv::available() { return lib().error.empty(); }
const char* cudnn_conv::why_not() { return available() ? "" : lib().error.c_str(); }

#else // built without cudnn.h

struct cudnn_conv::impl {};

namespace {
constexpr const char* not_built = "qwen3_tts cuDNN convolution: this build found no cudnn.h (install cuDNN 9: pip "
                                  "install nvidia-cudnn-cu13, or the CUDA toolkit's cuDNN, and reconfigure); "
                                  "choose another codec math (tf32)";
}

cudnn_conv::cudnn_conv(cudaStream_t, bool, void*, std::size_t) { throw std::runtime_error(not_built); }
cudnn_conv::~cudnn_conv() = default;
void cudnn_conv::forward(const float*, int, int, const float*, int, int, int, float*) {}
bool cudnn_conv::available() { return false; }
const char* cudnn_conv::why_not() { return not_built; }

#endif

} // namespace qwen3_tts
