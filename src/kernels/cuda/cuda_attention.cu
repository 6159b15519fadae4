// kernels/cuda/cuda_attention.cu: the device K/V cache and paged decode attention
// (flash-decoding) behind kernels/cuda/cuda_attention.h.
//
// Decode attention is memory-bound: per KV head and position it reads 4 * head_dim bytes of K/V
// (512 B at 128) for 4 * G * head_dim FLOPs (G query heads per KV head), so the goal is HBM
// bandwidth. The kernel:
//   - grid (splits, n_kv_heads, n_seqs), 128 threads: one block owns one split of one
//     sequence's context for one KV head and all G query heads of its group;
//   - the split is walked in tiles of 64 positions; each tile's K and V rows (looked up through
//     the block table one position at a time, so any block size and any table order work) are
//     copied global -> shared with 16-byte cp.async, kStages (2) deep: tile i+1 is in flight
//     while tile i is computed. Rows of a block are contiguous, so the copies are coalesced.
//     Shared rows are stored with their 16-byte chunks XOR-swizzled by (row & 7), so the
//     row-per-thread reads below are free of bank conflicts;
//   - scores: thread (t, half) computes q . K[t] for half of the G heads (q pre-scaled by
//     scale * log2(e), in shared memory, read as broadcasts); one warp per head then takes the
//     tile's max, rescales its running max / sum (online softmax, exp2) and writes p;
//   - output: thread (chunk c of 8 dims, token group) accumulates p * V for all G heads over
//     its tokens; the token groups are added in shared memory at the end of the split;
//   - a split writes its unnormalised output, max and sum to the workspace; the merge kernel
//     combines the splits of each (sequence, head) in split order: M = max m_s, out = sum
//     2^(m_s - M) o_s / sum 2^(m_s - M) l_s.
// Every result has a fixed summation order given the split size, so it is deterministic and
// independent of the batch it runs in.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_attention.h"

namespace kvw::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = kAttnTileTokens;  // positions per tile
// Tiles in flight: tile i + kStages - 1 is copied while tile i is computed. -D overrides the
// default for comparison runs.
#ifndef KVW_ATTN_STAGES
#define KVW_ATTN_STAGES 2
#endif
constexpr int kStages = KVW_ATTN_STAGES;
constexpr float kLog2e = 1.4426950408889634f;

Error cuda_error(const std::string& what, cudaError_t err) {
  return Error{what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")",
               ErrorKind::kInternal};
}

Error arg_error(const std::string& what) {
  return Error{"cuda attention_decode: " + what, ErrorKind::kInvalidInput};
}

