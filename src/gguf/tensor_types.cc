// gguf/tensor_types.cc: type traits and the scalar row conversions for the non-K types.
// Dequantisation follows ggml's dequantize_row_* expression by expression, so results are
// bit-identical to ggml's reference (same float operations in the same order).

#include "gguf/tensor_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "gguf/quant_internal.h"

namespace kvw {
namespace {

struct TypeEntry {
  GgmlType type;
  TypeTraits traits;
};

constexpr std::array<TypeEntry, 17> kTypes = {{
    {GgmlType::kF32, {"f32", 1, 4}},
    {GgmlType::kF16, {"f16", 1, 2}},
    {GgmlType::kQ4_0, {"q4_0", kQK4_0, sizeof(BlockQ4_0)}},
    {GgmlType::kQ4_1, {"q4_1", kQK4_1, sizeof(BlockQ4_1)}},
    {GgmlType::kQ5_0, {"q5_0", kQK5_0, sizeof(BlockQ5_0)}},
    {GgmlType::kQ5_1, {"q5_1", kQK5_1, sizeof(BlockQ5_1)}},
    {GgmlType::kQ8_0, {"q8_0", kQK8_0, sizeof(BlockQ8_0)}},
    {GgmlType::kQ2_K, {"q2_K", kQK_K, sizeof(BlockQ2_K)}},
    {GgmlType::kQ3_K, {"q3_K", kQK_K, sizeof(BlockQ3_K)}},
    {GgmlType::kQ4_K, {"q4_K", kQK_K, sizeof(BlockQ4_K)}},
    {GgmlType::kQ5_K, {"q5_K", kQK_K, sizeof(BlockQ5_K)}},
    {GgmlType::kQ6_K, {"q6_K", kQK_K, sizeof(BlockQ6_K)}},
    {GgmlType::kQ8_K, {"q8_K", kQK_K, sizeof(BlockQ8_K)}},
    {GgmlType::kIQ4_NL, {"iq4_nl", kQK4_NL, sizeof(BlockIQ4_NL)}},
    {GgmlType::kIQ4_XS, {"iq4_xs", kQK_K, sizeof(BlockIQ4_XS)}},
    {GgmlType::kBF16, {"bf16", 1, 2}},
    {GgmlType::kMXFP4, {"mxfp4", kQKMxfp4, sizeof(BlockMXFP4)}},
}};

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * kQK4_0 + j] = x0 * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = x1 * d;
    }
  }
}

// ggml's reference: the signed value of largest magnitude maps to -8, so the 16 levels
// [-8, 7] cover it exactly and the opposite side loses at most one level.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const float* xb = x + i * kQK4_0;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      // Clamp in float before the integer conversion so NaN/inf inputs stay defined.
      const float v0 = std::clamp(xb[j] * id + 8.5f, 0.0f, 15.0f);
      const float v1 = std::clamp(xb[j + kQK4_0 / 2] * id + 8.5f, 0.0f, 15.0f);
      const uint8_t q0 = std::isnan(v0) ? 8 : static_cast<uint8_t>(v0);
      const uint8_t q1 = std::isnan(v1) ? 8 : static_cast<uint8_t>(v1);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      const float v = std::clamp(std::round(xb[j] * id), -127.0f, 127.0f);
      y[i].qs[j] = std::isnan(v) ? 0 : static_cast<int8_t>(v);
    }
  }
}

}  // namespace

std::optional<GgmlType> ggml_type_from_raw(uint32_t raw) {
  for (const TypeEntry& e : kTypes) {
    if (static_cast<uint32_t>(e.type) == raw) return e.type;
  }
  return std::nullopt;
}

const TypeTraits& type_traits(GgmlType type) {
  for (const TypeEntry& e : kTypes) {
    if (e.type == type) return e.traits;
  }
  CHECK(false) << "unsupported GgmlType " << static_cast<uint32_t>(type);
  return kTypes[0].traits;  // unreachable
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  for (const TypeEntry& e : kTypes) {
    const std::string_view want = e.traits.name;
    if (want.size() != name.size()) continue;
    if (std::equal(want.begin(), want.end(), name.begin(),
                   [&](char a, char b) { return lower(a) == lower(b); })) {
      return e.type;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(GgmlType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  if (n < 0 || n % t.block_elems != 0) return std::nullopt;
  return static_cast<uint64_t>(n / t.block_elems) * static_cast<uint64_t>(t.block_bytes);
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  CHECK(row_bytes(type, n).has_value()) << type_traits(type).name << " row of " << n;
  const auto* b = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);  // rows need not be 2-byte aligned in the file
        dst[i] = type == GgmlType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case GgmlType::kQ4_0:
      return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case GgmlType::kQ8_0:
      return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case GgmlType::kQ4_1:
      return quant::dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case GgmlType::kQ5_0:
      return quant::dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case GgmlType::kQ5_1:
      return quant::dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case GgmlType::kIQ4_NL:
      return quant::dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n);
    case GgmlType::kQ2_K:
      return quant::dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, n);
    case GgmlType::kQ3_K:
      return quant::dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, n);
    case GgmlType::kIQ4_XS:
      return quant::dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n);
    case GgmlType::kMXFP4:
      return quant::dequantize_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n);
    case GgmlType::kQ4_K:
      return quant::dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case GgmlType::kQ5_K:
      return quant::dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case GgmlType::kQ6_K:
      return quant::dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case GgmlType::kQ8_K:
      return quant::dequantize_q8_k(static_cast<const BlockQ8_K*>(src), dst, n);
  }
  CHECK(false) << "unsupported GgmlType " << static_cast<uint32_t>(type);
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  CHECK(row_bytes(type, n).has_value()) << type_traits(type).name << " row of " << n;
  auto* b = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == GgmlType::kF16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(b + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kQ4_0:
      return quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case GgmlType::kQ8_0:
      return quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case GgmlType::kQ4_1:
      return quant::quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case GgmlType::kQ5_0:
      return quant::quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case GgmlType::kQ5_1:
      return quant::quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case GgmlType::kIQ4_NL:
      return quant::quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n);
    case GgmlType::kQ2_K:
      return quant::quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n);
    case GgmlType::kQ3_K:
      return quant::quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n);
    case GgmlType::kIQ4_XS:
      return quant::quantize_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n);
    case GgmlType::kMXFP4:
      return quant::quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), n);
    case GgmlType::kQ4_K:
      return quant::quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
    case GgmlType::kQ5_K:
      return quant::quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n);
    case GgmlType::kQ6_K:
      return quant::quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
    case GgmlType::kQ8_K:
      return quant::quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), n);
  }
  CHECK(false) << "unsupported GgmlType " << static_cast<uint32_t>(type);
}

}  // namespace kvw
