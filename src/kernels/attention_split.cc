// kernels/attention_split.cc: attention as segments merged in position order (flash-decoding's
// split, kernels.h kAttnSegment), shared by every table. A segment's own kernel
// (attention_segment) runs the online softmax inside it; this file folds segments together with
// one merge that the model's split decode also calls, so a (query, head) gets the same bits
// whether its segments were computed in one call here or on several threads.
// Compiled with -ffp-contract=off like the rest of kvw_kernels: the merge's a * x + b * y must
// round the same way in every caller.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace {

constexpr int kTileQueries = 16;  // queries per segment call (the model's kAttnTile)
constexpr int kTileHeads = 16;    // query heads per segment call (the x86 kernels' kMaxGroup)

}  // namespace

void attention_merge(float* out, float* ml, const float* seg_out, const float* seg_ml,
                     int32_t head_dim) {
  const float m = std::max(ml[0], seg_ml[0]);
  // Both states are of non-empty segments: m is finite. One exponent is 0, whose exp is 1
  // exactly: skipping that call halves the exps of a prefill tile's ~40 merges per pair at 10k.
  const float a = ml[0] == m ? 1.0f : std::exp(ml[0] - m);
  const float b = seg_ml[0] == m ? 1.0f : std::exp(seg_ml[0] - m);
  for (int32_t i = 0; i < head_dim; ++i) out[i] = out[i] * a + seg_out[i] * b;
  ml[0] = m;
  ml[1] = ml[1] * a + seg_ml[1] * b;
}

void attention_finish(float* out, const float* ml, int32_t head_dim, const float* sink) {
  float inv = ml[1] > 0.0f ? 1.0f / ml[1] : 0.0f;
  if (sink != nullptr) {
    // The sink as one more merged state {sink, 1} with a zero row. An empty range (m = -inf,
    // l = 0) gets a = 0: all weight on the sink, a zero row.
    const float m = std::max(ml[0], *sink);
    const float a = std::exp(ml[0] - m);
    inv = a / (ml[1] * a + std::exp(*sink - m));
  }
  for (int32_t i = 0; i < head_dim; ++i) out[i] *= inv;
}

KvLayerView kv_head_view(const KvLayerView& kv, int32_t g) {
  const int64_t rows = (int64_t)g * kv.block_size;
  const int64_t elem = (int64_t)kv_elem_bytes(kv.dtype);
  KvLayerView out = kv;
  out.k = static_cast<uint8_t*>(kv.k) + rows * kv.head_dim * elem;
  out.v = static_cast<uint8_t*>(kv.v) + rows * kv.head_dim * elem;
  if (kv.k_scale != nullptr) {
    out.k_scale = static_cast<uint8_t*>(kv.k_scale) + rows * 4;
    out.v_scale = static_cast<uint8_t*>(kv.v_scale) + rows * 4;
  }
  out.n_kv_heads = 1;
  return out;
}

// The kernel's own scratch, then a segment's rows [kTileQueries][kTileHeads][hd], its states and
// the running states ([kTileQueries][kTileHeads][2] each).
int64_t attention_scratch_floats(int32_t head_dim) {
  return attention_segment_scratch_floats(head_dim) +
         (int64_t)kTileQueries * kTileHeads * (head_dim + 4);
}

int64_t attention_split_slots(int32_t head_dim, int32_t group) {
  return (int64_t)kTileQueries * kTileHeads * (head_dim + 4) / ((int64_t)group * (head_dim + 2));
}

float* attention_split_slot(float* thread_scratch, int32_t head_dim, int32_t group, int64_t slot) {
  return thread_scratch + attention_segment_scratch_floats(head_dim) +
         slot * group * (head_dim + 2);
}

