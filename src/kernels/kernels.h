// kernels/kernels.h: THE CPU kernel interface. Plain pointers and dimensions; kernels know nothing
// of models, requests or the KV manager. Multi-threaded kernels take (ith, nth) and process their
// own share; they never create threads.
//
// Batch invariance (the engine's determinism rests on it): every output element is computed with
// a fixed reduction order that does not depend on n_tokens, ith or nth. Work is split over output
// rows / tokens / heads, never over a reduction dimension.
//
// A KernelTable of function pointers is chosen once from CPUID (AVX-512 > AVX2 > scalar ref,
// each with a VNNI variant).
#pragma once

#include <cstdint>
#include <span>

#include "core/kv_dtype.h"
#include "gguf/tensor_types.h"

namespace kvw::kernels {

using ::kvw::KvDtype;  // f32, f16, bf16, int8 (core/kv_dtype.h; never fp8)

// Paged K/V of one layer. Block b's data starts at byte b * block_stride of each base pointer:
//   k, v:              [n_kv_heads][block_size][head_dim] of dtype
//   k_scale, v_scale:  int8 only: [n_kv_heads][block_size] f32, x = q * scale
struct KvLayerView {
  KvDtype dtype;
  void* k;
  void* v;
  void* k_scale;         // int8 only, else nullptr
  void* v_scale;         // int8 only, else nullptr
  int64_t block_stride;  // bytes between consecutive blocks
  int32_t block_size;
  int32_t n_kv_heads;
  int32_t head_dim;
};

// Reads one stored K (or V) row of position `pos`, head `kv_head`, decoded to f32 [head_dim].
void kv_load_row(const KvLayerView& kv, bool value, std::span<const uint32_t> block_table,
                 int64_t pos, int32_t kv_head, float* out);
// Encodes one f32 row into position `pos`, head `kv_head` (int8: scale = max|x| / 127).
void kv_store_row(const KvLayerView& kv, bool value, std::span<const uint32_t> block_table,
                  int64_t pos, int32_t kv_head, const float* in);

// One query token of an attention call: its q and out rows ([n_heads][head_dim] each) and the
// positions it attends, [pos_begin, pos_end): pos_end = its own position + 1 (causal),
// pos_begin > 0 under a sliding window.
struct AttnQuery {
  const float* q;
  float* out;
  int64_t pos_begin;
  int64_t pos_end;
};

// How an attention call turns q.k into softmax logits, and what else joins its softmax: the
// attention variants of the families. logit = scale * q.k, or with softcap > 0 (Gemma-2's
// attn_logit_softcapping) softcap * tanh(scale * q.k / softcap). sinks (gpt-oss; nullable):
// one learned logit per query head of the call ([n_heads]) that joins each softmax's
// denominator with no value row, so a head may attend to almost nothing. A segment
// (attention_segment) applies the softcap; sinks join only at attention_finish, after the
// segments' merge, so the split decode and the unsplit call fold them in the same place.
//
// bf16_dot (opt-in, `--attention-dot bf16`): q.k from bf16 operands, q and k each rounded to bf16
// (nearest even), summed as the lanes of AVX512_BF16's vdpbf16ps do: over d-pairs j in order,
// acc = dpbf16(acc, q[2j..2j+1], k[2j..2j+1]) (each bf16 product exact in f32). PV likewise: the
// softmax weights (INT8: times the V row's scale) and V rounded to bf16, paired by position
// (2j, 2j + 1) of each 16-aligned chunk, out = dpbf16(out, (w_2j, w_2j+1), (v_2j, v_2j+1)) over
// j in order after the f32 rescale; a paired position outside the query's range adds +0. The
// multiplier, the softmax's max, sum and rescale stay f32. INT8 K rows enter as their integers
// (exact in bf16) where the f32 path takes them so (head_dim % 16 == 0), their scale in the
// multiplier; INT8 V rows always enter as their integers. Only
// the AVX-512 tables implement it, and only on a CPU with AVX512_BF16
// (attention_bf16_dot_supported); callers must check, others ignore it. Within the mode the batch
// invariance above holds as in f32: each score's arithmetic is the same in a decode tile, a prefill
// tile and a split segment.
struct AttnScores {
  float scale;
  float softcap = 0.0f;
  const float* sinks = nullptr;
  bool bf16_dot = false;
};

// Positions per attention chunk (two AVX2 registers of scores).
constexpr int32_t kAttnChunk = 16;

// Positions per attention segment (flash-decoding's split). Attention is defined segment by
// segment: each segment of kAttnSegment positions, aligned to absolute positions, gets its own
// softmax max and sum, and the segments of a query are merged in position order
// (attention_merge). The split is a property of positions, not of threads, so any thread may
// compute any segment and every caller gets the same bits. 256: a decode step at depth 8192 has
// 32 segments per KV head to spread over the threads, and the merge (3 x head_dim flops per
// segment) costs under 1% of the segment's 2 x 256 x head_dim.
constexpr int32_t kAttnSegment = 256;

struct KernelTable {
  const char* isa;  // "avx512vnni", "avx512", "avx2vnni", "avx2", "ref"

