// The CUDA Talker's orchestration (talker_cuda.hpp says what it computes): device buffers, weight
// upload, the decoder stack as GEMMs plus the kernels of talker_cuda_kernels.cu, prefill, and the
// decode step captured as one CUDA graph per row count.
#include "talker_cuda.hpp"
#include "talker_cuda_kernels.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

namespace qwen3_tts {
namespace {

using cuda::bf16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qwen3_tts CUDA talker: ") + what + " failed: " + cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("qwen3_tts CUDA talker (cuBLAS): ") + what +
                             " failed: " + cublasGetStatusString(e));
}
#define TALKER_CHECK(call) check((call), #call)

constexpr std::size_t workspace_bytes = std::size_t(32) << 20;
constexpr std::size_t staging_bytes = std::size_t(64) << 20;

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i)
    t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

float bf16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  int exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    if (mant == 0)
      u = sign;
    else { // subnormal: normalise
      exp = 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (std::uint32_t(exp + 112) << 23) | (mant << 13);
    }
  } else if (exp == 31)
    u = sign | 0x7f800000u | (mant << 13);
  else
    u = sign | (std::uint32_t(exp + 112) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t float_to_bf16_bits(float f) { // round to nearest even, as torch's .to(bfloat16)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u); // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

// One tensor's element i as float32, whatever the checkpoint's dtype.
float element(const host_tensor& t, std::size_t i) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  if (t.dtype == "F32") {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  std::uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  return t.dtype == "BF16" ? bf16_bits_to_float(b) : f16_bits_to_float(b);
}

template <class T>
T* device_alloc(std::size_t n, std::vector<void*>& owned, std::size_t* bytes = nullptr) {
  if (n == 0) return nullptr;
  void* p = nullptr;
  TALKER_CHECK(cudaMalloc(&p, n * sizeof(T)));
  owned.push_back(p);
  if (bytes) *bytes += n * sizeof(T);
  return static_cast<T*>(p);
}

} // namespace

// Weights of one layer; q/k/v are stacked into one [q; k; v] matrix and gate/up into [gate; up], so
// each is one GEMM.
struct layer_weights {
  bf16* qkv = nullptr;     // [(heads + 2 kv_heads) * head_dim][hidden]
  bf16* o = nullptr;       // [hidden][heads * head_dim]
  bf16* gate_up = nullptr; // [2 * intermediate][hidden]
  bf16* down = nullptr;    // [hidden][intermediate]
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  float* q_norm = nullptr;
  float* k_norm = nullptr;
};

struct stack_weights {
  std::vector<layer_weights> layers;
  float* norm = nullptr;
  float* inv_freq = nullptr; // [head_dim / 2]
  std::vector<cuda::kv_layer> kv;
};

struct talker_cuda::state {
  // Everything is released here, so a constructor that throws half-way leaks nothing either.
  ~state() {
    if (stream) cudaStreamSynchronize(stream);
    for (auto& [rows, g] : graphs)
      cudaGraphExecDestroy(g);
    if (blas) cublasDestroy(blas);
    for (int i = 0; i < pinned_ring; ++i) {
      if (pinned_mirrors[i]) cudaFreeHost(pinned_mirrors[i]);
      if (copied[i]) cudaEventDestroy(copied[i]);
    }
    for (staging_ring* r : {&embeds_in, &seeds_in})
      for (int i = 0; i < staging_ring::size; ++i) {
        if (r->buf[i]) cudaFreeHost(r->buf[i]);
        if (r->copied[i]) cudaEventDestroy(r->copied[i]);
      }
    for (void* p : owned)
      cudaFree(p);
    if (stream) cudaStreamDestroy(stream);
  }

  cudaStream_t stream = nullptr;
  std::vector<void*> owned;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;

  stack_weights talker, predictor;
  bf16* codec_embedding = nullptr; // [codec_vocab][hidden]
  bf16* text_embedding = nullptr;  // [text_vocab][text_hidden]
  bf16* text_fc1 = nullptr;        // [text_hidden][text_hidden]
  float* text_fc1_bias = nullptr;
  bf16* text_fc2 = nullptr; // [hidden][text_hidden]
  float* text_fc2_bias = nullptr;
  bf16* codec_head = nullptr;      // [codec_vocab][hidden]
  bf16* pred_embeddings = nullptr; // [groups - 1][predictor_vocab][hidden]  (the Talker's width)
  bf16* pred_heads = nullptr;      // [groups - 1][predictor_vocab][predictor hidden]
  bf16* proj = nullptr;            // [predictor hidden][hidden], null when the widths agree
  float* proj_bias = nullptr;

  // Scratch, sized for the largest token count of any call.
  float* x = nullptr;          // residual stream [tokens][max width]
  float* xin = nullptr;        // predictor input before the projection [tokens][hidden]
  bf16* xn = nullptr;          // GEMM input [tokens][max in-width]
  float* qkv = nullptr;        // [tokens][max qkv width]
  float* q = nullptr;          // [tokens][max q width]
  bf16* attn = nullptr;        // [tokens][max q width]
  float* out = nullptr;        // o / down / projection output [tokens][max width]
  float* gate_up = nullptr;    // [tokens][2 * max intermediate]
  bf16* act = nullptr;         // [tokens][max intermediate]
  float* text = nullptr;       // trailing text rows [rows][hidden]
  float* hidden_all = nullptr; // prefill's post-norm states [tokens][hidden]
  cuda::decode_scratch attn_scratch; // the Talker's split decode attention (talker_decode_splits)

  // Generation state, one entry per row.
  std::int32_t* code0 = nullptr;
  std::int32_t* frames = nullptr; // [rows][groups]
  std::uint8_t* seen = nullptr;   // [rows][codec_vocab]
  std::int32_t* generated = nullptr;
  // Teacher forcing for tests, [rows][groups], -1 = the model's own choice: column 0 is the code 0 that
  // the step chooses (the next frame's), columns 1..15 this frame's predictor codes.
  std::int32_t* forced = nullptr;
  std::uint64_t* seeds = nullptr;
  std::int32_t* chosen = nullptr; // [rows][groups] the model's own choices, before forcing (tests)
  float* past_hidden = nullptr; // [rows][hidden]
  bf16* past_hidden16 = nullptr;
  float* logits = nullptr; // [rows][codec_vocab]
  float* processed = nullptr;
  float* pred_logits = nullptr; // [groups - 1][rows][predictor_vocab]
  std::int32_t* out_frames = nullptr; // [rows][groups + 1]: copy_frames_out's rows

  // The slot store of the generation state (own or bound), and the row arrays above as its pieces.
  unsigned char* store = nullptr;
  std::size_t store_row_bytes = 0;
  int store_slots = 0;
  cuda::state_pieces pieces;

  // The Talker's plan (device, and a pinned host mirror for asynchronous uploads).
  std::int32_t *qo_indptr = nullptr, *page_indptr = nullptr, *page_indices = nullptr, *last_page_len = nullptr,
               *positions = nullptr, *text_ids_dev = nullptr, *row_slots = nullptr;
  // A ring of pinned mirrors, so that the host writes the next step's plan while the last step's copy may
  // still be pending: a mirror is rewritten only once the copy from it (event `copied`) has run.
  static constexpr int pinned_ring = 3;
  std::int32_t* pinned_mirrors[pinned_ring] = {};
  cudaEvent_t copied[pinned_ring] = {};
  int mirror = 0;
  std::int32_t* pinned = nullptr; // the mirror being written: same layout as the device block, contiguous
  std::size_t pinned_ints = 0;

  // Copies the current mirror to the device block on `s`, and notes when the copy has run.
  void upload_mirror(cudaStream_t s) {
    TALKER_CHECK(cudaMemcpyAsync(qo_indptr, pinned, pinned_ints * 4, cudaMemcpyHostToDevice, s));
    TALKER_CHECK(cudaEventRecord(copied[mirror], s));
  }

  // Pinned staging for what the host hands a step by value (the prefill's embeds, the seeds), so that the
  // step's copy is asynchronous and the call returns at once: a buffer is rewritten only once the copy from
  // it (event `copied`) has run, as with the plan's mirrors.
  struct staging_ring {
    static constexpr int size = 2;
    void* buf[size] = {};
    cudaEvent_t copied[size] = {};
    int next = 0;
    void allocate(std::size_t bytes) {
      for (int i = 0; i < size; ++i) {
        TALKER_CHECK(cudaMallocHost(&buf[i], bytes));
        TALKER_CHECK(cudaEventCreateWithFlags(&copied[i], cudaEventDisableTiming));
      }
    }
    // Copies n bytes of src to dst on s through the next buffer.
    void copy(void* dst, const void* src, std::size_t n, cudaStream_t s) {
      next = (next + 1) % size;
      TALKER_CHECK(cudaEventSynchronize(copied[next]));
      std::memcpy(buf[next], src, n);
      TALKER_CHECK(cudaMemcpyAsync(dst, buf[next], n, cudaMemcpyHostToDevice, s));
      TALKER_CHECK(cudaEventRecord(copied[next], s));
    }
  };
  staging_ring embeds_in, seeds_in;

  // The predictor's fixed plans: iteration 0 is a 2-token prefill per row at positions 0, 1; iteration
  // g >= 1 appends one token at position g + 1. Row r owns page r (one page of 16 slots).
  struct predictor_plan {
    std::int32_t *qo_indptr, *last_page_len, *positions;
  };
  std::vector<predictor_plan> pred_plans;
  std::int32_t* pred_page_indptr = nullptr;
  std::int32_t* pred_page_indices = nullptr;

  // Captured decode steps by talker_cuda::decode_key (the row count, negative in the speech flow's order).
  std::map<int, cudaGraphExec_t> graphs;
  // What each captured step holds: nodes (kernels, GEMMs, copies), and edges along which a kernel may start before
  // the one it follows completes (talker_cuda_limits::pdl).
  struct graph_shape {
    std::size_t nodes = 0, programmatic = 0;
  };
  std::map<int, graph_shape> shapes;

  // Edges of a graph along which a kernel may start before the one it follows completes (programmatic dependent
  // launch); 0 where the runtime cannot say.
  static std::size_t programmatic_edges(cudaGraph_t graph) {
    std::size_t n = 0;
    if (cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n) != cudaSuccess || n == 0) return 0;
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    if (cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n) != cudaSuccess) return 0;
    return std::size_t(std::count_if(data.begin(), data.begin() + std::ptrdiff_t(n), [](const cudaGraphEdgeData& e) {
      return e.type == cudaGraphDependencyTypeProgrammatic;
    }));
  }

  // Runs enqueue() on s: eagerly when graphs are off; else from the graph captured under key (graph()).
  template <class F>
  void run(cudaStream_t s, bool use_graphs, int key, const char* what, const F& enqueue) {
    if (!use_graphs) {
      enqueue();
      return;
    }
    TALKER_CHECK(cudaGraphLaunch(graph(s, key, what, enqueue), s));
  }

  // The graph captured under key, capturing enqueue()'s launches on s (nothing runs) on the first call with it.
  // The graph bakes those launches, so whatever they read from the host (sizes, settings, the store's address)
  // must be the same on every call with the key, or the graphs dropped when it changes.
  template <class F>
  cudaGraphExec_t graph(cudaStream_t s, int key, const char* what, const F& enqueue) {
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      cudaGraph_t graph = nullptr;
      TALKER_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue();
      } catch (...) {
        cudaStreamEndCapture(s, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      TALKER_CHECK(cudaStreamEndCapture(s, &graph));
      graph_shape& shape = shapes[key];
      if (cudaGraphGetNodes(graph, nullptr, &shape.nodes) != cudaSuccess) shape.nodes = 0;
      shape.programmatic = programmatic_edges(graph);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      check(e, (std::string("cudaGraphInstantiate (") + what + ")").c_str());
      it = graphs.emplace(key, exec).first;
    }
    return it->second;
  }

  // y[m][out] = x[m][in] * w[out][in]^T (column-major view: y^T = w * x^T). Always on the model's
  // stream, which the handle was bound to once: cublasSetStream resets the handle's workspace to
  // cuBLAS's own pool, and a pool allocation must not happen inside a graph capture.
  void gemm(cudaStream_t, const bf16* w, int out, int in, const bf16* x, int ldx, float* y, int ldy, int m) const {
    const float one = 1.0f, zero = 0.0f;
    TALKER_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, m, in, &one, w, CUDA_R_16BF, in, x, CUDA_R_16BF, ldx,
                              &zero, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // Products of at most this many rows in a decode step run as small_gemv (talker_cuda_limits::gemv_rows).
  int gemv_rows = 0;
  bool gemv_norm = false; // talker_cuda_limits::gemv_norm
  bool gemv_tensor_cores = false; // talker_cuda_limits::gemv_tensor_cores
  // The kernel a product of m rows runs on: the tensor cores from 2 rows where gemv_tensor_cores, else the CUDA cores.
  cuda::gemv_path gemv_path(int m) const {
    return gemv_tensor_cores && m >= 2 ? cuda::gemv_path::tensor_cores : cuda::gemv_path::cuda_cores;
  }
  bool gemv_fits(int m, int in, int ldx) const {
    return m <= gemv_rows && cuda::small_gemv_fits(m, in, ldx, gemv_path(m));
  }
  // talker_cuda_limits::gemv_k_split: the tensor-core products of fewer tiles than the SMs share a tile's inputs
  // among gemv_split.splits blocks (gemv_split.capacity = the SM count; partial and tickets sized for it).
  cuda::gemv_split gemv_split;
  // The split a small_gemv product of `out` outputs on `path` takes (by its shape only).
  cuda::gemv_split split_for(cuda::gemv_epilogue e, int out, cuda::gemv_path path) const {
    if (gemv_split.splits == 1 || path != cuda::gemv_path::tensor_cores ||
        cuda::gemv_tiles(e, out) >= gemv_split.capacity)
      return {};
    return gemv_split;
  }
  // talker_cuda_limits::gemv_norm_after_rows, and the ticket its products count their finished blocks with.
  int gemv_norm_after_rows = 0;
  unsigned* norm_ticket = nullptr;
  // small_gemv with the split its shape takes; norm_weight given: the rows it leaves normalised into xn by it.
  void product(cuda::gemv_epilogue e, const bf16* w, int out, int in, const bf16* x, int ldx, float* y32, bf16* act,
               int ldy, int m, cudaStream_t s, const cuda::gemv_norm& norm, cuda::gemv_path path,
               const float* norm_weight = nullptr, float eps = 0.0f) const {
    const cuda::gemv_norm_after after =
        norm_weight ? cuda::gemv_norm_after{norm_weight, xn, eps, norm_ticket} : cuda::gemv_norm_after{};
    cuda::small_gemv(e, w, out, in, x, ldx, y32, act, ldy, m, s, norm, path, split_for(e, out, path), after);
  }
  // gemm's product, as small_gemv where `small` (a decode step's product) and the shape fits.
  void linear(cudaStream_t s, const bf16* w, int out, int in, const bf16* x, int ldx, float* y, int ldy, int m,
              bool small) const {
    if (small && gemv_fits(m, in, ldx))
      product(cuda::gemv_epilogue::store, w, out, in, x, ldx, y, nullptr, ldy, m, s, {}, gemv_path(m));
    else
      gemm(s, w, out, in, x, ldx, y, ldy, m);
  }
};

