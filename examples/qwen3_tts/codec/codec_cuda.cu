// The CUDA codec decoder's orchestration (codec_cuda.hpp says what it computes): weight upload, the
// per-request state's segment offsets, scratch, one step as a sequence of launches on one stream, and the
// padded step's CUDA graphs.
#include "codec_cuda.hpp"
#include "codec_cuda_conv.hpp"
#include "codec_cuda_kernels.hpp"
#include "sm_partition.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace qwen3_tts {
namespace {

namespace k = codec_kernels;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts CUDA codec: ") + what + " failed: " + cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("qwen3_tts CUDA codec (cuBLAS): ") + what +
                             " failed: " + cublasGetStatusString(e));
}
#define CODEC_CHECK(call) check((call), #call)

constexpr std::size_t cublas_workspace_bytes = std::size_t(32) << 20;

// The maths whose cuBLAS products run in TF32 (cutlass_tf32: all but its CUTLASS convolutions).
bool tf32_products(codec_cuda_math m) {
  return m == codec_cuda_math::cublas_tf32 || m == codec_cuda_math::cutlass_tf32;
}

// Device weights, float32, laid out for the kernels.
struct dev_linear {
  const float* w = nullptr; // [out][in]
  const float* bias = nullptr;
  int in = 0, out = 0;
  const __half* w16 = nullptr; // w in fp16 (codec_cuda_math::cublas_fp16 and cutlass_fp16 only)
};
struct dev_conv {           // causal, stride 1
  const float* w = nullptr; // [out][taps * in] (tap-major reduction); depthwise: [channels][taps]
  const float* bias = nullptr;
  int in = 0, out = 0, taps = 1, dilation = 1, context = 0;
  std::size_t state = 0;       // offset of its left context in the request's state (context > 0)
  const __half* w16 = nullptr; // w in fp16 (the fp16 maths, not depthwise)
};
struct dev_trans_conv {     // transposed, trimmed on the right
  const float* w = nullptr; // [kernel * out][in]
  const float* bias = nullptr;
  int in = 0, out = 0, kernel = 1, stride = 1, context = 0;
  std::size_t state = 0;
  const __half* w16 = nullptr; // w in fp16 (the fp16 maths)
};
struct dev_snake {
  const float* exp_alpha = nullptr;
  const float* inv_exp_beta = nullptr;
};
struct dev_layer {
  dev_linear qkv, o, gate_up, down; // q, k, v stacked; gate, up stacked
  const float *input_norm = nullptr, *post_norm = nullptr, *attn_scale = nullptr, *mlp_scale = nullptr;
  std::size_t key_state = 0, value_state = 0;
};
struct dev_stage {
  dev_trans_conv up;
  dev_conv dwconv;
  const float *norm_weight = nullptr, *norm_bias = nullptr, *gamma = nullptr;
  dev_linear pwconv1, pwconv2;
};
struct dev_unit {
  dev_snake act1, act2;
  dev_conv conv1, conv2;
};
struct dev_block {
  dev_snake snake;
  dev_trans_conv up;
  std::vector<dev_unit> units;
};

// Walks the state layout's segments in the order make_codec_state_layout lists them (the host decoder's
// state_cursor order), checking each size.
struct segment_cursor {
  const codec_state_layout& layout;
  std::size_t next = 1; // segment 0 is the frame counter

  std::size_t take(std::size_t size) {
    if (size == 0) return 0;
    const auto& seg = layout.segments.at(next++);
    if (seg.size != size)
      throw std::logic_error("qwen3_tts CUDA codec: state segment " + seg.name + " holds " + std::to_string(seg.size) +
                             " floats, the decoder needs " + std::to_string(size));
    return seg.offset;
  }
};

// One upload buffer: the step's row table and codes, device block and pinned mirror in the same layout. A
// padded step has one row more than its bucket (the filler row, see decode_step).
struct table_layout {
  std::size_t states = 0, audio = 0, start = 0, frame_row = 0, codes = 0, bytes = 0;
  table_layout(int rows, int frames, int quantizers) {
    auto place = [&](std::size_t& at, std::size_t size) {
      at = bytes;
      bytes = (bytes + size + 15) & ~std::size_t(15);
    };
    place(states, std::size_t(rows) * sizeof(float*));
    place(audio, std::size_t(rows) * sizeof(float*));
    place(start, std::size_t(rows + 1) * sizeof(std::int32_t));
    place(frame_row, std::size_t(frames) * sizeof(std::int32_t));
    place(codes, std::size_t(frames) * quantizers * sizeof(std::int32_t));
  }
};

} // namespace

struct codec_cuda::state {
  // Everything is released here, so a constructor that throws half-way leaks nothing either.
  ~state() {
    if (stream) cudaStreamSynchronize(stream);
    for (auto& [key, g] : graphs)
      cudaGraphExecDestroy(g);
    if (uploaded) cudaEventDestroy(uploaded);
    if (blas) cublasDestroy(blas);
    if (lt) cublasLtDestroy(lt);
    if (pinned) cudaFreeHost(pinned);
    if (range_host) cudaFreeHost(range_host);
    for (void* p : owned)
      cudaFree(p);
    if (stream && !partition) cudaStreamDestroy(stream);
  }

  cudaStream_t stream = nullptr;
  std::unique_ptr<sm_partition_stream> partition; // owns stream where limits.sm_count > 0
  std::vector<void*> owned;
  std::size_t weight_bytes = 0;

  const float* rvq_tables = nullptr; // [num_quantizers][codebook_size][codebook_dim / 2]
  dev_linear rvq_first, rvq_rest;    // the halves' output projections
  dev_conv pre_conv;
  dev_linear input_proj, output_proj;
  std::vector<dev_layer> layers;
  const float* final_norm = nullptr;
  const float* inv_freq = nullptr;
  std::vector<dev_stage> upsample;
  dev_conv decoder_in;
  std::vector<dev_block> blocks;
  dev_snake final_snake;
  dev_conv decoder_out;