  // Activations x [n_tokens][n_in] f32 converted to the dot-product format that weights of
  // `wtype` pair with (Q8_0 for Q4_0/Q8_0, Q8_K for K-quants, copy otherwise), rows [ith share].
  // dst holds n_tokens rows of act_row_bytes(wtype, n_in). A Q8_0 row is n_in/32 BlockQ8_0
  // followed by n_in/32 ActBlockExtra (f32 scale, -128 x sum of the block's quants;
  // kernels_internal.h), which only matmul_packed reads.
  void (*quantize_act)(GgmlType wtype, const float* x, int64_t n_tokens, int64_t n_in, void* dst,
                       int ith, int nth);

  // y[t][r] = sum_i W[r][i] * x[t][i] for r in [0,n_rows), t in [0,n_tokens).
  // w: n_rows rows of n_in elements in wtype; xq: output of quantize_act; y row stride = n_rows.
  // Each thread takes a contiguous range of rows.
  void (*matmul)(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                 int64_t n_tokens, float* y, int ith, int nth);

  // Load-time repacking for prefill-speed GEMM (Q8_0 and Q4_0: kernels/packed.cc; Q4_K, Q5_K
  // and Q6_K: kernels/packed_kquants.cc; F32, F16 and BF16: kernels/packed_float.cc; the same
  // layout for every table). packs(): whether matmul_packed takes this matrix (n_rows >= 8
  // quantised, >= 16 float). pack(): rewrites n_rows GGUF rows into the packed layout of the
  // same byte count; dst may equal src (in place). matmul_packed(): as matmul, for weights pack()
  // wrote. Quantised: for each (row, token) it computes acc = fma(float(isum_b), d_w_b * d_x_b,
  // acc) over blocks b in order from 0 (isum_b the exact int32 block dot; K-quants add a min or
  // offset term per super-block, packed_kquants.cc); float: acc = fma(w_i, x_i, acc) over
  // elements i in order. Either way its output is bit-identical across tables, tile shapes,
  // n_tokens and thread counts. Each thread takes a contiguous row range. scratch: this
  // thread's own packed_scratch_bytes(wtype, n_in, n_tokens) bytes, 4-byte aligned (may be null
  // where that is 0); the tiles copy a block of activations there.
  bool (*packs)(GgmlType wtype, int64_t n_rows, int64_t n_in);
  void (*pack)(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in);
  void (*matmul_packed)(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                        int64_t n_tokens, float* y, int ith, int nth, void* scratch);

  // out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], n elements (single row).
  void (*rmsnorm)(const float* x, const float* w, int64_t n, float eps, float* out);

  // out[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);

  // Gemma's element-wise pieces. Each element's result depends on its inputs alone, not on where
  // it lies in the range (tails take the vector code too), so any split of a row across threads
  // gives the same bits.
  // out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715
  // x^3))) (llama.cpp's GELU, HF gelu_pytorch_tanh).
  void (*gelu_tanh_mul)(const float* gate, const float* up, int64_t n, float* out);
  // x[i] = cap * tanh(x[i] / cap) in place (cap > 0): Gemma-2's final-logit soft-capping.
  void (*softcap)(float* x, int64_t n, float cap);

