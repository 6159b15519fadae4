// kernels/membw.cc: STREAM-like triad and read-only bandwidth probes (see membw.h).
#include "kernels/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/huge_pages.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace {

constexpr int kRepetitions = 5;
// Elements per 64-byte line, and how far ahead each stream is prefetched. Without software
// prefetch this VM's streams were latency-bound (read probe 7 GB/s while an F16 matmul with
// prefetch streamed 17 GB/s), which would understate the bound the matmuls are held to.
constexpr int64_t kLine = 16;
constexpr int64_t kAheadBytes = 4096;

// The prefetch address may lie past the array: form it as an integer, never as a pointer.
void prefetch_ahead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kAheadBytes));
}

// An array in huge pages, as the model's weights are: with 4 KiB pages a 512 MiB stream spends
// its time in TLB misses and the probe read 20.6 GB/s while Q4_0 decode streamed 24.7 GB/s of
// weights on the same machine. Without an anonymous mapping it falls back to the heap.
template <class T>
class HugeArray {
 public:
  explicit HugeArray(int64_t n) {
    data_ = reinterpret_cast<T*>(map_huge_pages((uint64_t)n * sizeof(T), &mapped_));
    if (data_ == nullptr) {
      fallback_.resize(n);
      data_ = fallback_.data();
    }
  }
  ~HugeArray() { unmap_huge_pages(reinterpret_cast<uint8_t*>(data_), mapped_); }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  T* data() { return data_; }
  T& operator[](int64_t i) { return data_[i]; }

 private:
  uint64_t mapped_ = 0;  // 0: the heap fallback
  T* data_ = nullptr;
  std::vector<T> fallback_;
};

template <class Fn>
double best_seconds(ThreadPool& pool, const Fn& fn) {
  double best = 1e30;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(fn);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count());
  }
  return best;
}

}  // namespace

double measure_memory_bandwidth_gbs(ThreadPool& pool, size_t bytes) {
  const int64_t n = std::max<int64_t>(1024, (int64_t)(bytes / (3 * sizeof(float))) / 1024 * 1024);
  HugeArray<float> a(n), b(n), c(n);
  // First touch by the same threads that later stream each range.
  pool.run([&](int ith, int nth) {
    const RowRange r = split_range(n, ith, nth, 1024);
    for (int64_t i = r.begin; i < r.end; ++i) {
      a[i] = 0.0f;
      b[i] = 1.0f;
      c[i] = 2.0f;
    }
  });
  const float s = 3.0f;
  const double seconds = best_seconds(pool, [&](int ith, int nth) {
    const RowRange r = split_range(n, ith, nth, 1024);
    float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
    for (int64_t i = r.begin; i < r.end; i += kLine) {
      prefetch_ahead(pb + i);
      prefetch_ahead(pc + i);
      for (int64_t j = i; j < i + kLine; ++j) pa[j] = pb[j] + s * pc[j];
    }
  });
  return 3.0 * (double)n * sizeof(float) / seconds / 1e9;
}

double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes) {
  const int64_t n = std::max<int64_t>(1024, (int64_t)(bytes / sizeof(uint32_t)) / 1024 * 1024);
  HugeArray<uint32_t> a(n);
  pool.run([&](int ith, int nth) {
    const RowRange r = split_range(n, ith, nth, 1024);
    for (int64_t i = r.begin; i < r.end; ++i) a[i] = (uint32_t)i;
  });
  std::vector<uint64_t> sums(pool.num_threads() * 8);  // 64-byte apart: no false sharing
  const double seconds = best_seconds(pool, [&](int ith, int nth) {
    const RowRange r = split_range(n, ith, nth, 1024);
    // Integer sum (wrapping): vectorises without -ffast-math, so the loop is load-bound.
    uint32_t sum = 0;
    const uint32_t* pa = a.data();
    for (int64_t i = r.begin; i < r.end; i += kLine) {
      prefetch_ahead(pa + i);
      for (int64_t j = i; j < i + kLine; ++j) sum += pa[j];
    }
    sums[ith * 8] = sum;
  });
  return (double)n * sizeof(uint32_t) / seconds / 1e9;
}

}  // namespace kvw::kernels
