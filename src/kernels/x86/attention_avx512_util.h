// kernels/x86/attention_avx512_util.h: what the AVX-512 attention's prefill tile
// (attention_avx512.cc) and decode tile (attention_decode_avx512.cc) share: the V accumulation,
// chunk row addressing and prefetch, and a tile's scratch. Include only from translation units
// compiled with the AVX-512 options of src/kernels/CMakeLists.txt (KVW_AVX512_SOURCES): every
// function is `static` (see attention_util.h), and each includer gets its own copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/kernels_internal.h"
#include "kernels/x86/attention_util.h"

namespace kvw::kernels::avx512 {

static_assert(kAttnChunk == 16, "one __m512 holds a chunk's scores");

using x86::ChunkPair;
using x86::SoftmaxState;

using x86::kMaxGroup;
using x86::kMaxTile;
// Decode prefetches this many chunks ahead (16 KB of f16 K/V at hd 64), into L2 (prefetch_rows).
// On a DRAM stream of 512 MiB (decode_attention_bench, 1 thread, busy machine, CPU time, per-row
// prefetch): 1 chunk ahead 123-126 ms, 2: 128-131, 4: 117-118.
constexpr int kPrefetchChunks = 4;
constexpr int kAccBatch = 8;     // pairs accumulating V together: 8 or at most 4
constexpr int kDecodeLanes = 8;  // a decode tile's pairs, one per lane of a __m256 (attend_decode)

// How accumulate reads V rows: f32 rows (decoded, or the F32 cache's own), or the F16 / INT8
// cache's rows in place, decoded per use to the same f32 values as the f32 rows. INT8 rows are
// their integers: each row's scale is folded into the weights instead (fold_scales).
// BF16 rows are read in place only under bf16_dot, whose tiles all read V in place (into bf16
// pairs, bf16_v_pairs).
enum class VRows { kF32, kF16, kInt8, kBF16 };

// 16 elements of a V row from element j.
template <VRows kV>
static KVW_INLINE __m512 load_v(const void* row, int32_t j, __mmask16 m) {
  if constexpr (kV == VRows::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + j));
  } else if constexpr (kV == VRows::kInt8) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, static_cast<const int8_t*>(row) + j)));
  } else if constexpr (kV == VRows::kBF16) {  // bf16 is the high half of its f32
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + j)),
        16));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + j);
  }
}

// One chunk's share of a V accumulation: each pair's rescale of its state, its weights and the
// chunk's V rows.
struct AccChunk {
  const float* c;        // [pair]
  const float* w;        // [pair][kAttnChunk], or [kAttnChunk][kDecodeLanes] (kPosMajor): one
                         // base pointer, not N (they would spill)
  const void* const* v;  // [kAttnChunk] rows
};

// Whether the N rescales from c are all exactly 1: no pair's max moved (exp512(0) is 1.0f
// exactly), so multiplying by them, an identity, can be skipped. Deep in a context the max
// rarely moves: the skip saves 1 of every 17 vector ops of the V accumulation.
template <int N>
static KVW_INLINE bool all_ones(const float* c) {
  constexpr __mmask16 m = (__mmask16)((1u << N) - 1);
  return _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, c), _mm512_set1_ps(1.0f),
                                 _CMP_EQ_OQ) == m;
}

