// planner/engine_budget.h: the start-up memory budget of kvwarden's own CPU engine, computed
// from a model shape before anything is allocated. The engine calls plan_engine_budget() to size
// its KV arena, and prints the returned table; `kvwarden plan` shows the same numbers.
// Pure functions; the workspace and KV rows are src/model's own (model/workspace_layout.h), so
// they equal what Model::Model and the KV arena allocate by construction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "planner/model_shape.h"

namespace kvw::planner {

struct EngineOptions {
  int64_t max_num_batched_tokens = 512;  // largest forward() call; sizes the workspace
  int64_t block_size = 16;               // tokens per KV block
  KvDtype kv_dtype = KvDtype::kF16;      // f32, f16, bf16 or int8
  int64_t n_threads = 1;                 // worker threads (attention scratch per thread)
  Dtype weight_dtype{"f32", 1, 4};       // used only when the shape has no GGUF facts
  // Either a total memory budget (the KV pool takes what is left) ...
  uint64_t memory_budget_bytes = 0;
  // ... or, when the budget is 0, room for max_num_seqs sequences of
  // min(max_model_len, kDefaultPoolTokensPerSeq) tokens, and at least one of max_model_len
  // (engine_blocks_per_seq each: a sliding window caps it).
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 0;
  // Reserve for everything else: f32 copies of norms and biases, tokenizer, rope tables, thread
  // stacks, allocator slack. The budget's reserve row adds the engine's logits buffer to it:
  // min(max_num_seqs, max_num_batched_tokens) x n_vocab f32.
  uint64_t reserve_bytes = uint64_t{64} << 20;
  // The HTTP front door's request memory (request_row_bytes below); 0 for engine-only use.
  uint64_t request_bytes = 0;
  // The swap tier's staging buffers (--swap-space > 0): its bound on bytes in flight.
  uint64_t swap_staging_bytes = 0;
  // Speculative decoding: extra logit rows for the drafts one step may verify (SpecConfig::
  // max_draft_tokens_per_step), f32 x n_vocab each, added to the reserve row.
  int64_t spec_draft_logit_rows = 0;
  // Prompt logprobs: logit rows one step may give to prompt positions (SchedConfig::
  // max_prompt_logit_rows), f32 x n_vocab each, added to the reserve row.
  int64_t prompt_logit_rows = 0;
  // Speculative decoding with a draft model (--draft-model): its shape (nullptr: none). Its
  // weights, its workspace (for max_num_batched_tokens tokens, plus draft_logit_rows f32 rows of
  // its vocabulary) and its KV are rows of the table; its KV pool has as many blocks as the
  // target's, so any sequence the target holds the draft can hold too.
  const ModelShape* draft = nullptr;
  int64_t draft_logit_rows = 0;  // sequences drafted per step (SpecConfig::max_seqs)
  // --swa-full: hybrid window models keep every position's KV in their windowed layers too
  // (llama.cpp's name), instead of window slots; for prefix reuse over long contexts.
  bool swa_full = false;
};

// Staging the swap tier allocates for `swap_bytes` of swap (0: no tier): its bound on bytes in
// flight, 64 MiB, or the whole tier when that is smaller.
inline constexpr uint64_t kSwapStagingBytes = uint64_t{64} << 20;
inline uint64_t swap_staging_bytes(uint64_t swap_bytes) {
  return swap_bytes < kSwapStagingBytes ? swap_bytes : kSwapStagingBytes;
}

// What `kvwarden serve` holds for requests before and beside the KV cache, all bounded at
// start-up: request bodies with their parsed JSON and rendered prompts (--request-memory, a
// hard cap enforced by the transport), per-connection state (kConnectionBytes each, up to
// --max-connections), and per-stream output (--stream-buffer-bytes of unsent SSE, as much again
// in the kernel's send buffer (the server sets SO_SNDBUF to half of it; Linux doubles it), plus
// the accumulated answer of a non-streamed request, max_model_len x kAnswerBytesPerToken), and
// the structured-output grammars kept across requests (--grammar-cache).
struct RequestMemoryOptions {
  uint64_t request_memory_bytes = uint64_t{64} << 20;  // --request-memory
  int64_t max_connections = 0;                         // 0: default_max_connections()
  int64_t max_num_seqs = 256;
  int64_t max_queue = 256;  // --max-queue (0: unbounded; then max_num_seqs more)
  uint64_t stream_buffer_bytes = uint64_t{64} << 10;
  int64_t max_model_len = 4096;
  // Compiled grammars and their mask caches kept across requests (--grammar-cache).
  uint64_t grammar_cache_bytes = uint64_t{16} << 20;
};
inline constexpr uint64_t kConnectionBytes = 16u << 10;  // measured: bench/http_front_bench
inline constexpr uint64_t kAnswerBytesPerToken = 16;
// Without a memory budget the pool is sized for max_num_seqs requests of up to this many tokens:
// a long context does not multiply the pool by max_num_seqs; its requests share the pool.
inline constexpr int64_t kDefaultPoolTokensPerSeq = 4096;
// The tokens each of max_num_seqs sequences gets in an unbudgeted pool (which also always holds
// one sequence of max_model_len).
inline int64_t default_pool_tokens_per_seq(int64_t max_model_len) {
  return std::min(max_model_len, kDefaultPoolTokensPerSeq);
}
int64_t default_max_connections(int64_t max_num_seqs, int64_t max_queue);
// Streams that can be open at once: every request admission lets run or wait.
int64_t max_open_streams(int64_t max_num_seqs, int64_t max_queue);
uint64_t request_row_bytes(const RequestMemoryOptions& o);

struct BudgetTable {
  uint64_t weights_bytes = 0;    // mmapped tensors (GGUF: exact sum of tensor bytes; Q8_0/Q4_0
                                 // matrices repacked at load are the same bytes, as private
                                 // copy-on-write pages in place of the file's)
  uint64_t workspace_bytes = 0;  // activation buffers for max_num_batched_tokens
  uint64_t kv_pool_bytes = 0;    // num_blocks * kv_bytes_per_block
  uint64_t reserve_bytes = 0;
  uint64_t request_bytes = 0;       // the HTTP front door (request_row_bytes)
  uint64_t swap_staging_bytes = 0;  // the swap tier's copies in flight
  // Draft model (EngineOptions::draft), 0 without one:
  uint64_t draft_weights_bytes = 0;    // its mmapped tensors
  uint64_t draft_workspace_bytes = 0;  // its activations + its logit rows + catch-up tokens
  // Part of draft_workspace_bytes: the catch-up buffer ([max_num_batched_tokens] int32) that
  // holds a catch-up chunk running across a shared prompt's end, allocated at start-up.
  uint64_t draft_catch_up_bytes = 0;
  uint64_t draft_kv_pool_bytes = 0;  // num_blocks * draft_kv_bytes_per_block
  uint64_t draft_kv_bytes_per_block = 0;
  uint64_t total_bytes = 0;          // every row above
  uint64_t spec_logits_bytes = 0;    // part of reserve: the speculative drafts' logit rows
  uint64_t prompt_logits_bytes = 0;  // part of reserve: the prompt logprobs' logit rows
  uint64_t kv_bytes_per_token = 0;   // all layers (hybrid window: the full-attention layers)
  uint64_t kv_bytes_per_block = 0;
  uint64_t num_blocks = 0;
  // Hybrid window models (engine_hybrid_window > 0): the windowed layers' KV lives in
  // num_window_slots window slots (kv/window_slots.h) of kv_window_bytes_per_block each;
  // kv_pool_bytes = num_blocks x kv_bytes_per_block + num_window_slots x that.
  int64_t hybrid_window = 0;
  int64_t num_window_layers = 0;
  uint64_t kv_window_bytes_per_token = 0;
  uint64_t kv_window_bytes_per_block = 0;
  uint64_t num_window_slots = 0;  // min(num_blocks, max_window_slots)
  uint64_t max_window_slots = 0;  // engine_window_slots_bound (UINT64_MAX: max_num_seqs unset)
  // One sequence at full context (set when EngineOptions::max_model_len > 0):
  int64_t max_model_len = 0;
  int64_t sliding_window = 0;        // engine_window(); 0: full attention
  uint64_t kv_blocks_per_seq = 0;    // engine_blocks_per_seq(max_model_len)
  uint64_t kv_bytes_per_seq = 0;     // kv_blocks_per_seq x kv_bytes_per_block
  uint64_t max_seqs_at_max_len = 0;  // num_blocks / kv_blocks_per_seq: sequences that can
                                     // all hold max_model_len tokens (before --max-num-seqs)
  // Weight bytes a single-sequence decode step streams (the decode bandwidth bound is
  // bandwidth / this): every matrix but the embedding, and of MoE layers only the routed experts
  // a token uses. Printed for MoE models, where it is far below weights_bytes.
  uint64_t decode_weight_bytes = 0;
  int64_t n_experts = 0, n_experts_used = 0;  // routed experts, and per token (0: dense)
  std::string to_string() const;              // the start-up table, one line per row
  // kv_pool_bytes of this table resized to num_blocks blocks (tests size budgets with it).
  uint64_t kv_pool_bytes_for(uint64_t num_blocks) const;
};

// The window kvwarden's engine frees blocks by: a block holds every layer, so only when every
// layer with a KV cache is windowed, the largest window; else 0 (GGUF models are all-or-none).
int64_t engine_window(const ModelShape& m);
// Blocks one sequence of max_model_len tokens holds at most in the engine:
// window_blocks(max_model_len, engine_window(m), block_size), the same bound the KvManager
// keeps (KvManager::max_window_blocks) while a windowed sequence decodes.
int64_t engine_blocks_per_seq(const ModelShape& m, int64_t max_model_len, int64_t block_size);

// The window of a hybrid model's windowed layers (some layers windowed, some not: gemma2/3,
// gpt-oss), whose KV the engine keeps in window slots; 0 for other models or with swa_full.
int64_t engine_hybrid_window(const ModelShape& m, bool swa_full);
// Window slots the sequences a step can hold need at most: each of max_num_seqs sequences holds
// the blocks of its last w - 1 positions plus its chunk (ceil((w - 1) / bs) + 1, + 1 for a
// chunk's partial block, + 1 for a speculative tail), and the chunks of one step cover at most
// max_num_batched_tokens positions. The KvManager still checks slots on every allocation (a
// shortfall preempts like a full pool), this only sizes the slots so that it does not happen.
int64_t engine_window_slots_bound(int64_t window, int64_t block_size, int64_t max_num_seqs,
                                  int64_t max_num_batched_tokens);

// The dimensions kvwarden's engine sizes its memory from (model/workspace_layout.h): a GGUF
// shape's own (GgufFacts::dims, read as Model::Model reads them); for a catalogue or config.json
// shape, a conversion of its fields, every matrix of the uniform `weight_dtype`.
ModelDims engine_dims(const ModelShape& m, const Dtype& weight_dtype);

// Bytes of the engine's KV layout per token per layer: 2 * n_kv_heads * head_dim * bytes(dtype),
// plus for int8 one f32 scale per token per KV head for K and for V (MLA: one latent row).
// kv_bytes_per_token_layer(engine_dims(m)): the KV arena's own formula.
uint64_t engine_kv_bytes_per_token_layer(const ModelShape& m, KvDtype dtype);

// Model::Model's workspace for T tokens on n_threads threads: workspace_layout(engine_dims(m))
// .bytes(), the same buffers the model allocates.
uint64_t engine_workspace_bytes(const ModelShape& m, int64_t max_num_batched_tokens,
                                int64_t n_threads, const Dtype& weight_dtype);

// Errors: shapes the engine cannot run (MLA, shared experts), invalid options, a budget that leaves
// no room for one KV block ("needs 3.1 GiB for weights and workspace, budget 2.0 GiB").
Result<BudgetTable> plan_engine_budget(const ModelShape& m, const EngineOptions& opt);

}  // namespace kvw::planner
