// kernels/packed_kquants.cc: the load-time packed layout of Q4_K / Q5_K / Q6_K matrices, the
// packer, and the scalar matmul_packed every SIMD table reproduces bit for bit (Q8_0/Q4_0:
// packed.cc; float types: packed_float.cc).
//
// A group is 8 rows (kPackRows), stored super-block by super-block; each super-block of a group
// (8 x the GGUF block bytes, so the matrix keeps its size) holds, for the 256 elements e of each
// row r, with chunk c = e / 64, half h = (e % 64) / 32, step s = (e % 32) / 4, k = e % 4:
//
//   Q4_K (1152 B)  d[8] fp16 | dmin[8] fp16 | scale lows [8 sub-blocks][8 rows]:
//                  (sc & 15) | (m & 15) << 4 | scale highs [4][8 rows]: sub-blocks j and j + 4's
//                  top 2 bits at bits (0: sc_j, 2: m_j, 4: sc_j+4, 6: m_j+4) | quants
//   Q5_K (1408 B)  as Q4_K, then fifth bits [c][h][8 rows][4 k]: bit s | quants
//   Q6_K (1680 B)  d[8] fp16 | scales [16 groups][8 rows] int8 | quants | high 2 bits
//                  [c][2h + s / 4][8 rows][4 k]: bits 2 (s % 4) .. 2 (s % 4) + 1
//   quants         [c][s][8 rows][4 k] bytes: low nibble = element (c, h 0, s, k)'s low 4 bits,
//                  high nibble = element (c, h 1, s, k)'s (1024 B)
//
// One 256-bit load of a step is 4 elements of each of the 8 rows (as the Q4_0 layout), which meet
// a token's 4 activation bytes broadcast to every lane; the scales of a super-block unpack into
// one vector per sub-block with the 8 rows in its lanes.
//
// Arithmetic per (row, token), super-blocks b in order from acc = 0 (all sums exact in int32):
//   Q4_K/Q5_K  isum = sum_j sc_j x sum_{e in sub-block j} q_e x_e
//              imin = sum_j m_j x (bsums[2j] + bsums[2j + 1])
//              acc = fma(float(isum), d_w * d_x, acc); acc = fma(float(-imin), dmin_w * d_x, acc)
//   Q6_K       isum = sum_g sc_g x (sum_{e in group g} q_e x_e - 32 x bsums[g])
//              acc = fma(float(isum), d_w * d_x, acc)
// so every table, tile shape, token count and thread split gives the same bits.
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

// One row's super-block, decoded: q are the unsigned stored values (0..15, 0..31, 0..63).
struct KBlock {
  uint16_t d = 0;
  uint16_t dmin = 0;
  uint8_t sc[8] = {};   // Q4_K/Q5_K sub-block scales
  uint8_t m[8] = {};    // Q4_K/Q5_K sub-block mins
  int8_t sc6[16] = {};  // Q6_K group scales
  uint8_t q[kQK_K] = {};
};

int64_t gguf_block_bytes(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_K:
      return sizeof(BlockQ4_K);
    case GgmlType::kQ5_K:
      return sizeof(BlockQ5_K);
    default:
      return sizeof(BlockQ6_K);
  }
}

KBlock decode_gguf(GgmlType wtype, const uint8_t* blk) {
  KBlock k;
  if (wtype == GgmlType::kQ6_K) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
    k.d = b->d;
    std::memcpy(k.sc6, b->scales, 16);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, l = e % 32, quarter = (e % 128) / 32;
      const uint8_t lo = b->ql[64 * h + l + 32 * (quarter % 2)];
      k.q[e] =
          ((lo >> (4 * (quarter / 2))) & 0xF) | (((b->qh[32 * h + l] >> (2 * quarter)) & 3) << 4);
    }
    return k;
  }
  // Q4_K and Q5_K share d, dmin, scales and the nibble order; Q5_K adds qh.
  const auto* b = reinterpret_cast<const BlockQ4_K*>(blk);
  k.d = b->d;
  k.dmin = b->dmin;
  ref::unpack_scale_min_k4(b->scales, k.sc, k.m);
  const uint8_t* qs =
      wtype == GgmlType::kQ5_K ? reinterpret_cast<const BlockQ5_K*>(blk)->qs : b->qs;
  for (int e = 0; e < kQK_K; ++e) {
    const int j = e / 32, l = e % 32;
    k.q[e] = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
    if (wtype == GgmlType::kQ5_K) {
      k.q[e] |= ((reinterpret_cast<const BlockQ5_K*>(blk)->qh[l] >> j) & 1) << 4;
    }
  }
  return k;
}