// 16-byte global -> shared copy, zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// 8 f16 (one 16-byte chunk, element 2i in the low half of word i) to f32, exactly.
__device__ __forceinline__ void f16x8_to_float(uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

template <int D, int G>
struct AttnConfig {
  static constexpr int kChunks = D / 8;               // 16-byte chunks per K/V row
  static constexpr int kGroups = kThreads / kChunks;  // token groups of the output phase
  static constexpr int kTokensPerGroup = kTile / kGroups;
  static constexpr int kHeadHalves = G >= 2 ? 2 : 1;  // score phase: thread (t, half)
  static constexpr int kHeadsPerThread = G / kHeadHalves;
  static constexpr int kHeadsPerWarp = (G + 3) / 4;  // softmax phase: head h on warp h % 4
  // Shared memory, in bytes from the start.
  static constexpr int kRowBytes = D * 2;
  static constexpr int kStageBytes = 2 * kTile * kRowBytes;  // K tile then V tile
  static constexpr int kQOff = kStages * kStageBytes;        // q [G][D] f32, pre-scaled
  static constexpr int kSOff = kQOff + G * D * 4;            // scores [G][kTile] f32
  static constexpr int kPOff = kSOff + G * kTile * 4;        // p [kTile][G] f32
  static constexpr int kAlphaOff = kPOff + kTile * G * 4;    // rescale factors [G] f32
  static constexpr int kSmemBytes = kAlphaOff + 16 * 4;
  // End-of-split reduction of the token groups' outputs, [kGroups][G][D] f32, reuses the stages.
  static_assert(kGroups * G * D * 4 <= kStages * kStageBytes, "reduction buffer");
  static_assert(kTile % kGroups == 0 && kThreads % kChunks == 0, "tile mapping");
  static_assert(kTile * 2 == kThreads, "score phase: two threads per position");
  static_assert(G <= 8, "heads per warp");
};

// Partial results of split `s` of sequence `b`: out [n_seqs][n_splits][n_heads][D] f32, then
// ml [n_seqs][n_splits][n_heads][2] f32 (max in log2 units, sum).
struct Workspace {
  float* o;
  float* ml;
};

template <int D, int G>
__global__ void __launch_bounds__(kThreads, 3)
    attn_split_kernel(const uint8_t* __restrict__ kbase, const uint8_t* __restrict__ vbase,
                      int64_t block_stride, int32_t block_size, int32_t n_kv_heads,
                      const float* __restrict__ q, const int32_t* __restrict__ tables,
                      int64_t table_stride, const int32_t* __restrict__ pos_begin,
                      const int32_t* __restrict__ pos_end, int32_t n_heads, int32_t split,
                      int32_t n_splits, float qscale, Workspace ws) {
  using C = AttnConfig<D, G>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x;
  const int split_idx = blockIdx.x;
  const int kvh = blockIdx.y;
  const int b = blockIdx.z;

  const int32_t begin = pos_begin != nullptr ? pos_begin[b] : 0;
  const int32_t end = pos_end[b];
  const int32_t lo = begin + split_idx * split;
  if (lo >= end) return;  // this sequence has fewer splits; the merge skips them
  const int32_t hi = min(end, lo + split);
  const int32_t n_tiles = (hi - lo + kTile - 1) / kTile;
  const int32_t* table = tables + (int64_t)b * table_stride;
  const int64_t head_row_off = (int64_t)kvh * block_size;  // rows of the heads before this one

  float* qs = reinterpret_cast<float*>(smem + C::kQOff);
  float* ss = reinterpret_cast<float*>(smem + C::kSOff);
  float* ps = reinterpret_cast<float*>(smem + C::kPOff);
  float* alphas = reinterpret_cast<float*>(smem + C::kAlphaOff);

  // Issues the copies of tile `tile` into stage `stage`: K rows then V rows, each row's chunks
  // to slots swizzled by (row & 7).
  auto load_tile = [&](int tile, int stage) {
    uint8_t* ks = smem + stage * C::kStageBytes;
    uint8_t* vs = ks + kTile * C::kRowBytes;
#pragma unroll
    for (int k = 0; k < kTile * C::kChunks / kThreads; ++k) {
      const int i = tid + k * kThreads;
      const int r = i / C::kChunks;
      const int c = i % C::kChunks;
      const int32_t p = lo + tile * kTile + r;
      const bool valid = p < hi;
      int64_t off = 0;
      if (valid) {
        const int64_t blk = table[p / block_size];
        off = blk * block_stride + ((head_row_off + p % block_size) * D + c * 8) * 2;
      }
      const int slot = r * C::kRowBytes + ((c ^ (r & 7)) * 16);
      cp_async16(ks + slot, kbase + off, valid);
      cp_async16(vs + slot, vbase + off, valid);
    }
  };

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_tiles) load_tile(st, st);
    cp_async_commit();  // possibly empty: one group per tile keeps the wait count fixed
  }

  // q of this group's heads, scaled to log2 units.
  const float* qg = q + ((int64_t)b * n_heads + (int64_t)kvh * G) * D;
  for (int i = tid; i < G * D; i += kThreads) qs[i] = qg[i] * qscale;

  // Running max / sum of head h = warp + 4 * j, held by every lane of warp h % 4.
  const int warp = tid / 32;
  const int lane = tid % 32;
  float m_run[C::kHeadsPerWarp];
  float l_run[C::kHeadsPerWarp];