  // Attention for a tile of query tokens of one sequence (all heads of each): flash attention
  // with online softmax. Positions are visited in chunks of kAttnChunk aligned to absolute
  // positions; each chunk's K/V rows are read (and decoded) once for every query and every query
  // head of their KV head. Positions outside a query's [pos_begin, pos_end) contribute exact zeros,
  // so a query's result does not depend on the other queries of its tile: decode (one query),
  // prefill tiles and chunked prefill give the same bits. Position p lives in
  // block_table[p / block_size], slot p % block_size; only blocks covering [min pos_begin,
  // max pos_end) are read (entries before may be holes, 0xffffffff, released behind a sliding
  // window). scratch: at least attention_scratch_floats(head_dim) floats.
  // Since flash-decoding, every table's attention is attention_by_segments over its own
  // attention_segment (kernels_internal.h).
  void (*attention)(std::span<const AttnQuery> queries, int32_t n_heads, const KvLayerView& kv,
                    std::span<const uint32_t> block_table, AttnScores scores, float* scratch);

  // One segment of attention, unnormalised: as attention for queries whose [pos_begin, pos_end)
  // lie inside one segment (non-empty), but each (query, head)'s out row is the sum of
  // exp(s - m) * v, not divided by l, and its state {m, l} (max score, sum of exp(s - m)) goes to
  // ml[query][head][2]. attention_merge and attention_finish turn segments into attention.
  // scores.sinks is not read here (attention_finish takes each head's sink).
  void (*attention_segment)(std::span<const AttnQuery> queries, int32_t n_heads,
                            const KvLayerView& kv, std::span<const uint32_t> block_table,
                            AttnScores scores, float* ml, float* scratch);

  // Writes one token's k, v ([n_kv_heads][head_dim] f32) into slot `pos` of the block table.
  void (*kv_store)(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
                   const float* k, const float* v);
};

// Bytes of one activation row for quantize_act with weights of `wtype`.
int64_t act_row_bytes(GgmlType wtype, int64_t n_in);
int64_t attention_scratch_floats(int32_t head_dim);

// Folds one segment (its unnormalised row seg_out [head_dim], state seg_ml {m, l}) into a running
// (out, ml) that holds the earlier segments of the same (query, head), in position order. The
// one merge every path uses, so a split computed on other threads gives the same bits.
void attention_merge(float* out, float* ml, const float* seg_out, const float* seg_ml,
                     int32_t head_dim);
// Divides a merged row by its sum (zeros when l is 0). sink (nullable): the head's sink logit,
// which joins the sum (and the max) first: out * exp(m - m') / (l exp(m - m') + exp(sink - m')).
void attention_finish(float* out, const float* ml, int32_t head_dim, const float* sink = nullptr);
// First position of the segment holding pos, and the segments [pos_begin, pos_end) touches.
inline int64_t attn_segment_begin(int64_t pos) {
  return pos / kAttnSegment * kAttnSegment;
}
inline int64_t attn_num_segments(int64_t pos_begin, int64_t pos_end) {
  return pos_end <= pos_begin ? 0 : (pos_end - 1) / kAttnSegment - pos_begin / kAttnSegment + 1;
}
// A split decode's partial results live in the threads' attention scratch, past what the
// kernel itself uses: slot i of a thread's scratch holds one segment of one KV head's `group`
// query heads, rows [group][head_dim] then states [group][2]. Slots per thread (>= 1 for
// group <= 64):
int64_t attention_split_slots(int32_t head_dim, int32_t group);
float* attention_split_slot(float* thread_scratch, int32_t head_dim, int32_t group, int64_t slot);
// The view narrowed to KV head g alone (n_kv_heads 1).
KvLayerView kv_head_view(const KvLayerView& kv, int32_t g);
// Per-thread scratch of matmul_packed for weights of `wtype` with n_in columns and at most
// n_tokens tokens, in bytes, the same bound for every table: one token block of activations in
// the tiles' order (float types and Q8_0/Q4_0 from 2 tokens; 0 for one token and the K-quants).
// Never smaller for more tokens; not monotone in n_in (blocks round to whole tiles), so the
// model allocates, at start-up inside its workspace, the largest over all its packed matrices.
int64_t packed_scratch_bytes(GgmlType wtype, int64_t n_in, int64_t n_tokens);

// The best table for this CPU (chosen once, on first call). KVW_ISA=<isa name> overrides.
const KernelTable& kernels();
const KernelTable& kernels_ref();
// Whether `table` implements AttnScores::bf16_dot on this CPU (AVX-512 tables with AVX512_BF16).
bool attention_bf16_dot_supported(const KernelTable& table);
// All tables this CPU can run (for tests comparing each against ref).
std::span<const KernelTable* const> available_kernel_tables();

}  // namespace kvw::kernels
