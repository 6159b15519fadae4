// tests/kernels/cuda/cuda_attention_test.cu: correctness test and benchmark of the CUDA paged
// decode attention (kernels/cuda/cuda_attention.h). Plain main(), no GoogleTest, like
// cuda_matmul_test.
//
//   cuda_attention_test            correctness on model shapes, then the benchmark
//   cuda_attention_test --quick    small shapes only, no benchmark (for compute-sanitizer)
//   cuda_attention_test --tiny     4 small cases of one shape (for compute-sanitizer racecheck)
//   cuda_attention_test --no-bench correctness only
//
// Correctness: one pool of random f16 K/V in [-1, 1) (2 GiB, 64 MiB with --quick) is uploaded
// into a DeviceKvCache of each shape (head_dim 64 / 128; 32 query heads over 8 or 4 KV heads;
// block size 16, and 32 for some cases); each sequence gets a block table of distinct blocks
// drawn at random from the pool. q is random in [-1, 1) times 1, 4 or 8 by head (peaked
// softmaxes too). Sequences of a batch have different lengths (the longest = the case's
// context); under a sliding window (every odd sequence from context 512 on) the table entries
// before the window are -1, so a read of them faults. Reference: float64 softmax(q.K * scale).V.
// Error measure of an output element: |out - ref| / W, W = sum_p P_p |V_p[d]| (P the exact
// softmax weights), the size of the terms averaged. Pass when every element has error <= kTol
// = 1e-4 against the reference, for the automatic split and for splits 64, 256 and 2048, and
// the splits agree with each other within 2 * kTol (the result depends on the split only
// through f32 rounding). Why 1e-4: the f32 sums run over at most split / 8 (per thread), 8
// (token groups) and split count terms, plus one rescale per tile; a worst-case bound of
// n * 2^-24 with n = 4096 (one split of 32768 positions) is 2.4e-4, a random-walk estimate
// sqrt(n) * 2^-24 about 4e-6; an indexing or masking error moves a short context's output by
// a whole position's weight (>= 1/512 of W at context 512). Unwritten outputs stay NaN (the
// output is poisoned before every run) and fail. Also checked: bit-identical results for the
// same split on a re-run and for a sequence run alone vs inside a batch of 16; argument errors.
//
// Benchmark: head_dim 128, 32 query heads over 8 and 4 KV heads, batch 1 and 16, contexts 4096
// and 32768: GB/s of K+V bytes read (each once per launch: n_seqs * ctx * n_kv_heads * head_dim
// * 4) over both kernels (split + merge), median of 21 samples (3 warm-ups) timed with CUDA
// events over a round of launches on different block tables, enough that one round reads over
// 4x the L2; against a 1 GiB device-to-device cudaMemcpy counted as read + write.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "kernels/cuda/cuda_attention.h"

namespace kvw::cuda {
namespace {

constexpr double kTol = 1e-4;

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

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return (float)(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs f(i) for i in [0, n) on all hardware threads.
void parallel_for(int64_t n, const std::function<void(int64_t)>& f) {
  const int nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (int t = 0; t < nt; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += nt) f(i);
    });
  }
  for (auto& th : threads) th.join();
}

// The pool of random f16 values that every cache shape reinterprets.
std::vector<uint16_t> make_pool(int64_t n_halfs) {
  std::vector<uint16_t> pool(n_halfs);
  const int64_t piece = 1 << 20;
  parallel_for((n_halfs + piece - 1) / piece, [&](int64_t k) {
    Rng rng{0xA77Eu + (uint64_t)k * 7919};
    const int64_t e = std::min(n_halfs, (k + 1) * piece);
    for (int64_t i = k * piece; i < e; ++i) pool[i] = f32_to_f16(rng.uniform());
  });
  return pool;
}

struct Config {
  int32_t head_dim;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t block_size;
};

// A cache shape over the pool: the host bytes (pool) and the device copy.
struct Cache {
  Config cfg;
  DeviceKvShape shape;
  const uint16_t* host;  // the pool, read in this shape's layout
  DeviceKvCache dev;

