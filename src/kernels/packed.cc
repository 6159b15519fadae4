// kernels/packed.cc: the load-time packed layout of the int8-dot types, Q8_0 / Q4_0 / Q4_1 /
// Q5_0 / Q5_1 / IQ4_NL / MXFP4 (float types: packed_float.cc, K-quants: packed_kquants.cc), for
// prefill-speed GEMM, the packer, and the scalar matmul_packed every SIMD table reproduces bit
// for bit (x86/packed_tile.h, x86/avx512vnni.cc).
//
// Layout of an n_rows x n_in matrix, nb = n_in / 32 blocks per row, same bytes as GGUF:
//
//   [group 0][group 1] ... [group n_rows/8 - 1][the n_rows % 8 last rows, GGUF layout]
//   group g (rows 8g .. 8g+7), 8 x row_bytes:
//     scales [nb][8 rows] fp16 d                                         16 bytes per block
//            Q4_1 / Q5_1: [nb][d of the 8 rows, then their m] fp16      32 bytes per block
//            MXFP4: [nb][8 rows] E8M0 exponent e                         8 bytes per block
//     quants [nb][steps][8 rows][4] uint8, block b's 32 elements in 4-byte steps:
//       Q8_0: 8 steps, byte k of step s = q[r][4s + k] + 128            256 bytes per block
//       Q4_0: 4 steps, byte k of step s = GGUF qs[r][4s + k]            128 bytes per block
//             (low nibble: element 4s + k, high nibble: element 16 + 4s + k; q = nibble - 8)
//       IQ4_NL: as Q4_0, q = kIq4NlValues[nibble], looked up as kIq4NlValues + 128 (or signed
//             where no VNNI: |q| x sign(x, q) as Q8_0)
//       MXFP4: as Q4_0, q = kMxfp4Values[nibble] (twice the E2M1 values), looked up + 12
//       Q5_0: 32 fifth-bit bytes [8 rows][4], then the nibbles as Q4_0   160 bytes per block
//             (fifth-bit byte k of row r: bit s = element 4s + k's, bit 4 + s = element
//             16 + 4s + k's, so a step's fifth bits are one 16-bit shift and a mask away;
//             q = (nibble | fifth << 4) - 16)
//       Q4_1 / Q5_1: as Q4_0 / Q5_0 with no offset (x = d q + m, q = the nibble or 5-bit value)
//
// One 256-bit load of a step holds 4 consecutive weights of each of the 8 rows, which meet a
// token's 4 activation bytes broadcast to every lane: one multiply-add instruction does 8 rows x
// 4 elements, and the 8 lanes of the float accumulator are the 8 rows (no horizontal sum). The
// scales of all blocks come first so that, for an even nb, every quant load is 32-byte aligned
// (GGUF tensors are) and never splits a cache line. Weights are unsigned (q + 128, the raw
// nibble, the 5-bit value, the IQ4_NL level + 128, the MXFP4 level + 12) as VNNI's u8 x s8
// dpbusd needs; the offset (128, 8, 16, 128, 12; none for Q4_1 / Q5_1) is removed exactly with
// the activation block sum: isum = sum(w_u * x) - off * sum(x).
//
// Arithmetic per (row, token): acc = 0; for b in order: acc = fma(float(isum_b), d_w * d_x, acc)
// with d_w * d_x one float multiply (MXFP4: d_w = 2^(e - 128), ggml's E8M0 half); Q4_1 / Q5_1
// then add their min term as llama.cpp's Q4_1 x Q8_1 does (m x the activation block's sum),
// acc = fma(-m / 128, d_x * neg128, acc) (block_fma). isum_b is exact, so every table, tile
// shape, token count and thread split produces the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace {

bool packable_type(GgmlType wtype) {
  return wtype == GgmlType::kQ8_0 || wtype == GgmlType::kQ4_0 || wtype == GgmlType::kQ5_0 ||
         wtype == GgmlType::kIQ4_NL || wtype == GgmlType::kMXFP4 || has_min_scale(wtype);
}