// For N pairs with the same lanes [a, b), chunk after chunk (G in position order):
// out[n] = out[n] * c[n] + sum over p in [a, b) of w[n][p] * v[p], each element fma'd over p in
// order (64, then 16, then a masked 1..15 at a time). The per-element arithmetic does not depend
// on the blocking, on N or on G: a chunk's sum kept in a register for the next chunk is the float
// a store and reload would give.
template <int N, int W, int G, VRows kV, bool kPosMajor>
static KVW_INLINE void accumulate_block(float* const* out, const AccChunk* ch, int a, int b,
                                        int32_t j, __mmask16 tail) {
  __m512 acc[N][W];
  for (int n = 0; n < N; ++n) {
    for (int u = 0; u < W; ++u) acc[n][u] = _mm512_maskz_loadu_ps(tail, out[n] + j + 16 * u);
  }
  for (int g = 0; g < G; ++g) {
    if (!all_ones<N>(ch[g].c)) {
      for (int n = 0; n < N; ++n) {
        const __m512 vc = _mm512_set1_ps(ch[g].c[n]);
        for (int u = 0; u < W; ++u) acc[n][u] = _mm512_mul_ps(acc[n][u], vc);
      }
    }
    for (int p = a; p < b; ++p) {
      __m512 vv[W];
      for (int u = 0; u < W; ++u) vv[u] = load_v<kV>(ch[g].v[p], j + 16 * u, tail);
      for (int n = 0; n < N; ++n) {
        const __m512 wp =
            _mm512_set1_ps(ch[g].w[kPosMajor ? p * kDecodeLanes + n : n * kAttnChunk + p]);
        for (int u = 0; u < W; ++u) acc[n][u] = _mm512_fmadd_ps(wp, vv[u], acc[n][u]);
      }
    }
  }
  for (int n = 0; n < N; ++n) {
    for (int u = 0; u < W; ++u) _mm512_mask_storeu_ps(out[n] + j + 16 * u, tail, acc[n][u]);
  }
}

// Up to 4 pairs take 64 elements of a row per pass (16 accumulators); 8 pairs (a decode's GQA
// group) take 32, so each V row is loaded and converted once for all 8 instead of twice.
template <int N, int G, VRows kV, bool kPosMajor = false>
static KVW_INLINE void accumulate_pairs(float* const* out, const AccChunk* ch, int a, int b,
                                        int32_t hd) {
  constexpr int kWide = N > 4 ? 2 : 4;
  int32_t j = 0;
  for (; j + 16 * kWide <= hd; j += 16 * kWide)
    accumulate_block<N, kWide, G, kV, kPosMajor>(out, ch, a, b, j, 0xFFFF);
  for (; j + 16 <= hd; j += 16) accumulate_block<N, 1, G, kV, kPosMajor>(out, ch, a, b, j, 0xFFFF);
  if (j < hd) {
    accumulate_block<N, 1, G, kV, kPosMajor>(out, ch, a, b, j, (__mmask16)((1u << (hd - j)) - 1));
  }
}

// Two-chunk steps read decoded f32 rows only.
template <int N, int G, bool kPosMajor = false>
static KVW_INLINE void accumulate_any(VRows rows, float* const* out, const AccChunk* ch, int a,
                                      int b, int32_t hd) {
  if constexpr (G == 1) {
    switch (rows) {
      case VRows::kF16:
        return accumulate_pairs<N, G, VRows::kF16, kPosMajor>(out, ch, a, b, hd);
      case VRows::kInt8:
        return accumulate_pairs<N, G, VRows::kInt8, kPosMajor>(out, ch, a, b, hd);
      case VRows::kBF16:
        return accumulate_pairs<N, G, VRows::kBF16, kPosMajor>(out, ch, a, b, hd);
      case VRows::kF32:
        break;
    }
  }
  accumulate_pairs<N, G, VRows::kF32, kPosMajor>(out, ch, a, b, hd);
}
// Where the rows of positions [a, b) of the chunk at c0 live: row p is at byte
// block[p] + idx[p] * row bytes of K or V, and its INT8 scale at block[p] + idx[p] * 4. One
// division per chunk: kv_offset's pos / block_size per row (a runtime divisor, ~20 cycles) cost
// more than the chunk's softmax.
struct ChunkRows {
  int64_t block[kAttnChunk];
  int64_t idx[kAttnChunk];
};

static KVW_INLINE void chunk_rows(const KvLayerView& kv, const uint32_t* block_table, int64_t c0,
                                  int a, int b, int32_t kv_head, ChunkRows* r) {
  int64_t blk = (c0 + a) / kv.block_size, slot = c0 + a - blk * kv.block_size;
  for (int p = a; p < b; ++p) {
    r->block[p] = (int64_t)block_table[blk] * kv.block_stride;
    r->idx[p] = (int64_t)kv_head * kv.block_size + slot;
    if (++slot == kv.block_size) slot = 0, ++blk;
  }
}