  // Host K (value = false) or V row of block `blk`, kv head `g`, slot `slot`.
  const uint16_t* row(bool value, int64_t blk, int g, int slot) const {
    const int64_t halfs = shape.layer_block_bytes() / 2;
    return host + blk * halfs + (value ? shape.v_offset() / 2 : 0) +
           ((int64_t)g * cfg.block_size + slot) * cfg.head_dim;
  }
};

Cache make_cache(const Config& cfg, const std::vector<uint16_t>& pool) {
  DeviceKvShape shape;
  shape.n_layer = 1;
  shape.n_kv_heads = cfg.n_kv_heads;
  shape.head_dim = cfg.head_dim;
  shape.block_size = cfg.block_size;
  shape.num_blocks = (int64_t)pool.size() * 2 / shape.layer_block_bytes();
  DeviceKvCache dev = must(DeviceKvCache::allocate(shape), "allocate K/V cache");
  must(dev.upload_blocks(0, 0, shape.num_blocks, pool.data()), "upload K/V pool");
  return Cache{cfg, shape, pool.data(), std::move(dev)};
}

// One batch on the host and its device copies.
struct Batch {
  int32_t n_seqs = 0;
  int64_t max_span = 0;
  int64_t table_stride = 0;
  std::vector<int32_t> begin, end, tables;
  std::vector<float> q;  // [n_seqs][n_heads][head_dim]
  DeviceBuffer d_q, d_out, d_tables, d_begin, d_end;

  AttnDecodeBatch view(int32_t n_heads) const {
    AttnDecodeBatch b;
    b.q = static_cast<const float*>(d_q.data());
    b.out = static_cast<float*>(d_out.data());
    b.block_tables = static_cast<const int32_t*>(d_tables.data());
    b.table_stride = table_stride;
    b.pos_begin = static_cast<const int32_t*>(d_begin.data());
    b.pos_end = static_cast<const int32_t*>(d_end.data());
    b.n_seqs = n_seqs;
    b.n_heads = n_heads;
    b.max_span = max_span;
    return b;
  }
};

// Sequence lengths: the first is ctx, the others spread below it; windows on odd sequences
// when `window`. Tables take distinct blocks of the pool from `perm` starting at *next.
Batch make_batch(const Cache& c, int32_t n_seqs, int32_t ctx, bool window, bool all_full,
                 const std::vector<int32_t>& perm, int64_t* next, uint64_t seed) {
  Rng rng{seed};
  Batch b;
  b.n_seqs = n_seqs;
  const int32_t bs = c.cfg.block_size;
  b.table_stride = (ctx + bs - 1) / bs;
  b.tables.assign((size_t)n_seqs * b.table_stride, -1);
  for (int32_t s = 0; s < n_seqs; ++s) {
    int32_t len = ctx;
    if (s > 0 && !all_full) len = 1 + (int32_t)(rng.next() % (uint64_t)ctx);
    int32_t beg = 0;
    if (window && (s % 2) == 1 && len > 3) {
      beg = std::min(len - 1, len / 3 + (int32_t)(rng.next() % 7));
    }
    b.begin.push_back(beg);
    b.end.push_back(len);
    b.max_span = std::max<int64_t>(b.max_span, len - beg);
    for (int32_t j = beg / bs; j < (len + bs - 1) / bs; ++j) {
      if (*next >= (int64_t)perm.size()) {
        std::fprintf(stderr, "FATAL pool too small\n");
        std::exit(2);
      }
      b.tables[(size_t)s * b.table_stride + j] = perm[(*next)++];
    }
  }
  const int64_t qn = (int64_t)n_seqs * c.cfg.n_heads * c.cfg.head_dim;
  b.q.resize(qn);
  for (int64_t i = 0; i < qn; ++i) {
    const int64_t head = i / c.cfg.head_dim;
    const float mult = head % 3 == 0 ? 1.0f : (head % 3 == 1 ? 4.0f : 8.0f);
    b.q[i] = rng.uniform() * mult;
  }
  b.d_q = must(DeviceBuffer::allocate(qn * 4), "allocate q");
  b.d_out = must(DeviceBuffer::allocate(qn * 4), "allocate out");
  b.d_tables = must(DeviceBuffer::allocate((int64_t)b.tables.size() * 4), "allocate tables");
  b.d_begin = must(DeviceBuffer::allocate(n_seqs * 4), "allocate begin");
  b.d_end = must(DeviceBuffer::allocate(n_seqs * 4), "allocate end");
  must(b.d_q.upload(b.q.data(), qn * 4), "upload q");
  must(b.d_tables.upload(b.tables.data(), (int64_t)b.tables.size() * 4), "upload tables");
  must(b.d_begin.upload(b.begin.data(), n_seqs * 4), "upload begin");
  must(b.d_end.upload(b.end.data(), n_seqs * 4), "upload end");
  return b;
}

