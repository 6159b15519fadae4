// kernels/kernels_internal.h: private plumbing shared by the kernel tables (row splitting, the
// activation format of each weight type, and the per-ISA tables dispatch.cc chooses from).
// Not part of the kernel contract; only src/kernels and tests/kernels include it.
//
// ISA translation units (x86/*.cc) are compiled with -mavx2/-mavx512f. They must not include
// headers whose inline functions could be merged (ODR) with the generic copies, e.g. core/half.h:
// the linker might keep the AVX-512 copy and run it on a CPU without AVX-512. Helpers they share
// with generic code are therefore declared here and defined out of line in dispatch.cc.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace kvw::kernels {

// Threads take contiguous row ranges whose length is a multiple of kRowAlign (16 rows = 4 tiles of
// 4 rows), so no two threads share a tile and every thread streams its own part of the weights.
constexpr int64_t kRowAlign = 16;

struct RowRange {
  int64_t begin;
  int64_t end;
};

// Share of thread ith of n items, in chunks that are multiples of `align` (the last may be shorter,
// and trailing threads may get an empty range).
RowRange split_range(int64_t n, int ith, int nth, int64_t align);

// The format quantize_act writes for weights of `wtype`: kQ8_0, kQ8_K or kF32 (float types and
// the dequantised types below).
GgmlType act_type(GgmlType wtype);

// Row sizes of a matmul; CHECKs that n_in is a whole number of weight and activation blocks.
struct MatmulGeometry {
  int64_t w_row_bytes;
  int64_t x_row_bytes;
};
MatmulGeometry matmul_geometry(GgmlType wtype, int64_t n_in);

// Q2_K, Q3_K, IQ4_XS: f32 activations, weight rows dequantised a
// chunk at a time and dotted in one fixed order (kernels/dequant_matmul.cc). Every table's matmul
// routes these types to matmul_dequant (the x86 tables to avx2::matmul_dequant, the same arithmetic
// in SIMD), so results are bit-identical across tables; packs() is false for them.
bool is_dequant_type(GgmlType wtype);
void matmul_dequant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const float* x,
                    int64_t n_tokens, float* y, int ith, int nth);

// What quantize_act appends to each Q8_0 activation row, after its n_in/32 BlockQ8_0: one of
// these per block, for matmul_packed (x86 kernels broadcast both straight from memory).
struct ActBlockExtra {
  float d;         // the block's fp16 scale, converted (exact)
  int32_t neg128;  // -128 x the sum of its 32 quants: the unsigned-weight correction of Q8_0
                   // (weights stored q + 128); Q4_0's -8 x sum is neg128 >> 4, Q5_0's
                   // -16 x sum neg128 >> 3 (exact); Q4_1/Q5_1's min term reads it as the sum
};
// Q4_1 and Q5_1 (x = d q + m): a second fp16 per block and row, the min, in the packed scales.
constexpr bool has_min_scale(GgmlType wtype) {
  return wtype == GgmlType::kQ4_1 || wtype == GgmlType::kQ5_1;
}
// Byte offset of the extras in a Q8_0 activation row of nb blocks: after the blocks, rounded up
// to 4 bytes so that the extras, and every row (act_row_bytes is a multiple of 4), are aligned.
int64_t act_extras_offset(int64_t nb);
// Writes the nb extras of one Q8_0 activation row whose blocks are already written.
void write_act_extras(void* q8_0_row, int64_t nb);

