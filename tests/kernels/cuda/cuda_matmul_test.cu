// tests/kernels/cuda/cuda_matmul_test.cu: correctness test and microbenchmark of the CUDA
// matmul (kernels/cuda/cuda_matmul.h). Plain main(), no GoogleTest: GPU machines need not have
// the project's test dependencies.
//
//   cuda_matmul_test            correctness on model shapes, then the benchmark
//   cuda_matmul_test --quick    small shapes only, no benchmark (for compute-sanitizer)
//   cuda_matmul_test --no-bench correctness only
//
// Correctness: random F16 / Q8_0 weights (GGUF rows, built with the project's fp16 conversion),
// random f32 activations, and a float64 reference over the same dequantised weights (d * q for
// Q8_0, the exact f16 value for F16). Pass when, for every output, |y - ref| <= kTol * S with
// S = sum_i |W[r][i] * x[t][i]|. Why kTol = 1e-5: the kernel forms each output with at most
// 16 (one chunk) + n_in / 256 (chunks per lane) + 1 (scale) + 5 (lanes) f32 roundings in
// sequence, under 50 for n_in <= 5632, so its error is below about 50 * 2^-24 * S = 3e-6 * S;
// a wrong index, a lost chunk or a misplaced scale is off by a sizeable part of S. Unwritten
// outputs stay NaN (the output is poisoned before every run) and fail. Results must also be
// bit-identical across rows_per_warp and token grouping (batch invariance, as on the CPU).
//
// Benchmark: GB/s of weight bytes read (each once per launch) for 1 and 8 tokens, the median of
// 21 samples after 5 warm-ups, each sample timed with CUDA events over one launch per weight
// copy, with enough copies that they exceed 4x the L2 (so HBM is measured, not the cache);
// against a device-to-device cudaMemcpy of 2 GiB counted as bytes read + bytes written.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "kernels/cuda/cuda_matmul.h"

namespace kvw::cuda {
namespace {

constexpr double kTol = 1e-5;

#define TEST_CUDA(expr)                                                        \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    if (err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                                  \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

template <typename T>
T must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "FATAL %s: %s\n", what, r.message().c_str());
    std::exit(2);
  }
  return std::move(r).value();
}

void must(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "FATAL %s: %s\n", what, s.message().c_str());
    std::exit(2);
  }
}

// splitmix64: a fast, seedable generator (the weights of the largest shape are 65M values).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return (float)(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }  // [-1,1)
};

const char* type_name(GgmlType t) {
  return t == GgmlType::kQ8_0 ? "q8_0" : "f16";
}

