// kernels/x86/avx2vnni.cc: the "avx2vnni" KernelTable: the AVX2 table with the packed GEMM on
// AVX-VNNI's 256-bit dpbusd (u8 x s8 -> int32, no int16 saturation, one instruction per 8 rows
// x 4 elements). Compiled with -mavx2 -mfma -mf16c -mavxvnni; nothing here runs unless
// dispatch.cc saw AVX-VNNI in CPUID.
#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_kernels.h"
#include "kernels/x86/packed_tile.h"

namespace kvw::kernels {
namespace {

struct DotAvxVnni {
  static constexpr bool kVnni = true;
  static KVW_INLINE __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_dpbusd_avx_epi32(acc, u8, s8);
  }
  static KVW_INLINE __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_avx_epi32(acc, a, b);
  }
};

// 8 rows x 6 tokens: 6 float + 6 int32 accumulators, weights (Q4_0: low and high nibbles and
// the mask) and a broadcast: 16 ymm registers.
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch) {
  x86::matmul_packed<DotAvxVnni, 6, 3>(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth, scratch);
}

}  // namespace

const KernelTable& avx2vnni_table() {
  static const KernelTable table = [] {
    KernelTable t = avx2_table();
    t.isa = "avx2vnni";
    t.matmul_packed = matmul_packed;
    return t;
  }();
  return table;
}

}  // namespace kvw::kernels
