// kernels/x86/avx2_ops.cc: AVX2 rmsnorm, silu_mul, paged attention and KV store, and the "avx2"
// KernelTable. Compiled with -mavx2 -mfma -mf16c; used only after dispatch.cc checked CPUID.
// Attention vectorises over head_dim and walks the query heads of one KV head together, so each
// K/V row is read (and, for F16, converted) once per group; each head still sees its positions
// in order with its own online-softmax state, so the result per head is the same as alone.
#include <cstring>

#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_kernels.h"
#include "kernels/x86/avx2_util.h"

namespace kvw::kernels::avx2 {
namespace {

constexpr int kMaxGroup = 16;  // query heads sharing a K/V row handled per pass

KVW_INLINE float dot(const float* a, const float* b, int32_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = x86::hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y = y * c + e * v.
KVW_INLINE void scale_add(float* y, float c, float e, const float* v, int32_t n) {
  const __m256 vc = _mm256_set1_ps(c);
  const __m256 ve = _mm256_set1_ps(e);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 yi = _mm256_mul_ps(_mm256_loadu_ps(y + i), vc);
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(ve, _mm256_loadu_ps(v + i), yi));
  }
  for (; i < n; ++i) y[i] = y[i] * c + e * v[i];
}

KVW_INLINE void scale_row(float* y, float c, int32_t n) {
  const __m256 vc = _mm256_set1_ps(c);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vc));
  for (; i < n; ++i) y[i] *= c;
}

void f16_to_f32_row(const uint16_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, x86::load_f16x8(src + i));
  for (; i < n; ++i) dst[i] = x86::f16_scalar(src[i]);
}

void f32_to_f16_row(const float* src, uint16_t* dst, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

// Byte offset of row (kv_head, slot of pos) of element size `elem` from a base pointer.
int64_t kv_offset(const KvLayerView& kv, const uint32_t* block_table, int64_t pos, int32_t kv_head,
                  int64_t elem) {
  const int64_t block = block_table[pos / kv.block_size];
  return block * kv.block_stride +
         ((int64_t)kv_head * kv.block_size + pos % kv.block_size) * kv.head_dim * elem;
}

// Query heads [h0, h0 + ng) of KV head kv_head; acc rows are the output rows.
void attend_group(const float* q, int32_t h0, int ng, int32_t kv_head, const KvLayerView& kv,
                  const uint32_t* block_table, int64_t pos_begin, int64_t pos_end, float scale,
                  float* out, float* scratch) {
  const int32_t hd = kv.head_dim;
  float m[kMaxGroup];
  float l[kMaxGroup];
  for (int g = 0; g < ng; ++g) {
    m[g] = -__builtin_inff();
    l[g] = 0.0f;
    std::memset(out + (int64_t)(h0 + g) * hd, 0, hd * sizeof(float));
  }
  for (int64_t p = pos_begin; p < pos_end; ++p) {
    const float* k = scratch;
    const float* v = scratch + hd;
    if (kv.dtype == KvDtype::kF16) {
      const int64_t off = kv_offset(kv, block_table, p, kv_head, 2);
      f16_to_f32_row(reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(kv.k) + off),
                     scratch, hd);
      f16_to_f32_row(reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(kv.v) + off),
                     scratch + hd, hd);
    } else if (kv.dtype == KvDtype::kF32) {
      const int64_t off = kv_offset(kv, block_table, p, kv_head, 4);
      k = reinterpret_cast<const float*>(static_cast<const uint8_t*>(kv.k) + off);
      v = reinterpret_cast<const float*>(static_cast<const uint8_t*>(kv.v) + off);
    } else {  // bf16, int8: decoded by the shared row codec
      const std::span<const uint32_t> table(block_table,
                                            (size_t)(pos_end + kv.block_size - 1) / kv.block_size);
      kv_load_row(kv, false, table, p, kv_head, scratch);
      kv_load_row(kv, true, table, p, kv_head, scratch + hd);
    }
    for (int g = 0; g < ng; ++g) {
      const float s = dot(q + (int64_t)(h0 + g) * hd, k, hd) * scale;
      float c = 1.0f;
      if (s > m[g]) {
        c = __builtin_expf(m[g] - s);  // 0 at the first position (m = -inf)
        l[g] *= c;
        m[g] = s;
      }
      const float e = __builtin_expf(s - m[g]);
      l[g] += e;
      scale_add(out + (int64_t)(h0 + g) * hd, c, e, v, hd);
    }
  }
  for (int g = 0; g < ng; ++g) {
    const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
    scale_row(out + (int64_t)(h0 + g) * hd, inv, hd);
  }
}

}  // namespace

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * j);
      acc[j] = _mm256_fmadd_ps(v, v, acc[j]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc[0] = _mm256_fmadd_ps(v, v, acc[0]);
  }
  float sum =
      x86::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(sum / (float)n + eps)));
  const __m256 vs = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = x86::exp256(_mm256_xor_ps(g, sign));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + __builtin_expf(-gate[i])) * up[i];
}

void attention(const float* q, int32_t n_heads, const KvLayerView& kv,
               std::span<const uint32_t> block_table, int64_t pos_begin, int64_t pos_end,
               float scale, float* out, float* scratch) {
  const int32_t group = gqa_group(n_heads, kv);
  for (int32_t kv_head = 0; kv_head < kv.n_kv_heads; ++kv_head) {
    for (int32_t g0 = 0; g0 < group; g0 += kMaxGroup) {
      const int ng = group - g0 < kMaxGroup ? group - g0 : kMaxGroup;
      attend_group(q, kv_head * group + g0, ng, kv_head, kv, block_table.data(), pos_begin, pos_end,
                   scale, out, scratch);
    }
  }
}

void kv_store(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
              const float* k, const float* v) {
  const int32_t hd = kv.head_dim;
  for (int32_t h = 0; h < kv.n_kv_heads; ++h) {
    if (kv.dtype == KvDtype::kF16) {
      const int64_t off = kv_offset(kv, block_table.data(), pos, h, 2);
      f32_to_f16_row(k + (int64_t)h * hd,
                     reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(kv.k) + off), hd);
      f32_to_f16_row(v + (int64_t)h * hd,
                     reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(kv.v) + off), hd);
    } else {
      kv_store_row(kv, false, block_table, pos, h, k + (int64_t)h * hd);
      kv_store_row(kv, true, block_table, pos, h, v + (int64_t)h * hd);
    }
  }
}

}  // namespace kvw::kernels::avx2

namespace kvw::kernels {

const KernelTable& avx2_table() {
  static const KernelTable table = {
      .isa = "avx2",
      .quantize_act = avx2::quantize_act,
      .matmul = avx2::matmul,
      .packs = packs,
      .pack = pack,
      .matmul_packed = avx2::matmul_packed,
      .rmsnorm = avx2::rmsnorm,
      .silu_mul = avx2::silu_mul,
      .attention = avx2::attention,
      .kv_store = avx2::kv_store,
  };
  return table;
}

}  // namespace kvw::kernels
