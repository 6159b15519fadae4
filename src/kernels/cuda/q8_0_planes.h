// kernels/cuda/q8_0_planes.h: the device layout of Q8_0 weights (DeviceMatrix), built on the
// host at upload. Pure C++ (no CUDA), so it is testable anywhere.
//
//   GGUF row r:   [d0 q0..q31][d1 q32..q63] ...            n_in/32 blocks of 34 bytes
//   planes:       qs: [n_rows][n_in] int8                  byte 0
//                 d:  [n_rows][n_in/32] fp16 bits          byte n_rows * n_in
//
// The same byte count (34 per 32 weights); qs rows are 32-byte multiples, so with a 256-byte
// aligned base every 16-byte group of quants is aligned for one vector load.
#pragma once

#include <cstdint>
#include <cstring>

#include "gguf/quant_blocks.h"

namespace kvw::cuda {

// Bytes of the planes for a Q8_0 matrix (n_in a multiple of 32): n_rows * n_in / 32 * 34.
inline int64_t q8_0_planes_bytes(int64_t n_rows, int64_t n_in) {
  return n_rows * (n_in / kQK8_0) * (int64_t)sizeof(BlockQ8_0);
}

// Rewrites n_rows GGUF Q8_0 rows (src) into the planes layout (dst, q8_0_planes_bytes long).
inline void q8_0_to_planes(const void* src, int64_t n_rows, int64_t n_in, void* dst) {
  const int64_t nb = n_in / kQK8_0;
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  auto* qs = static_cast<uint8_t*>(dst);
  uint8_t* d = qs + n_rows * n_in;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0& blk = blocks[r * nb + b];
      std::memcpy(qs + r * n_in + b * kQK8_0, blk.qs, kQK8_0);
      std::memcpy(d + (r * nb + b) * 2, &blk.d, 2);
    }
  }
}

}  // namespace kvw::cuda
