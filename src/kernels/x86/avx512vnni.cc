// kernels/x86/avx512vnni.cc: the "avx512vnni" KernelTable: the AVX-512 table with the packed GEMM
// on AVX512-VNNI's dpbusd at 256 bits (EVEX: 32 ymm registers, so wider token tiles than AVX2).
// Compiled with the AVX-512 flags plus -mavx512vnni; nothing here runs unless dispatch.cc saw
// AVX512-VNNI in CPUID.
#include "kernels/kernels_internal.h"
#include "kernels/x86/packed_tile.h"

namespace kvw::kernels {
namespace {

struct DotAvx512Vnni {
  static constexpr bool kVnni = true;
  static KVW_INLINE __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_dpbusd_epi32(acc, u8, s8);
  }
};

// 8 rows x 12 tokens: 12 float + 12 int32 accumulators and the weights: 28 of 32 registers.
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth) {
  x86::matmul_packed<DotAvx512Vnni, 12>(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
}

}  // namespace

const KernelTable& avx512vnni_table() {
  static const KernelTable table = [] {
    KernelTable t = avx512_table();
    t.isa = "avx512vnni";
    t.matmul_packed = matmul_packed;
    return t;
  }();
  return table;
}

}  // namespace kvw::kernels