// The packed layout (kernels/packed.cc): a group of kPackRows rows, and the geometry of one
// packed matrix. packed_geometry CHECKs that the table packs (wtype, n_rows, n_in).
constexpr int64_t kPackRows = 8;
struct PackedGeometry {
  int64_t nb;             // 32-element blocks per row
  int64_t row_bytes;      // GGUF row bytes (rows past the last full group keep this layout)
  int64_t group_bytes;    // kPackRows * row_bytes
  int64_t scale_bytes;    // per block of one group: 16 (d), Q4_1 / Q5_1 32 (d, m), MXFP4 8 (e)
  int64_t quant_bytes;    // per block of one group: Q8_0 256, Q4_0 / Q4_1 / IQ4_NL / MXFP4 128,
                          // Q5_0 / Q5_1 160
  int64_t n_groups;       // n_rows / kPackRows
  int64_t x_row_bytes;    // act_row_bytes
  int64_t extras_offset;  // act_extras_offset(nb)
};
PackedGeometry packed_geometry(GgmlType wtype, int64_t n_rows, int64_t n_in);
// packs(): Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 with n_rows >= kPackRows, a K-quant
// with n_rows >= kPackRows, or a float type with n_rows >= kFloatPackRows.
bool packs(GgmlType wtype, int64_t n_rows, int64_t n_in);
void pack(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in);
// Token blocks of the packed GEMMs, whole tiles of C tokens: the Q8_0/Q4_0 and K-quant tiles
// walk ~256 KiB of activation rows at a time (x86/tile_walk.h), the float tiles ~1 MiB and at
// least 4 tiles (x86/packed_float_driver.h). packed_scratch_bytes bounds the copies of a block
// that the tiles below make, so every table sizes its blocks here.
int64_t int8_token_block(int64_t x_row_bytes, int C);
int64_t float_token_block(int64_t n_in, int C);
constexpr int kFloatTileTokensAvx2 = 6;
constexpr int kFloatTileTokensAvx512 = 12;
// The AVX512-VNNI Q8_0/Q4_0 pair tiles: 12 tokens; per 32-element block of a tile, 8 x 4 quant
// bytes, a scale and an offset correction per token (TileBlock, x86/avx512vnni.cc).
constexpr int kInt8PairTileTokens = 12;
constexpr int64_t kInt8PairTileBlockBytes = (8 + 2) * 4 * kInt8PairTileTokens;
// Rows [row_begin, row_end) that lie past the last full group (GGUF layout), for all tokens,
// with matmul_packed's arithmetic in scalar code: every table calls this for its tail rows.
void matmul_packed_tail(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                        int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end);
// Rows [row_begin, row_end) of a matrix of GGUF-layout rows of those types, any n_rows, with
// matmul_packed's arithmetic; matmul_gguf: thread ith of nth's rows. The unpacked matmul of
// Q4_1 / Q5_1 / MXFP4 in every table, so packing never changes a result.
void matmul_gguf_rows(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                      int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end);
void matmul_gguf(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                 int64_t n_tokens, float* y, int ith, int nth);

// The packed layout of F32 / F16 / BF16 matrices (kernels/packed_float.cc): groups of
// kFloatPackRows rows stored element-major. pack() and packs() above route these types there.
constexpr int64_t kFloatPackRows = 16;
bool is_float_type(GgmlType wtype);  // F32, F16, BF16
struct FloatPackedGeometry {
  int64_t elem_bytes;   // 4 or 2
  int64_t row_bytes;    // n_in * elem_bytes
  int64_t group_bytes;  // kFloatPackRows * row_bytes
  int64_t n_groups;     // n_rows / kFloatPackRows
};
FloatPackedGeometry float_packed_geometry(GgmlType wtype, int64_t n_rows, int64_t n_in);
void pack_float(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in);
// Rows [row_begin, row_end) past the last full group (GGUF layout), serial scalar arithmetic.
void matmul_packed_float_tail(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                              const float* x, int64_t n_tokens, float* y, int64_t row_begin,
                              int64_t row_end);
// matmul_packed of the float types in each x86 table (x86/packed_float_*.cc).
namespace avx2 {
void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth,
                         void* scratch);
// matmul_dequant in AVX2, bit-identical to the scalar one (x86/avx2_dequant.cc).
void matmul_dequant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const float* x,
                    int64_t n_tokens, float* y, int ith, int nth);
}  // namespace avx2
namespace avx512 {
void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth,
                         void* scratch);
// matmul_dequant in AVX-512, bit-identical to the scalar one (x86/avx512_dequant.cc).
void matmul_dequant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const float* x,
                    int64_t n_tokens, float* y, int ith, int nth);
// The AVX-512 tables' attention_segment (x86/attention_avx512.cc).
void attention_segment(std::span<const AttnQuery> queries, int32_t n_heads, const KvLayerView& kv,
                       std::span<const uint32_t> block_table, AttnScores scores, float* ml,
                       float* scratch);
}  // namespace avx512

// Attention from a table's attention_segment (kernels/attention_split.cc): for tiles of up to 16
// queries x 16 query heads of one KV head, each segment the tile touches is computed and merged
// in position order into the queries' out rows, which are then normalised.
using AttnSegmentFn = void (*)(std::span<const AttnQuery>, int32_t, const KvLayerView&,
                               std::span<const uint32_t>, AttnScores, float*, float*);
void attention_by_segments(AttnSegmentFn segment, std::span<const AttnQuery> queries,
                           int32_t n_heads, const KvLayerView& kv,
                           std::span<const uint32_t> block_table, AttnScores scores,
                           float* scratch);
template <AttnSegmentFn kSegment>
void attention_of(std::span<const AttnQuery> queries, int32_t n_heads, const KvLayerView& kv,
                  std::span<const uint32_t> block_table, AttnScores scores, float* scratch) {
  attention_by_segments(kSegment, queries, n_heads, kv, block_table, scores, scratch);
}
// Scratch of one attention_segment call (the kernels' own part of attention_scratch_floats).
int64_t attention_segment_scratch_floats(int32_t head_dim);
// Chunks the AVX-512 kernel's prefill step takes at once (x86/attention_avx512.cc): their K and
// V rows, decoded, are its scratch.
constexpr int kAttnStepChunks = 2;

