// kernels/ref/ops_ref.cc: scalar oracle for the element-wise kernels, paged attention and the KV
// store, plus the "ref" KernelTable. Pure functions; safe from any thread on disjoint output.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace ref {

void quantize_act(GgmlType wtype, const float* x, int64_t n_tokens, int64_t n_in, void* dst,
                  int ith, int nth);
void matmul(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
            int64_t n_tokens, float* y, int ith, int nth);

namespace {

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += (double)x[i] * x[i];
  const float scale = 1.0f / std::sqrt((float)(sum / (double)n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float g = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
    out[i] = g * up[i];
  }
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

// One query head: online softmax over positions in order. m: running max, l: running sum of
// exp(s - m), acc: running sum of exp(s - m) * v (rescaled whenever m grows).
// krow, vrow: [head_dim] scratch for the decoded K and V rows.
void attend_head(const float* q, int32_t kv_head, const KvLayerView& kv,
                 std::span<const uint32_t> block_table, int64_t pos_begin, int64_t pos_end,
                 AttnScores scores, float* acc, float* ml, float* krow, float* vrow) {
  const int32_t hd = kv.head_dim;
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int32_t i = 0; i < hd; ++i) acc[i] = 0.0f;
  for (int64_t p = pos_begin; p < pos_end; ++p) {
    kv_load_row(kv, false, block_table, p, kv_head, krow);
    kv_load_row(kv, true, block_table, p, kv_head, vrow);
    float s = 0.0f;
    for (int32_t i = 0; i < hd; ++i) s += q[i] * krow[i];
    s *= scores.scale;
    if (scores.softcap > 0.0f) s = scores.softcap * std::tanh(s * (1.0f / scores.softcap));
    if (s > m) {
      const float c = std::exp(m - s);  // 0 on the first position (m = -inf)
      l *= c;
      for (int32_t i = 0; i < hd; ++i) acc[i] *= c;
      m = s;
    }
    const float e = std::exp(s - m);
    l += e;
    for (int32_t i = 0; i < hd; ++i) acc[i] += e * vrow[i];
  }
  ml[0] = m;  // unnormalised: attention_finish divides by l after the segments' merge
  ml[1] = l;
}

void attention_segment(std::span<const AttnQuery> queries, int32_t n_heads, const KvLayerView& kv,
                       std::span<const uint32_t> block_table, AttnScores scores, float* ml,
                       float* scratch) {
  const int32_t group = gqa_group(n_heads, kv);
  const int64_t hd = kv.head_dim;
  for (size_t i = 0; i < queries.size(); ++i) {
    const AttnQuery& query = queries[i];
    for (int32_t h = 0; h < n_heads; ++h) {
      attend_head(query.q + h * hd, h / group, kv, block_table, query.pos_begin, query.pos_end,
                  scores, query.out + h * hd, ml + (i * n_heads + h) * 2, scratch, scratch + hd);
    }
  }
}

void kv_store(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
              const float* k, const float* v) {
  for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
    kv_store_row(kv, false, block_table, pos, h, k + (int64_t)h * kv.head_dim);
    kv_store_row(kv, true, block_table, pos, h, v + (int64_t)h * kv.head_dim);
  }
}

}  // namespace
}  // namespace ref

const KernelTable& ref_table() {
  static const KernelTable table = {
      .isa = "ref",
      .quantize_act = ref::quantize_act,
      .matmul = ref::matmul,
      .packs = packs,
      .pack = pack,
      .matmul_packed = ref::matmul_packed,
      .rmsnorm = ref::rmsnorm,
      .silu_mul = ref::silu_mul,
      .gelu_tanh_mul = ref::gelu_tanh_mul,
      .softcap = ref::softcap,
      .attention = attention_of<ref::attention_segment>,
      .attention_segment = ref::attention_segment,
      .kv_store = ref::kv_store,
  };
  return table;
}

}  // namespace kvw::kernels