namespace {

int qkv_width(const cuda_stack_dims& d) { return (d.heads + 2 * d.kv_heads) * d.head_dim; }

// Blocks a row's context is shared by in the Talker's decode attention: enough that one row's 8 KV heads fill a
// good part of the GPU, fixed so that a row's result does not depend on how many rows its step has. The code
// predictor's context is at most 17 tokens: one block a row.
constexpr int talker_decode_splits = 8;

// Blocks a row's context may take in the Talker's decode attention under the limits (talker_cuda_limits::
// attention_chunk): the fixed equal shares, or up to the most the kernel takes for shares of a given size.
int attention_splits(const talker_cuda_limits& l) {
  return l.attention_chunk > 0 ? cuda::max_decode_splits : talker_decode_splits;
}

// Blocks each row's shares are dealt to in the Talker's decode attention of `rows` rows (talker_cuda_limits::
// attention_grid): one a share while rows x kv_heads x blocks stays within the grid, else halved until it does.
int attention_blocks(const talker_cuda_limits& l, int rows, int kv_heads) {
  int blocks = attention_splits(l);
  if (l.attention_grid <= 0) return blocks;
  while (blocks > 1 && std::int64_t(rows) * kv_heads * blocks > l.attention_grid)
    blocks = (blocks + 1) / 2;
  return blocks;
}

// Where each piece of a request's generation state sits in its slot row (bytes): the seed first (8-byte
// aligned), then code 0, the frame count, the last frame, the last hidden state and the seen-codes bitmap.
struct state_layout {
  std::size_t seed = 0, code0 = 8, generated = 12, frames = 16, hidden = 0, seen = 0, total = 0;
};
state_layout layout_of(const talker_cuda_dims& d) {
  state_layout l;
  l.hidden = l.frames + 4 * std::size_t(d.code_groups);
  l.seen = l.hidden + 4 * std::size_t(d.talker.hidden);
  l.total = (l.seen + std::size_t(d.codec_vocab) + 15) / 16 * 16;
  return l;
}

// Runs the stack's layers over `tokens` tokens of x (float32 residual, modified), appending K/V by
// `view`, and leaves the final norm in y16 (bf16) and, when given, y32.
// fused: every row has one token, so qk_norm_rope_append and paged_attention may run as one launch.
// small: a decode step's pass, whose products may run as small_gemv when the tokens are few enough.
// splits: shares a row's kv indices are cut into in the fused attention (scratch holds their partials); chunk: the
// least tokens a share takes; blocks: blocks a row's shares are dealt to (cuda::decode_attention).
void run_stack(const talker_cuda::state& st, const stack_weights& w, const cuda_stack_dims& d, float* x, int tokens,
               const cuda::paged_view& view, bf16* y16, float* y32, cudaStream_t s, bool fused = false,
               bool small = false, const cuda::decode_scratch& scratch = {}, int splits = 1, int chunk = 0,
               int blocks = 0) {
  fused = fused && d.heads / d.kv_heads <= cuda::max_decode_group;
  const int h = d.hidden, qw = d.heads * d.head_dim, inter = d.intermediate;
  // On small_gemv the o and down projections add to the residual x themselves and the gate/up product
  // ends in SwiGLU, so the norms that follow have nothing to add: all of a layer's products or none.
  const bool gemv =
      small && st.gemv_fits(tokens, h, h) && st.gemv_fits(tokens, qw, qw) && st.gemv_fits(tokens, inter, inter);
  // On small_gemv with gemv_norm, the qkv and gate/up products normalise the residual themselves.
  const cuda::gemv_path path = st.gemv_path(tokens);
  const bool norm_in_gemv = gemv && st.gemv_norm && cuda::gemv_norm_fits(h, path);
  // On the tensor cores, up to gemv_norm_after_rows rows: the o and down projections leave the next norm in xn (rows
  // of at most max_gemv_norm_after_out values: a wider model keeps rms_norm).
  const bool norm_after = gemv && tokens <= st.gemv_norm_after_rows && path == cuda::gemv_path::tensor_cores &&
                          h <= cuda::max_gemv_norm_after_out;
  for (int l = 0; l < d.layers; ++l) {
    const layer_weights& lw = w.layers[std::size_t(l)];
    if (norm_in_gemv) {
      st.product(cuda::gemv_epilogue::store, lw.qkv, qkv_width(d), h, nullptr, h, st.qkv, nullptr, qkv_width(d), tokens,
                 s, {x, h, lw.input_norm, d.rms_eps}, path);
    } else {
      if (!norm_after || l == 0) // else the previous layer's down projection left it in xn
        cuda::rms_norm(x, l == 0 || gemv ? nullptr : st.out, lw.input_norm, st.xn, nullptr, tokens, h, d.rms_eps, s);
      st.linear(s, lw.qkv, qkv_width(d), h, st.xn, h, st.qkv, qkv_width(d), tokens, gemv);
    }
    if (fused) {
      cuda::decode_attention(st.qkv, lw.q_norm, lw.k_norm, w.inv_freq, w.kv[std::size_t(l)], view, st.attn, d.heads,
                             d.kv_heads, d.head_dim, d.rms_eps, scratch, splits, s, chunk, blocks);
    } else {
      cuda::qk_norm_rope_append(st.qkv, lw.q_norm, lw.k_norm, w.inv_freq, st.q, w.kv[std::size_t(l)], view, d.heads,
                                d.kv_heads, d.head_dim, d.rms_eps, s);
      cuda::paged_attention(st.q, w.kv[std::size_t(l)], view, st.attn, d.heads, d.kv_heads, d.head_dim, s);
    }
    if (gemv) {
      st.product(cuda::gemv_epilogue::residual, lw.o, h, qw, st.attn, qw, x, nullptr, h, tokens, s, {}, path,
                 norm_after ? lw.post_norm : nullptr, d.rms_eps);
      if (norm_in_gemv) {
        st.product(cuda::gemv_epilogue::swiglu, lw.gate_up, 2 * inter, h, nullptr, h, nullptr, st.act, inter, tokens, s,
                   {x, h, lw.post_norm, d.rms_eps}, path);
      } else {
        if (!norm_after) cuda::rms_norm(x, nullptr, lw.post_norm, st.xn, nullptr, tokens, h, d.rms_eps, s);
        st.product(cuda::gemv_epilogue::swiglu, lw.gate_up, 2 * inter, h, st.xn, h, nullptr, st.act, inter, tokens, s, {},
                   path);
      }
      const bool next = norm_after && l + 1 < d.layers;
      st.product(cuda::gemv_epilogue::residual, lw.down, h, inter, st.act, inter, x, nullptr, h, tokens, s, {}, path,
                 next ? w.layers[std::size_t(l) + 1].input_norm : nullptr, d.rms_eps);
      continue;
    }
    st.gemm(s, lw.o, h, qw, st.attn, qw, st.out, h, tokens);
    cuda::rms_norm(x, st.out, lw.post_norm, st.xn, nullptr, tokens, h, d.rms_eps, s);
    st.gemm(s, lw.gate_up, 2 * inter, h, st.xn, h, st.gate_up, 2 * inter, tokens);
    cuda::swiglu(st.gate_up, st.act, tokens, inter, s);
    st.gemm(s, lw.down, h, inter, st.act, inter, st.out, h, tokens);
  }
  cuda::rms_norm(x, d.layers > 0 && !gemv ? st.out : nullptr, w.norm, y16, y32, tokens, h, d.rms_eps, s);
}

void host_inv_freq(const cuda_stack_dims& d, std::vector<float>& f) {
  // The reference: 1 / theta^(arange(0, dim, 2) / dim) in float32.
  f.resize(std::size_t(d.head_dim / 2));
  for (int i = 0; i < d.head_dim / 2; ++i)
    f[std::size_t(i)] = 1.0f / std::pow(d.rope_theta, float(2 * i) / float(d.head_dim));
}

void check_dims(const talker_cuda_dims& d, const talker_cuda_limits& l) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("qwen3_tts CUDA talker: " + what);
  };
  for (const auto* s : {&d.talker, &d.predictor}) {
    const std::string which = s == &d.talker ? "talker" : "code predictor";
    need(s->layers > 0 && s->hidden > 0 && s->intermediate > 0, which + " needs layers, hidden and intermediate > 0");
    need(s->heads > 0 && s->kv_heads > 0 && s->heads % s->kv_heads == 0,
         which + ": heads " + std::to_string(s->heads) + " must be a positive multiple of kv_heads " +
             std::to_string(s->kv_heads));
    const int hd = s->head_dim;
    need(hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256,
         which + ": head_dim " + std::to_string(hd) +
             " has no attention kernel (16, 32, 64, 128, 256 are built; add a case to paged_attention)");
  }
  need(d.code_groups >= 2 && d.code_groups <= 32, "code_groups " + std::to_string(d.code_groups) + " out of [2, 32]");
  need(d.codec_vocab > 0 && d.predictor_vocab > 0 && d.text_vocab > 0 && d.text_hidden > 0,
       "codec_vocab, predictor_vocab, text_vocab and text_hidden must be > 0");
  need(d.eos_id >= 0 && d.eos_id < d.codec_vocab, "eos_id " + std::to_string(d.eos_id) + " outside the codec vocab");
  need(l.max_rows > 0 && l.block_tokens > 0 && l.kv_blocks > 0 && l.max_pages > 0 && l.max_prefill_tokens > 0,
       "every limit must be > 0");
  // Without the tensor cores, products of more rows than the CUDA-core kernel takes stay on cuBLAS (gemv_fits).
  need(l.gemv_rows >= 0 && l.gemv_rows <= cuda::max_mma_gemv_rows,
       "gemv_rows " + std::to_string(l.gemv_rows) + " outside [0, " + std::to_string(cuda::max_mma_gemv_rows) +
           "] (the most rows small_gemv takes, on the tensor cores; 0 keeps every product on cuBLAS)");
  need(l.gemv_k_split >= 1 && l.gemv_k_split <= cuda::max_gemv_splits,
       "gemv_k_split " + std::to_string(l.gemv_k_split) + " outside [1, " + std::to_string(cuda::max_gemv_splits) +
           "] (blocks a tensor-core product's tile of 16 outputs is shared among; 1: one)");
  need(l.gemv_norm_after_rows >= 0 && l.gemv_norm_after_rows <= cuda::max_mma_gemv_rows,
       "gemv_norm_after_rows " + std::to_string(l.gemv_norm_after_rows) + " outside [0, " +
           std::to_string(cuda::max_mma_gemv_rows) +
           "] (the most rows of a tensor-core o or down projection that normalises its output; 0: none)");
  need(l.attention_chunk >= 0, "attention_chunk " + std::to_string(l.attention_chunk) +
                                   " is negative (0: equal shares; N: shares of at least N tokens)");
  need(l.attention_grid >= 0, "attention_grid " + std::to_string(l.attention_grid) +
                                  " is negative (0: one block a share; N: at most about N blocks a launch)");
}

} // namespace

