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

// Element (kv_head, slot, 0) of position `pos` in the K (or V) arena `base`.
int64_t kv_offset(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
                  int32_t kv_head) {
  const uint32_t block = block_table[pos / kv.block_size];
  const int64_t slot = pos % kv.block_size;
  return block * kv.block_stride + ((int64_t)kv_head * kv.block_size + slot) * kv.head_dim;
}

float load_kv(const KvLayerView& kv, const void* base, int64_t index) {
  if (kv.dtype == KvDtype::kF16) return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
  return static_cast<const float*>(base)[index];
}

// One query head: online softmax over positions in order. m: running max, l: running sum of
// exp(s - m), acc: running sum of exp(s - m) * v (rescaled whenever m grows).
void attend_head(const float* q, int32_t kv_head, const KvLayerView& kv,
                 std::span<const uint32_t> block_table, int64_t pos_begin, int64_t pos_end,
                 float scale, float* acc) {
  const int32_t hd = kv.head_dim;
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (int32_t i = 0; i < hd; ++i) acc[i] = 0.0f;
  for (int64_t p = pos_begin; p < pos_end; ++p) {
    const int64_t off = kv_offset(kv, block_table, p, kv_head);
    float s = 0.0f;
    for (int32_t i = 0; i < hd; ++i) s += q[i] * load_kv(kv, kv.base_k, off + i);
    s *= scale;
    if (s > m) {
      const float c = std::exp(m - s);  // 0 on the first position (m = -inf)
      l *= c;
      for (int32_t i = 0; i < hd; ++i) acc[i] *= c;
      m = s;
    }
    const float e = std::exp(s - m);
    l += e;
    for (int32_t i = 0; i < hd; ++i) acc[i] += e * load_kv(kv, kv.base_v, off + i);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int32_t i = 0; i < hd; ++i) acc[i] *= inv;
}

void attention(const float* q, int32_t n_heads, const KvLayerView& kv,
               std::span<const uint32_t> block_table, int64_t pos_begin, int64_t pos_end,
               float scale, float* out, float* /*scratch*/) {
  const int32_t group = gqa_group(n_heads, kv);
  for (int32_t h = 0; h < n_heads; ++h) {
    attend_head(q + (int64_t)h * kv.head_dim, h / group, kv, block_table, pos_begin, pos_end, scale,
                out + (int64_t)h * kv.head_dim);
  }
}

void kv_store(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
              const float* k, const float* v) {
  for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
    const int64_t off = kv_offset(kv, block_table, pos, h);
    const float* kh = k + (int64_t)h * kv.head_dim;
    const float* vh = v + (int64_t)h * kv.head_dim;
    if (kv.dtype == KvDtype::kF16) {
      for (int32_t i = 0; i < kv.head_dim; ++i) {
        static_cast<uint16_t*>(kv.base_k)[off + i] = f32_to_f16(kh[i]);
        static_cast<uint16_t*>(kv.base_v)[off + i] = f32_to_f16(vh[i]);
      }
    } else {
      std::memcpy(static_cast<float*>(kv.base_k) + off, kh, kv.head_dim * sizeof(float));
      std::memcpy(static_cast<float*>(kv.base_v) + off, vh, kv.head_dim * sizeof(float));
    }
  }
}

}  // namespace
}  // namespace ref

const KernelTable& ref_table() {
  static const KernelTable table = {
      .isa = "ref",
      .quantize_act = ref::quantize_act,
      .matmul = ref::matmul,
      .rmsnorm = ref::rmsnorm,
      .silu_mul = ref::silu_mul,
      .attention = ref::attention,
      .kv_store = ref::kv_store,
  };
  return table;
}

}  // namespace kvw::kernels