// float64 reference: ref and W (see the header comment) per output element.
void reference(const Cache& c, const Batch& b, float scale, std::vector<double>* ref,
               std::vector<double>* weight) {
  const int D = c.cfg.head_dim, H = c.cfg.n_heads, G = H / c.cfg.n_kv_heads;
  const int bs = c.cfg.block_size;
  ref->assign((size_t)b.n_seqs * H * D, 0.0);
  weight->assign(ref->size(), 0.0);
  parallel_for((int64_t)b.n_seqs * H, [&](int64_t sh) {
    const int s = (int)(sh / H), h = (int)(sh % H), g = h / G;
    const float* q = b.q.data() + sh * D;
    const int32_t beg = b.begin[s], end = b.end[s];
    std::vector<double> sc(end - beg);
    std::vector<double> qd(q, q + D);
    double mx = -INFINITY;
    for (int32_t p = beg; p < end; ++p) {
      const int64_t blk = b.tables[(size_t)s * b.table_stride + p / bs];
      const uint16_t* k = c.row(false, blk, g, p % bs);
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += qd[d] * f16_to_f32(k[d]);
      sc[p - beg] = dot * scale;
      mx = std::max(mx, sc[p - beg]);
    }
    double sum = 0.0;
    for (double& x : sc) sum += (x = std::exp(x - mx));
    double* out = ref->data() + sh * D;
    double* w = weight->data() + sh * D;
    std::vector<double> vd(D);
    for (int32_t p = beg; p < end; ++p) {
      const int64_t blk = b.tables[(size_t)s * b.table_stride + p / bs];
      const uint16_t* v = c.row(true, blk, g, p % bs);
      const double pr = sc[p - beg] / sum;
      for (int d = 0; d < D; ++d) {
        const double x = f16_to_f32(v[d]);
        out[d] += pr * x;
        w[d] += pr * std::fabs(x);
      }
    }
  });
}

struct Counts {
  int passed = 0;
  int failed = 0;
  double max_err = 0.0;         // against the reference
  double max_split_diff = 0.0;  // between splits
};