  // Scratch: two activations taking turns, the extended (context | window) input of a convolution, and
  // the wide intermediates (q/k/v, gate/up, a transposed convolution's taps, ConvNeXt's 4x layer).
  float *act[2] = {nullptr, nullptr}, *ext = nullptr, *tmp = nullptr;
  std::size_t act_floats = 0, ext_floats = 0, tmp_floats = 0;
  // cuBLAS only: the handle (its workspace set once, on the decoder's stream), a convolution's windows
  // written out, and a product before its epilogue (bias, layer scale, residual).
  cublasHandle_t blas = nullptr;
  // cublas_fp16, cutlass_fp16: every product's weights also in fp16 (uploaded with the float32 ones), and its input
  // rounded to fp16 on the way through the im2col (col16, in place of col); under cutlass_fp16 a CUTLASS
  // convolution's extended input also in fp16 (ext16, written by the extend beside ext).
  bool fp16 = false;
  __half* ext16 = nullptr;
  long long cutlass_min_tiles = 0; // codec_cuda_limits::cutlass_min_tiles, -1 resolved to an SM count
  __half* col16 = nullptr;
  std::size_t col16_elements = 0;
  // Set to 1 by the fp16 conversion when a value it met was beyond fp16's range or not finite: host memory mapped
  // into the device's address space, so the host reads it without synchronizing.
  unsigned* range_host = nullptr;
  unsigned* range_dev = nullptr;
  // cuBLASLt for the products that carry a bias: the bias and the accumulation into y inside the product (its
  // bias epilogue, beta 1), where cuBLAS would write the product out for the epilogue kernel to read back.
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr; // cuBLAS's, shared with cuBLASLt (both run on the decoder's stream)
  float *col = nullptr, *product = nullptr;
  std::size_t col_floats = 0, product_floats = 0;

  unsigned char* table = nullptr; // device
  unsigned char* pinned = nullptr;
  table_layout tables{0, 0, 0};
  cudaEvent_t uploaded = nullptr; // the last upload from `pinned` has been read
  // The padded step's sinks: idle rows (no frames) read and write back the idle state's zeros, the filler row
  // (the frames a bucket has beyond its rows') decodes from the filler state, zeroed each step; both write
  // their audio to sink_audio.
  float *idle_state = nullptr, *filler_state = nullptr, *sink_audio = nullptr;
  std::size_t state_floats = 0;
  // (bucket, width, one width: the CUTLASS maths' padding of rows of one width, see upload) -> the padded step
  std::map<std::tuple<int, int, bool>, cudaGraphExec_t> graphs;
  // cuBLASLt's algorithm for each (kdim, n_out, m, accumulate) product with a bias, from its heuristic; a shape
  // it has none for maps to nullopt (cuBLAS and the epilogue kernel then).
  mutable std::map<std::array<int, 4>, std::optional<cublasLtMatmulAlgo_t>> lt_algos;
  // A host decoder without weights: its input checks and their messages, for decode_step.
  std::unique_ptr<codec_decoder> checker;

  template <class T>
  T* alloc(std::size_t n) {
    if (n == 0) return nullptr;
    void* p = nullptr;
    CODEC_CHECK(cudaMalloc(&p, n * sizeof(T)));
    owned.push_back(p);
    return static_cast<T*>(p);
  }
  const float* upload(const std::vector<float>& v) {
    float* p = alloc<float>(v.size());
    if (p) CODEC_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    weight_bytes += v.size() * sizeof(float);
    return p;
  }
  const __half* upload_half(const std::vector<float>& v) {
    if (!fp16) return nullptr;
    std::vector<__half> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      h[i] = __float2half_rn(v[i]);
    auto* p = alloc<__half>(h.size());
    if (p) CODEC_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(__half), cudaMemcpyHostToDevice));
    weight_bytes += h.size() * sizeof(__half);
    return p;
  }
  dev_linear linear(const codec_linear& l) {
    return {upload(l.weight), l.bias.empty() ? nullptr : upload(l.bias), l.in, l.out, upload_half(l.weight)};
  }
  // [out][in][taps] as stored -> [out][taps * in]; a depthwise convolution keeps [channels][taps]. [out][taps][in] is
  // also CUTLASS's KRSC filter layout (R = 1), so the CUTLASS maths read these weights (or their fp16) as they are.
  dev_conv conv(const codec_conv& c, segment_cursor& cursor) {
    dev_conv d{nullptr, upload(c.bias), c.in, c.out, c.kernel, c.dilation, c.context()};
    if (c.groups == 1) {
      std::vector<float> w(c.weight.size());
      for (int o = 0; o < c.out; ++o)
        for (int i = 0; i < c.in; ++i)
          for (int t = 0; t < c.kernel; ++t)
            w[(std::size_t(o) * c.kernel + t) * c.in + i] = c.weight[(std::size_t(o) * c.in + i) * c.kernel + t];
      d.w = upload(w);
      d.w16 = upload_half(w);
    } else {
      if (c.groups != c.in || c.in != c.out)
        throw std::logic_error("qwen3_tts CUDA codec: a grouped convolution of " + std::to_string(c.groups) +
                               " groups over " + std::to_string(c.in) + " channels; only depthwise ones are built");
      d.w = upload(c.weight);
    }
    d.state = cursor.take(std::size_t(d.context) * c.in);
    return d;
  }
  dev_trans_conv trans_conv(const codec_trans_conv& t, segment_cursor& cursor) {
    dev_trans_conv d{upload(t.taps), upload(t.bias), t.in, t.out, t.kernel, t.stride, t.context()};
    d.w16 = upload_half(t.taps);
    d.state = cursor.take(std::size_t(d.context) * t.in);
    return d;
  }
  dev_snake snake(const codec_snake_beta& s) { return {upload(s.exp_alpha), upload(s.inv_exp_beta)}; }
};

namespace {

using dev = codec_cuda::state;

// y^T [n_out x m] = w [kdim x n_out]^T x^T [kdim x m] + bias (+ y where accumulate), column-major, in one
// cuBLASLt product (its bias epilogue; beta 1 reads y as C and writes it as D). False, with nothing enqueued,
// where cuBLASLt has no algorithm for the shape.
bool lt_product(const dev& w, codec_cuda_math math, int sms, const void* wt, const void* x, int kdim, int n_out, int m,
                const float* bias, bool accumulate, float* y, cudaStream_t s) {
  const cudaDataType_t in = fp16_operands(math) ? CUDA_R_16F : CUDA_R_32F;
  struct descriptors {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    ~descriptors() {
      if (c) cublasLtMatrixLayoutDestroy(c);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  } d;
  CODEC_CHECK(cublasLtMatmulDescCreate(&d.op, tf32_products(math) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                       CUDA_R_32F));
  const cublasOperation_t transposed = CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  CODEC_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof(transposed)));
  CODEC_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  CODEC_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (sms > 0) { // sized for the partition's SMs, as the cuBLAS handle is (see the constructor)
    const std::int32_t target = sms;
    CODEC_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
  }
  CODEC_CHECK(cublasLtMatrixLayoutCreate(&d.a, in, std::uint64_t(kdim), std::uint64_t(n_out), kdim));
  CODEC_CHECK(cublasLtMatrixLayoutCreate(&d.b, in, std::uint64_t(kdim), std::uint64_t(m), kdim));
  CODEC_CHECK(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, std::uint64_t(n_out), std::uint64_t(m), n_out));
  const std::array<int, 4> key{kdim, n_out, m, accumulate ? 1 : 0};
  auto known = w.lt_algos.find(key);
  if (known == w.lt_algos.end()) { // the first product of this shape: ask the heuristic once
    std::optional<cublasLtMatmulAlgo_t> pick;
    cublasLtMatmulPreference_t pref = nullptr;
    CODEC_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t bytes = cublas_workspace_bytes;
    cublasStatus_t e =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes));
    cublasLtMatmulHeuristicResult_t found{};
    int count = 0;
    if (e == CUBLAS_STATUS_SUCCESS)
      e = cublasLtMatmulAlgoGetHeuristic(w.lt, d.op, d.a, d.b, d.c, d.c, pref, 1, &found, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    if (e != CUBLAS_STATUS_SUCCESS && e != CUBLAS_STATUS_NOT_SUPPORTED) check(e, "cublasLtMatmulAlgoGetHeuristic");
    if (e == CUBLAS_STATUS_SUCCESS && count > 0 && found.state == CUBLAS_STATUS_SUCCESS) pick = found.algo;
    known = w.lt_algos.emplace(key, pick).first;
  }
  const std::optional<cublasLtMatmulAlgo_t>& algo = known->second;
  if (!algo.has_value()) return false;
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CODEC_CHECK(cublasLtMatmul(w.lt, d.op, &one, wt, d.a, x, d.b, &beta, y, d.c, y, d.c, &*algo, w.workspace,
                             cublas_workspace_bytes, s));
  return true;
}

