// kernels/dispatch.cc: chooses the KernelTable once from CPUID (AVX-512 > AVX2 > ref, each with
// VNNI first), with the KVW_ISA=ref|avx2|avx2vnni|avx512|avx512vnni environment override for tests
// and benchmarks, and holds the small ISA-independent helpers declared in kernels_internal.h.
// Thread-safe (static initialisation).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {

RowRange split_range(int64_t n, int ith, int nth, int64_t align) {
  CHECK(nth > 0 && ith >= 0 && ith < nth) << "split_range: ith " << ith << " nth " << nth;
  const int64_t per_thread = (n + nth - 1) / nth;
  const int64_t chunk = (per_thread + align - 1) / align * align;
  const int64_t begin = std::min(n, chunk * ith);
  return {begin, std::min(n, begin + chunk)};
}

GgmlType act_type(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:  // Q4_1/Q5_1: their min term reads the block sums (ActBlockExtra)
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kIQ4_NL:
    case GgmlType::kQ8_0:
    case GgmlType::kMXFP4:  // int8 dot, packed.cc
      return GgmlType::kQ8_0;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return GgmlType::kQ8_K;
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
      return GgmlType::kF32;
    case GgmlType::kQ8_K:
      break;
  }
  CHECK(false) << "no activation format for weight type " << (uint32_t)wtype;
  return GgmlType::kF32;
}

int64_t act_extras_offset(int64_t nb) {
  return (nb * (int64_t)sizeof(BlockQ8_0) + 3) / 4 * 4;
}

int64_t act_row_bytes(GgmlType wtype, int64_t n_in) {
  switch (act_type(wtype)) {
    case GgmlType::kQ8_0:
      CHECK(n_in % kQK8_0 == 0) << "n_in " << n_in;
      return act_extras_offset(n_in / kQK8_0) + n_in / kQK8_0 * (int64_t)sizeof(ActBlockExtra);
    case GgmlType::kQ8_K:
      CHECK(n_in % kQK_K == 0) << "n_in " << n_in;
      return n_in / kQK_K * (int64_t)sizeof(BlockQ8_K);
    default:
      return n_in * (int64_t)sizeof(float);
  }
}

MatmulGeometry matmul_geometry(GgmlType wtype, int64_t n_in) {
  const std::optional<uint64_t> w_row_bytes = row_bytes(wtype, n_in);
  CHECK(wtype != GgmlType::kQ8_K && w_row_bytes.has_value())
      << "matmul: weight type " << (uint32_t)wtype << " with n_in " << n_in;
  return {(int64_t)*w_row_bytes, act_row_bytes(wtype, n_in)};
}

int32_t gqa_group(int32_t n_heads, const KvLayerView& kv) {
  CHECK(kv.n_kv_heads > 0 && n_heads % kv.n_kv_heads == 0 && kv.head_dim > 0)
      << "attention: n_heads " << n_heads << " n_kv_heads " << kv.n_kv_heads << " head_dim "
      << kv.head_dim;
  return n_heads / kv.n_kv_heads;
}

// A step's chunks' K (transposed) and V rows decoded to f32, one decoded row, and a chunk of
// softmax weights.
int64_t attention_segment_scratch_floats(int32_t head_dim) {
  return (2 * kAttnStepChunks * kAttnChunk + 1) * (int64_t)head_dim + kAttnChunk;
}

namespace {

enum class Isa { kRef, kAvx2, kAvx2Vnni, kAvx512, kAvx512Vnni };
// Worst to best: choose_table() takes the last one the CPU supports.
constexpr Isa kAllIsas[] = {Isa::kRef, Isa::kAvx2, Isa::kAvx2Vnni, Isa::kAvx512, Isa::kAvx512Vnni};

// Names match KernelTable::isa. Looked up here rather than through the tables: code in the
// AVX-512 translation unit must not run at all on a CPU without AVX-512.
const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2Vnni:
      return "avx2vnni";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kRef:
      break;
  }
  return "ref";
}

bool cpu_supports(Isa isa) {
#if defined(KVW_HAVE_X86)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  switch (isa) {
    case Isa::kRef:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx2Vnni:
      return avx2 && __builtin_cpu_supports("avxvnni");
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx512Vnni:
      return avx512 && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::kRef;
#endif
}

const KernelTable& table_for(Isa isa) {
#if defined(KVW_HAVE_X86)
  switch (isa) {
    case Isa::kAvx512Vnni:
      return avx512vnni_table();
    case Isa::kAvx512:
      return avx512_table();
    case Isa::kAvx2Vnni:
      return avx2vnni_table();
    case Isa::kAvx2:
      return avx2_table();
    case Isa::kRef:
      break;
  }
#endif
  (void)isa;
  return ref_table();
}

const KernelTable& choose_table() {
  Isa best = Isa::kRef;
  for (Isa isa : kAllIsas) {
    if (cpu_supports(isa)) best = isa;
  }
  // The one environment variable kernels read: benchmarks and tests pin an ISA with it.
  if (const char* want = std::getenv("KVW_ISA"); want != nullptr && *want != '\0') {
    for (Isa isa : kAllIsas) {
      if (std::strcmp(want, isa_name(isa)) != 0) continue;
      if (cpu_supports(isa)) return table_for(isa);
      LOG(WARN, kernels) << "KVW_ISA=" << want << " not supported by this CPU; using "
                         << isa_name(best);
      return table_for(best);
    }
    LOG(WARN, kernels) << "unknown KVW_ISA=" << want << "; using " << isa_name(best);
  }
  return table_for(best);
}

}  // namespace

const KernelTable& kernels() {
  static const KernelTable& table = choose_table();
  return table;
}

const KernelTable& kernels_ref() {
  return ref_table();
}

bool attention_bf16_dot_supported(const KernelTable& table) {
#if defined(KVW_HAVE_X86)
  // The AVX-512 tables' attention (x86/attention_avx512.cc) is the one that implements it; its
  // table is only touched once the CPU is known to run it.
  return cpu_supports(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16") &&
         table.attention_segment == avx512_table().attention_segment;
#else
  (void)table;
  return false;
#endif
}

std::span<const KernelTable* const> available_kernel_tables() {
  static const std::vector<const KernelTable*> tables = [] {
    std::vector<const KernelTable*> out;
    for (Isa isa : kAllIsas) {
      if (cpu_supports(isa)) out.push_back(&table_for(isa));
    }
    return out;
  }();
  return tables;
}

}  // namespace kvw::kernels