void check(bool ok, Counts& counts, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void check(bool ok, Counts& counts, const char* fmt, ...) {
  if (ok) {
    ++counts.passed;
    return;
  }
  ++counts.failed;
  std::printf("FAIL ");
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::printf("\n");
}

// Runs attention_decode with `split` (0 = auto) and returns the output (poisoned first).
std::vector<float> run_attention(const Cache& c, const Batch& b, float scale, int32_t split,
                                 DeviceBuffer& ws) {
  const DeviceKvLayer kv = c.dev.layer(0);
  const AttnDecodeBatch view = b.view(c.cfg.n_heads);
  AttnDecodeOptions opt;
  opt.split_tokens = split;
  const int64_t need = must(attention_decode_workspace_bytes(kv, view, opt), "workspace bytes");
  if (ws.bytes() < need) ws = must(DeviceBuffer::allocate(need), "allocate workspace");
  TEST_CUDA(cudaMemset(b.d_out.data(), 0xFF, (size_t)b.d_out.bytes()));
  must(attention_decode(kv, view, scale, ws.data(), ws.bytes(), opt), "attention_decode");
  must(synchronize(), "attention_decode run");
  std::vector<float> out(b.q.size());
  must(b.d_out.download(out.data(), (int64_t)out.size() * 4), "download out");
  return out;
}

void check_case(const Cache& c, int32_t n_seqs, int32_t ctx, const std::vector<int32_t>& perm,
                uint64_t seed, DeviceBuffer& ws, Counts& counts) {
  int64_t next = 0;
  const bool window = ctx >= 512;
  const Batch b = make_batch(c, n_seqs, ctx, window, false, perm, &next, seed);
  const float scale = 1.0f / std::sqrt((float)c.cfg.head_dim);
  std::vector<double> ref, w;
  reference(c, b, scale, &ref, &w);
  char name[160];
  std::snprintf(name, sizeof(name), "d%d h%d/%d bs%d batch %d ctx %d%s", c.cfg.head_dim,
                c.cfg.n_heads, c.cfg.n_kv_heads, c.cfg.block_size, n_seqs, ctx,
                window ? " (windows)" : "");
  std::vector<float> first;
  double case_err = 0.0, case_diff = 0.0;
  for (int32_t split : {0, 64, 256, 2048}) {
    const std::vector<float> out = run_attention(c, b, scale, split, ws);
    double err = 0.0;
    int64_t bad = -1;
    for (size_t i = 0; i < out.size(); ++i) {
      const double e = std::fabs(out[i] - ref[i]) / std::max(w[i], 1e-30);
      if (!(e <= err)) {  // NaN counts
        err = std::isnan(e) ? INFINITY : e;
        bad = (int64_t)i;
      }
    }
    check(err <= kTol, counts, "%s split %d: error %.3g at element %lld (out %g, ref %g, W %g)",
          name, split, err, (long long)bad, bad >= 0 ? out[bad] : 0.0, bad >= 0 ? ref[bad] : 0.0,
          bad >= 0 ? w[bad] : 0.0);
    case_err = std::max(case_err, err);
    if (first.empty()) {
      first = out;
      // Same split again: bit-identical.
      const std::vector<float> again = run_attention(c, b, scale, split, ws);
      check(std::memcmp(again.data(), out.data(), out.size() * 4) == 0, counts,
            "%s: re-run not bit-identical", name);
    } else {
      double diff = 0.0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double e = std::fabs((double)out[i] - first[i]) / std::max(w[i], 1e-30);
        diff = std::isnan(e) ? INFINITY : std::max(diff, e);
      }
      check(diff <= 2 * kTol, counts, "%s split %d vs auto: differ by %.3g", name, split, diff);
      case_diff = std::max(case_diff, diff);
    }
  }
  // Batch invariance: sequence 0 alone, split 256, against its row in the batch.
  if (n_seqs > 1) {
    const std::vector<float> in_batch = run_attention(c, b, scale, 256, ws);
    const DeviceKvLayer kv = c.dev.layer(0);
    AttnDecodeBatch one = b.view(c.cfg.n_heads);
    one.n_seqs = 1;
    one.max_span = b.end[0] - b.begin[0];
    AttnDecodeOptions opt;
    opt.split_tokens = 256;
    TEST_CUDA(cudaMemset(b.d_out.data(), 0xFF, (size_t)b.d_out.bytes()));
    must(attention_decode(kv, one, scale, ws.data(), ws.bytes(), opt), "attention_decode alone");
    must(synchronize(), "attention_decode alone run");
    std::vector<float> alone((size_t)c.cfg.n_heads * c.cfg.head_dim);
    must(b.d_out.download(alone.data(), (int64_t)alone.size() * 4), "download");
    check(std::memcmp(alone.data(), in_batch.data(), alone.size() * 4) == 0, counts,
          "%s: sequence 0 alone differs from its row in the batch", name);
  }
  std::printf("%-44s max error %.3g, splits differ by %.3g\n", name, case_err, case_diff);
  counts.max_err = std::max(counts.max_err, case_err);
  counts.max_split_diff = std::max(counts.max_split_diff, case_diff);
}

