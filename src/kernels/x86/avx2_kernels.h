// kernels/x86/avx2_kernels.h: entry points of the AVX2 table, shared between the AVX2 files and
// reused by the AVX-512 table for the kernels it does not specialise. Call only when the CPU has
// AVX2, FMA and F16C. Same contracts as the KernelTable fields of the same name.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels.h"
#include "kernels/x86/matmul_tile.h"

namespace kvw::kernels::avx2 {

void quantize_act(GgmlType wtype, const float* x, int64_t n_tokens, int64_t n_in, void* dst,
                  int ith, int nth);
void matmul(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
            int64_t n_tokens, float* y, int ith, int nth);
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch);
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void attention_segment(std::span<const AttnQuery> queries, int32_t n_heads, const KvLayerView& kv,
                       std::span<const uint32_t> block_table, AttnScores scores, float* ml,
                       float* scratch);
void kv_store(const KvLayerView& kv, std::span<const uint32_t> block_table, int64_t pos,
              const float* k, const float* v);

// K-quant rows [row_begin, row_end) (avx2_kquants.cc); a.nb counts 256-element super-blocks.
void matmul_rows_q4_k(const x86::MatmulArgs& a, int64_t row_begin, int64_t row_end);
void matmul_rows_q5_k(const x86::MatmulArgs& a, int64_t row_begin, int64_t row_end);
void matmul_rows_q6_k(const x86::MatmulArgs& a, int64_t row_begin, int64_t row_end);

}  // namespace kvw::kernels::avx2