talker_cuda::talker_cuda(const talker_cuda_dims& dims, const talker_cuda_limits& limits)
    : dims_(dims), limits_(limits), s_(std::make_unique<state>()) {
  check_dims(dims, limits);
  state& st = *s_;
  auto& own = st.owned;
  if (limits.high_priority) {
    int least = 0, greatest = 0;
    TALKER_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TALKER_CHECK(cudaStreamCreateWithPriority(&st.stream, cudaStreamNonBlocking, greatest));
  } else {
    TALKER_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  }
  stream_ = st.stream;
  TALKER_CHECK(cublasCreate(&st.blas));
  st.workspace = device_alloc<unsigned char>(workspace_bytes, own);
  TALKER_CHECK(cublasSetStream(st.blas, stream_)); // first: it resets the workspace
  TALKER_CHECK(cublasSetWorkspace(st.blas, st.workspace, workspace_bytes));
  st.gemv_rows = limits.gemv_rows;
  st.gemv_norm = limits.gemv_norm;
  st.gemv_tensor_cores = limits.gemv_tensor_cores;
  st.gemv_norm_after_rows = limits.gemv_norm_after_rows;
  st.norm_ticket = device_alloc<unsigned>(1, own);
  TALKER_CHECK(cudaMemset(st.norm_ticket, 0, sizeof(unsigned)));
  if (limits.gemv_k_split > 1) {
    int device = 0, sms = 0;
    TALKER_CHECK(cudaGetDevice(&device));
    TALKER_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    st.gemv_split.splits = limits.gemv_k_split;
    st.gemv_split.capacity = sms;
    st.gemv_split.partial = device_alloc<float>(cuda::gemv_split_floats(sms, limits.gemv_k_split), own);
    st.gemv_split.tickets = device_alloc<unsigned>(std::size_t(sms), own);
    TALKER_CHECK(cudaMemset(st.gemv_split.tickets, 0, std::size_t(sms) * sizeof(unsigned)));
  }

  const auto& T = dims.talker;
  const auto& P = dims.predictor;
  const int groups = dims.code_groups;
  std::size_t wb = 0;
  auto alloc_stack = [&](stack_weights& w, const cuda_stack_dims& d) {
    w.layers.resize(std::size_t(d.layers));
    for (auto& l : w.layers) {
      l.qkv = device_alloc<bf16>(std::size_t(qkv_width(d)) * d.hidden, own, &wb);
      l.o = device_alloc<bf16>(std::size_t(d.hidden) * d.heads * d.head_dim, own, &wb);
      l.gate_up = device_alloc<bf16>(std::size_t(2) * d.intermediate * d.hidden, own, &wb);
      l.down = device_alloc<bf16>(std::size_t(d.hidden) * d.intermediate, own, &wb);
      l.input_norm = device_alloc<float>(std::size_t(d.hidden), own, &wb);
      l.post_norm = device_alloc<float>(std::size_t(d.hidden), own, &wb);
      l.q_norm = device_alloc<float>(std::size_t(d.head_dim), own, &wb);
      l.k_norm = device_alloc<float>(std::size_t(d.head_dim), own, &wb);
    }
    w.norm = device_alloc<float>(std::size_t(d.hidden), own, &wb);
    w.inv_freq = device_alloc<float>(std::size_t(d.head_dim / 2), own);
    std::vector<float> f;
    host_inv_freq(d, f);
    TALKER_CHECK(cudaMemcpy(w.inv_freq, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  };
  alloc_stack(st.talker, T);
  alloc_stack(st.predictor, P);
  st.codec_embedding = device_alloc<bf16>(std::size_t(dims.codec_vocab) * T.hidden, own, &wb);
  st.text_embedding = device_alloc<bf16>(std::size_t(dims.text_vocab) * dims.text_hidden, own, &wb);
  st.text_fc1 = device_alloc<bf16>(std::size_t(dims.text_hidden) * dims.text_hidden, own, &wb);
  st.text_fc1_bias = device_alloc<float>(std::size_t(dims.text_hidden), own, &wb);
  st.text_fc2 = device_alloc<bf16>(std::size_t(T.hidden) * dims.text_hidden, own, &wb);
  st.text_fc2_bias = device_alloc<float>(std::size_t(T.hidden), own, &wb);
  st.codec_head = device_alloc<bf16>(std::size_t(dims.codec_vocab) * T.hidden, own, &wb);
  st.pred_embeddings = device_alloc<bf16>(std::size_t(groups - 1) * dims.predictor_vocab * T.hidden, own, &wb);
  st.pred_heads = device_alloc<bf16>(std::size_t(groups - 1) * dims.predictor_vocab * P.hidden, own, &wb);
  if (P.hidden != T.hidden) {
    st.proj = device_alloc<bf16>(std::size_t(P.hidden) * T.hidden, own, &wb);
    st.proj_bias = device_alloc<float>(std::size_t(P.hidden), own, &wb);
  }
  weight_bytes_ = wb;

  // KV caches: the Talker's paged; the predictor's one page of `groups` slots per row.
  const std::size_t talker_kv = std::size_t(limits.kv_blocks) * limits.block_tokens * T.kv_heads * T.head_dim;
  for (int l = 0; l < T.layers; ++l)
    st.talker.kv.push_back({device_alloc<bf16>(talker_kv, own), device_alloc<bf16>(talker_kv, own)});
  const std::size_t pred_kv = std::size_t(limits.max_rows) * groups * P.kv_heads * P.head_dim;
  for (int l = 0; l < P.layers; ++l)
    st.predictor.kv.push_back({device_alloc<bf16>(pred_kv, own), device_alloc<bf16>(pred_kv, own)});

  // Scratch.
  const std::size_t tokens = std::size_t(std::max(limits.max_prefill_tokens, 2 * limits.max_rows));
  const std::size_t width = std::size_t(std::max({T.hidden, P.hidden, dims.text_hidden}));
  const std::size_t qkvw = std::size_t(std::max(qkv_width(T), qkv_width(P)));
  const std::size_t qw = std::size_t(std::max(T.heads * T.head_dim, P.heads * P.head_dim));
  const std::size_t inter = std::size_t(std::max(T.intermediate, P.intermediate));
  st.x = device_alloc<float>(tokens * width, own);
  st.embeds_in.allocate(tokens * std::size_t(T.hidden) * sizeof(float));
  st.seeds_in.allocate(std::size_t(limits.max_rows) * sizeof(std::uint64_t));
  st.xin = device_alloc<float>(tokens * width, own);
  st.xn = device_alloc<bf16>(tokens * std::max(width, qw), own);
  st.qkv = device_alloc<float>(tokens * qkvw, own);
  st.q = device_alloc<float>(tokens * qw, own);
  st.attn = device_alloc<bf16>(tokens * qw, own);
  st.out = device_alloc<float>(tokens * width, own);
  st.gate_up = device_alloc<float>(tokens * 2 * std::max(inter, width), own);
  st.act = device_alloc<bf16>(tokens * std::max(inter, width), own);
  st.hidden_all = device_alloc<float>(tokens * T.hidden, own);
  const std::size_t rows = std::size_t(limits.max_rows);
  {
    const std::size_t parts = rows * std::size_t(T.heads) * std::size_t(attention_splits(limits));
    st.attn_scratch.acc = device_alloc<float>(parts * std::size_t(T.head_dim), own);
    st.attn_scratch.m = device_alloc<float>(parts, own);
    st.attn_scratch.l = device_alloc<float>(parts, own);
    st.attn_scratch.counters = device_alloc<unsigned>(rows * std::size_t(T.kv_heads), own);
    TALKER_CHECK(cudaMemset(st.attn_scratch.counters, 0, rows * std::size_t(T.kv_heads) * sizeof(unsigned)));
  }
  st.text = device_alloc<float>(rows * T.hidden, own);
  st.code0 = device_alloc<std::int32_t>(rows, own);
  st.frames = device_alloc<std::int32_t>(rows * groups, own);
  st.seen = device_alloc<std::uint8_t>(rows * dims.codec_vocab, own);
  st.generated = device_alloc<std::int32_t>(rows, own);
  st.forced = device_alloc<std::int32_t>(rows * groups, own);
  st.seeds = device_alloc<std::uint64_t>(rows, own);
  st.chosen = device_alloc<std::int32_t>(rows * groups, own);
  TALKER_CHECK(cudaMemset(st.seeds, 0, rows * 8));
  TALKER_CHECK(cudaMemset(st.forced, 0xff, rows * groups * 4)); // all -1
  st.past_hidden = device_alloc<float>(rows * T.hidden, own);
  st.past_hidden16 = device_alloc<bf16>(rows * T.hidden, own);
  st.logits = device_alloc<float>(rows * dims.codec_vocab, own);
  st.processed = device_alloc<float>(rows * dims.codec_vocab, own);
  st.pred_logits = device_alloc<float>(std::size_t(groups - 1) * rows * dims.predictor_vocab, own);
  TALKER_CHECK(cudaMemset(st.frames, 0, rows * groups * 4));
  TALKER_CHECK(cudaMemset(st.code0, 0, rows * 4));
  TALKER_CHECK(cudaMemset(st.seen, 0, rows * dims.codec_vocab));
  TALKER_CHECK(cudaMemset(st.generated, 0, rows * 4));
  TALKER_CHECK(cudaMemset(st.past_hidden, 0, rows * T.hidden * 4)); // a decode before any prefill reads zeros
  st.out_frames = device_alloc<std::int32_t>(rows * (groups + 1), own);

  // The generation state's own store (zeros: a decode before any prefill reads zeros) and its pieces.
  const state_layout sl = layout_of(dims);
  st.store_slots = limits.state_slots > 0 ? limits.state_slots : limits.max_rows;
  st.store_row_bytes = sl.total;
  st.store = device_alloc<unsigned char>(std::size_t(st.store_slots) * sl.total, own);
  TALKER_CHECK(cudaMemset(st.store, 0, std::size_t(st.store_slots) * sl.total));
  auto piece = [&](void* rows_array, std::size_t offset, std::size_t bytes) {
    st.pieces.piece[st.pieces.count++] = cuda::state_piece{rows_array, int(offset), int(bytes)};
  };
  piece(st.seeds, sl.seed, 8);
  piece(st.code0, sl.code0, 4);
  piece(st.generated, sl.generated, 4);
  piece(st.frames, sl.frames, 4 * std::size_t(groups));
  piece(st.past_hidden, sl.hidden, 4 * std::size_t(T.hidden));
  piece(st.seen, sl.seen, std::size_t(dims.codec_vocab));

  // The Talker's plan: one device block, one pinned mirror, same layout.
  const std::size_t n_qo = rows + 1, n_pi = rows + 1, n_idx = std::size_t(limits.max_pages), n_last = rows,
                    n_pos = tokens, n_text = rows, n_slots = rows;
  st.pinned_ints = n_qo + n_pi + n_idx + n_last + n_pos + n_text + n_slots;
  std::int32_t* plan = device_alloc<std::int32_t>(st.pinned_ints, own);
  st.qo_indptr = plan;
  st.page_indptr = st.qo_indptr + n_qo;
  st.page_indices = st.page_indptr + n_pi;
  st.last_page_len = st.page_indices + n_idx;
  st.positions = st.last_page_len + n_last;
  st.text_ids_dev = st.positions + n_pos;
  st.row_slots = st.text_ids_dev + n_text;
  for (int i = 0; i < state::pinned_ring; ++i) {
    TALKER_CHECK(cudaMallocHost(&st.pinned_mirrors[i], st.pinned_ints * 4));
    TALKER_CHECK(cudaEventCreateWithFlags(&st.copied[i], cudaEventDisableTiming));
  }
  st.pinned = st.pinned_mirrors[0];

  // The predictor's fixed plans.
  std::vector<std::int32_t> indptr(rows + 1), pages(rows);
  for (std::size_t r = 0; r <= rows; ++r)
    indptr[r] = std::int32_t(r);
  for (std::size_t r = 0; r < rows; ++r)
    pages[r] = std::int32_t(r);
  st.pred_page_indptr = device_alloc<std::int32_t>(rows + 1, own);
  st.pred_page_indices = device_alloc<std::int32_t>(rows, own);
  TALKER_CHECK(cudaMemcpy(st.pred_page_indptr, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  TALKER_CHECK(cudaMemcpy(st.pred_page_indices, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));
  for (int g = 0; g < groups - 1; ++g) {
    const int per_row = g == 0 ? 2 : 1;
    std::vector<std::int32_t> qo(rows + 1), last(rows, g + 2), pos(rows * per_row);
    for (std::size_t r = 0; r <= rows; ++r)
      qo[r] = std::int32_t(r * per_row);
    for (std::size_t i = 0; i < pos.size(); ++i)
      pos[i] = g == 0 ? std::int32_t(i % 2) : g + 1;
    state::predictor_plan pp{device_alloc<std::int32_t>(qo.size(), own), device_alloc<std::int32_t>(rows, own),
                             device_alloc<std::int32_t>(pos.size(), own)};
    TALKER_CHECK(cudaMemcpy(pp.qo_indptr, qo.data(), qo.size() * 4, cudaMemcpyHostToDevice));
    TALKER_CHECK(cudaMemcpy(pp.last_page_len, last.data(), last.size() * 4, cudaMemcpyHostToDevice));
    TALKER_CHECK(cudaMemcpy(pp.positions, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
    st.pred_plans.push_back(pp);
  }
  // The memsets and copies above ran on the legacy stream, which the model's non-blocking stream does
  // not wait for.
  TALKER_CHECK(cudaDeviceSynchronize());
}

talker_cuda::~talker_cuda() = default; // state's destructor releases everything

std::size_t talker_cuda::decode_weight_bytes() const {
  const auto& T = dims_.talker;
  const auto& P = dims_.predictor;
  auto layer = [](const cuda_stack_dims& d) {
    return 2 * (std::size_t(qkv_width(d)) * d.hidden + std::size_t(d.hidden) * d.heads * d.head_dim +
                std::size_t(3) * d.intermediate * d.hidden);
  };
  const std::size_t iterations = std::size_t(dims_.code_groups - 1);
  std::size_t b = layer(T) * T.layers + 2 * std::size_t(dims_.codec_vocab) * T.hidden; // talker + codec head
  b += 2 * (std::size_t(dims_.text_hidden) * dims_.text_hidden + std::size_t(T.hidden) * dims_.text_hidden);
  b += iterations * layer(P) * P.layers;                                            // predictor, 15 passes
  b += iterations * 2 * std::size_t(dims_.predictor_vocab) * P.hidden;              // one lm head each
  if (P.hidden != T.hidden) b += iterations * 2 * std::size_t(P.hidden) * T.hidden; // projection each pass
  return b;
}

void talker_cuda::random_weights(std::uint32_t seed) {
  state& st = *s_;
  cudaStream_t s = stream_;
  std::uint32_t salt = seed * 7919u;
  auto mat = [&](bf16* p, std::size_t rows, std::size_t cols) {
    cuda::fill_random(p, rows * cols, ++salt, 1.0f / std::sqrt(float(cols)), s);
  };
  auto vec = [&](float* p, std::size_t n, float offset, float scale) {
    cuda::fill_random_f32(p, n, ++salt, offset, scale, s);
  };
  auto stack = [&](stack_weights& w, const cuda_stack_dims& d) {
    for (auto& l : w.layers) {
      mat(l.qkv, std::size_t(qkv_width(d)), std::size_t(d.hidden));
      mat(l.o, std::size_t(d.hidden), std::size_t(d.heads * d.head_dim));
      mat(l.gate_up, std::size_t(2 * d.intermediate), std::size_t(d.hidden));
      mat(l.down, std::size_t(d.hidden), std::size_t(d.intermediate));
      vec(l.input_norm, std::size_t(d.hidden), 1.0f, 0.1f);
      vec(l.post_norm, std::size_t(d.hidden), 1.0f, 0.1f);
      vec(l.q_norm, std::size_t(d.head_dim), 1.0f, 0.1f);
      vec(l.k_norm, std::size_t(d.head_dim), 1.0f, 0.1f);
    }
    vec(w.norm, std::size_t(d.hidden), 1.0f, 0.1f);
  };
  const auto& T = dims_.talker;
  const auto& P = dims_.predictor;
  stack(st.talker, T);
  stack(st.predictor, P);
  cuda::fill_random(st.codec_embedding, std::size_t(dims_.codec_vocab) * T.hidden, ++salt, 1.0f, s);
  cuda::fill_random(st.text_embedding, std::size_t(dims_.text_vocab) * dims_.text_hidden, ++salt, 1.0f, s);
  mat(st.text_fc1, std::size_t(dims_.text_hidden), std::size_t(dims_.text_hidden));
  vec(st.text_fc1_bias, std::size_t(dims_.text_hidden), 0.0f, 0.1f);
  mat(st.text_fc2, std::size_t(T.hidden), std::size_t(dims_.text_hidden));
  vec(st.text_fc2_bias, std::size_t(T.hidden), 0.0f, 0.1f);
  mat(st.codec_head, std::size_t(dims_.codec_vocab), std::size_t(T.hidden));
  cuda::fill_random(st.pred_embeddings, std::size_t(dims_.code_groups - 1) * dims_.predictor_vocab * T.hidden, ++salt,
                    1.0f, s);
  mat(st.pred_heads, std::size_t(dims_.code_groups - 1) * dims_.predictor_vocab, std::size_t(P.hidden));
  if (st.proj) {
    mat(st.proj, std::size_t(P.hidden), std::size_t(T.hidden));
    vec(st.proj_bias, std::size_t(P.hidden), 0.0f, 0.1f);
  }
  TALKER_CHECK(cudaStreamSynchronize(s));
}

void talker_cuda::load_weights(const weight_source& source) {
  state& st = *s_;
  void* staging = nullptr;
  TALKER_CHECK(cudaMallocHost(&staging, staging_bytes));
  struct staging_guard {
    void* p;
    ~staging_guard() { cudaFreeHost(p); }
  } guard{staging};

  // Fetches `name`, checks its shape, and returns it (the caller copies it out).
  auto fetch = [&](const std::string& name, std::vector<std::int64_t> shape) {
    host_tensor t = source(name, shape);
    if (t.shape != shape)
      throw std::runtime_error("qwen3_tts CUDA talker: tensor " + name + " has shape " + shape_text(t.shape) +
                               ", the config implies " + shape_text(shape) +
                               "; does config.json belong to these weights?");
    if (t.dtype != "BF16" && t.dtype != "F16" && t.dtype != "F32")
      throw std::runtime_error("qwen3_tts CUDA talker: tensor " + name + " has dtype " + t.dtype +
                               "; only BF16, F16 and F32 are read");
    std::size_t n = 1;
    for (auto v : shape)
      n *= std::size_t(v);
    if (t.bytes != n * (t.dtype == "F32" ? 4 : 2))
      throw std::runtime_error("qwen3_tts CUDA talker: tensor " + name + " holds " + std::to_string(t.bytes) +
                               " bytes for " + std::to_string(n) + " elements of " + t.dtype);
    return t;
  };
  // Copies a tensor's n elements, converted to bf16 (or float32), to dst through the pinned buffer.
  auto upload = [&](const host_tensor& t, void* dst, bool as_f32) {
    std::size_t n = t.dtype == "F32" ? t.bytes / 4 : t.bytes / 2;
    const std::size_t esize = as_f32 ? 4 : 2;
    const std::size_t chunk = staging_bytes / esize;
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t first = 0; first < n; first += chunk) {
      const std::size_t count = std::min(chunk, n - first);
      if (!as_f32 && t.dtype == "BF16") {
        std::memcpy(staging, static_cast<const unsigned char*>(t.data) + 2 * first, 2 * count);
      } else if (as_f32) {
        auto* f = static_cast<float*>(staging);
        for (std::size_t i = 0; i < count; ++i)
          f[i] = element(t, first + i);
      } else {
        auto* b = static_cast<std::uint16_t*>(staging);
        for (std::size_t i = 0; i < count; ++i)
          b[i] = float_to_bf16_bits(element(t, first + i));
      }
      TALKER_CHECK(cudaMemcpyAsync(out + esize * first, staging, esize * count, cudaMemcpyHostToDevice, stream_));
      TALKER_CHECK(cudaStreamSynchronize(stream_));
    }
  };
  auto matrix = [&](const std::string& name, bf16* dst, std::int64_t rows, std::int64_t cols) {
    upload(fetch(name, {rows, cols}), dst, false);
  };
  auto vector = [&](const std::string& name, float* dst, std::int64_t n) { upload(fetch(name, {n}), dst, true); };
  auto stack = [&](stack_weights& w, const cuda_stack_dims& d, const std::string& prefix) {
    const std::int64_t h = d.hidden, qw = std::int64_t(d.heads) * d.head_dim,
                       kw = std::int64_t(d.kv_heads) * d.head_dim;
    for (int l = 0; l < d.layers; ++l) {
      const std::string p = prefix + "layers." + std::to_string(l) + ".";
      layer_weights& lw = w.layers[std::size_t(l)];
      matrix(p + "self_attn.q_proj.weight", lw.qkv, qw, h);
      matrix(p + "self_attn.k_proj.weight", lw.qkv + qw * h, kw, h);
      matrix(p + "self_attn.v_proj.weight", lw.qkv + (qw + kw) * h, kw, h);
      matrix(p + "self_attn.o_proj.weight", lw.o, h, qw);
      matrix(p + "mlp.gate_proj.weight", lw.gate_up, d.intermediate, h);
      matrix(p + "mlp.up_proj.weight", lw.gate_up + std::int64_t(d.intermediate) * h, d.intermediate, h);
      matrix(p + "mlp.down_proj.weight", lw.down, h, d.intermediate);
      vector(p + "input_layernorm.weight", lw.input_norm, h);
      vector(p + "post_attention_layernorm.weight", lw.post_norm, h);
      vector(p + "self_attn.q_norm.weight", lw.q_norm, d.head_dim);
      vector(p + "self_attn.k_norm.weight", lw.k_norm, d.head_dim);
    }
    vector(prefix + "norm.weight", w.norm, h);
  };
  const auto& T = dims_.talker;
  const auto& P = dims_.predictor;
  stack(st.talker, T, "talker.model.");
  stack(st.predictor, P, "talker.code_predictor.model.");
  matrix("talker.model.codec_embedding.weight", st.codec_embedding, dims_.codec_vocab, T.hidden);
  matrix("talker.model.text_embedding.weight", st.text_embedding, dims_.text_vocab, dims_.text_hidden);
  matrix("talker.text_projection.linear_fc1.weight", st.text_fc1, dims_.text_hidden, dims_.text_hidden);
  vector("talker.text_projection.linear_fc1.bias", st.text_fc1_bias, dims_.text_hidden);
  matrix("talker.text_projection.linear_fc2.weight", st.text_fc2, T.hidden, dims_.text_hidden);
  vector("talker.text_projection.linear_fc2.bias", st.text_fc2_bias, T.hidden);
  matrix("talker.codec_head.weight", st.codec_head, dims_.codec_vocab, T.hidden);
  for (int g = 0; g < dims_.code_groups - 1; ++g) {
    const std::string i = std::to_string(g);
    matrix("talker.code_predictor.model.codec_embedding." + i + ".weight",
           st.pred_embeddings + std::int64_t(g) * dims_.predictor_vocab * T.hidden, dims_.predictor_vocab, T.hidden);
    matrix("talker.code_predictor.lm_head." + i + ".weight",
           st.pred_heads + std::int64_t(g) * dims_.predictor_vocab * P.hidden, dims_.predictor_vocab, P.hidden);
  }
  if (st.proj) {
    matrix("talker.code_predictor.small_to_mtp_projection.weight", st.proj, P.hidden, T.hidden);
    vector("talker.code_predictor.small_to_mtp_projection.bias", st.proj_bias, P.hidden);
  }
}

void talker_cuda::upload_plan(const step_plan& plan, int tokens) {
  state& st = *s_;
  const int rows = int(plan.rows());
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("qwen3_tts CUDA talker: plan " + what);
  };
  need(rows > 0 && rows <= limits_.max_rows,
       "has " + std::to_string(rows) + " rows; the model was built for at most " + std::to_string(limits_.max_rows));
  need(int(plan.page_indptr.size()) == rows + 1 && int(plan.last_page_len.size()) == rows,
       "page_indptr / last_page_len sizes disagree with qo_indptr's " + std::to_string(rows) + " rows");
  need(int(plan.page_indices.size()) <= limits_.max_pages, "uses " + std::to_string(plan.page_indices.size()) +
                                                               " pages; max_pages is " +
                                                               std::to_string(limits_.max_pages));
  need(plan.qo_indptr[0] == 0 && plan.page_indptr[0] >= 0 &&
           std::size_t(plan.page_indptr[std::size_t(rows)]) <= plan.page_indices.size(),
       "must start qo_indptr at 0 and keep page_indptr inside page_indices (" +
           std::to_string(plan.page_indices.size()) + " entries)");
  need(plan.qo_indptr.back() == tokens && int(plan.positions.size()) == tokens,
       "qo_indptr ends at " + std::to_string(plan.qo_indptr.back()) + " and has " +
           std::to_string(plan.positions.size()) + " positions for " + std::to_string(tokens) + " tokens");
  for (int r = 0; r < rows; ++r) {
    const int pages = plan.page_indptr[std::size_t(r) + 1] - plan.page_indptr[std::size_t(r)];
    const int last = plan.last_page_len[std::size_t(r)];
    const int kv = (pages - 1) * limits_.block_tokens + last;
    const int qo = plan.qo_indptr[std::size_t(r) + 1] - plan.qo_indptr[std::size_t(r)];
    need(pages >= 1 && last >= 1 && last <= limits_.block_tokens && qo >= 1 && qo <= kv,
         "row " + std::to_string(r) + ": " + std::to_string(pages) + " pages, last page " + std::to_string(last) +
             " tokens, " + std::to_string(qo) +
             " new tokens (each row needs >= 1 page, 1..block_tokens in its last, "
             "and no more new tokens than its KV length)");
  }
  for (auto b : plan.page_indices)
    need(b >= 0 && b < limits_.kv_blocks,
         "names block " + std::to_string(b) + " of " + std::to_string(limits_.kv_blocks));
  // The next mirror of the ring, once the copy from its last use has run.
  st.mirror = (st.mirror + 1) % state::pinned_ring;
  TALKER_CHECK(cudaEventSynchronize(st.copied[st.mirror]));
  st.pinned = st.pinned_mirrors[st.mirror];
  std::int32_t* p = st.pinned;
  std::copy(plan.qo_indptr.begin(), plan.qo_indptr.end(), p);
  std::copy(plan.page_indptr.begin(), plan.page_indptr.end(), p + (st.page_indptr - st.qo_indptr));
  std::copy(plan.page_indices.begin(), plan.page_indices.end(), p + (st.page_indices - st.qo_indptr));
  std::copy(plan.last_page_len.begin(), plan.last_page_len.end(), p + (st.last_page_len - st.qo_indptr));
  std::copy(plan.positions.begin(), plan.positions.end(), p + (st.positions - st.qo_indptr));
}

void talker_cuda::prefill(std::span<const float> embeds, const step_plan& plan, std::span<const std::int32_t> slots) {
  run_prefill(embeds, plan, slots, false);
}

void talker_cuda::prefill_frame(std::span<const float> embeds, const step_plan& plan,
                                std::span<const std::int32_t> slots) {
  run_prefill(embeds, plan, slots, true);
}

void talker_cuda::run_prefill(std::span<const float> embeds, const step_plan& plan,
                              std::span<const std::int32_t> slots, bool frame) {
  state& st = *s_;
  const cuda::pdl_scope pdl(limits_.pdl);
  const auto& T = dims_.talker;
  const int rows = int(plan.rows());
  const int tokens = rows > 0 ? plan.qo_indptr.back() : 0;
  if (tokens > limits_.max_prefill_tokens)
    throw std::invalid_argument("qwen3_tts CUDA talker: prefill of " + std::to_string(tokens) +
                                " tokens; max_prefill_tokens is " + std::to_string(limits_.max_prefill_tokens));
  if (embeds.size() != std::size_t(tokens) * T.hidden)
    throw std::invalid_argument("qwen3_tts CUDA talker: prefill embeds hold " + std::to_string(embeds.size()) +
                                " floats, the plan's " + std::to_string(tokens) + " tokens need " +
                                std::to_string(std::size_t(tokens) * T.hidden));
  upload_plan(plan, tokens);
  upload_slots(slots, rows);
  planned_rows_ = 0; // the plan buffers now hold a prefill's tables
  cudaStream_t s = stream_;
  st.upload_mirror(s);
  st.embeds_in.copy(st.x, embeds.data(), embeds.size() * 4, s);
  const cuda::paged_view view{st.qo_indptr, st.page_indptr, st.page_indices, st.last_page_len,
                              st.positions, rows,           tokens,          limits_.block_tokens};
  run_stack(st, st.talker, T, st.x, tokens, view, st.xn, st.hidden_all, s);
  cuda::gather_last_rows(st.hidden_all, st.qo_indptr, st.past_hidden, st.past_hidden16, rows, T.hidden, s);
  st.gemm(s, st.codec_head, dims_.codec_vocab, T.hidden, st.past_hidden16, T.hidden, st.logits, dims_.codec_vocab,
          rows);
  TALKER_CHECK(cudaMemsetAsync(st.seen, 0, std::size_t(rows) * dims_.codec_vocab, s));
  TALKER_CHECK(cudaMemsetAsync(st.generated, 0, std::size_t(rows) * 4, s));
  choose_code0(rows);
  // Eager. A graph per row count would replace some 750 launches, but under load capturing one held the GPU
  // thread for tens of milliseconds, for each row count met first (docs/benchmarks.md).
  if (frame) enqueue_predict(rows);
  cuda::scatter_state(st.store, st.store_row_bytes, st.row_slots, st.pieces, rows, s);
}

void talker_cuda::choose_code0(int rows) {
  state& st = *s_;
  const auto& ts = sampling_.talker;
  if (ts.do_sample)
    cuda::sample_code0(st.logits, st.processed, dims_.codec_vocab, st.seen, st.generated, st.code0, st.forced,
                       st.chosen, dims_.code_groups, rows, sampling_.repetition_penalty, sampling_.min_new_tokens,
                       dims_.eos_id, dims_.codec_vocab - 1024, cuda::sample_settings{ts.temperature, ts.top_k},
                       st.seeds, stream_);
  else
    cuda::choose_code0(st.logits, st.processed, dims_.codec_vocab, st.seen, st.generated, st.code0, st.forced,
                       st.chosen, dims_.code_groups, rows, sampling_.repetition_penalty, sampling_.min_new_tokens,
                       dims_.eos_id, dims_.codec_vocab - 1024, stream_);
}

void talker_cuda::set_sampling(const talker_sampling& sampling) {
  for (const auto* s : {&sampling.talker, &sampling.sub}) {
    const char* which = s == &sampling.talker ? "talker (code 0)" : "sub-talker (codes 1..15)";
    if (s->do_sample && s->top_p < 1.0f)
      throw std::invalid_argument(std::string("qwen3_tts CUDA talker: ") + which + " top_p " +
                                  std::to_string(s->top_p) +
                                  " is not computed on CUDA yet; use top_p 1 (the reference's default) or the host "
                                  "Talker");
    if (s->do_sample && !(s->temperature > 0.0f))
      throw std::invalid_argument(std::string("qwen3_tts CUDA talker: ") + which + " temperature " +
                                  std::to_string(s->temperature) + " must be > 0 when sampling");
  }
  drop_graphs();
  sampling_ = sampling;
}

void talker_cuda::drop_graphs() {
  TALKER_CHECK(cudaStreamSynchronize(stream_));
  for (auto& [rows, g] : s_->graphs)
    cudaGraphExecDestroy(g);
  s_->graphs.clear();
  s_->shapes.clear();
}

void talker_cuda::set_fused_decode(bool on) {
  drop_graphs();
  fused_decode_ = on;
}

void talker_cuda::set_seeds(std::span<const std::uint64_t> seeds) {
  if (seeds.size() > std::size_t(limits_.max_rows))
    throw std::invalid_argument("qwen3_tts CUDA talker: " + std::to_string(seeds.size()) + " seeds for at most " +
                                std::to_string(limits_.max_rows) + " rows");
  std::vector<std::uint64_t> all(std::size_t(limits_.max_rows), 0);
  std::copy(seeds.begin(), seeds.end(), all.begin());
  s_->seeds_in.copy(s_->seeds, all.data(), all.size() * 8, stream_);
}

void talker_cuda::force_codes(std::span<const std::int32_t> codes) {
  state& st = *s_;
  const std::size_t n = std::size_t(limits_.max_rows) * dims_.code_groups;
  if (!codes.empty() && codes.size() > n)
    throw std::invalid_argument("qwen3_tts CUDA talker: force_codes got " + std::to_string(codes.size()) +
                                " codes; at most max_rows x code_groups = " + std::to_string(n));
  std::vector<std::int32_t> all(n, -1);
  std::copy(codes.begin(), codes.end(), all.begin());
  // On the model's stream (a plain cudaMemcpy from pageable memory may return before its DMA lands,
  // and the non-blocking stream would not wait for it), then wait so `all` may go.
  TALKER_CHECK(cudaMemcpyAsync(st.forced, all.data(), n * 4, cudaMemcpyHostToDevice, stream_));
  TALKER_CHECK(cudaStreamSynchronize(stream_));
}

void talker_cuda::set_decode_inputs(const step_plan& plan, std::span<const std::int32_t> text_ids,
                                    std::span<const std::int32_t> slots) {
  state& st = *s_;
  const int rows = int(plan.rows());
  if (int(text_ids.size()) != rows)
    throw std::invalid_argument("qwen3_tts CUDA talker: " + std::to_string(text_ids.size()) + " text ids for " +
                                std::to_string(rows) + " rows");
  for (auto id : text_ids)
    if (id < 0 || id >= dims_.text_vocab)
      throw std::invalid_argument("qwen3_tts CUDA talker: text id " + std::to_string(id) + " outside [0, " +
                                  std::to_string(dims_.text_vocab) + ")");
  for (int r = 0; r < rows; ++r)
    if (plan.qo_indptr[std::size_t(r) + 1] - plan.qo_indptr[std::size_t(r)] != 1)
      throw std::invalid_argument("qwen3_tts CUDA talker: a decode plan has one token per row; row " +
                                  std::to_string(r) + " has " +
                                  std::to_string(plan.qo_indptr[std::size_t(r) + 1] - plan.qo_indptr[std::size_t(r)]));
  upload_plan(plan, rows);
  upload_slots(slots, rows);
  planned_rows_ = rows;
  std::copy(text_ids.begin(), text_ids.end(), st.pinned + (st.text_ids_dev - st.qo_indptr));
  st.upload_mirror(stream_);
}

void talker_cuda::enqueue_decode(int rows, bool frame_first) {
  state& st = *s_;
  const cuda::pdl_scope pdl(limits_.pdl);
  cuda::gather_state(st.store, st.store_row_bytes, st.row_slots, st.pieces, rows, stream_);
  if (frame_first) {
    enqueue_talker(rows);
    enqueue_predict(rows);
  } else {
    enqueue_predict(rows);
    enqueue_talker(rows);
  }
  cuda::scatter_state(st.store, st.store_row_bytes, st.row_slots, st.pieces, rows, stream_);
}

void talker_cuda::enqueue_predict(int rows) {
  state& st = *s_;
  cudaStream_t s = stream_;
  const auto& T = dims_.talker;
  const auto& P = dims_.predictor;
  const int groups = dims_.code_groups;
  const int pv = dims_.predictor_vocab;

  // Frame k's code 0 (chosen by the last step) opens the frame.
  TALKER_CHECK(cudaMemcpy2DAsync(st.frames, std::size_t(groups) * 4, st.code0, 4, 4, std::size_t(rows),
                                 cudaMemcpyDeviceToDevice, s));
  // The code predictor: iteration 0 is a 2-token prefill per row (the Talker's last hidden state, then
  // code 0's embedding); iteration g feeds codebook g back. lm_head[g] predicts codebook g + 1.
  for (int g = 0; g < groups - 1; ++g) {
    const int tokens = g == 0 ? 2 * rows : rows;
    float* input = st.proj ? st.xin : st.x;
    if (g == 0)
      cuda::predictor_prefill_input(st.past_hidden, st.codec_embedding, st.code0, input, rows, T.hidden, s);
    else
      cuda::gather_code_rows(st.pred_embeddings + std::size_t(g - 1) * pv * T.hidden, st.frames, groups, g, input, rows,
                             T.hidden, s);
    if (st.proj) {
      cuda::to_bf16(st.xin, st.xn, std::size_t(tokens) * T.hidden, s);
      st.linear(s, st.proj, P.hidden, T.hidden, st.xn, T.hidden, st.out, P.hidden, tokens, true);
      cuda::bias_add(st.out, st.proj_bias, st.x, nullptr, tokens, P.hidden, s);
    }
    const auto& pp = st.pred_plans[std::size_t(g)];
    const cuda::paged_view view{
        pp.qo_indptr, st.pred_page_indptr, st.pred_page_indices, pp.last_page_len, pp.positions, rows, tokens, groups};
    run_stack(st, st.predictor, P, st.x, tokens, view, st.xn, nullptr, s, fused_decode_ && g > 0, true);
    // The head reads each row's last token: token 2r + 1 of the prefill, token r afterwards.
    const bf16* last = g == 0 ? st.xn + P.hidden : st.xn;
    const int ld = g == 0 ? 2 * P.hidden : P.hidden;
    float* logits = st.pred_logits + std::size_t(g) * limits_.max_rows * pv;
    st.linear(s, st.pred_heads + std::size_t(g) * pv * P.hidden, pv, P.hidden, last, ld, logits, pv, rows, true);
    if (sampling_.sub.do_sample) // counter: this frame, generated[r] - 1; lane: the codebook, g + 1
      cuda::sample_rows(logits, pv, cuda::sample_settings{sampling_.sub.temperature, sampling_.sub.top_k}, st.seeds,
                        st.generated, -1, std::uint32_t(g + 1), st.frames, groups, g + 1, st.forced, st.chosen, rows,
                        s);
    else
      cuda::argmax_rows(logits, pv, st.frames, groups, g + 1, st.forced, st.chosen, rows, s);
  }
}

void talker_cuda::enqueue_talker(int rows) {
  state& st = *s_;
  cudaStream_t s = stream_;
  const auto& T = dims_.talker;
  const int groups = dims_.code_groups;
  const int pv = dims_.predictor_vocab;
  // The next Talker input: the frame's 16 embeddings plus the trailing text row.
  cuda::gather_rows(st.text_embedding, st.text_ids_dev, st.xn, rows, dims_.text_hidden, s);
  st.linear(s, st.text_fc1, dims_.text_hidden, dims_.text_hidden, st.xn, dims_.text_hidden, st.gate_up,
            dims_.text_hidden, rows, true);
  cuda::bias_silu(st.gate_up, st.text_fc1_bias, st.act, rows, dims_.text_hidden, s);
  st.linear(s, st.text_fc2, T.hidden, dims_.text_hidden, st.act, dims_.text_hidden, st.out, T.hidden, rows, true);
  cuda::bias_add(st.out, st.text_fc2_bias, st.text, nullptr, rows, T.hidden, s);
  cuda::frame_embedding_sum(st.codec_embedding, st.pred_embeddings, std::int64_t(pv) * T.hidden, st.frames, groups,
                            st.text, st.x, rows, T.hidden, s);
  // The Talker's step and the next frame's code 0.
  const cuda::paged_view view{st.qo_indptr, st.page_indptr, st.page_indices,     st.last_page_len, st.positions,
                              rows,         rows,           limits_.block_tokens};
  run_stack(st, st.talker, T, st.x, rows, view, st.past_hidden16, st.past_hidden, s, fused_decode_, true,
            st.attn_scratch, attention_splits(limits_), limits_.attention_chunk,
            attention_blocks(limits_, rows, T.kv_heads));
  st.linear(s, st.codec_head, dims_.codec_vocab, T.hidden, st.past_hidden16, T.hidden, st.logits, dims_.codec_vocab,
            rows, true);
  choose_code0(rows);
}

void talker_cuda::decode(int rows) { launch_decode(rows, false); }
void talker_cuda::decode_frame(int rows) { launch_decode(rows, true); }

void talker_cuda::launch_decode(int rows, bool frame_first) {
  if (rows <= 0 || rows > limits_.max_rows)
    throw std::invalid_argument("qwen3_tts CUDA talker: decode of " + std::to_string(rows) + " rows; max_rows is " +
                                std::to_string(limits_.max_rows));
  if (rows != planned_rows_)
    throw std::invalid_argument("qwen3_tts CUDA talker: decode of " + std::to_string(rows) +
                                " rows, but set_decode_inputs planned " + std::to_string(planned_rows_) +
                                "; plan every decode step with its own rows first");
  s_->run(stream_, use_graphs_, decode_key(rows, frame_first), "decode step",
          [&] { enqueue_decode(rows, frame_first); });
}

void talker_cuda::capture_decode_graphs(int max_rows, bool frame_first) {
  if (max_rows <= 0 || max_rows > limits_.max_rows)
    throw std::invalid_argument("qwen3_tts CUDA talker: capture_decode_graphs up to " + std::to_string(max_rows) +
                                " rows; max_rows is " + std::to_string(limits_.max_rows));
  if (!use_graphs_) return;
  for (int rows = 1; rows <= max_rows; ++rows)
    s_->graph(stream_, decode_key(rows, frame_first), "decode step", [&] { enqueue_decode(rows, frame_first); });
}

std::size_t talker_cuda::decode_graphs() const { return s_->graphs.size(); }

void talker_cuda::upload_slots(std::span<const std::int32_t> slots, int rows) {
  state& st = *s_;
  if (!slots.empty() && int(slots.size()) != rows)
    throw std::invalid_argument("qwen3_tts CUDA talker: " + std::to_string(slots.size()) + " slots for a step of " +
                                std::to_string(rows) + " rows; give one slot a row (or none: row r uses slot r)");
  std::vector<std::uint8_t> taken(std::size_t(st.store_slots), 0);
  std::int32_t* dst = st.pinned + (st.row_slots - st.qo_indptr);
  for (int r = 0; r < rows; ++r) {
    const std::int32_t slot = slots.empty() ? r : slots[std::size_t(r)];
    if (slot < 0 || slot >= st.store_slots)
      throw std::invalid_argument("qwen3_tts CUDA talker: row " + std::to_string(r) + " names state slot " +
                                  std::to_string(slot) + "; the store holds slots 0.." +
                                  std::to_string(st.store_slots - 1));
    if (taken[std::size_t(slot)]++)
      throw std::invalid_argument("qwen3_tts CUDA talker: two rows of one step name state slot " +
                                  std::to_string(slot) + "; a request's state belongs to one row a step");
    dst[r] = slot;
  }
}

std::size_t talker_cuda::state_bytes() const { return layout_of(dims_).total; }

void talker_cuda::bind_state(void* store, std::size_t row_bytes, int slots) {
  if (!store || slots <= 0 || row_bytes < state_bytes())
    throw std::invalid_argument("qwen3_tts CUDA talker: bind_state needs a store of slots > 0 rows of at least " +
                                std::to_string(state_bytes()) + " bytes; got " + std::to_string(slots) +
                                " rows of " + std::to_string(row_bytes) + " bytes" + (store ? "" : " at null"));
  drop_graphs();
  s_->store = static_cast<unsigned char*>(store);
  s_->store_row_bytes = row_bytes;
  s_->store_slots = slots;
}

void talker_cuda::copy_frames_out(std::int32_t* host, int rows) {
  state& st = *s_;
  if (rows <= 0 || rows > limits_.max_rows)
    throw std::invalid_argument("qwen3_tts CUDA talker: copy_frames_out of " + std::to_string(rows) +
                                " rows; max_rows is " + std::to_string(limits_.max_rows));
  cuda::frames_with_end(st.frames, dims_.code_groups, dims_.eos_id, st.out_frames, rows, stream_);
  TALKER_CHECK(cudaMemcpyAsync(host, st.out_frames, std::size_t(rows) * (dims_.code_groups + 1) * 4,
                               cudaMemcpyDeviceToHost, stream_));
}

namespace {
template <class T>
std::vector<T> read_back(cudaStream_t s, const T* p, std::size_t n) {
  std::vector<T> out(n);
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize before a read-back");
  check(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (read-back)");
  return out;
}
} // namespace

std::size_t talker_cuda::graph_nodes(int rows) const {
  const auto it = s_->shapes.find(rows);
  return it == s_->shapes.end() ? 0 : it->second.nodes;
}

std::size_t talker_cuda::graph_programmatic_edges(int rows) const {
  const auto it = s_->shapes.find(rows);
  return it == s_->shapes.end() ? 0 : it->second.programmatic;
}

std::vector<std::int32_t> talker_cuda::frames(int rows) const {
  return read_back(stream_, s_->frames, std::size_t(rows) * dims_.code_groups);
}
std::vector<std::int32_t> talker_cuda::own_choices(int rows) const {
  return read_back(stream_, s_->chosen, std::size_t(rows) * dims_.code_groups);
}
std::vector<std::int32_t> talker_cuda::code0(int rows) const {
  return read_back(stream_, s_->code0, std::size_t(rows));
}
std::vector<float> talker_cuda::talker_logits(int rows) const {
  return read_back(stream_, s_->logits, std::size_t(rows) * dims_.codec_vocab);
}
std::vector<float> talker_cuda::processed_logits(int rows) const {
  return read_back(stream_, s_->processed, std::size_t(rows) * dims_.codec_vocab);
}
std::vector<float> talker_cuda::predictor_logits(int rows) const {
  const std::size_t pv = std::size_t(dims_.predictor_vocab);
  auto all = read_back(stream_, s_->pred_logits, std::size_t(dims_.code_groups - 1) * limits_.max_rows * pv);
  std::vector<float> out;
  for (int g = 0; g < dims_.code_groups - 1; ++g) {
    const auto first = all.begin() + std::ptrdiff_t(std::size_t(g) * limits_.max_rows * pv);
    out.insert(out.end(), first, first + std::ptrdiff_t(std::size_t(rows) * pv));
  }
  return out;
}
std::vector<float> talker_cuda::last_hidden(int rows) const {
  return read_back(stream_, s_->past_hidden, std::size_t(rows) * dims_.talker.hidden);
}
std::vector<float> talker_cuda::kv_cache_k(int layer) const {
  const auto& T = dims_.talker;
  const std::size_t n = std::size_t(limits_.kv_blocks) * limits_.block_tokens * T.kv_heads * T.head_dim;
  auto raw = read_back(stream_, reinterpret_cast<const std::uint16_t*>(s_->talker.kv.at(std::size_t(layer)).k), n);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = bf16_bits_to_float(raw[i]);
  return out;
}

} // namespace qwen3_tts