void check_errors(const Cache& c, DeviceBuffer& ws, Counts& counts) {
  const std::vector<int32_t> perm = {0, 1, 2, 3};
  int64_t next = 0;
  const Batch b = make_batch(c, 1, 40, false, true, perm, &next, 5);
  const DeviceKvLayer kv = c.dev.layer(0);
  const AttnDecodeBatch good = b.view(c.cfg.n_heads);
  AttnDecodeOptions opt;
  const int64_t need = must(attention_decode_workspace_bytes(kv, good, opt), "workspace bytes");
  if (ws.bytes() < need) ws = must(DeviceBuffer::allocate(need), "allocate workspace");
  auto fails = [&](const DeviceKvLayer& k, const AttnDecodeBatch& bt, const AttnDecodeOptions& o,
                   int64_t ws_bytes) {
    return !attention_decode(k, bt, 0.1f, ws.data(), ws_bytes, o).ok();
  };
  check(!fails(kv, good, opt, ws.bytes()), counts, "errors: a good call failed");
  DeviceKvLayer bad_kv = kv;
  bad_kv.head_dim = 96;
  check(fails(bad_kv, good, opt, ws.bytes()), counts, "errors: head_dim 96 accepted");
  AttnDecodeBatch bad = good;
  bad.n_heads = c.cfg.n_heads + 1;
  check(fails(kv, bad, opt, ws.bytes()), counts, "errors: n_heads not a multiple accepted");
  bad = good;
  bad.n_heads = c.cfg.n_kv_heads * 16;
  check(fails(kv, bad, opt, ws.bytes()), counts, "errors: group 16 accepted");
  AttnDecodeOptions bad_opt;
  bad_opt.split_tokens = 100;
  check(fails(kv, good, bad_opt, ws.bytes()), counts, "errors: split 100 accepted");
  check(fails(kv, good, opt, 16), counts, "errors: a 16-byte workspace accepted");
  bad = good;
  bad.q = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(good.q) + 4);
  check(fails(kv, bad, opt, ws.bytes()), counts, "errors: unaligned q accepted");
  DeviceKvShape s;
  check(!DeviceKvCache::allocate(s).ok(), counts, "errors: an empty cache shape accepted");
  must(synchronize(), "error checks");
}

