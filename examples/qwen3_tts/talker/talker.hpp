// The real Qwen3-TTS Talker and code predictor, host float32, computed as the reference (qwen-tts 0.1.1) computes
// them. Three layers, each usable alone by the engine's worker:
//   1. build_prompt: the reference generate()'s prompt layout (codec prefix, speaker or instruction rows, the
//      tts pad/bos/eos rows, streaming or non-streaming text) as embedding rows, plus the trailing text rows
//      that each decode step adds to its input;
//   2. prefill / decode / predict / decode_input: batched over rows, each row independent; attention reads and
//      writes a paged KV cache through FlashInfer-style page tables (the kv_cache, attention and positions plans
//      of mstar give exactly these arrays);
//   3. talker_sampler (the reference's logits processing, seeded by a counter-based Philox draw per request,
//      frame and codebook) and generate_batch, a driver for tests and the CLI that runs without the engine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "talker_config.hpp"
#include "talker_weights.hpp"

namespace qwen3_tts {

// ---- paged KV cache -------------------------------------------------------------------------------------------

struct kv_shape {
  int layers = 0, blocks = 0, block_tokens = 0, kv_heads = 0, head_dim = 0;
};

// K and V storage shaped [layers][blocks][block_tokens][kv_heads][head_dim], float32.
class paged_kv {
public:
  explicit paged_kv(kv_shape shape);
  const kv_shape& shape() const { return shape_; }
  float* k(int layer, int block, int slot) { return k_.data() + offset(layer, block, slot); }
  float* v(int layer, int block, int slot) { return v_.data() + offset(layer, block, slot); }
  const float* k(int layer, int block, int slot) const { return k_.data() + offset(layer, block, slot); }
  const float* v(int layer, int block, int slot) const { return v_.data() + offset(layer, block, slot); }

private:
  std::size_t offset(int layer, int block, int slot) const {
    return ((std::size_t(layer) * shape_.blocks + std::size_t(block)) * shape_.block_tokens + std::size_t(slot)) *
           std::size_t(shape_.kv_heads) * std::size_t(shape_.head_dim);
  }
  kv_shape shape_;
  std::vector<float> k_, v_;
};

// One step's addressing, row by row. The page table covers each row's KV after this step (its new tokens
// included, as mstar's kv_cache plan stages it): kv_len = (pages - 1) * block_tokens + last_page_len, and the
// row's qo_len new tokens are the last qo_len of those kv_len positions.
struct step_plan {
  std::span<const std::int32_t> qo_indptr;     // [rows + 1] this step's tokens per row (attention plan)
  std::span<const std::int32_t> page_indptr;   // [rows + 1] (kv_cache plan)
  std::span<const std::int32_t> page_indices;  // [pages]
  std::span<const std::int32_t> last_page_len; // [rows]
  std::span<const std::int32_t> positions;     // [tokens] RoPE position of each token (positions plan)
  std::size_t rows() const { return qo_indptr.empty() ? 0 : qo_indptr.size() - 1; }
};

// A step_plan from one step's mstar plans (paged_kv_cache, attention_metadata and position_table plan_types):
// their host spans, padded rows included (a padding row has no tokens and no pages, and yields zeros).
template <class KvPlan, class AttentionPlan, class PositionsPlan>
step_plan plan_from(const KvPlan& kv, const AttentionPlan& attention, const PositionsPlan& positions) {
  return {attention.host_qo_indptr.first(kv.bucket + 1), kv.host_page_indptr.first(kv.bucket + 1),
          kv.host_page_indices.first(kv.pages), kv.host_last_page_len.first(kv.bucket),
          positions.host_positions.first(positions.tokens)};
}

// The arrays behind a step_plan, for callers that run without the engine (tests, generate_batch, the CLI).
struct step_tables {
  std::vector<std::int32_t> qo_indptr, page_indptr, page_indices, last_page_len, positions;
  step_plan view() const { return {qo_indptr, page_indptr, page_indices, last_page_len, positions}; }
};

// One request's pages: its blocks in order and the tokens they hold.
struct row_pages {
  std::vector<std::int32_t> blocks;
  int tokens = 0;
};

// A free list of KV blocks that hands them out in order, or (scatter_seed != 0) in a seeded shuffled order,
// so tests can check that addressing through scattered pages changes nothing.
class kv_block_pool {
public:
  kv_block_pool(int blocks, int block_tokens, std::uint64_t scatter_seed = 0);
  // Reserves the blocks each row's new tokens need, advances the rows' token counts, and returns the tables.
  step_tables plan(std::span<row_pages* const> rows, std::span<const int> new_tokens);
  void release(row_pages& row);
  int free_blocks() const { return int(free_.size()); }

private:
  int block_tokens_;
  std::vector<std::int32_t> free_; // taken from the back
};

// ---- sampling -------------------------------------------------------------------------------------------------

struct sampling_settings {
  bool do_sample = true;
  int top_k = 50;
  float top_p = 1.0f;
  float temperature = 0.9f;
};

// The reference generate()'s defaults.
struct talker_sampling {
  sampling_settings talker;         // code 0
  sampling_settings sub;            // the code predictor's codes 1..15 (subtalker_*)
  float repetition_penalty = 1.05f; // on code-0 ids already generated in this request
  int min_new_tokens = 2;           // the end token is masked before this many code-0 ids
  int max_frames = 4095;            // frames at most: the reference generate()'s max_new_tokens 4096, less one
  static talker_sampling greedy() {
    talker_sampling s;
    s.talker.do_sample = s.sub.do_sample = false;
    return s;
  }
};

// Applies the reference's logits processing and picks a code. Draws are Philox4x32-10 uniforms with
// counter (frame, codebook) and key seed, so a request's codes never depend on its batch or timing.
class talker_sampler {
public:
  talker_sampler(const talker_config& config, talker_sampling settings) : config_(&config), s_(settings) {}
  const talker_sampling& settings() const { return s_; }
  // Code 0 of `frame`: repetition penalty over `history` (this request's earlier code-0 ids), the minimum
  // new tokens, control-token suppression, then temperature, top-k, top-p when sampling. Edits `logits`.
  std::int32_t pick_code0(std::span<float> logits, std::span<const std::int32_t> history, std::uint64_t seed,
                          std::uint32_t frame) const;
  // Code `codebook` (1..15) of `frame` from the predictor's logits, with the sub-talker's settings.
  std::int32_t pick_sub(std::span<float> logits, std::uint64_t seed, std::uint32_t frame, int codebook) const;

private:
  std::int32_t pick(std::span<float> logits, const sampling_settings& s, std::uint64_t seed, std::uint32_t frame,
                    int codebook) const;
  const talker_config* config_;
  talker_sampling s_;
};

// ---- the model ------------------------------------------------------------------------------------------------

// A request as the reference's generate() takes it. input_ids is the chat-templated text:
// "<|im_start|>assistant\n" (3 ids), the text, then "<|im_end|>\n<|im_start|>assistant\n" (5 ids).
struct talker_prompt {
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> instruct_ids; // VoiceDesign's instruction, chat-templated; empty: none
  std::string speaker;                    // CustomVoice speaker name; empty: none
  std::string language = "auto";
  bool non_streaming = false; // all text in the prompt (the wrapper's default) or one row a step
};

// A prompt as embedding rows of the Talker's width.
struct built_prompt {
  int rows = 0;
  std::vector<float> prefill; // [rows][hidden]
  int trailing_rows = 0;
  std::vector<float> trailing; // [trailing_rows][hidden]: decode step s adds row s, then tts_pad
  std::vector<float> tts_pad;  // [hidden]
  const float* text_row(int step) const {
    return step < trailing_rows ? trailing.data() + std::size_t(step) * (tts_pad.size()) : tts_pad.data();
  }
};

// Per row of a Talker step: the last token's logits and post-norm hidden state (the predictor's first input).
struct talker_step_output {
  std::vector<float> logits; // [rows][vocab]
  std::vector<float> hidden; // [rows][hidden]
};

class talker_host {
public:
  talker_host(talker_config config, talker_weights weights);
  const talker_config& config() const { return c_; }
  const talker_weights& weights() const { return w_; }
  // The Talker's KV cache shape for a pool of `blocks` blocks of `block_tokens` tokens.
  kv_shape kv_for(int blocks, int block_tokens) const;

