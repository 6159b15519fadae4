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

// The format quantize_act writes for weights of `wtype`: kQ8_0, kQ8_K or kF32.
GgmlType act_type(GgmlType wtype);

// Row sizes of a matmul; CHECKs that n_in is a whole number of weight and activation blocks.
struct MatmulGeometry {
  int64_t w_row_bytes;
  int64_t x_row_bytes;
};
MatmulGeometry matmul_geometry(GgmlType wtype, int64_t n_in);

// Query heads per KV head; CHECKs n_kv_heads > 0 divides n_heads.
int32_t gqa_group(int32_t n_heads, const KvLayerView& kv);

// Per-ISA tables. The AVX2/AVX-512 ones may only be used when the CPU supports them.
const KernelTable& ref_table();
const KernelTable& avx2_table();
const KernelTable& avx512_table();

// Scalar reference pieces that tests and other tables reuse.
namespace ref {
void quantize_row_q8_0(const float* x, void* dst, int64_t n);  // n % 32 == 0
void quantize_row_q8_k(const float* x, void* dst, int64_t n);  // n % 256 == 0
}  // namespace ref

}  // namespace kvw::kernels
