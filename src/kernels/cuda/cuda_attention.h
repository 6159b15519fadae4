// kernels/cuda/cuda_attention.h: the second brick of the CUDA backend: the paged K/V cache in
// device memory and decode attention over it (one new query token per sequence, flash-decoding:
// the context is split into chunks, each chunk's softmax statistics and partial output are
// computed independently, then merged exactly). Like cuda_matmul.h this header includes no CUDA
// header; the definitions (cuda_attention.cu) need nvcc. Built only with -DKVW_CUDA=ON.
// Owner: any one host thread at a time per object; calls on one stream run in issue order.
#pragma once

#include <cstdint>
#include <utility>

#include "core/status.h"
#include "kernels/cuda/cuda_matmul.h"

namespace kvw::cuda {

// Shape of a device K/V cache. The layout is the CPU KvArena's for dtype f16 without shared_kv
// (kv/kv_arena.h), byte for byte:
//   [n_layer][num_blocks][layer_block_bytes], and within one layer's block
//   K [n_kv_heads][block_size][head_dim] f16, then V [n_kv_heads][block_size][head_dim] f16.
// Why this layout: (1) a block of one layer is one contiguous range of the same size on both
// sides, so the KV manager can move blocks host <-> device with one copy each, and a whole
// arena with one copy, without repacking; (2) the attention kernel works on one (sequence, KV
// head) at a time, and in this layout the block_size rows of one KV head are one contiguous
// block_size * head_dim * 2 bytes (4 KB for 16 x 128): every 16-byte load of a warp is
// coalesced, whatever the block table's order. A head-major layout across blocks would cut
// those runs at every block boundary anyway, since blocks are scattered.
struct DeviceKvShape {
  int32_t n_layer = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // tokens per block
  int64_t num_blocks = 0;

  // Bytes of one block in one layer (K and V): KvArena::layer_block_bytes for f16.
  int64_t layer_block_bytes() const { return int64_t{2} * n_kv_heads * block_size * head_dim * 2; }
  int64_t v_offset() const { return int64_t{n_kv_heads} * block_size * head_dim * 2; }
};

// One layer of a device K/V cache as the kernels see it. Block b of this layer starts at byte
// b * block_stride of k (and of v): k and v point into the same allocation, v = k + v_offset.
struct DeviceKvLayer {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t block_stride = 0;  // bytes, a multiple of 16
  int32_t block_size = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
};

// Move-only owner of a device K/V cache of DeviceKvShape's layout (one cudaMalloc).
class DeviceKvCache {
 public:
  // Errors: a non-positive dimension, head_dim not a multiple of 8, or the allocation failed.
  static Result<DeviceKvCache> allocate(const DeviceKvShape& shape);

  const DeviceKvShape& shape() const { return shape_; }
  int64_t bytes() const { return data_.bytes(); }
  DeviceKvLayer layer(int32_t l) const;

  // Host -> device / device -> host of n_blocks consecutive blocks of one layer, from / to
  // n_blocks * layer_block_bytes() bytes laid out as in KvArena::layer_base(l) + first *
  // layer_block_bytes() (f16 arena). Synchronous. Errors: the range leaves the cache.
  Status upload_blocks(int32_t layer, int64_t first_block, int64_t n_blocks, const void* src);
  Status download_blocks(int32_t layer, int64_t first_block, int64_t n_blocks, void* dst) const;

 private:
  DeviceKvCache(const DeviceKvShape& shape, DeviceBuffer data)
      : shape_(shape), data_(std::move(data)) {}
  Status check_range(int32_t layer, int64_t first_block, int64_t n_blocks) const;
  DeviceKvShape shape_;
  DeviceBuffer data_;  // [n_layer][num_blocks][layer_block_bytes]
};

// One decode step of a batch of sequences, one new query token each. All pointers are device
// memory.
struct AttnDecodeBatch {
  const float* q = nullptr;  // [n_seqs][n_heads][head_dim] f32, 16-byte aligned
  float* out = nullptr;      // [n_seqs][n_heads][head_dim] f32
  // Block tables, [n_seqs][table_stride] int32: position p of sequence s lives in block
  // block_tables[s * table_stride + p / block_size], slot p % block_size. Only the entries that
  // cover [pos_begin, pos_end) are read (entries before may be holes, e.g. -1, released behind a
  // sliding window).
  const int32_t* block_tables = nullptr;
  int64_t table_stride = 0;
  // The positions each query attends, [pos_begin[s], pos_end[s]): pos_end = the new token's
  // position + 1 (causal; its own K/V must be stored already), pos_begin > 0 under a sliding
  // window. pos_begin may be nullptr (all 0). Each sequence needs pos_end > pos_begin >= 0.
  const int32_t* pos_begin = nullptr;
  const int32_t* pos_end = nullptr;
  int32_t n_seqs = 0;
  int32_t n_heads = 0;  // query heads; a multiple of the layer's n_kv_heads
  // Host-side bound: max over sequences of pos_end - pos_begin (sizes the grid and workspace;
  // a larger value only launches blocks that return at once).
  int64_t max_span = 0;
};

// Tokens per attention tile: the split size is a multiple of it.
constexpr int32_t kAttnTileTokens = 64;

struct AttnDecodeOptions {
  // Context positions per split (flash-decoding chunk), a multiple of kAttnTileTokens; 0 chooses
  // from the shape and the device (attention_decode_split). Results depend on it only through
  // f32 rounding (the merge is exact in real arithmetic).
  int32_t split_tokens = 0;
  CUstream_st* stream = nullptr;  // nullptr: the default stream
};

// The split attention_decode uses for split_tokens == 0 (fitted to the H200 sweep, README):
// enough splits for about 2 blocks per multiprocessor (n_seqs * n_kv_heads * splits), the split
// rounded up to whole tiles and kept within [256, 1024] positions, and at most max_span / 8
// (rounded up, at least 256), so long contexts get 8+ splits: short splits pay the pipeline's
// start in every block, long ones leave multiprocessors idle.
int32_t attention_decode_split(int64_t n_seqs, int32_t n_kv_heads, int64_t max_span, int sm_count);

// Device workspace bytes attention_decode needs for this batch and options (the per-split
// partial outputs and statistics: n_seqs * splits * n_heads * (head_dim + 2) floats).
// Errors: as attention_decode's argument checks.
Result<int64_t> attention_decode_workspace_bytes(const DeviceKvLayer& kv,
                                                 const AttnDecodeBatch& batch,
                                                 const AttnDecodeOptions& opt = {});

// out[s][h] = softmax_p(q[s][h] . K[p][h / G] * scale) . V[p][h / G] over p in [pos_begin[s],
// pos_end[s]), G = n_heads / n_kv_heads (query heads h = g*G .. g*G+G-1 share KV head g, as in
// Model::run_attention). f16 K/V converted exactly to f32, f32 arithmetic, exp2 of scores
// pre-scaled by log2(e). Each CTA handles one (sequence, KV head, split) and reads each K/V row
// of its split once for all G query heads; a second kernel merges the splits.
// Supported: head_dim 64 or 128; G in {1, 2, 4, 8}. workspace: attention_decode_workspace_bytes
// bytes of device memory. Asynchronous on opt.stream: returns argument and launch errors only.
Status attention_decode(const DeviceKvLayer& kv, const AttnDecodeBatch& batch, float scale,
                        void* workspace, int64_t workspace_bytes,
                        const AttnDecodeOptions& opt = {});

}  // namespace kvw::cuda