// The largest scratch each buffer needs for `frames` frames over `rows` rows: the step below, walked
// with sizes only (forward's need() checks every use against these).
struct scratch_sizes {
  std::size_t act = 0, ext = 0, tmp = 0, col = 0; // col: the widest im2col of a convolution (cuBLAS)
  void act_at_least(std::size_t n) { act = std::max(act, n); }
  void ext_at_least(std::size_t n) { ext = std::max(ext, n); }
  void tmp_at_least(std::size_t n) { tmp = std::max(tmp, n); }
  void conv_at(const dev_conv& c, std::size_t positions) {
    if (c.taps > 1 || c.context > 0) col = std::max(col, positions * c.taps * c.in);
  }
};

scratch_sizes measure(const codec_config& c, const dev& w, std::size_t frames, std::size_t rows) {
  scratch_sizes s;
  const std::size_t T = frames, R = rows;
  const std::size_t qw = std::size_t(c.num_attention_heads) * c.head_dim,
                    kvw = std::size_t(c.num_key_value_heads) * c.head_dim;
  s.tmp_at_least(2 * T * (c.codebook_dim / 2));
  s.act_at_least(T * std::max({std::size_t(c.codebook_dim), std::size_t(c.latent_dim), std::size_t(c.hidden_size), qw,
                               std::size_t(c.intermediate_size)}));
  s.ext_at_least((T + R * w.pre_conv.context) * c.codebook_dim);
  s.conv_at(w.pre_conv, T);
  s.tmp_at_least(T * std::max(qw + 2 * kvw, std::size_t(2) * c.intermediate_size));
  std::size_t L = 1;
  for (const auto& st : w.upsample) {
    s.tmp_at_least(T * L * st.up.kernel * st.up.out);
    L *= std::size_t(st.up.stride);
    s.act_at_least(T * L * c.latent_dim);
    s.ext_at_least((T * L + R * st.dwconv.context) * c.latent_dim);
    s.tmp_at_least(T * L * st.pwconv1.out);
  }
  s.ext_at_least((T * L + R * w.decoder_in.context) * w.decoder_in.in);
  s.conv_at(w.decoder_in, T * L);
  s.act_at_least(T * L * w.decoder_in.out);
  for (const auto& b : w.blocks) {
    s.act_at_least(T * L * b.up.in);
    s.ext_at_least((T * L + R * b.up.context) * b.up.in);
    s.tmp_at_least((T * L + R * b.up.context) * b.up.kernel * b.up.out);
    L *= std::size_t(b.up.stride);
    s.act_at_least(T * L * b.up.out);
    for (const auto& u : b.units) {
      s.ext_at_least((T * L + R * u.conv1.context) * u.conv1.in);
      s.conv_at(u.conv1, T * L);
      s.conv_at(u.conv2, T * L);
      s.tmp_at_least(T * L * u.conv1.out);
    }
  }
  s.ext_at_least((T * L + R * w.decoder_out.context) * w.decoder_out.in);
  s.conv_at(w.decoder_out, T * L);
  s.tmp_at_least(T * L * w.decoder_out.out);
  return s;
}

void check_limits(const codec_config& c, const codec_cuda_limits& l) {
  if (l.max_rows < 1 || l.max_window < 1)
    throw std::invalid_argument("qwen3_tts CUDA codec: max_rows " + std::to_string(l.max_rows) + " and max_window " +
                                std::to_string(l.max_window) + " must both be >= 1");
  if (l.sm_count < 0)
    throw std::invalid_argument("qwen3_tts CUDA codec: sm_count " + std::to_string(l.sm_count) +
                                " is negative; give 0 (the whole GPU) or the SMs its kernels may occupy");
  if (l.cutlass_min_tiles < -1)
    throw std::invalid_argument("qwen3_tts CUDA codec: cutlass_min_tiles " + std::to_string(l.cutlass_min_tiles) +
                                " is below -1; give -1 (one wave of the codec's SMs), 0 (every shape) or a count");
  // The GEMMs put 64 output positions in a tile and the tiles of a step on gridDim.y (at most 65535).
  const std::size_t samples = std::size_t(l.max_rows) * std::size_t(l.max_window) * std::size_t(c.samples_per_frame());
  if (samples > std::size_t(65535) * 64)
    throw std::invalid_argument("qwen3_tts CUDA codec: max_rows " + std::to_string(l.max_rows) + " x max_window " +
                                std::to_string(l.max_window) + " x " + std::to_string(c.samples_per_frame()) +
                                " samples a frame is over 4,194,240 samples a step; lower max_rows or max_window");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::invalid_argument("qwen3_tts CUDA codec: " + std::to_string(c.num_attention_heads) +
                                " attention heads are not a multiple of " + std::to_string(c.num_key_value_heads) +
                                " key/value heads");
  if (c.head_dim % 2 != 0)
    throw std::invalid_argument("qwen3_tts CUDA codec: head_dim " + std::to_string(c.head_dim) +
                                " is odd; RoPE rotates halves");
}

} // namespace

