// The real Qwen3-TTS Talker and its code predictor on CUDA: bf16 weights on the device, cuBLAS GEMMs
// (or, at a few rows, a GEMV kernel of our own: talker_cuda_limits::gemv_rows) with float32 accumulation
// and float32 outputs, the residual stream in float32, the paged KV cache in bf16
// ([layers][blocks][block_tokens][kv_heads][head_dim], the host forward's layout), and one decode
// step -- the code predictor's 15 codes of the current frame, the next Talker input (16 codebook
// embeddings plus the trailing text row), the Talker's layers, the codec head and the choice of the
// next frame's code 0, every choice on the GPU (greedy, or drawn as the host talker_sampler draws) --
// enqueued as a single stream of work that a CUDA graph captures per batch size. The math follows
// qwen-tts 0.1.1 (modeling_qwen3_tts.py) as the host float32 forward does.
//
// Each request's generation state (seed, frame count, the code-0 ids it chose for the repetition penalty,
// its last frame and code 0, its last hidden state) is one row of a slot store, addressed per step by a
// slot per row: a step gathers its rows' state from their slots first and scatters it back last, so a
// request may sit on any row of any step. The store is the model's own (state_slots rows) or one bound
// with bind_state (the engine's talker_state pool). Without slots a step's row r uses slot r. Every row of
// a step is a live request: the caller passes the step's real rows, never an engine plan's padding.
#pragma once

#include "talker.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace qwen3_tts {

// One decoder stack: the Talker's or the code predictor's.
struct cuda_stack_dims {
  int layers = 0;
  int hidden = 0;
  int intermediate = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float rms_eps = 1e-6f;
  float rope_theta = 1e6f;
};

struct talker_cuda_dims {
  cuda_stack_dims talker;
  cuda_stack_dims predictor;
  int codec_vocab = 0;     // the Talker's vocab_size: rows of codec_embedding and codec_head
  int predictor_vocab = 0; // the code predictor's vocab_size (codebook size)
  int code_groups = 16;
  int text_vocab = 0;
  int text_hidden = 0;
  int eos_id = 0; // the codec end token (code 0's processing: set_sampling has the rest)
};