bool has_fifth_bit(GgmlType wtype) {
  return wtype == GgmlType::kQ5_0 || wtype == GgmlType::kQ5_1;
}

int64_t gguf_block_bytes(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ8_0:
      return sizeof(BlockQ8_0);
    case GgmlType::kIQ4_NL:
      return sizeof(BlockIQ4_NL);
    case GgmlType::kQ4_1:
      return sizeof(BlockQ4_1);
    case GgmlType::kQ5_0:
      return sizeof(BlockQ5_0);
    case GgmlType::kQ5_1:
      return sizeof(BlockQ5_1);
    case GgmlType::kMXFP4:
      return sizeof(BlockMXFP4);
    default:
      return sizeof(BlockQ4_0);
  }
}

// Where a GGUF block's quant bytes (qs) and fifth bits (qh) start: after d (and m; MXFP4: e).
int64_t gguf_qs_offset(GgmlType wtype) {
  if (wtype == GgmlType::kMXFP4) return 1;
  const int64_t scales = has_min_scale(wtype) ? 4 : 2;
  return has_fifth_bit(wtype) ? scales + 4 : scales;
}
int64_t gguf_qh_offset(GgmlType wtype) {
  return has_min_scale(wtype) ? 4 : 2;
}

uint32_t fifth_bits(GgmlType wtype, const uint8_t* block) {
  uint32_t qh;
  std::memcpy(&qh, block + gguf_qh_offset(wtype), 4);
  return qh;
}

// Element j of block b of GGUF row `row` as its unsigned stored value (offset: correction()).
int unsigned_quant(GgmlType wtype, const uint8_t* row, int64_t b, int j) {
  const uint8_t* blk = row + b * gguf_block_bytes(wtype);
  if (wtype == GgmlType::kQ8_0) return reinterpret_cast<const BlockQ8_0*>(blk)->qs[j] + 128;
  const uint8_t q = blk[gguf_qs_offset(wtype) + j % 16];
  const int nibble = j < 16 ? (q & 0xF) : (q >> 4);
  if (wtype == GgmlType::kIQ4_NL) return kIq4NlValues[nibble] + 128;
  if (wtype == GgmlType::kMXFP4) return kMxfp4Values[nibble] + 12;
  if (!has_fifth_bit(wtype)) return nibble;
  return nibble | (int)((fifth_bits(wtype, blk) >> j) & 1) << 4;
}

// -offset x sum(x) for the block's activations: exact, as the SIMD tables compute it. Q4_1 and
// Q5_1 store q unsigned with no offset; their min takes the sum in min_term instead.
int32_t correction(GgmlType wtype, const ActBlockExtra& ex) {
  switch (wtype) {
    case GgmlType::kQ8_0:
    case GgmlType::kIQ4_NL:
      return ex.neg128;
    case GgmlType::kQ4_0:
      return ex.neg128 >> 4;
    case GgmlType::kQ5_0:
      return ex.neg128 >> 3;
    case GgmlType::kMXFP4:  // -12 x sum
      return 3 * (ex.neg128 >> 5);
    default:
      return 0;
  }
}

// Bytes of one block's quants in a group (the fifth-bit plane of Q5_0/Q5_1 first).
int64_t group_quant_bytes(GgmlType wtype) {
  if (wtype == GgmlType::kQ8_0) return 256;
  return has_fifth_bit(wtype) ? 32 + 128 : 128;
}

