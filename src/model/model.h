// model/model.h: a loaded Llama-family model and its forward pass over a batch of sequences.
// forward() computes several sequences of different lengths in one call, mixing prefill and
// decode, reading and writing K/V through each sequence's block table. Every output is
// batch-invariant: a sequence's logits are bit-identical whatever else is in the batch and
// however many threads run (kernels keep a fixed reduction order per row).
// Owner: one thread calls forward() at a time; the workspace is allocated once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "kv/kv_arena.h"
#include "model/hparams.h"
#include "model/rope.h"
#include "model/weights.h"
#include "model/workspace_layout.h"

namespace kvw {

struct RopeOverride {
  std::optional<RopeScaling> scaling;
  std::optional<float> scale_factor;
  std::optional<float> freq_base;
  std::optional<int32_t> orig_ctx;
};

struct ModelOptions {
  int n_threads = 0;               // 0: all cores
  int32_t max_batch_tokens = 512;  // largest forward() call; sizes the workspace
  RopeOverride rope;               // command-line overrides of the GGUF rope metadata
  // --activation-clamp: when > 0, residual-stream values are clamped to [-c, c] after the
  // embedding and after every residual add, so one extreme row cannot overflow a later norm
  // into Inf/NaN. 0 = off (the default; clamping changes numerics).
  float activation_clamp = 0.0f;
  // Repack Q8_0/Q4_0 matrices at load for the packed GEMM (pack_matrices in model/weights.h).
  // false keeps the GGUF layout and the row-tiled matmul (benchmarks and tests compare both).
  bool pack_weights = true;
  // The longest sequence this model will serve (--max-model-len; 0: the trained context, as
  // llama.cpp's default n_ctx). Picks phi3's LongRoPE factors: see rope_factors below.
  int64_t max_model_len = 0;
  // --attention-dot bf16: attention's q.k and P.V products from bf16 operands (kernels.h
  // AttnScores::bf16_dot; default f32). load() refuses it where the kernels lack it (no
  // AVX512_BF16, or a non-AVX-512 table) rather than falling back silently.
  bool attention_bf16_dot = false;
};

// One sequence's part of a batch.
struct SeqInput {
  std::span<const int32_t> tokens;        // new tokens to compute
  int64_t start_pos = 0;                  // position of tokens[0] = tokens already in the KV
  std::span<const uint32_t> block_table;  // covers positions [0, start_pos + tokens.size());
                                          // with a sliding window w, entries wholly below
                                          // start_pos + 1 - w may be kNullBlock (never read)
  // Arenas with window slots (KvArenaConfig::num_window_slots > 0): the windowed layers' table,
  // the slot of each logical block (KvManager::window_block_table), kNoWindowSlot wholly below
  // start_pos + 1 - w. Same size as block_table. Unused otherwise.
  std::span<const uint32_t> window_block_table;
  bool all_logits = false;  // logits for every new token, else only the last
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& opt);
  // The same from a file already open (the caller planned with it); the Model keeps it.
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> file,
                                             const ModelOptions& opt);
  // The same with the file's hyper-parameters already read (hparams_from_gguf of this file,
  // without opt.rope's overrides, which load applies): start-up parses them once.
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> file, ModelHParams hp,
                                             const ModelOptions& opt);
  ~Model();

  const ModelHParams& hparams() const { return hp_; }
  const GgufFile& file() const { return *file_; }
  const ModelWeights& weights() const { return w_; }
  // The weights' memory (GgufFile::tensor_memory) and how much of it sits on 2 MiB pages now,
  // from /proc/self/smaps (core/huge_page_usage.h; a walk of the page tables, not free):
  // nullopt when smaps cannot be read.
  uint64_t weights_memory_bytes() const { return file_->tensor_memory().size(); }
  std::optional<uint64_t> weights_huge_page_bytes() const;
  int32_t max_batch_tokens() const { return max_tokens_; }
  uint64_t workspace_bytes() const { return workspace_bytes_; }
  // What the workspace and KV rows were sized from (the planner sums the same).
  const ModelDims& dims() const { return dims_; }
  int num_threads() const { return pool_.num_threads(); }
  // Runs fn(ith, nth) on the model's threads (the caller is thread 0), between forward passes:
  // the engine samples a batch's rows there.
  void run_on_threads(const std::function<void(int ith, int nth)>& fn) { pool_.run(fn); }
  // Tests only (fault injection): ThreadPool::set_task_hook on the model's threads.
  void set_task_hook(std::function<void(int ith)> hook) { pool_.set_task_hook(std::move(hook)); }

  // A KV arena config matching this model. num_window_slots > 0 (hybrid window models only:
  // some layers windowed, some not) puts the windowed layers in that many window slots.
  KvArenaConfig kv_config(uint32_t num_blocks, int32_t block_size, KvDtype dtype,
                          uint32_t num_window_slots = 0) const;

  // Number of logit rows forward() writes for `seqs`.
  static int64_t num_logit_rows(std::span<const SeqInput> seqs);
  // Computes the batch; logits: [num_logit_rows][n_vocab], rows in sequence order.
  // Errors (nothing computed): empty batch, more than max_batch_tokens tokens, token ids out of
  // range, block tables too short or naming blocks outside the arena (or holes the window
  // still covers).
  Status forward(std::span<const SeqInput> seqs, KvArena& kv, float* logits);

 private:
  Model(std::unique_ptr<GgufFile> file, ModelHParams hp, ModelWeights w, const ModelOptions& opt);
  Status validate(std::span<const SeqInput> seqs, const KvArena& kv) const;
  void check_workspace_fits(const WorkspaceLayout& ws) const;  // CHECKs every weight's needs
  void run_layer(int32_t l, KvArena& kv, int64_t n_tokens);
  // Attention of layer l: normed, quantised input in xn_ -> attn_output into tmp_ [T][n_embd].
  void run_attention(const LayerWeights& L, int32_t l, KvArena& kv, int64_t n_tokens);
  // Attention of the step's decode tokens, each split over its context (forward_decode.cc).
  // The table layer rows are read through: the window slots' for window-slot layers.
  std::span<const uint32_t> kv_table(int32_t seq, bool window_rows) const {
    return window_rows ? seqs_[size_t(seq)].window_block_table : seqs_[size_t(seq)].block_table;
  }
  void attend_decode_split(const kernels::KvLayerView& view, bool window_rows, int64_t window,
                           kernels::AttnScores scores, int64_t n_tokens);
  void run_mla_attention(const LayerWeights& L, int32_t l, KvArena& kv, int64_t n_tokens);
  void per_head_matmul(const ExpertMatrices& w, const float* in, int64_t n_tokens, float* out);
  // FFN of an MoE layer: xn [T][n_embd] (normed, quantised for the router) -> tmp_ [T][n_embd].
  void run_moe_ffn(const LayerWeights& L, int64_t n_tokens);
  int64_t expert_of(int64_t a) const;  // expert of assignment a after group_by_expert
  void run_shared_experts(const LayerWeights& L, int64_t n_tokens);
  void group_by_expert(int64_t n_tokens);
  void compute_logits(int64_t n_rows, float* logits);
  // rows [T][n_embd] of tmp_ RMS-normalised in place by `norm` (Gemma's post norms).
  void post_norm(const std::vector<float>& norm, int64_t n_tokens);
  void add_row_bias(const std::vector<float>& bias, int64_t n_tokens);
  void quantize_for(const WeightMatrix& w, const float* x, int64_t row, int64_t n_in);
  // kvw::matmul with thread ith's part of gemm_scratch_ (the forward code's matmul calls land
  // here: a member hides the free function of the same name).
  void matmul(const kernels::KernelTable& kt, const WeightMatrix& w, const void* act,
              int64_t n_tokens, float* y, int ith, int nth);
  const void* act_for(const WeightMatrix& w, const float* x) const;

  std::unique_ptr<GgufFile> file_;
  ModelHParams hp_;
  ModelWeights w_;
  RopeTable rope_;
  std::optional<RopeTable> rope_swa_;  // windowed layers' own rope (hp_.has_rope_swa)
  ThreadPool pool_;
  int32_t max_tokens_;
  float clamp_;    // ModelOptions::activation_clamp
  bool bf16_dot_;  // ModelOptions::attention_bf16_dot
  uint64_t workspace_bytes_ = 0;
  ModelDims dims_;  // the workspace_layout() and KV shape this model was sized with

  // Per-step token layout, rebuilt each forward() (capacity reserved at load).
  struct TokenInfo {
    int32_t seq;
    int64_t pos;
  };
  std::vector<TokenInfo> tok_;      // [max_tokens]
  std::vector<int64_t> logit_src_;  // [max_tokens] token index of each logit row
  std::span<const SeqInput> seqs_;

  // Workspace, allocated once (sizes: workspace_layout). T = max_tokens.
  std::vector<float> x_;             // [T][n_embd] residual stream
  std::vector<float> xn_;            // [T][max(n_embd, q_dim, n_ff)] normed / matmul input
  std::vector<uint8_t> act_q8_0_;    // [T][act_row_bytes(Q8_0, max_in)]
  std::vector<uint8_t> act_q8_k_;    // [T][act_row_bytes(Q8_K, max_in)]
  std::vector<float> q_;             // [T][q_dim]
  std::vector<float> k_;             // [T][kv_dim]
  std::vector<float> v_;             // [T][kv_dim]; after kv_store: split-decode softmax states
  std::vector<float> tmp_;           // [T][n_embd] output of wo / down, added to x
  std::vector<float> gate_;          // [T][n_ff]
  std::vector<float> up_;            // [T][n_ff]
  std::vector<float> cs_;            // [T][n_rot] rope (cos, sin) pairs per token
  std::vector<float> cs_swa_;        // [T][n_rot] the same from rope_swa_; empty without it
  std::vector<float> attn_scratch_;  // [n_threads][attention_scratch_floats]
  // [n_threads][gemm_scratch_floats_]: each thread's copy of a token block for the packed GEMM
  // tiles, packed_scratch_bytes of the widest packed matrix, rounded up to a cache line.
  std::vector<float> gemm_scratch_;
  int64_t gemm_scratch_floats_ = 0;

  // MoE workspace (empty for dense models). E = n_expert, K = n_expert_used, A = T x K
  // (token, expert) assignments. gate_, up_ and the activation buffers also hold A rows.
  std::vector<float> router_logits_;   // [T][E] router outputs, then gating scores
  std::vector<float> router_scratch_;  // [n_threads][router_scratch_floats]
  std::vector<int32_t> route_ids_;     // [T][K] chosen experts, best first
  std::vector<float> route_weights_;   // [T][K] their weights
  std::vector<int32_t> route_slot_;    // [T][K] assignment index of (token, k)
  std::vector<int32_t> assign_tok_;    // [A] token of each assignment, grouped by expert
  std::vector<int32_t> expert_begin_;  // [E + 1] assignments of expert e: [begin[e], begin[e+1])
  std::vector<float> moe_rows_;        // [A][n_embd] gathered inputs, then expert outputs

  // MLA workspace (empty otherwise). H = n_head, R = kv_lora_rank, row = R + qk_rope_dim.
  float mla_scale_ = 0.0f;        // score scale (mla_score_scale)
  std::vector<float> mla_q_;      // [T][H][row] absorbed queries
  std::vector<float> mla_in_;     // [H][T][max(nope, R)] per-head matmul inputs
  std::vector<float> mla_out_;    // [H][T][max(R, v_head_dim)] per-head matmul outputs
  std::vector<float> mla_row_;    // [n_threads][R] a dequantised attn_kv_b row
  std::vector<uint8_t> mla_act_;  // [H x T][act_row_bytes] quantised per-head inputs
};

// The per-pair rope frequency divisors the model rotates with, as llama.cpp's get_rope_factors:
// rope_freqs when the file has it; else LongRoPE's long factors when sequences may be longer
// than the original context (max_model_len, 0: n_ctx_train, > rope.orig_ctx), the short ones
// otherwise. Empty: none. llama.cpp compares its n_ctx_seq: -c (divided by -np unless the KV
// cache is unified) rounded up to a multiple of 256, so the two pick alike for the same
// per-sequence context whenever the original context is a multiple of 256 (4096 on Phi-3/4).
std::span<const float> rope_factors(const ModelWeights& w, const ModelHParams& hp,
                                    int64_t max_model_len);

// MLA (model/mla_forward.cc): the rope parameters the rotation uses (llama.cpp's deepseek2
// cancels the YaRN magnitude there) and the attention score scale (DeepSeek's mscale^2 /
// sqrt(qk_nope + qk_rope)).
RopeParams mla_rope_params(const ModelHParams& hp);
float mla_score_scale(const ModelHParams& hp);

}  // namespace kvw