// Capacities fixed at construction (every buffer is allocated once, so graphs stay valid).
struct talker_cuda_limits {
  int max_rows = 1;
  int max_prefill_tokens = 256; // tokens of one prefill call, all rows together
  int kv_blocks = 64;
  int block_tokens = 16;
  int max_pages = 64; // entries of page_indices in one call
  int state_slots = 0; // rows of the model's own state store (0: max_rows); bind_state replaces the store
  // The model's stream at the device's greatest priority: where other streams (the codec's) keep the GPU busy,
  // the hardware then dispatches this stream's pending blocks first. Off: the default priority.
  bool high_priority = false;
  // Weight products of at most this many rows (tokens) in the decode step -- the Talker's layers and heads, the
  // code predictor's passes -- run as small_gemv (one pass over the weights, the residual add and SwiGLU fused in)
  // instead of cuBLAS GEMMs; the prefill keeps cuBLAS. 0: cuBLAS everywhere. At most cuda::max_mma_gemv_rows
  // (64, the tensor-core kernel's); without gemv_tensor_cores, products of more than cuda::max_gemv_rows (8) rows
  // stay on cuBLAS. The default, 32: on an H100 the 0.6B's decode step with the tensor cores up to 32 rows took
  // 0.94-0.96x cuBLAS's at 24-32 rows, and the eight-tile kernel of 33-64 rows 1.18-1.26x (the 1.7B's: 1.02x at
  // 24-32 rows; docs/benchmarks.md).
  int gemv_rows = 32;
  // On small_gemv, the RMSNorm before the qkv and gate/up products done by the product's blocks themselves
  // (cuda::gemv_norm: the same bits, one launch fewer each; measured faster, docs/benchmarks.md). Off: a separate
  // rms_norm launch before each.
  bool gemv_norm = true;
  // The decode step's and the prefill's own kernels launched with programmatic dependent launch (cuda::pdl_scope):
  // on Hopper a kernel's blocks start, and ask their first weights into L2, while the kernel before it finishes.
  // The same bits either way; measured faster (docs/benchmarks.md: 2.6-7 % of a decode step, 4-13 % of a prefill).
  bool pdl = true;
  // The Talker's fused decode attention: 0, each row's context shared by 8 blocks in equal parts (their partial
  // results merged); N > 0, in parts of at least N tokens (at most cuda::max_decode_splits of them), so that a
  // context of at most N tokens takes one block and no merge. Either way a row's parts follow its own length only,
  // never its step's other rows. For the bench (qwen3tts_talker_bench --attention-chunk): no chunk was measured
  // faster at every row count (docs/benchmarks.md), so 0 stays the default.
  int attention_chunk = 0;
  // The Talker's fused decode attention: a launch of R rows deals each row's shares to fewer blocks while R x
  // kv_heads x (blocks a row) exceeds this many (halving from one block a share, down to one block a row): at many
  // rows the GPU is full anyway, and a block taking several shares normalises, rotates and appends once for them. The
  // same sums whatever the blocks, so a row's bits never depend on its step's rows. 0: one block a share at every row
  // count. The default, 2048: the 0.6B's 8 KV heads take fewer blocks from 33 rows; on an H100 the decode step took
  // 0.98-0.99x at 48 and 64 rows and 0.96x at 128 of the step without it, and no other grid measured did better at
  // every row count (docs/benchmarks.md). qwen3tts_talker_bench --attention-grid N.
  int attention_grid = 2048;
  // small_gemv's products of 2 to gemv_rows rows on the tensor cores (cuda::gemv_path::tensor_cores: a block 16
  // weight rows, m16n8k16 bf16 products with float32 sums, no norm prologue; a row's sums never depend on the
  // step's other rows), 1 row on the CUDA-core kernel: measured faster than cuBLAS at 2 to 32 rows and than the
  // CUDA-core kernel from 2 rows, slower than it at 1 (docs/benchmarks.md). Off: the CUDA-core kernel for every
  // row count up to gemv_rows and 8, cuBLAS beyond.
  bool gemv_tensor_cores = true;
  // On the tensor cores, a product of fewer tiles of 16 outputs than the GPU has SMs (the 0.6B's o and down
  // projections: 64 tiles) has each tile's inputs shared among this many blocks (cuda::gemv_split: 1 to
  // cuda::max_gemv_splits; 1, one block a tile). The split follows the product's shape and the SM count, never the
  // step's rows, so a row's bits still follow its own inputs only (qwen3tts_talker_bench --gemv-k-split N). The
  // default, 4: the 0.6B's decode step took 0.97-0.98x main's time at 2-8 rows and 0.92-0.93x at 12-16 rows
  // (0.96-0.98x the same build's without a split; docs/benchmarks.md).
  int gemv_k_split = 4;
  // On the tensor cores, the RMSNorm after the o and down projections (before the gate/up product and the next
  // layer's qkv) done by the projection's last block to finish (cuda::gemv_norm_after: rms_norm's bits, one launch
  // fewer each: at 2 rows a step's launches went from 798 to 608), for products of at most this many rows (0: none; at
  // most cuda::max_mma_gemv_rows). The default, 8: on an H100 the 0.6B's decode step took 0.94-0.95x the step without
  // at 2-4 rows and 0.96x at 8, but 1.02x at 16, where the one block's norm of 16 rows costs more than the launch it
  // saves (docs/benchmarks.md). qwen3tts_talker_bench --gemv-norm-after N.
  int gemv_norm_after_rows = 8;
};

// A tensor as a checkpoint holds it: dtype "BF16", "F16" or "F32", row-major, little-endian. The
// bytes must stay valid until the next call of the source.
struct host_tensor {
  std::string dtype;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};
// Looks a tensor up by its checkpoint name ("talker.model.layers.0.self_attn.q_proj.weight") and the
// shape the config implies; throws when the checkpoint has none (talker_cuda checks the shape too).
using weight_source = std::function<host_tensor(const std::string& name, const std::vector<std::int64_t>& shape)>;