// DeviceKvCache round trip of some blocks of a two-layer cache.
void check_cache_copy(Counts& counts) {
  DeviceKvShape s;
  s.n_layer = 2;
  s.n_kv_heads = 4;
  s.head_dim = 64;
  s.block_size = 16;
  s.num_blocks = 10;
  DeviceKvCache c = must(DeviceKvCache::allocate(s), "allocate small cache");
  std::vector<uint8_t> a(3 * s.layer_block_bytes()), back(a.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = (uint8_t)(i * 131 + 7);
  must(c.upload_blocks(1, 7, 3, a.data()), "upload blocks");
  must(c.download_blocks(1, 7, 3, back.data()), "download blocks");
  check(a == back, counts, "cache: block round trip differs");
  check(!c.upload_blocks(1, 8, 3, a.data()).ok(), counts, "cache: out-of-range upload accepted");
  check(!c.upload_blocks(2, 0, 1, a.data()).ok(), counts, "cache: layer 2 of 2 accepted");
  const DeviceKvLayer l1 = c.layer(1);
  check(static_cast<const uint8_t*>(l1.v) - static_cast<const uint8_t*>(l1.k) == s.v_offset() &&
            l1.block_stride == s.layer_block_bytes() &&
            s.layer_block_bytes() == 2 * 4 * 16 * 64 * 2,
        counts, "cache: layer view");
}

// --- benchmark ---

double copy_bandwidth(const DeviceBuffer& src) {
  const int64_t bytes = std::min<int64_t>(src.bytes(), int64_t{1} << 30);
  DeviceBuffer dst = must(DeviceBuffer::allocate(bytes), "allocate copy destination");
  cudaEvent_t start, stop;
  TEST_CUDA(cudaEventCreate(&start));
  TEST_CUDA(cudaEventCreate(&stop));
  std::vector<double> samples;
  for (int s = 0; s < 3 + 21; ++s) {
    TEST_CUDA(cudaEventRecord(start));
    TEST_CUDA(cudaMemcpyAsync(dst.data(), src.data(), (size_t)bytes, cudaMemcpyDeviceToDevice));
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

void benchmark(const DeviceInfo& info, const std::vector<uint16_t>& pool, const DeviceBuffer& any) {
  const double copy_bps = copy_bandwidth(any);
  std::printf("\ncopy bandwidth (cudaMemcpy D2D 1 GiB, read + write): %.1f GB/s\n",
              copy_bps * 1e-9);
  std::printf("%-10s %5s %6s %6s %6s %5s %10s %9s %7s\n", "heads", "batch", "ctx", "split",
              "splits", "sets", "us/launch", "GB/s", "%copy");
  double goal = -1.0;
  for (int32_t n_kv : {8, 4}) {
    const Cache c = make_cache({128, 32, n_kv, 16}, pool);
    std::vector<int32_t> perm(c.shape.num_blocks);
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = (int32_t)i;
    Rng rng{99};
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    DeviceBuffer ws;
    for (int32_t n_seqs : {1, 16}) {
      for (int32_t ctx : {4096, 32768}) {
        const int64_t kv_bytes = (int64_t)n_seqs * ctx * n_kv * 128 * 4;
        const int64_t blocks = (int64_t)n_seqs * ctx / 16;
        const int64_t sets = std::clamp<int64_t>((4 * info.l2_bytes + kv_bytes - 1) / kv_bytes, 1,
                                                 c.shape.num_blocks / blocks);
        std::vector<Batch> batches;
        int64_t next = 0;
        for (int64_t s = 0; s < sets; ++s) {
          batches.push_back(make_batch(c, n_seqs, ctx, false, true, perm, &next, 1000 + s));
        }
        const DeviceKvLayer kv = c.dev.layer(0);
        for (int32_t split : {0, 256, 512, 1024, 2048, 4096}) {
          if (split > ctx) continue;
          AttnDecodeOptions opt;
          opt.split_tokens = split;
          const AttnDecodeBatch v0 = batches[0].view(32);
          const int64_t need = must(attention_decode_workspace_bytes(kv, v0, opt), "ws");
          if (ws.bytes() < need) ws = must(DeviceBuffer::allocate(need), "allocate workspace");
          cudaEvent_t start, stop;
          TEST_CUDA(cudaEventCreate(&start));
          TEST_CUDA(cudaEventCreate(&stop));
          std::vector<double> samples;
          for (int s = 0; s < 3 + 21; ++s) {
            TEST_CUDA(cudaEventRecord(start));
            for (const Batch& bt : batches) {
              must(attention_decode(kv, bt.view(32), 0.088f, ws.data(), ws.bytes(), opt),
                   "attention_decode");
            }
            TEST_CUDA(cudaEventRecord(stop));
            TEST_CUDA(cudaEventSynchronize(stop));
            float ms = 0.0f;
            TEST_CUDA(cudaEventElapsedTime(&ms, start, stop));
            if (s >= 3) samples.push_back(ms * 1e-3 / (double)batches.size());
          }
          TEST_CUDA(cudaEventDestroy(start));
          TEST_CUDA(cudaEventDestroy(stop));
          const double t = median(samples);
          const double bps = kv_bytes / t;
          const int32_t used =
              split != 0 ? split : attention_decode_split(n_seqs, n_kv, ctx, info.sm_count);
          char heads[16], split_name[16];
          std::snprintf(heads, sizeof(heads), "32/%d", n_kv);
          std::snprintf(split_name, sizeof(split_name), "%s%d", split == 0 ? "a" : "", used);
          std::printf("%-10s %5d %6d %6s %6d %5lld %10.2f %9.1f %6.1f%%\n", heads, n_seqs, ctx,
                      split_name, (ctx + used - 1) / used, (long long)sets, t * 1e6, bps * 1e-9,
                      100.0 * bps / copy_bps);
          if (n_kv == 8 && n_seqs == 16 && ctx == 32768 && split == 0)
            goal = 100.0 * bps / copy_bps;
        }
      }
    }
  }
  std::printf(
      "\ngoal: batch 16, ctx 32768, 32/8 heads, d128 (auto split) at %.1f%% of copy "
      "bandwidth (goal >= 60%%): %s\n",
      goal, goal >= 60.0 ? "met" : "NOT met");
}

int run(int argc, char** argv) {
  bool quick = false, tiny = false, bench = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      bench = false;
    } else if (std::strcmp(argv[i], "--tiny") == 0) {
      quick = tiny = true;
      bench = false;
    } else if (std::strcmp(argv[i], "--no-bench") == 0) {
      bench = false;
    } else {
      std::fprintf(stderr, "usage: %s [--quick | --tiny | --no-bench]\n", argv[0]);
      return 2;
    }
  }
  const DeviceInfo info = must(device_info(0), "device_info");
  std::printf("device: %s, cc %d.%d, %d SMs, %.1f GiB, L2 %.1f MiB, runtime %d, driver %d\n",
              info.name.c_str(), info.cc_major, info.cc_minor, info.sm_count,
              info.mem_bytes / 1073741824.0, info.l2_bytes / 1048576.0, info.runtime_version,
              info.driver_version);
  const int64_t pool_halfs = quick ? (int64_t{32} << 20) : (int64_t{1} << 30);
  const std::vector<uint16_t> pool = make_pool(pool_halfs);

  Counts counts;
  check_cache_copy(counts);
  const std::vector<Config> configs = {
      {128, 32, 8, 16}, {128, 32, 4, 16}, {64, 32, 8, 16}, {64, 32, 4, 16}};
  const std::vector<int32_t> contexts = quick ? std::vector<int32_t>{1, 17, 512, 1000}
                                              : std::vector<int32_t>{1, 17, 512, 4096, 32768};
  const std::vector<int32_t> batches =
      quick ? std::vector<int32_t>{1, 4} : std::vector<int32_t>{1, 16};
  uint64_t seed = 1;
  DeviceBuffer ws;
  const size_t n_configs = tiny ? 1 : configs.size() + 2;
  for (size_t ci = 0; ci < n_configs; ++ci) {
    // Two more shapes at block size 32 and 64 (32/8 heads, d128 and d64), fewer cases.
    const bool extra = ci >= configs.size();
    const Config cfg =
        !extra ? configs[ci]
               : (ci == configs.size() ? Config{128, 32, 8, 32} : Config{64, 32, 8, 64});
    const Cache c = make_cache(cfg, pool);
    if (ci == 0) check_errors(c, ws, counts);
    std::vector<int32_t> perm(c.shape.num_blocks);
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = (int32_t)i;
    Rng rng{seed * 31};
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    for (int32_t n_seqs : batches) {
      for (int32_t ctx : contexts) {
        if (extra && (ctx == 32768 || n_seqs == 1)) continue;
        if (tiny && ctx != 17 && ctx != 1000) continue;
        check_case(c, n_seqs, ctx, perm, seed++, ws, counts);
      }
    }
  }
  std::printf(
      "\n%d passed, %d failed; max error %.3g (tolerance %.0e), splits differ by at most "
      "%.3g (bound %.0e)\n",
      counts.passed, counts.failed, counts.max_err, kTol, counts.max_split_diff, 2 * kTol);
  if (counts.failed != 0) return 1;
  if (bench) {
    DeviceBuffer any = must(DeviceBuffer::allocate(int64_t{1} << 30), "allocate copy source");
    TEST_CUDA(cudaMemset(any.data(), 0x5A, (size_t)any.bytes()));
    benchmark(info, pool, any);
  }
  return 0;
}

}  // namespace
}  // namespace kvw::cuda

int main(int argc, char** argv) {
  return kvw::cuda::run(argc, argv);
}
