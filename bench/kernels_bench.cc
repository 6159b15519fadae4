// bench/kernels_bench.cc: matmul throughput per weight type, in weight bytes per second, next to
// the STREAM-like triad and read-only bandwidth of this machine (the bound for decode).
//
//   BM_Matmul/<type>/<rows>x<n_in>/tokens:<n>/threads:<t>   bytes/s = weight bytes streamed,
//                                                            GOP/s = 2 x rows x n_in x tokens
//   BM_MatmulPacked/...                                     the same on load-time packed weights
//   BM_MemoryBandwidth/<triad|read>/threads:<t>             bytes/s = the probe's bandwidth
//   BM_Attention/f16/queries:<q>/depth:<d>                  one KV head of 8 query heads (hd 64,
//                                                            TinyLlama's GQA), 1 thread; q causal
//                                                            queries ending at d; GFLOP/s counts
//                                                            QK and PV (4 x hd per position)
//
// Weights are replicated into several copies totalling >= 128 MiB and a different copy is used
// on each iteration, so every call reads its weights from DRAM as a real decode step does (the
// L3 here is 32 MiB; a single 2048x2048 Q8_0 matrix, 4.5 MiB, would be served from cache).
// KVW_ISA=ref|avx2|avx2vnni|avx512|avx512vnni pins the kernel table.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_main.h"
#include "core/thread_pool.h"
#include "gguf/tensor_types.h"
#include "kernels/kernels.h"
#include "kernels/membw.h"