// One group of kPackRows GGUF rows (src) into the packed layout (dst); they must not overlap.
void pack_group(GgmlType wtype, const PackedGeometry& g, const uint8_t* src, uint8_t* dst) {
  uint8_t* scales = dst;
  uint8_t* quants = dst + g.nb * g.scale_bytes;
  const int64_t block_bytes = gguf_block_bytes(wtype);
  const int64_t qs_offset = gguf_qs_offset(wtype);
  for (int64_t r = 0; r < kPackRows; ++r) {
    const uint8_t* row = src + r * g.row_bytes;
    for (int64_t b = 0; b < g.nb; ++b) {
      const uint8_t* blk = row + b * block_bytes;
      // Every block type starts with its scale: fp16 (Q4_1/Q5_1: then the fp16 min), or
      // MXFP4's E8M0 byte.
      uint8_t* sc = scales + b * g.scale_bytes;
      if (wtype == GgmlType::kMXFP4) {
        sc[r] = blk[0];
      } else {
        std::memcpy(sc + 2 * r, blk, 2);
      }
      if (has_min_scale(wtype)) std::memcpy(sc + 2 * kPackRows + 2 * r, blk + 2, 2);
      uint8_t* q = quants + b * g.quant_bytes;
      if (wtype == GgmlType::kQ8_0) {
        for (int j = 0; j < 32; ++j) {
          q[(j / 4) * 32 + r * 4 + j % 4] = (uint8_t)unsigned_quant(wtype, row, b, j);
        }
        continue;
      }
      if (has_fifth_bit(wtype)) {
        const uint32_t qh = fifth_bits(wtype, blk);
        for (int k = 0; k < 4; ++k) {
          uint8_t fifth = 0;
          for (int s = 0; s < 4; ++s) {
            fifth |= ((qh >> (4 * s + k)) & 1) << s;
            fifth |= ((qh >> (16 + 4 * s + k)) & 1) << (4 + s);
          }
          q[r * 4 + k] = fifth;
        }
        q += 32;
      }
      for (int j = 0; j < 16; ++j) q[(j / 4) * 32 + r * 4 + j % 4] = blk[qs_offset + j];
    }
  }
}

// Element j of block b of packed row r (within its group) as an unsigned stored value.
int packed_quant(GgmlType wtype, const PackedGeometry& g, const uint8_t* group, int64_t r,
                 int64_t b, int j) {
  const uint8_t* q = group + g.nb * g.scale_bytes + b * g.quant_bytes;
  if (wtype == GgmlType::kQ8_0) return q[(j / 4) * 32 + r * 4 + j % 4];
  const int fifth_plane = has_fifth_bit(wtype) ? 32 : 0;
  const uint8_t byte = q[fifth_plane + ((j % 16) / 4) * 32 + r * 4 + j % 4];
  const int nibble = j < 16 ? (byte & 0xF) : (byte >> 4);
  if (wtype == GgmlType::kIQ4_NL) return kIq4NlValues[nibble] + 128;
  if (wtype == GgmlType::kMXFP4) return kMxfp4Values[nibble] + 12;
  if (!has_fifth_bit(wtype)) return nibble;
  const int bit = (j % 16) / 4 + (j < 16 ? 0 : 4);  // the step, plus 4 for the high half
  return nibble | ((q[r * 4 + j % 4] >> bit) & 1) << 4;
}

// One block's contribution, the arithmetic every table reproduces: the exact int32 sum of
// unsigned quants x activations plus the offset correction, scaled by d_w x d_x; then for
// Q4_1/Q5_1 the min term m x d_x x sum(x), written as (-m / 128) x (d_x x neg128) so that the
// SIMD tables read it straight from ActBlockExtra (both factors scale exactly by powers of 2).
// scale: the block's first byte(s) (GGUF) or row r's in a packed group's scales of the block.
float block_fma(GgmlType wtype, int32_t dot, const uint8_t* scale, int64_t stride,
                const ActBlockExtra& ex, float acc) {
  float dw;
  if (wtype == GgmlType::kMXFP4) {
    dw = mxfp4_block_scale(scale[0]);
  } else {
    uint16_t h;
    std::memcpy(&h, scale, 2);
    dw = f16_to_f32(h);
  }
  acc = std::fma((float)(dot + correction(wtype, ex)), dw * ex.d, acc);
  if (has_min_scale(wtype)) {
    uint16_t m;
    std::memcpy(&m, scale + stride, 2);
    acc = std::fma(f16_to_f32(m) * -0x1p-7f, (float)ex.neg128 * ex.d, acc);
  }
  return acc;
}