#pragma unroll
  for (int j = 0; j < C::kHeadsPerWarp; ++j) {
    m_run[j] = -INFINITY;
    l_run[j] = 0.0f;
  }

  // Output phase mapping: chunk oc of every V row, tokens og, og + kGroups, ...
  const int oc = tid % C::kChunks;
  const int og = tid / C::kChunks;
  float acc[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  }

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int stage = tile % kStages;
    // The stage of tile + kStages - 1 is the one computed in the previous iteration, which
    // ended with a barrier.
    const int ahead = tile + kStages - 1;
    if (ahead < n_tiles) load_tile(ahead, ahead % kStages);
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // all groups but the newest kStages - 1: tile `tile` landed
    __syncthreads();               // tile `tile` (and q) visible to all
    const uint8_t* ks = smem + stage * C::kStageBytes;
    const uint8_t* vs = ks + kTile * C::kRowBytes;

    // Scores: thread (t, half) for heads half * kHeadsPerThread + j.
    {
      const int t = tid % kTile;
      const int half = tid / kTile;
      if (half < C::kHeadHalves) {
        float s[C::kHeadsPerThread];
#pragma unroll
        for (int j = 0; j < C::kHeadsPerThread; ++j) s[j] = 0.0f;
        const float* qh = qs + half * C::kHeadsPerThread * D;
#pragma unroll 4
        for (int c = 0; c < C::kChunks; ++c) {
          const uint4 raw =
              *reinterpret_cast<const uint4*>(ks + t * C::kRowBytes + ((c ^ (t & 7)) * 16));
          float k[8];
          f16x8_to_float(raw, k);
#pragma unroll
          for (int j = 0; j < C::kHeadsPerThread; ++j) {
            const float4 q0 = *reinterpret_cast<const float4*>(qh + j * D + c * 8);
            const float4 q1 = *reinterpret_cast<const float4*>(qh + j * D + c * 8 + 4);
            s[j] = fmaf(q0.x, k[0], s[j]);
            s[j] = fmaf(q0.y, k[1], s[j]);
            s[j] = fmaf(q0.z, k[2], s[j]);
            s[j] = fmaf(q0.w, k[3], s[j]);
            s[j] = fmaf(q1.x, k[4], s[j]);
            s[j] = fmaf(q1.y, k[5], s[j]);
            s[j] = fmaf(q1.z, k[6], s[j]);
            s[j] = fmaf(q1.w, k[7], s[j]);
          }
        }
        const bool valid = lo + tile * kTile + t < hi;
#pragma unroll
        for (int j = 0; j < C::kHeadsPerThread; ++j) {
          ss[(half * C::kHeadsPerThread + j) * kTile + t] = valid ? s[j] : -INFINITY;
        }
      }
    }
    __syncthreads();

    // Online softmax: warp w takes heads w, w + 4 (every tile has a valid position, so the new
    // max is finite).
#pragma unroll
    for (int j = 0; j < C::kHeadsPerWarp; ++j) {
      const int h = warp + 4 * j;
      if (h < G) {
        const float s0 = ss[h * kTile + lane];
        const float s1 = ss[h * kTile + lane + 32];
        float mx = fmaxf(s0, s1);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m_run[j], mx);
        const float alpha = exp2f(m_run[j] - m_new);  // 0 on the first tile
        const float p0 = exp2f(s0 - m_new);
        const float p1 = exp2f(s1 - m_new);
        ps[lane * G + h] = p0;
        ps[(lane + 32) * G + h] = p1;
        float sum = p0 + p1;
#pragma unroll
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l_run[j] = l_run[j] * alpha + sum;
        m_run[j] = m_new;
        if (lane == 0) alphas[h] = alpha;
      }
    }
    __syncthreads();

    // Output: acc[h][e] = acc[h][e] * alpha[h] + sum_t p[t][h] * V[t][oc * 8 + e].
    {
#pragma unroll
      for (int h = 0; h < G; ++h) {
        const float a = alphas[h];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] *= a;
      }
#pragma unroll 2
      for (int i = 0; i < C::kTokensPerGroup; ++i) {
        const int t = og + i * C::kGroups;
        const uint4 raw =
            *reinterpret_cast<const uint4*>(vs + t * C::kRowBytes + ((oc ^ (t & 7)) * 16));
        float v[8];
        f16x8_to_float(raw, v);
        float p[G];
        if constexpr (G % 4 == 0) {
#pragma unroll
          for (int h = 0; h < G; h += 4) {
            const float4 p4 = *reinterpret_cast<const float4*>(ps + t * G + h);
            p[h] = p4.x;
            p[h + 1] = p4.y;
            p[h + 2] = p4.z;
            p[h + 3] = p4.w;
          }
        } else {
#pragma unroll
          for (int h = 0; h < G; ++h) p[h] = ps[t * G + h];
        }
#pragma unroll
        for (int h = 0; h < G; ++h) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(p[h], v[e], acc[h][e]);
        }
      }
    }
    __syncthreads();  // the stage and ps are rewritten next
  }

  // Add the token groups (in group order) through shared memory, then write this split.
  float* red = reinterpret_cast<float*>(smem);  // [kGroups][G][D]