  built_prompt build_prompt(const talker_prompt& prompt) const;

  // embeds: [tokens][hidden], rows and positions as `plan` gives them. prefill takes any number of tokens a
  // row; decode checks there is exactly one.
  void prefill(std::span<const float> embeds, const step_plan& plan, paged_kv& kv, talker_step_output& out) const;
  void decode(std::span<const float> embeds, const step_plan& plan, paged_kv& kv, talker_step_output& out) const;

  // The code predictor for rows: codes is [rows][code_groups] with code 0 set; fills codes 1..15. Each row's
  // fresh 2-token prefill (hidden, code 0) and 14 single steps use a private contiguous KV. When `logits` is
  // given it receives [rows][code_groups - 1][predictor vocab], the raw logits of each step.
  void predict(std::span<const float> hidden, std::span<std::int32_t> codes, const talker_sampler& sampler,
               std::span<const std::uint64_t> seeds, std::span<const std::uint32_t> frames,
               std::vector<float>* logits = nullptr) const;

  // The next decode input of one row: the sum of the frame's 16 codebook embeddings plus `text_row`.
  void decode_input(std::span<const std::int32_t> frame, const float* text_row, float* out) const;

  // text_projection(text_embedding(ids)) into out [ids][hidden].
  void text_rows(std::span<const std::int32_t> ids, float* out) const;

private:
  void forward(std::span<const float> embeds, const step_plan& plan, paged_kv& kv, talker_step_output& out) const;
  talker_config c_;
  talker_weights w_;
};

// ---- a driver without the engine ------------------------------------------------------------------------------

struct generate_options {
  int block_tokens = 16;
  std::uint64_t scatter_seed = 0; // non-zero: KV blocks handed out in a shuffled order
  int record_steps = 0;           // keep the raw logits of the first steps (prefill = step 0)
};

struct generate_result {
  std::vector<std::vector<std::int32_t>> frames;    // [frames][code_groups]
  bool stopped = false;                             // the end token came (else max_frames ended it)
  std::vector<std::vector<float>> talker_logits;    // raw, steps 0 .. record_steps - 1
  std::vector<std::vector<float>> predictor_logits; // raw, per recorded frame: [code_groups - 1][vocab]
};

// Runs prompts together through one paged KV cache until each ends; seeds[i] seeds prompt i.
std::vector<generate_result> generate_batch(const talker_host& model, std::span<const talker_prompt> prompts,
                                            const talker_sampling& sampling, std::span<const std::uint64_t> seeds,
                                            const generate_options& options = {});
generate_result generate(const talker_host& model, const talker_prompt& prompt, const talker_sampling& sampling,
                         std::uint64_t seed, const generate_options& options = {});

} // namespace qwen3_tts