const ActBlockExtra* act_extras(const uint8_t* x_row, int64_t nb) {
  return reinterpret_cast<const ActBlockExtra*>(x_row + act_extras_offset(nb));
}

}  // namespace

float mxfp4_block_scale(uint8_t e) {
  // ggml's GGML_E8M0_TO_FP32_HALF: exponents 0 and 1 are denormals.
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

void write_act_extras(void* q8_0_row, int64_t nb) {
  const auto* blocks = static_cast<const BlockQ8_0*>(q8_0_row);
  auto* extras =
      reinterpret_cast<ActBlockExtra*>(static_cast<uint8_t*>(q8_0_row) + act_extras_offset(nb));
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum = 0;
    for (int j = 0; j < kQK8_0; ++j) sum += blocks[b].qs[j];
    extras[b] = {f16_to_f32(blocks[b].d), -128 * sum};
  }
}

bool packs(GgmlType wtype, int64_t n_rows, int64_t n_in) {
  if (is_float_type(wtype)) return n_rows >= kFloatPackRows && n_in > 0;
  if (is_kquant_type(wtype)) return n_rows >= kPackRows && n_in > 0 && n_in % kQK_K == 0;
  return packable_type(wtype) && n_rows >= kPackRows && n_in > 0 && n_in % kQK8_0 == 0;
}

int64_t int8_token_block(int64_t x_row_bytes, int C) {
  const int64_t block = (256 * 1024) / x_row_bytes;
  return block < C ? C : block / C * C;
}

int64_t float_token_block(int64_t n_in, int C) {
  // 1 MiB: at 512 KiB, n_in 5632 made 12-token blocks that re-read the thread's weights 43
  // times per 512-token chunk (packed_float_driver.h).
  const int64_t block = (1024 * 1024) / (n_in * (int64_t)sizeof(float));
  return block < 4 * C ? 4 * C : block / C * C;
}

int64_t packed_scratch_bytes(GgmlType wtype, int64_t n_in, int64_t n_tokens) {
  if (n_tokens < 2 || n_in <= 0) return 0;
  // Tiles of C tokens covering one block, or all the tokens when there are fewer.
  auto block_copy = [&](int64_t block, int C, int64_t tile_bytes) {
    const int64_t tokens = std::min(n_tokens, block);
    return (tokens + C - 1) / C * tile_bytes;
  };
  if (is_float_type(wtype)) {
    int64_t most = 0;
    for (int C : {kFloatTileTokensAvx2, kFloatTileTokensAvx512}) {
      most = std::max(most,
                      block_copy(float_token_block(n_in, C), C, C * n_in * (int64_t)sizeof(float)));
    }
    return most;
  }
  if (!packable_type(wtype) || n_in % kQK8_0 != 0) return 0;  // K-quants read rows in place
  const int C = kInt8PairTileTokens;
  return block_copy(int8_token_block(act_row_bytes(wtype, n_in), C), C,
                    n_in / kQK8_0 * kInt8PairTileBlockBytes);
}

PackedGeometry packed_geometry(GgmlType wtype, int64_t n_rows, int64_t n_in) {
  CHECK(packs(wtype, n_rows, n_in))
      << "packed matmul: weight type " << (uint32_t)wtype << " rows " << n_rows << " n_in " << n_in;
  PackedGeometry g;
  g.nb = n_in / kQK8_0;
  g.row_bytes = (int64_t)*row_bytes(wtype, n_in);
  g.group_bytes = kPackRows * g.row_bytes;
  g.scale_bytes =
      wtype == GgmlType::kMXFP4 ? kPackRows : (has_min_scale(wtype) ? 4 : 2) * kPackRows;
  g.quant_bytes = group_quant_bytes(wtype);
  g.n_groups = n_rows / kPackRows;
  g.x_row_bytes = act_row_bytes(wtype, n_in);
  g.extras_offset = act_extras_offset(g.nb);
  DCHECK(g.nb * (g.scale_bytes + g.quant_bytes) == g.group_bytes);
  return g;
}