#pragma unroll
  for (int h = 0; h < G; ++h) {
    float4* dst = reinterpret_cast<float4*>(red + ((og * G + h) * D + oc * 8));
    dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
    dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
  }
  __syncthreads();
  const int64_t row0 = ((int64_t)b * n_splits + split_idx) * n_heads + (int64_t)kvh * G;
  for (int i = tid; i < G * D; i += kThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int g = 0; g < C::kGroups; ++g) sum += red[g * G * D + i];
    ws.o[row0 * D + i] = sum;
  }
#pragma unroll
  for (int j = 0; j < C::kHeadsPerWarp; ++j) {
    const int h = warp + 4 * j;
    if (h < G && lane == 0) {
      ws.ml[(row0 + h) * 2] = m_run[j];
      ws.ml[(row0 + h) * 2 + 1] = l_run[j];
    }
  }
}

// One block per (head, sequence), one thread per output element.
__global__ void attn_merge_kernel(const int32_t* __restrict__ pos_begin,
                                  const int32_t* __restrict__ pos_end, int32_t n_heads,
                                  int32_t head_dim, int32_t split, int32_t n_splits, Workspace ws,
                                  float* __restrict__ out) {
  const int h = blockIdx.x;
  const int b = blockIdx.y;
  const int d = threadIdx.x;
  const int32_t begin = pos_begin != nullptr ? pos_begin[b] : 0;
  const int32_t span = pos_end[b] - begin;
  const int ns = min(n_splits, (span + split - 1) / split);
  const int64_t row0 = (int64_t)b * n_splits * n_heads + h;  // split s: row0 + s * n_heads
  float m = -INFINITY;
  for (int s = 0; s < ns; ++s) m = fmaxf(m, ws.ml[(row0 + (int64_t)s * n_heads) * 2]);
  float num = 0.0f, den = 0.0f;
  for (int s = 0; s < ns; ++s) {
    const int64_t row = row0 + (int64_t)s * n_heads;
    const float w = exp2f(ws.ml[row * 2] - m);
    den = fmaf(w, ws.ml[row * 2 + 1], den);
    num = fmaf(w, ws.o[row * head_dim + d], num);
  }
  out[((int64_t)b * n_heads + h) * head_dim + d] = num / den;
}

// Multiprocessors of the current device, read once.
int sm_count_or(int fallback) {
  static const int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n;
  }();
  return count > 0 ? count : fallback;
}