codec_cuda::codec_cuda(const codec_config& config, const codec_weights& weights, const codec_cuda_limits& limits,
                       codec_cuda_math math)
    : config_(config), limits_(limits), math_(math), layout_(make_codec_state_layout(config)),
      s_(std::make_unique<state>()) {
  check_limits(config, limits);
  if (cutlass_convolutions(math) && !implicit_conv::available())
    throw std::invalid_argument(
        std::string("qwen3_tts CUDA codec: codec math ") +
        (math == codec_cuda_math::cutlass_tf32 ? "tf32-conv (CUTLASS TF32 convolutions)"
                                               : "fp16-conv (CUTLASS fp16 convolutions)") +
        " needs CUTLASS, which was not found at build time: run scripts/setup.sh (or scripts/cutlass.sh: it puts "
        "CUTLASS's headers in third_party/cutlass/include; meson -Dcutlass_include=DIR names another folder), then "
        "reconfigure (meson setup --reconfigure) and rebuild; or use " +
        (math == codec_cuda_math::cutlass_tf32 ? "tf32" : "fp16"));
  const codec_config& c = config_;
  state& st = *s_;
  if (limits.sm_count > 0) {
    st.partition = std::make_unique<sm_partition_stream>(limits.sm_count);
    st.stream = st.partition->stream();
  } else {
    CODEC_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  }
  stream_ = st.stream;

  st.fp16 = fp16_operands(math);
  segment_cursor cursor{layout_};
  // Split RVQ: the semantic codebook, then the acoustic ones, as one table.
  std::vector<float> tables;
  for (const auto* q : {&weights.rvq_first, &weights.rvq_rest})
    for (const auto& layer : q->layers)
      tables.insert(tables.end(), layer.embedding.begin(), layer.embedding.end());
  const std::size_t half = std::size_t(c.codebook_dim / 2);
  if (tables.size() != std::size_t(c.num_quantizers) * c.codebook_size * half)
    throw std::logic_error("qwen3_tts CUDA codec: the codebooks hold " + std::to_string(tables.size()) +
                           " floats, the config implies " +
                           std::to_string(std::size_t(c.num_quantizers) * c.codebook_size * half));
  st.rvq_tables = st.upload(tables);
  st.rvq_first = {st.upload(weights.rvq_first.output_proj), nullptr, int(half), c.codebook_dim,
                  st.upload_half(weights.rvq_first.output_proj)};
  st.rvq_rest = {st.upload(weights.rvq_rest.output_proj), nullptr, int(half), c.codebook_dim,
                 st.upload_half(weights.rvq_rest.output_proj)};
  st.pre_conv = st.conv(weights.pre_conv, cursor);

  const auto& tr = weights.pre_transformer;
  st.input_proj = st.linear(tr.input_proj);
  st.output_proj = st.linear(tr.output_proj);
  for (const auto& l : tr.layers) {
    dev_layer d;
    codec_linear qkv; // [q; k; v] rows, so that the three projections are one GEMM
    qkv.in = l.q_proj.in;
    qkv.out = l.q_proj.out + l.k_proj.out + l.v_proj.out;
    const bool bias = !l.q_proj.bias.empty() || !l.k_proj.bias.empty() || !l.v_proj.bias.empty();
    for (const auto* p : {&l.q_proj, &l.k_proj, &l.v_proj}) {
      qkv.weight.insert(qkv.weight.end(), p->weight.begin(), p->weight.end());
      if (bias) {
        if (p->bias.empty())
          qkv.bias.insert(qkv.bias.end(), std::size_t(p->out), 0.0f);
        else
          qkv.bias.insert(qkv.bias.end(), p->bias.begin(), p->bias.end());
      }
    }
    d.qkv = st.linear(qkv);
    d.o = st.linear(l.o_proj);
    codec_linear gate_up; // [gate; up]
    gate_up.in = l.gate_proj.in;
    gate_up.out = 2 * l.gate_proj.out;
    gate_up.weight = l.gate_proj.weight;
    gate_up.weight.insert(gate_up.weight.end(), l.up_proj.weight.begin(), l.up_proj.weight.end());
    if (!l.gate_proj.bias.empty() || !l.up_proj.bias.empty())
      throw std::logic_error("qwen3_tts CUDA codec: the pre-transformer's MLP has a bias; the reference builds none");
    d.gate_up = st.linear(gate_up);
    d.down = st.linear(l.down_proj);
    d.input_norm = st.upload(l.input_layernorm);
    d.post_norm = st.upload(l.post_attention_layernorm);
    d.attn_scale = st.upload(l.self_attn_layer_scale);
    d.mlp_scale = st.upload(l.mlp_layer_scale);
    const std::size_t kv = std::size_t(c.sliding_window - 1) * c.num_key_value_heads * c.head_dim;
    d.key_state = cursor.take(kv);
    d.value_state = cursor.take(kv);
    st.layers.push_back(d);
  }
  st.final_norm = st.upload(tr.norm);
  std::vector<float> inv_freq(std::size_t(c.head_dim / 2));
  for (int i = 0; i < c.head_dim / 2; ++i) // as the host decoder (and the reference) rounds it
    inv_freq[std::size_t(i)] = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(c.head_dim));
  st.inv_freq = st.upload(inv_freq);

  for (const auto& s : weights.upsample) {
    dev_stage d;
    d.up = st.trans_conv(s.trans_conv, cursor);
    d.dwconv = st.conv(s.convnext.dwconv, cursor);
    d.norm_weight = st.upload(s.convnext.norm_weight);
    d.norm_bias = st.upload(s.convnext.norm_bias);
    d.pwconv1 = st.linear(s.convnext.pwconv1);
    d.pwconv2 = st.linear(s.convnext.pwconv2);
    d.gamma = st.upload(s.convnext.gamma);
    st.upsample.push_back(d);
  }
  st.decoder_in = st.conv(weights.decoder_in, cursor);
  for (const auto& b : weights.blocks) {
    dev_block d;
    d.snake = st.snake(b.snake);
    d.up = st.trans_conv(b.trans_conv, cursor);
    for (const auto& u : b.units)
      d.units.push_back({st.snake(u.act1), st.snake(u.act2), st.conv(u.conv1, cursor), st.conv(u.conv2, cursor)});
    st.blocks.push_back(std::move(d));
  }
  st.final_snake = st.snake(weights.final_snake);
  st.decoder_out = st.conv(weights.decoder_out, cursor);
  if (cursor.next != layout_.segments.size())
    throw std::logic_error("qwen3_tts CUDA codec: the decoder used " + std::to_string(cursor.next) +
                           " of the state's " + std::to_string(layout_.segments.size()) + " segments");
  weight_bytes_ = st.weight_bytes;

  const std::size_t frames = std::size_t(limits.max_rows) * limits.max_window;
  const int table_rows = limits.max_rows + 1; // a padded step's filler row besides its bucket
  const scratch_sizes need = measure(c, st, frames, std::size_t(table_rows));
  // The element-wise kernels index a step's buffers with 32-bit integers (the im2col buffer: cuBLAS only).
  const std::size_t widest =
      std::max({need.act, need.ext, need.tmp, math == codec_cuda_math::double_sums ? 0 : need.col});
  // (cublas_fp16's col16 is the largest of these four.)
  if (widest > k::max_elementwise_floats)
    throw std::invalid_argument("qwen3_tts CUDA codec: max_rows " + std::to_string(limits.max_rows) +
                                " x max_window " + std::to_string(limits.max_window) + " frames need a buffer of " +
                                std::to_string(widest) + " floats, more than the element-wise kernels' " +
                                std::to_string(k::max_elementwise_floats) + "; lower max_rows or max_window");
  st.act[0] = st.alloc<float>(need.act);
  st.act[1] = st.alloc<float>(need.act);
  st.ext = st.alloc<float>(need.ext);
  st.tmp = st.alloc<float>(need.tmp);
  st.act_floats = need.act;
  st.ext_floats = need.ext;
  st.tmp_floats = need.tmp;
  scratch_bytes_ = (2 * need.act + need.ext + need.tmp) * sizeof(float);
  if (math != codec_cuda_math::double_sums) {
    CODEC_CHECK(cublasCreate(&st.blas));
    CODEC_CHECK(cublasSetMathMode(st.blas, tf32_products(math) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (cutlass_convolutions(math)) {
      implicit_conv::prepare();
      int sms = st.partition ? st.partition->sms() : 0;
      if (sms == 0) {
        int device = 0;
        CODEC_CHECK(cudaGetDevice(&device));
        CODEC_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      }
      st.cutlass_min_tiles = limits.cutlass_min_tiles >= 0 ? limits.cutlass_min_tiles : sms;
    }
    void* workspace = st.alloc<unsigned char>(cublas_workspace_bytes);
    CODEC_CHECK(cublasSetStream(st.blas, stream_)); // first: it resets the workspace
    CODEC_CHECK(cublasSetWorkspace(st.blas, workspace, cublas_workspace_bytes));
    st.workspace = workspace;
    CODEC_CHECK(cublasLtCreate(&st.lt));
    // In a green context cuBLAS must size its grids for the partition's SMs, not the device's: left to the
    // device's count, its persistent kernels ask for more co-resident blocks than the partition holds and fail to
    // launch (seen at the released size from 8 rows on 32 of an H100's SMs).
    if (st.partition) CODEC_CHECK(cublasSetSmCountTarget(st.blas, st.partition->sms()));
    // Every product lands in an activation or an intermediate buffer, so it fits the larger of the two.
    st.product_floats = std::max(need.act, need.tmp);
    st.product = st.alloc<float>(st.product_floats);
    scratch_bytes_ += st.product_floats * sizeof(float) + cublas_workspace_bytes;
    if (st.fp16) { // every product's input passes through col16: a plain one is an activation or an intermediate
      st.col16_elements = std::max({need.col, need.act, need.tmp, need.ext});
      st.col16 = st.alloc<__half>(st.col16_elements);
      scratch_bytes_ += st.col16_elements * sizeof(__half);
      if (math == codec_cuda_math::cutlass_fp16) {
        st.ext16 = st.alloc<__half>(need.ext);
        scratch_bytes_ += need.ext * sizeof(__half);
      }
      CODEC_CHECK(cudaHostAlloc(&st.range_host, sizeof(unsigned), cudaHostAllocMapped));
      *st.range_host = 0;
      CODEC_CHECK(cudaHostGetDevicePointer(&st.range_dev, st.range_host, 0));
    } else {
      st.col_floats = need.col;
      st.col = st.alloc<float>(st.col_floats);
      scratch_bytes_ += st.col_floats * sizeof(float);
    }
  }

  st.tables = table_layout(table_rows, int(frames), c.num_quantizers);
  st.table = st.alloc<unsigned char>(st.tables.bytes);
  CODEC_CHECK(cudaMallocHost(&st.pinned, st.tables.bytes));
  CODEC_CHECK(cudaEventCreateWithFlags(&st.uploaded, cudaEventDisableTiming));
  st.checker = std::make_unique<codec_decoder>(c, codec_weights{});
  st.state_floats = layout_.total;
  st.idle_state = st.alloc<float>(st.state_floats);
  st.filler_state = st.alloc<float>(st.state_floats);
  st.sink_audio = st.alloc<float>(frames * std::size_t(c.samples_per_frame()));
  CODEC_CHECK(cudaMemset(st.idle_state, 0, st.state_floats * sizeof(float)));
  scratch_bytes_ += (2 * st.state_floats + frames * std::size_t(c.samples_per_frame())) * sizeof(float);
  // The copies above ran on the legacy stream, which the decoder's non-blocking stream does not wait for.
  CODEC_CHECK(cudaDeviceSynchronize());
}

codec_cuda::~codec_cuda() = default; // state's destructor releases everything

bool codec_cutlass_available() { return implicit_conv::available(); }

int codec_cuda::sm_count() const { return s_->partition ? s_->partition->sms() : 0; }

bool codec_cuda::fp16_out_of_range() const {
  return s_->range_host != nullptr && *static_cast<volatile unsigned*>(s_->range_host) != 0;
}

void codec_cuda::synchronize() const { CODEC_CHECK(cudaStreamSynchronize(stream_)); }

int codec_cuda::bucket_of(int rows) const {
  int bucket = 1;
  while (bucket < rows)
    bucket *= 2;
  return std::min(bucket, limits_.max_rows);
}

std::size_t codec_cuda::graphs() const { return s_->graphs.size(); }

void codec_cuda::decode_step(std::span<const row> rows, codec_cuda_launch launch) {
  const codec_config& c = config_;
  state& st = *s_;
  const int q = c.num_quantizers;
  if (rows.empty()) return;
  if (rows.size() > std::size_t(limits_.max_rows))
    throw std::invalid_argument("qwen3_tts CUDA codec: a step of " + std::to_string(rows.size()) +
                                " rows; this decoder was built for at most " + std::to_string(limits_.max_rows) +
                                " (codec_cuda_limits::max_rows)");
  int max_width = 0, min_width = limits_.max_window;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    st.checker->check_frames(rows[r].frames);
    const int n = int(rows[r].frames.size() / std::size_t(q));
    if (n < 1 || n > limits_.max_window)
      throw std::invalid_argument("qwen3_tts CUDA codec: row " + std::to_string(r) + " has " + std::to_string(n) +
                                  " frames; a window is 1 to " + std::to_string(limits_.max_window) +
                                  " frames (codec_cuda_limits::max_window)");
    if (rows[r].state == nullptr || rows[r].audio == nullptr)
      throw std::invalid_argument("qwen3_tts CUDA codec: row " + std::to_string(r) +
                                  " has no state or no audio buffer");
    max_width = std::max(max_width, n);
    min_width = std::min(min_width, n);
  }
  if (launch == codec_cuda_launch::eager) {
    enqueue(upload(rows, 0, max_width, false));
    return;
  }
  const int bucket = bucket_of(int(rows.size()));
  // Rows of one width padded with rows of that width, for the CUTLASS convolutions (see upload).
  const bool one_width = cutlass_convolutions(math_) && min_width == max_width;
  const k::row_table rt = upload(rows, bucket, max_width, one_width);
  if (launch == codec_cuda_launch::bucketed)
    enqueue_padded(rt);
  else
    replay(rt, bucket, max_width, one_width);
}