void pack(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in) {
  if (is_float_type(wtype)) return pack_float(wtype, src, dst, n_rows, n_in);
  if (is_kquant_type(wtype)) return pack_kquant(wtype, src, dst, n_rows, n_in);
  const PackedGeometry g = packed_geometry(wtype, n_rows, n_in);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  // In place (src == dst) each group is copied out first: one group of scratch.
  std::vector<uint8_t> scratch(g.group_bytes);
  for (int64_t i = 0; i < g.n_groups; ++i) {
    std::memcpy(scratch.data(), s + i * g.group_bytes, g.group_bytes);
    pack_group(wtype, g, scratch.data(), d + i * g.group_bytes);
  }
  const int64_t tail = g.n_groups * g.group_bytes;
  if (s != d) std::memcpy(d + tail, s + tail, (n_rows % kPackRows) * g.row_bytes);
}

void matmul_gguf_rows(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                      int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end) {
  CHECK(packable_type(wtype) && n_in % kQK8_0 == 0)
      << "int8 matmul: weight type " << (uint32_t)wtype << " n_in " << n_in;
  const int64_t nb = n_in / kQK8_0;
  const int64_t block_bytes = gguf_block_bytes(wtype);
  const int64_t x_row_bytes = act_row_bytes(wtype, n_in);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w8 + r * nb * block_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xr = x8 + t * x_row_bytes;
      const ActBlockExtra* ex = act_extras(xr, nb);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* xs = reinterpret_cast<const BlockQ8_0*>(xr)[b].qs;
        int32_t dot = 0;
        for (int j = 0; j < kQK8_0; ++j) dot += unsigned_quant(wtype, row, b, j) * xs[j];
        acc = block_fma(wtype, dot, row + b * block_bytes, 2, ex[b], acc);
      }
      y[t * n_rows + r] = acc;
    }
  }
}

void matmul_gguf(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                 int64_t n_tokens, float* y, int ith, int nth) {
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  matmul_gguf_rows(wtype, w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
}

void matmul_packed_tail(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                        int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end) {
  const int64_t full = n_rows / kPackRows * kPackRows;  // past the groups: GGUF layout
  matmul_gguf_rows(wtype, w, n_rows, n_in, xq, n_tokens, y, std::max(row_begin, full), row_end);
}

namespace ref {

void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* /*scratch*/) {
  if (is_float_type(wtype)) {
    return matmul_packed_float(wtype, w, n_rows, n_in, static_cast<const float*>(xq), n_tokens, y,
                               ith, nth);
  }
  if (is_kquant_type(wtype)) {
    return matmul_packed_kquant(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  }
  const PackedGeometry g = packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  const int64_t full = g.n_groups * kPackRows;
  for (int64_t r = rows.begin; r < std::min(rows.end, full); ++r) {
    const uint8_t* group = w8 + (r / kPackRows) * g.group_bytes;
    const int64_t rr = r % kPackRows;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xr = x8 + t * g.x_row_bytes;
      const ActBlockExtra* ex = act_extras(xr, g.nb);
      float acc = 0.0f;
      for (int64_t b = 0; b < g.nb; ++b) {
        const int8_t* xs = reinterpret_cast<const BlockQ8_0*>(xr)[b].qs;
        int32_t dot = 0;
        for (int j = 0; j < kQK8_0; ++j) dot += packed_quant(wtype, g, group, rr, b, j) * xs[j];
        const uint8_t* sc = group + b * g.scale_bytes;
        const int64_t width = wtype == GgmlType::kMXFP4 ? 1 : 2;  // bytes of one row's scale
        acc = block_fma(wtype, dot, sc + width * rr, 2 * kPackRows, ex[b], acc);
      }
      y[t * n_rows + r] = acc;
    }
  }
  if (rows.end > full)
    matmul_packed_tail(wtype, w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
}

}  // namespace ref
}  // namespace kvw::kernels