namespace kvw::kernels {
namespace {

constexpr size_t kMinWeightBytes = size_t{128} << 20;

struct MatmulCase {
  GgmlType wtype;
  int64_t n_rows;
  int64_t n_in;
  int64_t n_tokens;
  int threads;
  bool packed;  // load-time packed layout and matmul_packed (every type the table packs)
};

void bm_matmul(benchmark::State& state, MatmulCase c) {
  const KernelTable& k = kernels();
  const int64_t w_row_bytes = (int64_t)*row_bytes(c.wtype, c.n_in);
  const size_t matrix_bytes = (size_t)(w_row_bytes * c.n_rows);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(c.n_in);
  std::vector<uint8_t> one(matrix_bytes);
  for (int64_t r = 0; r < c.n_rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(c.wtype, row.data(), one.data() + r * w_row_bytes, c.n_in);
  }
  if (c.packed) k.pack(c.wtype, one.data(), one.data(), c.n_rows, c.n_in);
  const size_t copies = (kMinWeightBytes + matrix_bytes - 1) / matrix_bytes;
  std::vector<uint8_t> w(copies * matrix_bytes);
  for (size_t i = 0; i < copies; ++i)
    std::copy(one.begin(), one.end(), w.begin() + i * matrix_bytes);

  std::vector<float> x(c.n_tokens * c.n_in);
  for (float& v : x) v = dist(rng) * 20.0f;
  std::vector<uint8_t> xq(c.n_tokens * act_row_bytes(c.wtype, c.n_in));
  k.quantize_act(c.wtype, x.data(), c.n_tokens, c.n_in, xq.data(), 0, 1);
  std::vector<float> y(c.n_tokens * c.n_rows);

  ThreadPool pool(c.threads);
  const int64_t scratch_bytes = packed_scratch_bytes(c.wtype, c.n_in, c.n_tokens);
  const int64_t scratch_floats = (scratch_bytes + 63) / 64 * 16;  // a cache line apart
  std::vector<float> scratch(scratch_floats * c.threads);
  size_t copy = 0;
  for (auto _ : state) {
    const uint8_t* wc = w.data() + copy * matrix_bytes;
    pool.run([&](int ith, int nth) {
      if (c.packed) {
        k.matmul_packed(c.wtype, wc, c.n_rows, c.n_in, xq.data(), c.n_tokens, y.data(), ith, nth,
                        scratch.data() + ith * scratch_floats);
      } else {
        k.matmul(c.wtype, wc, c.n_rows, c.n_in, xq.data(), c.n_tokens, y.data(), ith, nth);
      }
    });
    benchmark::DoNotOptimize(y.data());
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)matrix_bytes);
  state.counters["tokens/s"] =
      benchmark::Counter((double)state.iterations() * c.n_tokens, benchmark::Counter::kIsRate);
  // 2 ops (multiply, add) per weight element per token, in units of 1e9 ops per second.
  state.counters["GOP/s"] = benchmark::Counter(
      (double)state.iterations() * 2e-9 * (double)c.n_rows * (double)c.n_in * (double)c.n_tokens,
      benchmark::Counter::kIsRate);
  state.SetLabel(k.isa);
}

void bm_bandwidth(benchmark::State& state, bool triad, int threads) {
  ThreadPool pool(threads);
  double gbs = 0.0;
  for (auto _ : state) {
    gbs = triad ? measure_memory_bandwidth_gbs(pool, size_t{384} << 20)
                : measure_read_bandwidth_gbs(pool, size_t{256} << 20);
  }
  state.counters["GB/s"] = gbs;
  state.SetBytesProcessed((int64_t)(gbs * 1e9 * state.iterations()));  // shown as bytes/s too
  state.SetIterationTime(1.0);
}

// Attention of q consecutive causal queries ending at position depth, one KV head with a GQA
// group of 8 and head_dim 64 in blocks of 16 of `dtype` (the real model's layout), on one
// thread. GB/s: K/V bytes (with INT8 scales) read per second, each row once per call; at depth
// 32768 one head's K/V (8 MB f16) is past L2, as a long context's are.
void bm_attention(benchmark::State& state, int64_t n_queries, int64_t depth, KvDtype dtype) {
  const KernelTable& k = kernels();
  constexpr int32_t kHd = 64, kGroup = 8, kBlock = 16;
  const int64_t n_blocks = (depth + kBlock - 1) / kBlock;
  const int64_t row_bytes = (int64_t)kv_elem_bytes(dtype) * kHd;
  const int64_t scales = dtype == KvDtype::kInt8 ? kBlock * 4 : 0;
  const int64_t stride = 2 * kBlock * row_bytes + 2 * scales;
  std::vector<uint8_t> arena(n_blocks * stride);
  uint8_t* b = arena.data();
  const KvLayerView kv = {dtype,
                          b,
                          b + kBlock * row_bytes,
                          scales ? b + 2 * kBlock * row_bytes : nullptr,
                          scales ? b + 2 * kBlock * row_bytes + scales : nullptr,
                          stride,
                          kBlock,
                          1,
                          kHd};
  std::vector<uint32_t> table(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) table[b] = (uint32_t)((b * 7) % n_blocks);  // scattered
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(kHd), row2(kHd);
  for (int64_t p = 0; p < depth; ++p) {
    for (auto& x : row) x = dist(rng);
    for (auto& x : row2) x = dist(rng);
    k.kv_store(kv, table, p, row.data(), row2.data());
  }
  std::vector<float> q(n_queries * kGroup * kHd), out(q.size());
  for (auto& x : q) x = dist(rng);
  std::vector<AttnQuery> queries(n_queries);
  double positions = 0;
  for (int64_t i = 0; i < n_queries; ++i) {
    const int64_t end = depth - n_queries + 1 + i;
    queries[i] = {q.data() + i * kGroup * kHd, out.data() + i * kGroup * kHd, 0, end};
    positions += (double)end;
  }
  std::vector<float> scratch(attention_scratch_floats(kHd));
  for (auto _ : state) {
    k.attention(queries, kGroup, kv, table, {0.125f}, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(positions * kGroup * kHd * 4 * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GB/s"] =
      benchmark::Counter((double)depth * 2 * (row_bytes + scales / kBlock) * state.iterations(),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(k.isa);
}

void register_all() {
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,   GgmlType::kQ8_0,
                            GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K,   GgmlType::kQ6_K,
                            GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS, GgmlType::kMXFP4};
  const int64_t shapes[][2] = {{2048, 2048}, {5632, 2048}};
  for (GgmlType t : types) {
    for (const auto& s : shapes) {
      // 1: decode; 8..512: prefill chunks (512 = the default max batch tokens).
      for (int64_t n_tokens : {1, 8, 32, 64, 512}) {
        for (int threads : {1, 2}) {
          for (bool packed : {false, true}) {
            if (packed && !kernels().packs(t, s[0], s[1])) continue;
            const std::string name = std::string(packed ? "BM_MatmulPacked/" : "BM_Matmul/") +
                                     std::string(type_traits(t).name) + "/" + std::to_string(s[0]) +
                                     "x" + std::to_string(s[1]) +
                                     "/tokens:" + std::to_string(n_tokens) +
                                     "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), bm_matmul,
                                         MatmulCase{t, s[0], s[1], n_tokens, threads, packed})
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
          }
        }
      }
    }
  }
  // Decode through a 151936-token output head of width 1024 (Qwen3-0.6B's, tied: Q6_K left
  // unpacked in a Q4_K_M file; untied heads are packed).
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int threads : {1, 2}) {
      for (bool packed : {false, true}) {
        const std::string name = std::string(packed ? "BM_MatmulPacked/" : "BM_Matmul/") +
                                 std::string(type_traits(t).name) +
                                 "/151936x1024/tokens:1/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), bm_matmul,
                                     MatmulCase{t, 151936, 1024, 1, threads, packed})
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  const std::tuple<KvDtype, int64_t, int64_t> attention_cases[] = {
      {KvDtype::kF16, 1, 4096},  {KvDtype::kF16, 1, 32768}, {KvDtype::kInt8, 1, 32768},
      {KvDtype::kF16, 16, 512},  {KvDtype::kF16, 16, 2048}, {KvDtype::kF16, 16, 8192},
      {KvDtype::kInt8, 16, 8192}};
  for (auto [dtype, n_queries, depth] : attention_cases) {
    const std::string name = std::string("BM_Attention/") + kv_dtype_name(dtype) +
                             "/queries:" + std::to_string(n_queries) +
                             "/depth:" + std::to_string(depth);
    benchmark::RegisterBenchmark(name.c_str(), bm_attention, n_queries, depth, dtype)
        ->Unit(benchmark::kMicrosecond);
  }
  for (bool triad : {true, false}) {
    for (int threads : {1, 2}) {
      const std::string name = std::string("BM_MemoryBandwidth/") + (triad ? "triad" : "read") +
                               "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), bm_bandwidth, triad, threads)
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace kvw::kernels

int main(int argc, char** argv) {
  return kvw::bench::run_registered(argc, argv, kvw::kernels::register_all);
}