static KVW_INLINE const uint8_t* row_ptr(const void* base, const ChunkRows& r, int p,
                                         int64_t row_bytes) {
  return static_cast<const uint8_t*>(base) + r.block[p] + r.idx[p] * row_bytes;
}

static KVW_INLINE float row_scale(const void* scales, const ChunkRows& r, int p) {
  float scale;
  std::memcpy(&scale, static_cast<const uint8_t*>(scales) + r.block[p] + r.idx[p] * 4, 4);
  return scale;
}

// prefetcht0 / prefetcht1 as volatile asm: GCC 12 deletes a loop whose body is only
// _mm_prefetch (no side effects), which left prefetch_rows empty.
template <bool kToL2>
static KVW_INLINE void prefetch_line(uintptr_t p) {
  if constexpr (kToL2) {
    asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(p)));
  } else {
    asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(p)));
  }
}

// Calls span(p, n) for the bytes of the K and V rows (and INT8 scales) of positions [a, b) of
// the chunk at c0. Blocks are scattered (one head's block is 16 x 128 bytes at f16 and hd 64,
// then a jump of the layer's block stride), so the hardware prefetcher, which stops at 4 KB
// pages, restarts at every block hop. A block's rows of one head are contiguous: one span per
// block, not per row (per-row addressing cost 7% of a decode's time with the rows already in L2).
template <class Span>
static void for_each_row_span(const KvLayerView& kv, const uint32_t* block_table, int64_t c0, int a,
                              int b, int32_t kv_head, Span&& span) {
  const int64_t row_bytes = kv.head_dim * (int64_t)kv_elem_bytes(kv.dtype);
  int64_t pos = c0 + a;
  const int64_t end = c0 + b;
  while (pos < end) {
    const int64_t blk = pos / kv.block_size, slot = pos - blk * kv.block_size;
    const int64_t n = std::min<int64_t>(end - pos, kv.block_size - slot);
    const int64_t base = (int64_t)block_table[blk] * kv.block_stride;
    const int64_t row = (int64_t)kv_head * kv.block_size + slot;
    span(static_cast<const uint8_t*>(kv.k) + base + row * row_bytes, n * row_bytes);
    span(static_cast<const uint8_t*>(kv.v) + base + row * row_bytes, n * row_bytes);
    if (kv.k_scale != nullptr) {
      span(static_cast<const uint8_t*>(kv.k_scale) + base + row * 4, n * 4);
      span(static_cast<const uint8_t*>(kv.v_scale) + base + row * 4, n * 4);
    }
    pos += n;
  }
}

// Prefetches the rows of positions [a, b) of the chunk at c0 into L2 (decode). Into L1, each
// line held an L1 miss buffer for a whole DRAM latency: a chunk's 64 lines stalled on them, and
// its loads still waited (profile: 13% of decode at the prefetch, 20% at the first V loads).
// decode_attention_bench f16 @ d8192, 1 thread, 512 MiB, busy machine, CPU time, medians of 3:
// prefetcht0 135-160 ms, prefetcht1 (L2) 115-125, prefetchnta 163; 8 chunks ahead with t1 131.
static void prefetch_rows(const KvLayerView& kv, const uint32_t* block_table, int64_t c0, int a,
                          int b, int32_t kv_head) {
  for_each_row_span(kv, block_table, c0, a, b, kv_head, [](const uint8_t* p, int64_t n) {
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + (uintptr_t)n;
    for (uintptr_t at = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63}; at < end; at += 64)
      prefetch_line<true>(at);
  });
}

