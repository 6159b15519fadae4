// planner/memory_plan.h: exact memory arithmetic for serving a model: parameters and weight
// bytes (every MoE expert, embeddings and output head), KV bytes per token / block / sequence
// for MHA, GQA, MQA, MLA, sliding-window and hybrid stacks, per-rank sharding under tensor and
// pipeline parallelism, and the budget split that yields maximum concurrency and length.
// Pure functions: no I/O, no globals; every result carries the formulas it used (`explain`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "planner/model_shape.h"

namespace kvw::planner {

inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// Framework overhead per GPU when not given: CUDA context, cuBLAS/NCCL workspaces and CUDA graph
// pools, which vLLM measures as "non-torch memory" (typically 0.5-1.5 GiB per rank).
inline constexpr uint64_t kDefaultOverheadBytes = kGiB;

// "12.55 GiB", "768.00 MiB", "512 B" (binary units).
std::string format_bytes(int64_t bytes);

struct ParamCounts {
  uint64_t embedding = 0;    // n_vocab * n_embd
  uint64_t output_head = 0;  // n_vocab * n_embd, 0 when tied
  uint64_t attention = 0;    // all layers: projections (+ MLA low-rank factors), biases
  uint64_t dense_mlp = 0;    // all dense layers: 3 * n_embd * n_ff
  uint64_t routed_experts = 0;
  uint64_t shared_experts = 0;
  uint64_t router = 0;  // gate: n_routed_experts * n_embd per MoE layer
  uint64_t norms = 0;   // RMSNorm weights
  // Routed-expert parameters one token uses: n_experts_per_tok of n_routed_experts per layer.
  uint64_t routed_experts_active = 0;
  uint64_t total() const {
    return embedding + output_head + attention + dense_mlp + routed_experts + shared_experts +
           router + norms;
  }
  // Parameters one token's forward pass reads (the decode bandwidth bound's numerator): all but
  // the unchosen routed experts. Equals total() for dense models.
  uint64_t active() const { return total() - routed_experts + routed_experts_active; }
  // Parameters in layer l alone (attention, MLP or experts, norms of that layer).
  std::vector<uint64_t> per_layer;
};

ParamCounts count_params(const ModelShape& m);

// KV heads one tensor-parallel rank holds: n_kv_head / tp, or 1 when n_kv_head < tp (each head
// is replicated on tp / n_kv_head ranks). MLA keeps the whole latent on every rank.
int64_t kv_heads_per_rank(const ModelShape& m, int64_t tp);
// Elements cached per token in one KV layer on one rank: 2 * heads * head_dim, or
// kv_lora_rank + qk_rope_head_dim for MLA.
int64_t kv_elems_per_token_layer(const ModelShape& m, int64_t tp);
// Bytes of the above, plus int8 scales (one f32 per head for K and for V; one per MLA latent).
uint64_t kv_bytes_per_token_layer(const ModelShape& m, KvDtype dtype, int64_t tp);
// One token in every layer that has a KV cache, as if no window applied (the usual "KV per
// token" figure; windows only cap how many tokens a layer keeps).
uint64_t kv_bytes_per_token(const ModelShape& m, KvDtype dtype, int64_t tp);

// Blocks one layer keeps for a sequence of seq_len tokens: ceil(seq_len / block_size), and under
// a sliding window (window > 0) at most ceil((window + block_size - 1) / block_size): blocks
// wholly behind the window are freed (kvwarden's KvManager, vLLM's sliding-window manager), and
// the window positions a token attends to, starting anywhere in a block, touch that many blocks
// (4096 tokens of 16-token blocks: 257, not 256).
int64_t window_blocks(int64_t seq_len, int64_t window, int64_t block_size);

// KV bytes one sequence of seq_len tokens holds in layers [layer_begin, layer_end) on one rank:
// window_blocks(seq_len, window of the layer, block_size) whole blocks per layer.
uint64_t kv_bytes_per_sequence(const ModelShape& m, KvDtype dtype, int64_t tp, int64_t layer_begin,
                               int64_t layer_end, int64_t seq_len, int64_t block_size);

struct PlanInputs {
  std::string gpu_name;           // for reports only
  uint64_t gpu_memory_bytes = 0;  // device-reported total of one GPU
  double gpu_memory_utilization = 0.9;
  int64_t tp = 1;
  int64_t pp = 1;
  Dtype weight_dtype;  // ignored for GGUF shapes (exact bytes from the file)
  KvDtype kv_dtype = KvDtype::kBF16;
  int64_t max_model_len = 4096;
  int64_t concurrency = 1;  // target concurrent sequences at max_model_len
  int64_t block_size = 16;
  int64_t max_num_batched_tokens = 8192;
  uint64_t overhead_bytes = kDefaultOverheadBytes;  // per GPU
  // A RoPE override (vLLM's rope_parameters JSON), passed on in the launch lines; "" = none.
  std::string rope_parameters_json;
  Status validate() const;
};

// One formula of the plan with its numbers substituted.
struct ExplainLine {
  std::string what;     // "KV bytes per token per layer"
  std::string formula;  // "2 x 8 heads x 128 x 2 B"
  std::string value;    // "4096 B"
};

// The budget of one pipeline stage (one GPU of it; all tp ranks of a stage are alike).
struct StagePlan {
  int64_t stage = 0;
  int64_t layer_begin = 0, layer_end = 0;
  uint64_t weight_bytes = 0;
  uint64_t activation_bytes = 0;  // estimate for max_num_batched_tokens
  uint64_t overhead_bytes = 0;
  uint64_t budget_bytes = 0;        // gpu_memory_bytes * gpu_memory_utilization
  int64_t kv_pool_bytes = 0;        // budget - weights - activation - overhead; < 0: no room
  uint64_t kv_bytes_per_token = 0;  // this rank's layers, no window cap
  uint64_t kv_bytes_per_block = 0;  // block_size tokens
  uint64_t kv_bytes_per_seq = 0;    // at max_model_len, windows applied
  int64_t num_blocks = 0;           // kv_pool / kv_bytes_per_block
  int64_t max_concurrency = 0;      // sequences of max_model_len that fit
};

enum class Verdict { kFits, kConcurrencyLimited, kKvTooSmall, kWeightsTooLarge };
const char* verdict_name(Verdict v);  // "fits", "concurrency-limited", ...

struct MemoryPlan {
  ModelShape model;
  PlanInputs in;
  ParamCounts params;
  uint64_t weight_bytes_total = 0;        // whole model, all ranks together
  uint64_t kv_bytes_per_token_total = 0;  // whole model at tp = 1
  uint64_t kv_bytes_per_block_total = 0;
  uint64_t kv_bytes_per_seq_total = 0;  // at max_model_len, windows applied, tp = 1
  std::vector<StagePlan> stages;
  int64_t binding_stage = 0;             // the stage with the fewest sequences
  int64_t max_concurrency = 0;           // at max_model_len, over all stages
  int64_t max_len_at_concurrency = 0;    // longest length `concurrency` sequences can all reach
  bool max_len_capped_by_model = false;  // max_len_at_concurrency hit the model's max_position
  Verdict verdict = Verdict::kFits;
  std::string binding_constraint;  // "weights", "kv_cache", "none"
  std::string verdict_text;        // one sentence
  std::vector<std::string> notes;  // warnings (context beyond max_position, replication)
  std::vector<ExplainLine> explain;
};

// Plans serving `m` under `in`. Errors: invalid inputs or a shape that cannot be sharded
// (heads not divisible by tp, more pipeline stages than layers).
Result<MemoryPlan> plan_memory(const ModelShape& m, const PlanInputs& in);

// Longest sequence length (<= cap) such that `concurrency` sequences fit in kv_pool_bytes on the
// given stage; 0 if not even length 1 fits.
int64_t max_len_for(const ModelShape& m, const PlanInputs& in, const StagePlan& s,
                    int64_t concurrency, int64_t cap);

}  // namespace kvw::planner