namespace {

// Queries [0, nq) x query heads [h0, h0 + ng) against a KV view of one head (see the header).
void attend_tile(AttnSegmentFn segment, const AttnQuery* queries, int nq, int32_t h0, int ng,
                 const KvLayerView& kv1, std::span<const uint32_t> block_table, AttnScores scores,
                 float* scratch) {
  const int32_t hd = kv1.head_dim;
  float* seg_out = scratch + attention_segment_scratch_floats(hd);  // [q][g][hd]
  float* seg_ml = seg_out + kTileQueries * kTileHeads * hd;         // [q][g][2]
  float* run_ml = seg_ml + kTileQueries * kTileHeads * 2;           // [q][g][2]
  bool started[kTileQueries] = {};
  int64_t lo = queries[0].pos_begin, hi = queries[0].pos_end;
  for (int i = 1; i < nq; ++i) {
    lo = std::min(lo, queries[i].pos_begin);
    hi = std::max(hi, queries[i].pos_end);
  }
  AttnQuery sub[kTileQueries];
  int idx[kTileQueries];
  for (int64_t s0 = attn_segment_begin(lo); s0 < hi; s0 += kAttnSegment) {
    int n = 0;
    for (int i = 0; i < nq; ++i) {
      const int64_t a = std::max(queries[i].pos_begin, s0);
      const int64_t b = std::min(queries[i].pos_end, s0 + kAttnSegment);
      if (a >= b) continue;
      // A query's first segment goes straight to its out row; later ones to seg_out.
      float* out =
          started[i] ? seg_out + (int64_t)n * kTileHeads * hd : queries[i].out + (int64_t)h0 * hd;
      sub[n] = {queries[i].q + (int64_t)h0 * hd, out, a, b};
      idx[n++] = i;
    }
    if (n == 0) continue;
    // seg_ml is indexed [n][g] with a row of ng heads; kernels write ml[query][head][2].
    segment({sub, (size_t)n}, ng, kv1, block_table, scores, seg_ml, scratch);
    for (int k = 0; k < n; ++k) {
      const int i = idx[k];
      float* rml = run_ml + (int64_t)i * kTileHeads * 2;
      const float* sml = seg_ml + (int64_t)k * ng * 2;
      if (!started[i]) {
        std::memcpy(rml, sml, sizeof(float) * 2 * ng);
        started[i] = true;
        continue;
      }
      for (int g = 0; g < ng; ++g) {
        attention_merge(queries[i].out + (int64_t)(h0 + g) * hd, rml + 2 * g,
                        seg_out + ((int64_t)k * kTileHeads + g) * hd, sml + 2 * g, hd);
      }
    }
  }
  for (int i = 0; i < nq; ++i) {
    for (int g = 0; g < ng; ++g) {
      float* out = queries[i].out + (int64_t)(h0 + g) * hd;
      if (!started[i]) {
        std::memset(out, 0, sizeof(float) * hd);  // an empty range attends nothing
      } else {
        attention_finish(out, run_ml + ((int64_t)i * kTileHeads + g) * 2, hd,
                         scores.sinks != nullptr ? scores.sinks + h0 + g : nullptr);
      }
    }
  }
}

}  // namespace

void attention_by_segments(AttnSegmentFn segment, std::span<const AttnQuery> queries,
                           int32_t n_heads, const KvLayerView& kv,
                           std::span<const uint32_t> block_table, AttnScores scores,
                           float* scratch) {
  const int32_t group = gqa_group(n_heads, kv);
  for (size_t i0 = 0; i0 < queries.size(); i0 += kTileQueries) {
    const int nq = (int)std::min<size_t>(kTileQueries, queries.size() - i0);
    for (int32_t kv_head = 0; kv_head < kv.n_kv_heads; ++kv_head) {
      const KvLayerView kv1 = kv_head_view(kv, kv_head);
      for (int32_t g0 = 0; g0 < group; g0 += kTileHeads) {
        const int ng = std::min(group - g0, kTileHeads);
        attend_tile(segment, queries.data() + i0, nq, kv_head * group + g0, ng, kv1, block_table,
                    scores, scratch);
      }
    }
  }
}

}  // namespace kvw::kernels