using kq::kD, kq::kDmin, kq::kScLow, kq::kScHigh, kq::kQ4Quants, kq::kQ5Fifth, kq::kQ5Quants,
    kq::kQ6Scales, kq::kQ6Quants, kq::kQ6High;

int64_t quants_offset(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_K:
      return kQ4Quants;
    case GgmlType::kQ5_K:
      return kQ5Quants;
    default:
      return kQ6Quants;
  }
}

// Positions of element e's bits inside a packed super-block, for row r.
struct ElemPos {
  int64_t quant;  // byte of its low 4 bits; nibble `high_nibble`
  bool high_nibble;
  int64_t fifth;  // Q5_K: byte of its fifth bit, bit `s`
  int64_t high2;  // Q6_K: byte of its top 2 bits, at bit 2 (s % 4)
  int s;
};

ElemPos elem_pos(GgmlType wtype, int64_t r, int e) {
  const int c = e / 64, h = (e % 64) / 32, s = (e % 32) / 4, k = e % 4;
  ElemPos p;
  p.quant = quants_offset(wtype) + c * 256 + s * 32 + r * 4 + k;
  p.high_nibble = h == 1;
  p.fifth = kQ5Fifth + c * 64 + h * 32 + r * 4 + k;
  p.high2 = kQ6High + c * 128 + (2 * h + s / 4) * 32 + r * 4 + k;
  p.s = s;
  return p;
}

void encode_packed(GgmlType wtype, const KBlock& k, int64_t r, uint8_t* sb) {
  if (wtype == GgmlType::kQ6_K) {
    std::memcpy(sb + kD + 2 * r, &k.d, 2);
    for (int g = 0; g < 16; ++g) sb[kQ6Scales + g * 8 + r] = (uint8_t)k.sc6[g];
  } else {
    std::memcpy(sb + kD + 2 * r, &k.d, 2);
    std::memcpy(sb + kDmin + 2 * r, &k.dmin, 2);
    for (int j = 0; j < 8; ++j) {
      sb[kScLow + j * 8 + r] = (uint8_t)((k.sc[j] & 15) | ((k.m[j] & 15) << 4));
      const int shift = (j / 4) * 4;
      uint8_t& hi = sb[kScHigh + (j % 4) * 8 + r];
      hi = (uint8_t)(hi | ((k.sc[j] >> 4) << shift) | ((k.m[j] >> 4) << (shift + 2)));
    }
  }
  for (int e = 0; e < kQK_K; ++e) {
    const ElemPos p = elem_pos(wtype, r, e);
    sb[p.quant] = (uint8_t)(sb[p.quant] | ((k.q[e] & 0xF) << (p.high_nibble ? 4 : 0)));
    if (wtype == GgmlType::kQ5_K) sb[p.fifth] = (uint8_t)(sb[p.fifth] | ((k.q[e] >> 4) << p.s));
    if (wtype == GgmlType::kQ6_K) {
      sb[p.high2] = (uint8_t)(sb[p.high2] | ((k.q[e] >> 4) << (2 * (p.s % 4))));
    }
  }
}

KBlock decode_packed(GgmlType wtype, const uint8_t* sb, int64_t r) {
  KBlock k;
  if (wtype == GgmlType::kQ6_K) {
    std::memcpy(&k.d, sb + kD + 2 * r, 2);
    for (int g = 0; g < 16; ++g) k.sc6[g] = (int8_t)sb[kQ6Scales + g * 8 + r];
  } else {
    std::memcpy(&k.d, sb + kD + 2 * r, 2);
    std::memcpy(&k.dmin, sb + kDmin + 2 * r, 2);
    for (int j = 0; j < 8; ++j) {
      const uint8_t lo = sb[kScLow + j * 8 + r];
      const uint8_t hi = sb[kScHigh + (j % 4) * 8 + r] >> ((j / 4) * 4);
      k.sc[j] = (uint8_t)((lo & 15) | ((hi & 3) << 4));
      k.m[j] = (uint8_t)((lo >> 4) | (((hi >> 2) & 3) << 4));
    }
  }
  for (int e = 0; e < kQK_K; ++e) {
    const ElemPos p = elem_pos(wtype, r, e);
    int q = (sb[p.quant] >> (p.high_nibble ? 4 : 0)) & 0xF;
    if (wtype == GgmlType::kQ5_K) q |= ((sb[p.fifth] >> p.s) & 1) << 4;
    if (wtype == GgmlType::kQ6_K) q |= ((sb[p.high2] >> (2 * (p.s % 4))) & 3) << 4;
    k.q[e] = (uint8_t)q;
  }
  return k;
}