// Random GGUF rows. Blocks of 32 get scales spread over 2^-6..1 so Q8_0 scales and F16
// exponents vary as in trained weights. Q8_0: quantised as the project does (d = amax / 127,
// round to nearest even), every 97th block all zero (d = 0) and every 61st with a quant of
// -128 (valid int8, never written by ggml) to cover the whole int8 range. F16: every 89th block
// holds subnormals.
std::vector<uint8_t> make_weights(GgmlType type, int64_t n_rows, int64_t n_in, uint64_t seed) {
  Rng rng{seed};
  const int64_t nb_total = n_rows * n_in / kQK8_0;
  std::vector<uint8_t> out(type == GgmlType::kQ8_0 ? nb_total * sizeof(BlockQ8_0)
                                                   : n_rows * n_in * 2);
  float v[kQK8_0];
  for (int64_t b = 0; b < nb_total; ++b) {
    const float scale = std::ldexp(1.0f, -(int)(rng.next() % 7));
    for (int j = 0; j < kQK8_0; ++j) v[j] = rng.uniform() * scale;
    if (type == GgmlType::kQ8_0) {
      BlockQ8_0 blk;
      if (b % 97 == 5) {
        std::memset(&blk, 0, sizeof(blk));
      } else {
        float amax = 0.0f;
        for (float f : v) amax = std::fmax(amax, std::fabs(f));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk.d = f32_to_f16(d);
        for (int j = 0; j < kQK8_0; ++j) {
          blk.qs[j] = (int8_t)std::clamp(std::nearbyint(v[j] * id), -127.0f, 127.0f);
        }
        if (b % 61 == 7) blk.qs[(b / 61) % kQK8_0] = -128;
      }
      std::memcpy(out.data() + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
    } else {
      uint16_t h[kQK8_0];
      for (int j = 0; j < kQK8_0; ++j) {
        h[j] = f32_to_f16(b % 89 == 3 ? v[j] * 1e-5f : v[j]);  // 1e-5 * [-1, 1): subnormal f16
      }
      std::memcpy(out.data() + b * sizeof(h), h, sizeof(h));
    }
  }
  return out;
}

std::vector<float> make_activations(int64_t n_tokens, int64_t n_in, uint64_t seed) {
  Rng rng{seed};
  std::vector<float> x(n_tokens * n_in);
  for (float& f : x) f = rng.uniform();
  return x;
}

double weight_at(GgmlType type, const uint8_t* rows, int64_t n_in, int64_t r, int64_t i) {
  if (type == GgmlType::kF16) {
    uint16_t h;
    std::memcpy(&h, rows + (r * n_in + i) * 2, 2);
    return f16_to_f32(h);
  }
  const auto* blk = reinterpret_cast<const BlockQ8_0*>(rows) + (r * n_in + i) / kQK8_0;
  uint16_t d;
  std::memcpy(&d, &blk->d, 2);
  return (double)f16_to_f32(d) * blk->qs[i % kQK8_0];
}

// float64 reference: ref[t][r] = sum_i W[r][i] x[t][i] and mag[t][r] = sum_i |W[r][i] x[t][i]|.
void reference(GgmlType type, const std::vector<uint8_t>& w, int64_t n_rows, int64_t n_in,
               const std::vector<float>& x, int64_t n_tokens, std::vector<double>& ref,
               std::vector<double>& mag) {
  ref.assign(n_tokens * n_rows, 0.0);
  mag.assign(n_tokens * n_rows, 0.0);
  const int nth = (int)std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (int ith = 0; ith < nth; ++ith) {
    threads.emplace_back([&, ith] {
      std::vector<double> row(n_in);
      for (int64_t r = ith; r < n_rows; r += nth) {
        for (int64_t i = 0; i < n_in; ++i) row[i] = weight_at(type, w.data(), n_in, r, i);
        for (int64_t t = 0; t < n_tokens; ++t) {
          double s = 0.0, m = 0.0;
          for (int64_t i = 0; i < n_in; ++i) {
            const double p = row[i] * x[t * n_in + i];
            s += p;
            m += std::fabs(p);
          }
          ref[t * n_rows + r] = s;
          mag[t * n_rows + r] = m;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
}

struct Counts {
  int passed = 0;
  int failed = 0;
};

// Runs the matmul with x and y in device memory; y is poisoned with NaN (all bits set) first.
std::vector<float> run_matmul(const DeviceMatrix& w, const DeviceBuffer& x, int64_t n_tokens,
                              DeviceBuffer& y, int rows_per_warp) {
  const int64_t y_bytes = n_tokens * w.n_rows() * 4;
  TEST_CUDA(cudaMemset(y.data(), 0xFF, (size_t)y_bytes));
  must(matmul(w, static_cast<const float*>(x.data()), n_tokens, static_cast<float*>(y.data()),
              MatmulOptions{.rows_per_warp = rows_per_warp}),
       "matmul");
  must(synchronize(), "synchronize after matmul");
  std::vector<float> out(n_tokens * w.n_rows());
  must(y.download(out.data(), y_bytes), "download y");
  return out;
}

void check_shape(GgmlType type, int64_t n_rows, int64_t n_in, std::vector<int> token_counts,
                 uint64_t seed, Counts& counts) {
  const std::vector<uint8_t> host_w = make_weights(type, n_rows, n_in, seed);
  const DeviceMatrix w =
      must(DeviceMatrix::upload(type, host_w.data(), n_rows, n_in), "upload weights");
  const int64_t max_tokens = *std::max_element(token_counts.begin(), token_counts.end());
  DeviceBuffer x = must(DeviceBuffer::allocate(max_tokens * n_in * 4), "allocate x");
  DeviceBuffer y = must(DeviceBuffer::allocate(max_tokens * n_rows * 4), "allocate y");
  std::vector<float> single;  // token 0 of the first run with 1 token, for batch invariance
  for (int n_tokens : token_counts) {
    const std::vector<float> host_x = make_activations(n_tokens, n_in, seed + 1);
    must(x.upload(host_x.data(), n_tokens * n_in * 4), "upload x");
    std::vector<double> ref, mag;
    reference(type, host_w, n_rows, n_in, host_x, n_tokens, ref, mag);
    std::vector<float> first;
    for (int rpw : {0, 1, 2, 4}) {
      const std::vector<float> y_host = run_matmul(w, x, n_tokens, y, rpw);
      double max_err = 0.0, num = 0.0, den = 0.0;
      int64_t bad = 0, worst = 0;
      for (int64_t k = 0; k < (int64_t)y_host.size(); ++k) {
        const double diff = std::fabs((double)y_host[k] - ref[k]);
        const double err = mag[k] > 0.0 ? diff / mag[k] : diff;
        if (!std::isfinite(y_host[k]) || !(err <= kTol)) ++bad;
        if (!std::isfinite(y_host[k]) || err > max_err) {
          max_err = std::isfinite(y_host[k]) ? err : INFINITY;
          worst = k;
        }
        num += diff * diff;
        den += ref[k] * ref[k];
      }
      const double rel_l2 = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
      bool same_bits = true;
      if (first.empty()) {
        first = y_host;
      } else {
        same_bits = std::memcmp(first.data(), y_host.data(), first.size() * 4) == 0;
      }
      if (n_tokens == 1 && single.empty()) single = y_host;
      // Token 0 is the same activation row in every run (same seed): its bits must not depend
      // on how many tokens share the pass.
      const bool invariant =
          single.empty() || std::memcmp(single.data(), y_host.data(), n_rows * 4) == 0;
      const bool ok = bad == 0 && same_bits && invariant;
      std::printf(
          "%s %-5s %6lld x %-5lld tokens %2d rpw %d: max err/sum|wx| %.2e (y %.6g ref %.6g) "
          "rel_l2 %.2e bad %lld%s%s\n",
          ok ? "PASS" : "FAIL", type_name(type), (long long)n_rows, (long long)n_in, n_tokens, rpw,
          max_err, (double)y_host[worst], ref[worst], rel_l2, (long long)bad,
          same_bits ? "" : " [bits differ across rows_per_warp]",
          invariant ? "" : " [token 0 differs from the 1-token run]");
      ok ? ++counts.passed : ++counts.failed;
    }
  }
}

// Rejected arguments come back as errors, not crashes.
void check_errors(Counts& counts) {
  std::vector<uint8_t> rows(64 * 40 * 2, 0);
  const bool bad_type = !DeviceMatrix::upload(GgmlType::kQ4_0, rows.data(), 4, 32).ok();
  const bool bad_f16 = !DeviceMatrix::upload(GgmlType::kF16, rows.data(), 4, 36).ok();
  const bool bad_q8 = !DeviceMatrix::upload(GgmlType::kQ8_0, rows.data(), 4, 48).ok();
  const DeviceMatrix w = must(DeviceMatrix::upload(GgmlType::kF16, rows.data(), 64, 40), "upload");
  DeviceBuffer buf = must(DeviceBuffer::allocate(4096), "allocate");
  auto* f = static_cast<float*>(buf.data());
  const bool misaligned = !matmul(w, f + 1, 1, f + 512).ok();
  const bool bad_rpw = !matmul(w, f, 1, f + 512, MatmulOptions{.rows_per_warp = 3}).ok();
  const bool no_tokens = !matmul(w, f, 0, f + 512).ok();
  const bool too_big = !DeviceBuffer::allocate(int64_t{1} << 50).ok();
  const bool range = !buf.upload(rows.data(), 16, 4090).ok();
  const bool ok = bad_type && bad_f16 && bad_q8 && misaligned && bad_rpw && no_tokens && too_big &&
                  range && synchronize().ok();
  std::printf(
      "%s errors: type %d f16-n_in %d q8-n_in %d misaligned-x %d rpw %d tokens %d "
      "alloc-1PiB %d range %d\n",
      ok ? "PASS" : "FAIL", bad_type, bad_f16, bad_q8, misaligned, bad_rpw, no_tokens, too_big,
      range);
  ok ? ++counts.passed : ++counts.failed;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over 21 samples of the time of one launch, in seconds.
double time_matmul(const std::vector<DeviceMatrix>& copies, const float* x, int n_tokens, float* y,
                   int rows_per_warp) {
  cudaEvent_t start, stop;
  TEST_CUDA(cudaEventCreate(&start));
  TEST_CUDA(cudaEventCreate(&stop));
  std::vector<double> samples;
  for (int s = 0; s < 5 + 21; ++s) {
    TEST_CUDA(cudaEventRecord(start));
    for (const DeviceMatrix& w : copies) {
      must(matmul(w, x, n_tokens, y, MatmulOptions{.rows_per_warp = rows_per_warp}), "matmul");
    }
    TEST_CUDA(cudaEventRecord(stop));
    TEST_CUDA(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TEST_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (s >= 5) samples.push_back(ms * 1e-3 / copies.size());
  }
  must(synchronize(), "synchronize after benchmark");
  TEST_CUDA(cudaEventDestroy(start));
  TEST_CUDA(cudaEventDestroy(stop));
  return median(samples);
}

// Device-to-device copy bandwidth, bytes read + bytes written per second (median of 11).
double copy_bandwidth() {
  const int64_t bytes = int64_t{2} << 30;
  DeviceBuffer a = must(DeviceBuffer::allocate(bytes), "allocate copy source");
  DeviceBuffer b = must(DeviceBuffer::allocate(bytes), "allocate copy destination");
  TEST_CUDA(cudaMemset(a.data(), 0x5A, (size_t)bytes));
  cudaEvent_t start, stop;
  TEST_CUDA(cudaEventCreate(&start));
  TEST_CUDA(cudaEventCreate(&stop));
  std::vector<double> samples;
  for (int s = 0; s < 3 + 11; ++s) {
    TEST_CUDA(cudaEventRecord(start));
    TEST_CUDA(cudaMemcpyAsync(b.data(), a.data(), (size_t)bytes, cudaMemcpyDeviceToDevice));
    TEST_CUDA(cudaEventRecord(stop));
    TEST_CUDA(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TEST_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (s >= 3) samples.push_back(2.0 * bytes / (ms * 1e-3));
  }
  TEST_CUDA(cudaEventDestroy(start));
  TEST_CUDA(cudaEventDestroy(stop));
  return median(samples);
}

struct Shape {
  int64_t n_rows;
  int64_t n_in;
  const char* what;
};

void benchmark(const DeviceInfo& info, const std::vector<Shape>& shapes) {
  const double copy_bps = copy_bandwidth();
  std::printf("\ncopy bandwidth (cudaMemcpy D2D 2 GiB, read + write): %.1f GB/s\n",
              copy_bps * 1e-9);
  std::printf("%-5s %-18s %6s %4s %4s %7s %10s %9s %7s\n", "type", "shape", "tokens", "rpw",
              "rpw=", "copies", "us/launch", "GB/s", "%copy");
  double goal_pct = -1.0;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kF16}) {
    for (const Shape& s : shapes) {
      const std::vector<uint8_t> host_w = make_weights(type, s.n_rows, s.n_in, 7);
      std::vector<DeviceMatrix> copies;
      copies.push_back(must(DeviceMatrix::upload(type, host_w.data(), s.n_rows, s.n_in), "up"));
      const int64_t n_copies = std::max<int64_t>(
          1, (4 * info.l2_bytes + copies[0].weight_bytes() - 1) / copies[0].weight_bytes());
      while ((int64_t)copies.size() < n_copies) {
        copies.push_back(must(DeviceMatrix::upload(type, host_w.data(), s.n_rows, s.n_in), "up"));
      }
      const std::vector<float> host_x = make_activations(8, s.n_in, 8);
      DeviceBuffer x = must(DeviceBuffer::allocate(8 * s.n_in * 4), "allocate x");
      DeviceBuffer y = must(DeviceBuffer::allocate(8 * s.n_rows * 4), "allocate y");
      must(x.upload(host_x.data(), 8 * s.n_in * 4), "upload x");
      for (int n_tokens : {1, 8}) {
        for (int rpw : {0, 1, 2, 4}) {
          const double t = time_matmul(copies, static_cast<const float*>(x.data()), n_tokens,
                                       static_cast<float*>(y.data()), rpw);
          const double bps = copies[0].weight_bytes() / t;
          const double pct = 100.0 * bps / copy_bps;
          const int used = rpw != 0 ? rpw : matmul_rows_per_warp(s.n_rows, n_tokens, info.sm_count);
          char shape[48];
          std::snprintf(shape, sizeof(shape), "%lldx%lld %s", (long long)s.n_rows,
                        (long long)s.n_in, s.what);
          std::printf("%-5s %-18s %6d %4s %4d %7lld %10.2f %9.1f %6.1f%%\n", type_name(type), shape,
                      n_tokens, rpw == 0 ? "auto" : std::to_string(rpw).c_str(), used,
                      (long long)copies.size(), t * 1e6, bps * 1e-9, pct);
          if (type == GgmlType::kQ8_0 && s.n_rows == 32000 && n_tokens == 1 && rpw == 0) {
            goal_pct = pct;
          }
        }
      }
    }
  }
  if (goal_pct >= 0.0) {
    std::printf(
        "\ngoal: q8_0 32000x2048 batch 1 (auto) at %.1f%% of copy bandwidth (goal >= 70%%): "
        "%s\n",
        goal_pct, goal_pct >= 70.0 ? "met" : "NOT met");
  }
}

int run(int argc, char** argv) {
  bool quick = false, bench = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      bench = false;
    } else if (std::strcmp(argv[i], "--no-bench") == 0) {
      bench = false;
    } else {
      std::fprintf(stderr, "usage: %s [--quick | --no-bench]\n", argv[0]);
      return 2;
    }
  }
  const DeviceInfo info = must(device_info(0), "device_info");
  std::printf("device: %s, cc %d.%d, %d SMs, %.1f GiB, L2 %.1f MiB, runtime %d, driver %d\n",
              info.name.c_str(), info.cc_major, info.cc_minor, info.sm_count,
              info.mem_bytes / 1073741824.0, info.l2_bytes / 1048576.0, info.runtime_version,
              info.driver_version);

  Counts counts;
  check_errors(counts);
  // Odd shapes: fewer chunks than lanes, rows not a multiple of the rows per block, one block.
  const std::vector<Shape> odd = {{1001, 96, ""}, {37, 4128, ""}, {3, 32, ""}, {130, 2048, ""}};
  // TinyLlama 1.1B: q/o projections, gate/up, down, output.
  const std::vector<Shape> model = {
      {2048, 2048, "attn"}, {5632, 2048, "gate/up"}, {2048, 5632, "down"}, {32000, 2048, "output"}};
  uint64_t seed = 100;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kF16}) {
    for (const Shape& s : odd) check_shape(type, s.n_rows, s.n_in, {1, 3, 9}, seed++, counts);
    if (!quick) {
      for (const Shape& s : model) {
        check_shape(type, s.n_rows, s.n_in, {1, 2, 8, 11}, seed++, counts);
      }
    }
  }
  std::printf("\n%d passed, %d failed\n", counts.passed, counts.failed);
  if (counts.failed != 0) return 1;
  if (bench) benchmark(info, model);
  return 0;
}

}  // namespace
}  // namespace kvw::cuda

int main(int argc, char** argv) {
  return kvw::cuda::run(argc, argv);
}