// What a tile's chunk steps share: the tile, its KV head, how V is read, and scratch.
struct TileWork {
  const KvLayerView* kv;
  const uint32_t* block_table;
  int32_t kv_head;
  AttnScores scores;
  VRows v_rows;
  float* kt;    // [kAttnStepChunks][hd][kAttnChunk]: a step's K, transposed
  float* vbuf;  // [kAttnStepChunks][kAttnChunk][hd]: a step's V rows, decoded
  float* row;   // [hd]
};

// AttnScores::bf16_dot's products (attention_bf16_avx512.cc, the one file compiled with
// -mavx512bf16; call only when bf16_dot is set). Head dims even and at most kMaxHeadDim.
constexpr int32_t kMaxHeadDim = 512;
// K transposed by load_kt ([hd][16] f32) into bf16 pairs in place: [hd / 2][16] of
// (k[2j], k[2j + 1]) as 32 bits, in the first half of kt.
void bf16_pair_kt(float* kt, int32_t hd);
// score_all of attention_avx512.cc against paired K (bf16_pair_kt), and against two chunks.
void score_all_bf16(const ChunkPair* pairs, int np, const float* kt2, int32_t hd,
                    float (*pv)[kAttnChunk]);
void score_all2_bf16(const ChunkPair* pairs, int np, const float* kt0, const float* kt1, int32_t hd,
                     float (*s0)[kAttnChunk], float (*s1)[kAttnChunk]);
// A decode tile's ng q rows (from q, [ng][hd]) as bf16 pairs, lanes = heads: qt2[hd / 2][8],
// lanes past ng zero.
void bf16_decode_q(const float* q, int ng, int32_t hd, uint32_t* qt2);
// One K row of dtype (F32, F16, BF16, INT8 integers) as bf16, hd % 16 == 0.
void bf16_k_row(KvDtype dtype, const uint8_t* src, int32_t hd, uint16_t* dst);
// A decode chunk's scores s[p][lane] from qt2 and 16 bf16 K rows kbuf[16][hd].
void bf16_decode_scores(const uint32_t* qt2, const uint16_t* kbuf, int32_t hd,
                        float (*s)[kDecodeLanes]);

// PV under bf16_dot: the weights rounded to bf16 and V as bf16 pairs of positions (2j, 2j + 1) of
// the chunk, out = dpbf16(out, (w[2j], w[2j + 1]), (v_2j[d], v_2j+1[d])) over j in order after
// the f32 rescale; a position outside a pair's lanes adds +0 (its weight 0, its V half zeroed).
// A chunk's V rows [la, lb) (vrow, read as `rows`) as pair rows vp[8][hd]: dword d of row j is
// (v_2j[d], v_2j+1[d]), rows outside [la, lb) zeros. vp may hold F32 rows decoded there
// (vbuf): pair row j is written after rows 2j and 2j + 1 are read.
void bf16_v_pairs(VRows rows, const void* const* vrow, int la, int lb, int32_t hd, uint32_t* vp);
// accumulate_runs<G> (G = 1 or kAttnStepChunks) in bf16: w[g] chunk g's weights [pair][16]
// (rounded in place), c[g] its rescales, vp[g] its V pairs.
void bf16_pv_step(const ChunkPair* pairs, int np, int G, float (*const* w)[kAttnChunk],
                  const float* const* c, const uint32_t* const* vp, int32_t hd);
// A decode chunk's PV in bf16: w [kAttnChunk][kDecodeLanes] position-major weights.
void bf16_pv_decode(const ChunkPair* pairs, int np, const float* w, const float* c,
                    const uint32_t* vp, int32_t hd);

// attend_tile's one-chunk steps for a decode tile (attention_decode_avx512.cc): one query, heads
// [h0, h0 + ng) with ng <= kDecodeLanes, F16 / INT8 / F32 rows (and BF16 under bf16_dot) with
// head_dim % 16 == 0, V read in place (t.v_rows). Leaves each pair's state in st[0]. Returns false,
// having done nothing, for other K/V dtypes.
bool attend_decode_tile(const TileWork& t, const AttnQuery* query, int32_t h0, int ng,
                        SoftmaxState (*st)[kMaxGroup]);

}  // namespace kvw::kernels::avx512