// One super-block's contribution to acc, as documented at the top.
float accumulate(GgmlType wtype, const KBlock& k, const BlockQ8_K& x, float acc) {
  if (wtype == GgmlType::kQ6_K) {
    int32_t isum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t dot = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) dot += k.q[e] * x.qs[e];
      isum += k.sc6[g] * (dot - 32 * x.bsums[g]);
    }
    return std::fma((float)isum, f16_to_f32(k.d) * x.d, acc);
  }
  int32_t isum = 0, imin = 0;
  for (int j = 0; j < 8; ++j) {
    int32_t dot = 0;
    for (int e = 32 * j; e < 32 * j + 32; ++e) dot += k.q[e] * x.qs[e];
    isum += k.sc[j] * dot;
    imin += k.m[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  acc = std::fma((float)isum, f16_to_f32(k.d) * x.d, acc);
  return std::fma((float)-imin, f16_to_f32(k.dmin) * x.d, acc);
}

}  // namespace

bool is_kquant_type(GgmlType wtype) {
  return wtype == GgmlType::kQ4_K || wtype == GgmlType::kQ5_K || wtype == GgmlType::kQ6_K;
}

KquantPackedGeometry kquant_packed_geometry(GgmlType wtype, int64_t n_rows, int64_t n_in) {
  CHECK(is_kquant_type(wtype) && n_rows >= kPackRows && n_in > 0 && n_in % kQK_K == 0)
      << "packed K-quant matmul: weight type " << (uint32_t)wtype << " rows " << n_rows << " n_in "
      << n_in;
  KquantPackedGeometry g;
  g.nsb = n_in / kQK_K;
  g.row_bytes = g.nsb * gguf_block_bytes(wtype);
  g.sb_bytes = kPackRows * gguf_block_bytes(wtype);
  g.group_bytes = kPackRows * g.row_bytes;
  g.n_groups = n_rows / kPackRows;
  g.x_row_bytes = act_row_bytes(wtype, n_in);
  g.quants = quants_offset(wtype);
  return g;
}

void pack_kquant(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in) {
  const KquantPackedGeometry g = kquant_packed_geometry(wtype, n_rows, n_in);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t block_bytes = gguf_block_bytes(wtype);
  // In place (src == dst) each group is copied out first: one group of scratch.
  std::vector<uint8_t> scratch(g.group_bytes);
  for (int64_t i = 0; i < g.n_groups; ++i) {
    std::memcpy(scratch.data(), s + i * g.group_bytes, g.group_bytes);
    uint8_t* group = d + i * g.group_bytes;
    std::memset(group, 0, g.group_bytes);  // encode_packed ORs bits in
    for (int64_t r = 0; r < kPackRows; ++r) {
      for (int64_t b = 0; b < g.nsb; ++b) {
        const KBlock k = decode_gguf(wtype, scratch.data() + r * g.row_bytes + b * block_bytes);
        encode_packed(wtype, k, r, group + b * g.sb_bytes);
      }
    }
  }
  const int64_t tail = g.n_groups * g.group_bytes;
  if (s != d) std::memcpy(d + tail, s + tail, (n_rows % kPackRows) * g.row_bytes);
}

void matmul_packed_kquant_tail(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                               const void* xq, int64_t n_tokens, float* y, int64_t row_begin,
                               int64_t row_end) {
  const KquantPackedGeometry g = kquant_packed_geometry(wtype, n_rows, n_in);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  const int64_t block_bytes = gguf_block_bytes(wtype);
  for (int64_t r = std::max(row_begin, g.n_groups * kPackRows); r < row_end; ++r) {
    const uint8_t* row = w8 + r * g.row_bytes;  // past the groups: GGUF layout
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_K*>(x8 + t * g.x_row_bytes);
      float acc = 0.0f;
      for (int64_t b = 0; b < g.nsb; ++b) {
        acc = accumulate(wtype, decode_gguf(wtype, row + b * block_bytes), x[b], acc);
      }
      y[t * n_rows + r] = acc;
    }
  }
}

namespace ref {

void matmul_packed_kquant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                          const void* xq, int64_t n_tokens, float* y, int ith, int nth) {
  const KquantPackedGeometry g = kquant_packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  const int64_t full = g.n_groups * kPackRows;
  std::vector<float> acc(n_tokens);
  for (int64_t r = rows.begin; r < std::min(rows.end, full); ++r) {
    const uint8_t* group = w8 + (r / kPackRows) * g.group_bytes;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < g.nsb; ++b) {
      const KBlock k = decode_packed(wtype, group + b * g.sb_bytes, r % kPackRows);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto* x = reinterpret_cast<const BlockQ8_K*>(x8 + t * g.x_row_bytes);
        acc[t] = accumulate(wtype, k, x[b], acc[t]);
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) y[t * n_rows + r] = acc[t];
  }
  if (rows.end > full) {
    matmul_packed_kquant_tail(wtype, w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace ref
}  // namespace kvw::kernels