// The packed layout of Q4_K / Q5_K / Q6_K matrices (kernels/packed_kquants.cc): groups of
// kPackRows rows, super-block by super-block. pack() and packs() above route these types there.
bool is_kquant_type(GgmlType wtype);  // Q4_K, Q5_K, Q6_K
struct KquantPackedGeometry {
  int64_t nsb;          // 256-element super-blocks per row
  int64_t row_bytes;    // GGUF row bytes
  int64_t sb_bytes;     // one super-block of a group: kPackRows GGUF blocks
  int64_t group_bytes;  // kPackRows * row_bytes
  int64_t n_groups;     // n_rows / kPackRows
  int64_t x_row_bytes;  // act_row_bytes (Q8_K)
  int64_t quants;       // offset of the quants inside a packed super-block
};
KquantPackedGeometry kquant_packed_geometry(GgmlType wtype, int64_t n_rows, int64_t n_in);
// Byte offsets inside one packed super-block of a group (layout: packed_kquants.cc).
namespace kq {
constexpr int64_t kD = 0;           // d[8] fp16 (all three types)
constexpr int64_t kDmin = 16;       // Q4_K/Q5_K: dmin[8] fp16
constexpr int64_t kScLow = 32;      // Q4_K/Q5_K: scale and min low nibbles [8][8 rows]
constexpr int64_t kScHigh = 96;     // Q4_K/Q5_K: their top 2 bits [4][8 rows]
constexpr int64_t kQ4Quants = 128;  // Q4_K quants [4 chunks][8 steps][8 rows][4]
constexpr int64_t kQ5Fifth = 128;   // Q5_K fifth bits [4 chunks][2 halves][8 rows][4]
constexpr int64_t kQ5Quants = 384;
constexpr int64_t kQ6Scales = 16;  // Q6_K scales [16 groups][8 rows] int8
constexpr int64_t kQ6Quants = 144;
constexpr int64_t kQ6High = 1168;  // Q6_K top 2 bits [4 chunks][4][8 rows][4]
static_assert(kQ4Quants + 1024 == 8 * 144 && kQ5Quants + 1024 == 8 * 176 &&
              kQ6High + 512 == 8 * 210);
}  // namespace kq
void pack_kquant(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in);
// Rows [row_begin, row_end) past the last full group (GGUF layout), matmul_packed's arithmetic.
void matmul_packed_kquant_tail(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                               const void* xq, int64_t n_tokens, float* y, int64_t row_begin,
                               int64_t row_end);

// The avx512vnni table's K-quant GEMM (x86/avx512vnni_kquants.cc).
namespace avx512vnni {
void matmul_packed_kquant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                          const void* xq, int64_t n_tokens, float* y, int ith, int nth);
// One token x unpacked Q6_K rows (ith's share), the AVX2 table's bits (x86/avx512vnni_gemv.cc);
// false, having written nothing, where n_in is outside what it takes.
bool gemv_q6_k(const void* w, int64_t n_rows, int64_t n_in, const void* xq, float* y, int ith,
               int nth);
}  // namespace avx512vnni

// MXFP4's E8M0 block scale 2^(e - 128) (ggml's E8M0 half); MXFP4 packs and multiplies as the
// other int8 types above (levels + 12 unsigned, the offset removed with 3 x (neg128 >> 5)).
float mxfp4_block_scale(uint8_t e);

// Query heads per KV head; CHECKs n_kv_heads > 0 divides n_heads.
int32_t gqa_group(int32_t n_heads, const KvLayerView& kv);

// Per-ISA tables. The AVX2/AVX-512 ones may only be used when the CPU supports them.
const KernelTable& ref_table();
const KernelTable& avx2_table();
const KernelTable& avx512_table();
// The same tables with matmul_packed on VNNI dot products (AVX-VNNI / AVX512-VNNI).
const KernelTable& avx2vnni_table();
const KernelTable& avx512vnni_table();

// Scalar reference pieces that tests and other tables reuse.
namespace ref {
void quantize_row_q8_0(const float* x, void* dst, int64_t n);  // n % 32 == 0
void quantize_row_q8_k(const float* x, void* dst, int64_t n);  // n % 256 == 0
// ggml's get_scale_min_k4: the 8 (scale, min) pairs of 6 bits in a Q4_K/Q5_K block's 12 bytes.
void unpack_scale_min_k4(const uint8_t* q, uint8_t* sc, uint8_t* m);
// The scalar packed matmuls every table's matmul_packed matches bit for bit (matmul_packed
// routes the float types to matmul_packed_float).
void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth);
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch = nullptr);
void matmul_packed_kquant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                          const void* xq, int64_t n_tokens, float* y, int ith, int nth);
}  // namespace ref

}  // namespace kvw::kernels