template <int D, int G>
cudaError_t launch_split(const DeviceKvLayer& kv, const AttnDecodeBatch& bt, int32_t split,
                         int32_t n_splits, float qscale, Workspace ws, cudaStream_t stream) {
  using C = AttnConfig<D, G>;
  auto* kernel = &attn_split_kernel<D, G>;
  static const cudaError_t attr_err = [kernel] {
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared);
    }
    return err;
  }();
  if (attr_err != cudaSuccess) return attr_err;
  const dim3 grid((unsigned)n_splits, (unsigned)kv.n_kv_heads, (unsigned)bt.n_seqs);
  kernel<<<grid, kThreads, C::kSmemBytes, stream>>>(
      static_cast<const uint8_t*>(kv.k), static_cast<const uint8_t*>(kv.v), kv.block_stride,
      kv.block_size, kv.n_kv_heads, bt.q, bt.block_tables, bt.table_stride, bt.pos_begin,
      bt.pos_end, bt.n_heads, split, n_splits, qscale, ws);
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_split_g(int group, const DeviceKvLayer& kv, const AttnDecodeBatch& bt,
                           int32_t split, int32_t n_splits, float qscale, Workspace ws,
                           cudaStream_t stream) {
  switch (group) {
    case 1:
      return launch_split<D, 1>(kv, bt, split, n_splits, qscale, ws, stream);
    case 2:
      return launch_split<D, 2>(kv, bt, split, n_splits, qscale, ws, stream);
    case 4:
      return launch_split<D, 4>(kv, bt, split, n_splits, qscale, ws, stream);
    case 8:
      return launch_split<D, 8>(kv, bt, split, n_splits, qscale, ws, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

struct Plan {
  int32_t split = 0;
  int32_t n_splits = 0;
  int64_t o_floats = 0;  // workspace floats of the partial outputs
  int64_t bytes = 0;
};

Result<Plan> plan(const DeviceKvLayer& kv, const AttnDecodeBatch& bt,
                  const AttnDecodeOptions& opt) {
  if (kv.k == nullptr || kv.v == nullptr) return arg_error("null K/V");
  if (kv.head_dim != 64 && kv.head_dim != 128) {
    return arg_error("head_dim " + std::to_string(kv.head_dim) + " (supported: 64, 128)");
  }
  if (kv.block_size < 1 || kv.n_kv_heads < 1 || kv.block_stride % 16 != 0 ||
      kv.block_stride < int64_t{2} * kv.n_kv_heads * kv.block_size * kv.head_dim * 2) {
    return arg_error("bad K/V layer shape");
  }
  if (bt.n_heads < 1 || bt.n_heads % kv.n_kv_heads != 0) {
    return arg_error("n_heads " + std::to_string(bt.n_heads) + " is not a multiple of n_kv_heads " +
                     std::to_string(kv.n_kv_heads));
  }
  const int group = bt.n_heads / kv.n_kv_heads;
  if (group != 1 && group != 2 && group != 4 && group != 8) {
    return arg_error("query heads per KV head " + std::to_string(group) +
                     " (supported: 1, 2, 4, 8)");
  }
  if (bt.n_seqs < 1 || bt.n_seqs > 65535) return arg_error("n_seqs out of [1, 65535]");
  if (bt.max_span < 1 || bt.max_span > INT32_MAX) return arg_error("max_span out of range");
  if (bt.q == nullptr || bt.out == nullptr || bt.block_tables == nullptr || bt.pos_end == nullptr) {
    return arg_error("null q, out, block_tables or pos_end");
  }
  if (reinterpret_cast<uintptr_t>(bt.q) % 16 != 0) return arg_error("q not 16-byte aligned");
  if (opt.split_tokens < 0 || opt.split_tokens % kAttnTileTokens != 0) {
    return arg_error("split_tokens " + std::to_string(opt.split_tokens) + " is not a multiple of " +
                     std::to_string(kAttnTileTokens));
  }
  Plan p;
  p.split = opt.split_tokens != 0
                ? opt.split_tokens
                : attention_decode_split(bt.n_seqs, kv.n_kv_heads, bt.max_span, sm_count_or(132));
  p.n_splits = (int32_t)((bt.max_span + p.split - 1) / p.split);
  p.o_floats = (int64_t)bt.n_seqs * p.n_splits * bt.n_heads * kv.head_dim;
  p.bytes = (p.o_floats + (int64_t)bt.n_seqs * p.n_splits * bt.n_heads * 2) * 4;
  return p;
}

}  // namespace

// --- DeviceKvCache ---

Result<DeviceKvCache> DeviceKvCache::allocate(const DeviceKvShape& shape) {
  if (shape.n_layer < 1 || shape.n_kv_heads < 1 || shape.head_dim < 8 || shape.head_dim % 8 != 0 ||
      shape.block_size < 1 || shape.num_blocks < 1) {
    return Error{"cuda: bad K/V cache shape", ErrorKind::kInvalidInput};
  }
  auto data = DeviceBuffer::allocate(shape.n_layer * shape.num_blocks * shape.layer_block_bytes());
  if (!data.ok()) return data.error();
  return DeviceKvCache(shape, std::move(data).value());
}

DeviceKvLayer DeviceKvCache::layer(int32_t l) const {
  const int64_t layer_bytes = shape_.num_blocks * shape_.layer_block_bytes();
  const uint8_t* base = static_cast<const uint8_t*>(data_.data()) + l * layer_bytes;
  DeviceKvLayer v;
  v.k = base;
  v.v = base + shape_.v_offset();
  v.block_stride = shape_.layer_block_bytes();
  v.block_size = shape_.block_size;
  v.n_kv_heads = shape_.n_kv_heads;
  v.head_dim = shape_.head_dim;
  return v;
}

Status DeviceKvCache::check_range(int32_t layer, int64_t first_block, int64_t n_blocks) const {
  if (layer < 0 || layer >= shape_.n_layer || first_block < 0 || n_blocks < 0 ||
      first_block + n_blocks > shape_.num_blocks) {
    return Error{"cuda K/V cache: layer " + std::to_string(layer) + " blocks [" +
                     std::to_string(first_block) + ", +" + std::to_string(n_blocks) +
                     ") out of range",
                 ErrorKind::kInvalidInput};
  }
  return Status::ok_status();
}

Status DeviceKvCache::upload_blocks(int32_t layer, int64_t first_block, int64_t n_blocks,
                                    const void* src) {
  if (Status s = check_range(layer, first_block, n_blocks); !s.ok()) return s;
  const int64_t lbb = shape_.layer_block_bytes();
  return data_.upload(src, n_blocks * lbb, (layer * shape_.num_blocks + first_block) * lbb);
}

Status DeviceKvCache::download_blocks(int32_t layer, int64_t first_block, int64_t n_blocks,
                                      void* dst) const {
  if (Status s = check_range(layer, first_block, n_blocks); !s.ok()) return s;
  const int64_t lbb = shape_.layer_block_bytes();
  return data_.download(dst, n_blocks * lbb, (layer * shape_.num_blocks + first_block) * lbb);
}

// --- attention ---

int32_t attention_decode_split(int64_t n_seqs, int32_t n_kv_heads, int64_t max_span, int sm_count) {
  auto round_up = [](int64_t x) {
    return (x + kAttnTileTokens - 1) / kAttnTileTokens * kAttnTileTokens;
  };
  const int64_t span = std::max<int64_t>(max_span, 1);
  const int64_t work = std::max<int64_t>(1, n_seqs * n_kv_heads);
  const int64_t splits =
      std::max<int64_t>(1, (2 * (int64_t)std::max(sm_count, 1) + work - 1) / work);
  const int64_t upper = std::min<int64_t>(1024, std::max<int64_t>(256, round_up((span + 7) / 8)));
  return (int32_t)std::clamp<int64_t>(round_up((span + splits - 1) / splits), 256, upper);
}

Result<int64_t> attention_decode_workspace_bytes(const DeviceKvLayer& kv,
                                                 const AttnDecodeBatch& batch,
                                                 const AttnDecodeOptions& opt) {
  auto p = plan(kv, batch, opt);
  if (!p.ok()) return p.error();
  return p.value().bytes;
}

Status attention_decode(const DeviceKvLayer& kv, const AttnDecodeBatch& batch, float scale,
                        void* workspace, int64_t workspace_bytes, const AttnDecodeOptions& opt) {
  auto pr = plan(kv, batch, opt);
  if (!pr.ok()) return pr.error();
  const Plan p = pr.value();
  if (workspace == nullptr || workspace_bytes < p.bytes) {
    return arg_error("workspace of " + std::to_string(workspace_bytes) + " bytes, needs " +
                     std::to_string(p.bytes));
  }
  Workspace ws{static_cast<float*>(workspace), static_cast<float*>(workspace) + p.o_floats};
  auto stream = reinterpret_cast<cudaStream_t>(opt.stream);
  const int group = batch.n_heads / kv.n_kv_heads;
  const float qscale = scale * kLog2e;
  cudaError_t err =
      kv.head_dim == 64
          ? launch_split_g<64>(group, kv, batch, p.split, p.n_splits, qscale, ws, stream)
          : launch_split_g<128>(group, kv, batch, p.split, p.n_splits, qscale, ws, stream);
  if (err != cudaSuccess) return cuda_error("attention split kernel launch", err);
  attn_merge_kernel<<<dim3((unsigned)batch.n_heads, (unsigned)batch.n_seqs), kv.head_dim, 0,
                      stream>>>(batch.pos_begin, batch.pos_end, batch.n_heads, kv.head_dim, p.split,
                                p.n_splits, ws, batch.out);
  err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error("attention merge kernel launch", err);
  return Status::ok_status();
}

}  // namespace kvw::cuda