// A padded step's table: rows 0..n-1 the step's, rows n..bucket-1 idle (no frames, the idle state), row
// bucket the filler (the frames up to bucket x width, code 0, the filler state). Every graph of a key then
// launches the same sizes over the same device table, whatever the step's rows, slots and widths.
// With one_width (every row of the step `width` frames wide), rows n..bucket-1 are filler rows of `width` frames each
// instead, all over the one filler state (a sink: what they read of it is the zeros of the step's start, each segment
// being read before it is written; their racing writes reach no caller's row), and there is no row after them: the
// table is then bucket equal rows, which the CUTLASS convolutions take as equal images, whatever n.
// row_table::uniform_rows says which layout the table has.
k::row_table codec_cuda::upload(std::span<const row> rows, int bucket, int width, bool one_width) {
  state& st = *s_;
  const int q = config_.num_quantizers, n = int(rows.size());
  // The pinned mirror is rewritten only once the previous step's upload has left it.
  CODEC_CHECK(cudaEventSynchronize(st.uploaded));
  const table_layout& tl = st.tables;
  auto host = [&](std::size_t at) { return st.pinned + at; };
  auto* states = reinterpret_cast<float**>(host(tl.states));
  auto* audio = reinterpret_cast<float**>(host(tl.audio));
  auto* start = reinterpret_cast<std::int32_t*>(host(tl.start));
  auto* frame_row = reinterpret_cast<std::int32_t*>(host(tl.frame_row));
  auto* codes = reinterpret_cast<std::int32_t*>(host(tl.codes));
  start[0] = 0;
  for (int r = 0; r < n; ++r) {
    const auto& row = rows[std::size_t(r)];
    const int frames = int(row.frames.size() / std::size_t(q));
    states[r] = row.state;
    audio[r] = row.audio;
    start[r + 1] = start[r] + frames;
    std::fill_n(frame_row + start[r], frames, std::int32_t(r));
    std::memcpy(codes + std::size_t(start[r]) * q, row.frames.data(), row.frames.size_bytes());
  }
  k::row_table rt;
  rt.rows = n;
  rt.frames = start[n];
  rt.max_width = width;
  rt.uniform_rows = rt.frames == n * width ? n : 0;
  if (bucket > 0 && one_width) {
    if (rt.uniform_rows != n)
      throw std::logic_error("qwen3_tts CUDA codec: a one-width padding of rows of several widths");
    for (int r = n; r < bucket; ++r) {
      states[r] = st.filler_state;
      audio[r] = st.sink_audio;
      start[r + 1] = start[r] + width;
      std::fill_n(frame_row + start[r], width, std::int32_t(r));
    }
    std::fill_n(codes + std::size_t(rt.frames) * q, std::size_t(bucket - n) * width * q, std::int32_t(0));
    rt.rows = bucket;
    rt.frames = bucket * width;
    rt.uniform_rows = bucket;
  } else if (bucket > 0) {
    for (int r = n; r < bucket; ++r) {
      states[r] = st.idle_state;
      audio[r] = st.sink_audio;
      start[r + 1] = start[r];
    }
    const int capacity = bucket * width;
    states[bucket] = st.filler_state;
    audio[bucket] = st.sink_audio;
    start[bucket + 1] = capacity;
    std::fill_n(frame_row + rt.frames, capacity - rt.frames, std::int32_t(bucket));
    std::fill_n(codes + std::size_t(rt.frames) * q, std::size_t(capacity - rt.frames) * q, std::int32_t(0));
    rt.rows = bucket + 1;
    rt.frames = capacity;
    rt.uniform_rows = 0;
  }
  CODEC_CHECK(cudaMemcpyAsync(st.table, st.pinned, tl.bytes, cudaMemcpyHostToDevice, stream_));
  CODEC_CHECK(cudaEventRecord(st.uploaded, stream_));
  rt.start = reinterpret_cast<const std::int32_t*>(st.table + tl.start);
  rt.frame_row = reinterpret_cast<const std::int32_t*>(st.table + tl.frame_row);
  rt.state = reinterpret_cast<float* const*>(st.table + tl.states);
  return rt;
}