// The CUDA model's sizes and code-0 settings from the host Talker's typed config.json. The three
// multimodal RoPE position streams are equal for TTS, so plain RoPE over head_dim / 2 frequencies is
// exact; a config whose streams could differ is still computed this way (the host forward does too).
talker_cuda_dims cuda_dims(const talker_config& config);
// The text id whose projected row decode step `step` (0 = the first after the prefill) adds to its
// input, as the reference's generate lays it out: streaming, the text after its first id, then
// tts_eos, then tts_pad; non-streaming, tts_pad from the start. build_prompt's trailing rows are the
// projections of exactly these ids.
std::int32_t trailing_text_id(const talker_prompt& prompt, const talker_config& config, int step);
class weight_store;
// A weight_source over a checkpoint's weight store: each tensor's bytes straight from the file's mapping
// (bf16 in the released checkpoints, uploaded as they are). Defined where the checkpoint reader is built.
weight_source store_weight_source(const weight_store& store);
// A weight_source over a float32 source (the host forward's tensor_source: tests, or a weight_store's
// to_f32); the tensors go to the device as bf16.
weight_source
f32_weight_source(std::function<std::vector<float>(const std::string&, const std::vector<std::int64_t>&)> source);
// A weight_source over the host Talker's loaded weights, by checkpoint name (a service that holds the host
// Talker uploads from it: bf16 checkpoint values come back exactly). The weights must outlive load_weights.
weight_source host_weight_source(const talker_weights& weights);

class talker_cuda {
public:
  talker_cuda(const talker_cuda_dims& dims, const talker_cuda_limits& limits);
  ~talker_cuda();
  talker_cuda(const talker_cuda&) = delete;
  talker_cuda& operator=(const talker_cuda&) = delete;

  // Uploads every weight once (converted to bf16, norms to float32) through a pinned staging buffer,
  // checking each tensor's shape against the dims; the error names the tensor, the shape found and
  // the shape expected.
  void load_weights(const weight_source& source);
  // Fills every weight with deterministic pseudo-random values on the device (benchmarks: real sizes,
  // no checkpoint file). Norm weights near 1, matrices scaled by 1/sqrt(fan-in).
  void random_weights(std::uint32_t seed);
  // Bytes of weights one decode step reads (the Talker once, the predictor's layers 15 times).
  std::size_t decode_weight_bytes() const;
  std::size_t weight_bytes() const { return weight_bytes_; }

  // Bytes of one request's generation state (a slot row of the store holds at least this many).
  std::size_t state_bytes() const;
  // Keeps the generation state in device memory the caller owns from here on: slots rows of row_bytes
  // (>= state_bytes()) at store, e.g. a recurrent pool's layer. Drops captured graphs (they bake the store).
  void bind_state(void* store, std::size_t row_bytes, int slots);

  // The prompt: embeds [tokens][talker hidden] float32 on the host (build_prompt's rows), addressed by
  // plan (the host forward's step_plan: the engine's kv_cache / attention / positions plans) and by slots
  // (row r's request's slot; empty: slot r). Runs the Talker, keeps each row's last post-norm hidden state,
  // computes its code-0 logits and chooses code 0 of frame 0; each row's state starts afresh, its seed the
  // one set_seeds gave the row. Asynchronous on the model's stream (embeds go through pinned staging: the
  // span may be reused on return); the read functions below synchronise.
  void prefill(std::span<const float> embeds, const step_plan& plan, std::span<const std::int32_t> slots = {});
  // prefill, then the code predictor: frame 0 complete (frames() reads it), as the speech flow's prefill
  // step makes it.
  void prefill_frame(std::span<const float> embeds, const step_plan& plan, std::span<const std::int32_t> slots = {});

