// bench/decode_attention_bench.cc: decode attention at depth as the model runs it, in bytes of
// K/V streamed per second beside the read bandwidth of the same threads (issue 32 item 1).
//
//   BM_DecodeAttention/<dtype>/depth:<d>/threads:<t>   one decode token of a TinyLlama-shaped
//       layer (4 KV heads x GQA 8, head_dim 64, blocks of 16 scattered over the arena), each KV
//       head's context cut into kAttnSegment segments dealt round-robin over the threads as
//       model/forward_decode.cc deals them, over as many layers as make >= 512 MiB of K/V so
//       every iteration reads its K/V from DRAM as a real token does (the merge of the
//       segments, 3 x head_dim flops per segment and head, is left out).
//       GB/s: K/V bytes (INT8: with its scales) per second; read_GB/s: the read-bandwidth
//       probe on the same threads, run once before the timed loop; share = GB/s / read_GB/s.
// KVW_ISA=ref|avx2|avx2vnni|avx512|avx512vnni pins the kernel table.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_main.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/membw.h"

namespace kvw::kernels {
namespace {

constexpr int32_t kHd = 64, kGroup = 8, kKvHeads = 4, kBlock = 16;
constexpr int64_t kMinKvBytes = int64_t{512} << 20;

void bm_decode_attention(benchmark::State& state, KvDtype dtype, int64_t depth, int threads,
                         bool bf16_dot) {
  const KernelTable& k = kernels();
  const int64_t n_blocks = (depth + kBlock - 1) / kBlock;
  const int64_t row_bytes = (int64_t)kv_elem_bytes(dtype) * kHd;
  const int64_t scale_bytes = dtype == KvDtype::kInt8 ? kKvHeads * kBlock * 4 : 0;
  const int64_t k_bytes = kKvHeads * kBlock * row_bytes;  // one block's K of every head
  const int64_t stride = 2 * k_bytes + 2 * scale_bytes;
  const int64_t layer_bytes = n_blocks * stride;
  const int64_t n_layers = std::max<int64_t>(1, (kMinKvBytes + layer_bytes - 1) / layer_bytes);
  std::vector<uint8_t> arena(n_layers * layer_bytes);
  auto view_of = [&](int64_t l) {
    uint8_t* b = arena.data() + l * layer_bytes;
    return KvLayerView{dtype,
                       b,
                       b + k_bytes,
                       scale_bytes ? b + 2 * k_bytes : nullptr,
                       scale_bytes ? b + 2 * k_bytes + scale_bytes : nullptr,
                       stride,
                       kBlock,
                       kKvHeads,
                       kHd};
  };
  // Scattered blocks (7 is coprime with the power-of-two block counts benchmarked).
  std::vector<uint32_t> table(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) table[b] = (uint32_t)((b * 7) % n_blocks);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> kr(kKvHeads * kHd), vr(kKvHeads * kHd);
  for (int64_t p = 0; p < depth; ++p) {
    for (auto& x : kr) x = dist(rng);
    for (auto& x : vr) x = dist(rng);
    k.kv_store(view_of(0), table, p, kr.data(), vr.data());
  }
  for (int64_t l = 1; l < n_layers; ++l)
    std::memcpy(arena.data() + l * layer_bytes, arena.data(), layer_bytes);
  std::vector<float> q(kKvHeads * kGroup * kHd);
  for (auto& x : q) x = dist(rng);

  ThreadPool pool(threads);
  const double read_gbs = measure_read_bandwidth_gbs(pool, size_t{256} << 20);
  const int64_t n_seg = attn_num_segments(0, depth);
  const int64_t n_items = kKvHeads * n_seg;
  const int64_t part_floats = kGroup * (kHd + 2);  // a segment's rows and {m, l} states
  const int64_t scratch_floats =
      attention_scratch_floats(kHd) + (n_items / threads + 1) * part_floats;
  std::vector<float> scratch(scratch_floats * threads);
  for (auto _ : state) {
    for (int64_t l = 0; l < n_layers; ++l) {
      const KvLayerView view = view_of(l);
      pool.run([&](int ith, int nth) {
        float* mine = scratch.data() + ith * scratch_floats;
        float* parts = mine + attention_scratch_floats(kHd);
        for (int64_t j = ith; j < n_items; j += nth) {
          const int32_t g = (int32_t)(j / n_seg);
          const int64_t s0 = j % n_seg * kAttnSegment;
          float* part = parts + j / nth * part_floats;
          const AttnQuery query = {q.data() + g * kGroup * kHd, part, s0,
                                   std::min(depth, s0 + kAttnSegment)};
          k.attention_segment({&query, 1}, kGroup, kv_head_view(view, g), table,
                              {0.125f, 0.0f, nullptr, bf16_dot}, part + kGroup * kHd, mine);
        }
      });
    }
    benchmark::DoNotOptimize(scratch.data());
  }
  const double bytes = (double)n_layers * depth * kKvHeads * 2 *
                       (double)(row_bytes + (dtype == KvDtype::kInt8 ? 4 : 0));
  state.counters["GB/s"] = benchmark::Counter(
      bytes * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["read_GB/s"] = read_gbs;
  state.counters["layers"] = (double)n_layers;
  state.SetLabel(k.isa);
}

void register_all() {
  bench::register_attention_sweep("BM_DecodeAttention", bm_decode_attention, {4096, 8192, 32768},
                                  attention_bf16_dot_supported(kernels()));
}

}  // namespace
}  // namespace kvw::kernels

int main(int argc, char** argv) {
  return kvw::bench::run_registered(argc, argv, kvw::kernels::register_all);
}