void codec_cuda::enqueue_padded(const k::row_table& rt) {
  const state& st = *s_;
  CODEC_CHECK(cudaMemsetAsync(st.filler_state, 0, st.state_floats * sizeof(float), stream_));
  enqueue(rt);
}

void codec_cuda::replay(const k::row_table& rt, int bucket, int width, bool one_width) {
  state& st = *s_;
  const std::tuple key{bucket, width, one_width};
  if (const auto it = st.graphs.find(key); it != st.graphs.end()) {
    CODEC_CHECK(cudaGraphLaunch(it->second, stream_));
    return;
  }
  // This step eagerly, so that cuBLAS and lazily loaded kernels initialize outside a capture; then the same
  // launches captured, not run, for the key's next steps.
  enqueue_padded(rt);
  cudaGraph_t graph = nullptr;
  CODEC_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_padded(rt);
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  CODEC_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiate (codec step)");
  st.graphs.emplace(key, exec);
}

void codec_cuda::enqueue(const codec_kernels::row_table& rt) {
  const codec_config& c = config_;
  const state& w = *s_;
  const auto* codes = reinterpret_cast<const std::int32_t*>(w.table + w.tables.codes);
  const auto* audio = reinterpret_cast<float* const*>(w.table + w.tables.audio);
  cudaStream_t s = stream_;
  const int T = rt.frames, R = rt.rows;
  // Every use of a scratch buffer is checked against what measure() allocated.
  auto need = [](std::size_t floats, std::size_t have, const char* which) {
    if (floats > have)
      throw std::logic_error(std::string("qwen3_tts CUDA codec: scratch ") + which + " needs " +
                             std::to_string(floats) + " floats, " + std::to_string(have) + " were allocated");
  };
  float* cur = w.act[0];
  float* other = w.act[1];
  auto act = [&](std::size_t floats) { need(floats, w.act_floats, "activation"); };
  auto tmp = [&](std::size_t floats) {
    need(floats, w.tmp_floats, "intermediate");
    return w.tmp;
  };

  // y[m][n_out] = A[m][:] * w[n][:] with the epilogue: the double-sum kernel, or cuBLAS over A written out.
  auto matmul = [&](const k::gemm_input& a, const float* wt, const __half* wt16, int n_out, const k::epilogue& ep,
                    float* y, int m) {
    if (a.exp_alpha != nullptr && !fp16_operands(math_))
      throw std::logic_error("qwen3_tts CUDA codec: only the fp16 conversion applies SnakeBeta to a product's input");
    if (math_ == codec_cuda_math::double_sums) {
      k::gemm(rt, a, wt, n_out, ep, y, n_out, m, s);
      return;
    }
    const int kdim = a.taps * a.channels;
    // cuBLAS's operands: the weights and the input as they are, or the input's windows written out (im2col); under
    // fp16 both in fp16, the input always converted.
    const bool fp16 = fp16_operands(math_);
    const void *x = a.data, *wv = wt;
    if (fp16) {
      if (wt16 == nullptr) throw std::logic_error("qwen3_tts CUDA codec: a product has no fp16 weights");
      need(std::size_t(m) * kdim, w.col16_elements, "fp16 input");
      k::im2col(rt, a, w.col16, m, w.range_dev, s);
      x = w.col16;
      wv = wt16;
    } else if (a.taps > 1 || a.context > 0) {
      need(std::size_t(m) * kdim, w.col_floats, "im2col");
      k::im2col(rt, a, w.col, m, s);
      x = w.col;
    }
    // column-major view: y^T [n_out x m] = w [kdim x n_out]^T * x^T [kdim x m]
    if (ep.bias != nullptr && ep.scale == nullptr &&
        lt_product(w, math_, sm_count(), wv, x, kdim, n_out, m, ep.bias, ep.accumulate, y, s))
      return;
    const bool plain = ep.bias == nullptr && ep.scale == nullptr;
    float* out = plain ? y : w.product;
    if (!plain) need(std::size_t(m) * n_out, w.product_floats, "product");
    const float one = 1.0f, beta = plain && ep.accumulate ? 1.0f : 0.0f;
    if (fp16)
      CODEC_CHECK(cublasGemmEx(w.blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, m, kdim, &one, wv, CUDA_R_16F, kdim, x,
                               CUDA_R_16F, kdim, &beta, out, CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    else
      CODEC_CHECK(cublasSgemm(w.blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, m, kdim, &one, wt, kdim,
                              static_cast<const float*>(x), kdim, &beta, out, n_out));
    if (!plain) k::apply_epilogue(w.product, ep, y, n_out, m, s);
  };

  // The CUTLASS maths: the convolution's shape as CUTLASS's implicit GEMM over the extended input
  // (codec_conv_shape.hpp) where its epilogue is the bias alone, the step's rows are of one width, CUTLASS takes the
  // shape and it gives at least cutlass_min_tiles threadblocks; nullopt otherwise (matmul's im2col then). refusal()
  // and tiles() are host arithmetic, the same at a graph's capture as at the eager step before it, so the extend knows
  // before it runs whether to write the fp16 copy.
  const implicit_conv::conv_operands operands = math_ == codec_cuda_math::cutlass_fp16
                                                    ? implicit_conv::conv_operands::fp16
                                                    : implicit_conv::conv_operands::tf32;
  auto cutlass_shape = [&](const dev_conv& cv, int level,
                           const k::epilogue& ep) -> std::optional<implicit_conv::conv_shape> {
    if (!cutlass_convolutions(math_) || ep.bias == nullptr || ep.scale != nullptr || ep.accumulate) return std::nullopt;
    const implicit_conv::conv_shape shape{.rows = rt.uniform_rows,
                                          .width = rt.max_width * level,
                                          .context = cv.context,
                                          .in = cv.in,
                                          .out = cv.out,
                                          .taps = cv.taps,
                                          .dilation = cv.dilation};
    if (implicit_conv::tiles(shape) < w.cutlass_min_tiles || implicit_conv::refusal(shape, operands) != nullptr)
      return std::nullopt;
    if (std::size_t(shape.rows) * shape.width != std::size_t(T) * level ||
        std::size_t(shape.rows) * (shape.context + shape.width) * cv.in > w.ext_floats)
      throw std::logic_error("qwen3_tts CUDA codec: a step of " + std::to_string(shape.rows) + " equal rows of " +
                             std::to_string(shape.width) + " positions does not match its " + std::to_string(T) +
                             " frames or the extended input");
    if (operands == implicit_conv::conv_operands::fp16 && cv.w16 == nullptr)
      throw std::logic_error("qwen3_tts CUDA codec: a convolution has no fp16 weights");
    return shape;
  };
  // A causal convolution of x (len positions a row at `level`) into y, its left context from and back to
  // the state.
  // With `snake`, SnakeBeta first: on the way into the extended input where the convolution has a context, else
  // (the fp16 maths only) on the way into the product's fp16 input.
  auto causal_conv = [&](const dev_conv& cv, const float* x, int level, float* y, const k::epilogue& ep,
                         const dev_snake* snake = nullptr) {
    const float* input = x;
    k::gemm_input a{nullptr, cv.in, cv.taps, cv.dilation, cv.context, level};
    if (snake && cv.context == 0) {
      a.exp_alpha = snake->exp_alpha;
      a.inv_exp_beta = snake->inv_exp_beta;
    }
    const auto conv = cv.context > 0 ? cutlass_shape(cv, level, ep) : std::nullopt;
    const bool half = conv && operands == implicit_conv::conv_operands::fp16;
    const std::size_t extended = std::size_t(T) * level + std::size_t(R) * cv.context;
    if (cv.context > 0) {
      need(extended * cv.in, w.ext_floats, "extended input");
      k::extend(rt, x, level, cv.in, cv.context, cv.state, w.ext, s, snake ? snake->exp_alpha : nullptr,
                snake ? snake->inv_exp_beta : nullptr, half ? w.ext16 : nullptr, half ? w.range_dev : nullptr);
      input = w.ext;
    }
    a.data = input;
    if (!conv)
      matmul(a, cv.w, cv.w16, cv.out, ep, y, T * level);
    else if (half)
      implicit_conv::run(*conv, w.ext16, cv.w16, ep.bias, y, s);
    else
      implicit_conv::run(*conv, w.ext, cv.w, ep.bias, y, s);
    if (cv.context > 0) k::carry(rt, w.ext, level, cv.in, cv.context, cv.state, s);
  };
  auto linear = [&](const dev_linear& l, const float* x, int positions, float* y, k::epilogue ep = {}) {
    ep.bias = l.bias;
    matmul({x, l.in}, l.w, l.w16, l.out, ep, y, positions);
  };
  // A transposed convolution of x (at `level`) into y (at level * stride): every extended input position
  // times every tap, then the overlap-add.
  auto trans_conv = [&](const dev_trans_conv& tc, const float* x, int level, float* y,
                        const dev_snake* snake = nullptr) {
    const float* input = x;
    const std::size_t positions = std::size_t(T) * level + std::size_t(R) * tc.context;
    if (tc.context > 0) {
      need(positions * tc.in, w.ext_floats, "extended input");
      k::extend(rt, x, level, tc.in, tc.context, tc.state, w.ext, s, snake ? snake->exp_alpha : nullptr,
                snake ? snake->inv_exp_beta : nullptr);
      input = w.ext;
    }
    float* z = tmp(positions * tc.kernel * tc.out);
    matmul({input, tc.in}, tc.w, tc.w16, tc.kernel * tc.out, {}, z, int(positions));
    if (tc.context > 0) k::carry(rt, w.ext, level, tc.in, tc.context, tc.state, s);
    act(std::size_t(T) * level * tc.stride * tc.out);
    k::overlap_add(rt, z, level, tc.out, tc.kernel, tc.stride, tc.context, tc.bias, y, s);
  };

  // Split RVQ decode, then the causal pre-convolution.
  const int half = c.codebook_dim / 2;
  float* sums = tmp(std::size_t(2) * T * half);
  k::rvq_sums(codes, w.rvq_tables, c.num_quantizers, c.codebook_size, half, sums, T, s);
  act(std::size_t(T) * c.codebook_dim);
  linear(w.rvq_first, sums, T, cur);
  linear(w.rvq_rest, sums + std::size_t(T) * half, T, cur, {.accumulate = true});
  act(std::size_t(T) * c.latent_dim);
  causal_conv(w.pre_conv, cur, 1, other, {.bias = w.pre_conv.bias});
  std::swap(cur, other);

  // The pre-transformer: cur is the residual stream, other the normed input and the attention output.
  const int hid = c.hidden_size, hd = c.head_dim;
  const int qw = c.num_attention_heads * hd, kvw = c.num_key_value_heads * hd;
  act(std::size_t(T) * std::max({hid, qw, c.intermediate_size}));
  linear(w.input_proj, cur, T, other);
  std::swap(cur, other);
  k::attention_shape shape;
  shape.heads = c.num_attention_heads;
  shape.kv_heads = c.num_key_value_heads;
  shape.head_dim = hd;
  shape.window = c.sliding_window;
  shape.ld = qw + 2 * kvw;
  shape.scaling = 1.0f / std::sqrt(float(hd));
  const float eps = float(c.rms_norm_eps);
  for (const auto& l : w.layers) {
    shape.key_offset = l.key_state;
    shape.value_offset = l.value_state;
    k::rms_norm(cur, l.input_norm, eps, T, hid, other, s);
    float* qkv = tmp(std::size_t(T) * shape.ld);
    linear(l.qkv, other, T, qkv);
    k::rope(rt, qkv, shape, w.inv_freq, s);
    k::window_attention(rt, qkv, shape, other, s);
    k::window_update(rt, qkv, shape, s);
    linear(l.o, other, T, cur, {.scale = l.attn_scale, .accumulate = true});
    k::rms_norm(cur, l.post_norm, eps, T, hid, other, s);
    float* gate_up = tmp(std::size_t(T) * l.gate_up.out);
    linear(l.gate_up, other, T, gate_up);
    k::swiglu(gate_up, T, c.intermediate_size, other, s);
    linear(l.down, other, T, cur, {.scale = l.mlp_scale, .accumulate = true});
  }
  k::rms_norm(cur, w.final_norm, eps, T, hid, other, s);
  act(std::size_t(T) * c.latent_dim);
  linear(w.output_proj, other, T, cur);

  // Upsampling: a transposed convolution (kernel == stride), then ConvNeXt.
  int level = 1;
  for (const auto& st : w.upsample) {
    trans_conv(st.up, cur, level, other);
    level *= st.up.stride;
    std::swap(cur, other);
    const std::size_t positions = std::size_t(T) * level;
    const auto& dw = st.dwconv;
    need((positions + std::size_t(R) * dw.context) * dw.in, w.ext_floats, "extended input");
    k::extend(rt, cur, level, dw.in, dw.context, dw.state, w.ext, s);
    k::depthwise_conv(rt, w.ext, level, dw.in, dw.taps, dw.context, dw.w, dw.bias, other, s);
    k::carry(rt, w.ext, level, dw.in, dw.context, dw.state, s);
    k::layer_norm(other, st.norm_weight, st.norm_bias, 1e-6f, int(positions), c.latent_dim, w.ext, s);
    float* mid = tmp(positions * st.pwconv1.out);
    linear(st.pwconv1, w.ext, int(positions), mid);
    k::gelu(mid, positions * st.pwconv1.out, s);
    linear(st.pwconv2, mid, int(positions), cur, {.scale = st.gamma, .accumulate = true});
  }

  // The decoder: its input convolution, the SnakeBeta blocks, the output convolution.
  act(std::size_t(T) * level * w.decoder_in.out);
  causal_conv(w.decoder_in, cur, level, other, {.bias = w.decoder_in.bias});
  std::swap(cur, other);
  // A SnakeBeta before a (transposed) convolution with a left context runs inside its extend (one pass over
  // the activation fewer); before one without, on its own.
  for (const auto& b : w.blocks) {
    if (b.up.context > 0) {
      trans_conv(b.up, cur, level, cur, &b.snake); // cur is read into the extended input before it is written
    } else {
      k::snake_beta(cur, b.snake.exp_alpha, b.snake.inv_exp_beta, std::size_t(T) * level, b.up.in, other, s);
      trans_conv(b.up, other, level, cur);
    }
    level *= b.up.stride;
    const std::size_t positions = std::size_t(T) * level;
    for (const auto& u : b.units) {
      float* c1 = tmp(positions * u.conv1.out);
      if (u.conv1.context > 0) {
        causal_conv(u.conv1, cur, level, c1, {.bias = u.conv1.bias}, &u.act1);
      } else {
        k::snake_beta(cur, u.act1.exp_alpha, u.act1.inv_exp_beta, positions, u.conv1.in, other, s);
        causal_conv(u.conv1, other, level, c1, {.bias = u.conv1.bias});
      }
      if (fp16_operands(math_) && u.conv2.context == 0) {
        causal_conv(u.conv2, c1, level, cur, {.bias = u.conv2.bias, .accumulate = true}, &u.act2); // in the fp16 pass
      } else {
        k::snake_beta(c1, u.act2.exp_alpha, u.act2.inv_exp_beta, positions, u.conv2.in, other, s);
        causal_conv(u.conv2, other, level, cur, {.bias = u.conv2.bias, .accumulate = true});
      }
    }
  }
  const std::size_t positions = std::size_t(T) * level;
  float* y = tmp(positions * w.decoder_out.out);
  if (w.decoder_out.context > 0) {
    causal_conv(w.decoder_out, cur, level, y, {.bias = w.decoder_out.bias}, &w.final_snake);
  } else {
    k::snake_beta(cur, w.final_snake.exp_alpha, w.final_snake.inv_exp_beta, positions, w.decoder_out.in, other, s);
    causal_conv(w.decoder_out, other, level, y, {.bias = w.decoder_out.bias});
  }
  k::finish_step(rt, y, level, audio, s);
}

} // namespace qwen3_tts