  // The addressing of the next decode step (one token per row), each row's trailing text id (the
  // next text token in the streaming layout, tts_eos after the text, then tts_pad) and each row's slot
  // (empty: slot r). Asynchronous copies on the model's stream from pinned memory; the next decode() or
  // decode_frame() reads them.
  void set_decode_inputs(const step_plan& plan, std::span<const std::int32_t> text_ids,
                         std::span<const std::int32_t> slots = {});
  // One decode step for rows [0, rows): completes frame k (code 0 from the last step, codes 1..15
  // here) and chooses frame k+1's code 0. With graphs on, the first call for a row count captures
  // the step and later calls replay it. Asynchronous; the read functions below synchronise.
  void decode(int rows);
  // The same work in the speech flow's order: the Talker's step on frame k - 1 chooses frame k's code 0,
  // then the predictor completes frame k (frames() reads it). Each request's first such step follows its
  // prefill_frame. Its own graph per row count.
  void decode_frame(int rows);
  // Enqueues a copy of the last step's frames to host (pinned) memory as [rows][code_groups + 1]: the
  // frame, then 1 when its code 0 is the end token. Asynchronous.
  void copy_frames_out(std::int32_t* host, int rows);
  void set_use_graphs(bool on) { use_graphs_ = on; }
  // Sampling as the host talker_sampler does it (default: greedy, as built). Code 0 and the predictor's
  // codes each sample or take the argmax per their do_sample; temperature and top-k are computed on the
  // GPU, top_p < 1 is refused (not computed here yet). Drops captured graphs (they bake the settings).
  void set_sampling(const talker_sampling& sampling);
  // Each row's request seed (Philox key; the counter is the frame, the lane the codebook), as the host
  // sampler's seeds; rows past the span get 0. The next prefill stores them in its rows' slots, where
  // later steps find them. Asynchronous on the model's stream, through pinned staging.
  void set_seeds(std::span<const std::uint64_t> seeds);
  // Decode steps run each layer's q/k norm, RoPE, KV append and attention as one launch (off by
  // default until a GPU run has shown it equal to the two launches and faster). Drops captured graphs.
  void set_fused_decode(bool on);
  // Nodes of the graph captured for `rows` (0 before its capture): at small batches the step's time is
  // mostly one launch latency per node.
  std::size_t graph_nodes(int rows) const;
  // Its edges along which a kernel may start before the one it follows completes (talker_cuda_limits::pdl: the
  // edges between the Talker's own kernels; 0 without it).
  std::size_t graph_programmatic_edges(int rows) const;
  // Captures the graph of the decode step (decode_frame's order when frame_first, decode's otherwise) for every
  // row count 1..max_rows not captured yet, without running any: a service pays the captures when it starts
  // rather than when a row count first comes (under load one held the launching thread for tens of milliseconds;
  // docs/benchmarks.md). Needs the state store bound first (bind_state) and the sampling and attention settings
  // final (changing them drops the graphs). Nothing to do with graphs off.
  void capture_decode_graphs(int max_rows, bool frame_first);
  // Decode-step graphs captured so far, both orders.
  std::size_t decode_graphs() const;
  // Teacher forcing for parity tests: codes [rows][16] (-1 = the model's own choice) that the next
  // prefill or decode step takes instead of its argmax; column 0 is the code 0 the step chooses (the
  // next frame's), columns 1..15 the frame's predictor codes. The logits stay the model's own, so a test
  // can compare every decision on the reference's path. An empty span clears it. Synchronous.
  void force_codes(std::span<const std::int32_t> codes);

  // Results of the last step.
  std::vector<std::int32_t> frames(int rows) const;      // [rows][16]: the frame decode() completed
  std::vector<std::int32_t> code0(int rows) const;       // [rows]: the next frame's code 0
  std::vector<std::int32_t> own_choices(int rows) const; // [rows][16]: the step's own choices, before forcing
  std::vector<float> talker_logits(int rows) const;      // [rows][codec_vocab], raw
  std::vector<float> processed_logits(int rows) const;   // [rows][codec_vocab], after penalty/bans
  std::vector<float> predictor_logits(int rows) const;   // [15][rows][predictor_vocab], raw
  std::vector<float> last_hidden(int rows) const;        // [rows][talker hidden], post-norm
  std::vector<float> kv_cache_k(int layer) const;        // the whole layer, as float32 (tests)

  cudaStream_t stream() const { return stream_; }
  const talker_cuda_dims& dims() const { return dims_; }
  const talker_cuda_limits& limits() const { return limits_; }

  struct state; // device buffers and weights (talker_cuda.cu)
  // The key of the decode step's graph for `rows` in an order: each order its own graphs.
  static int decode_key(int rows, bool frame_first) { return frame_first ? -rows : rows; }

private:
  void run_prefill(std::span<const float> embeds, const step_plan& plan, std::span<const std::int32_t> slots,
                   bool frame);
  void launch_decode(int rows, bool frame_first);
  void enqueue_decode(int rows, bool frame_first);
  void enqueue_predict(int rows); // completes a frame from code 0 and the last hidden state
  void enqueue_talker(int rows);  // the Talker's step on the last frame, and the next code 0
  void upload_slots(std::span<const std::int32_t> slots, int rows);
  void choose_code0(int rows); // code 0 from st.logits, greedy or sampled per sampling_
  void upload_plan(const step_plan& plan, int tokens);
  void drop_graphs(); // after a change that captured graphs have baked in

  talker_cuda_dims dims_;
  talker_cuda_limits limits_;
  cudaStream_t stream_ = nullptr;
  bool use_graphs_ = true;
  int planned_rows_ = 0; // rows of the last set_decode_inputs
  talker_sampling sampling_ = talker_sampling::greedy();
  bool fused_decode_ = false;
  std::size_t weight_bytes_ = 0;
  std::unique_ptr<state> s_;
};

} // namespace qwen3_tts
