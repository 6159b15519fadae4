// kernels/cuda/cuda_matmul.cu: device buffers, weight upload and the F16 / Q8_0 matmul kernels
// behind kernels/cuda/cuda_matmul.h.
//
// The kernel (decode is memory-bound: a 1.1B model's 32000 x 2048 Q8_0 output matrix is 70 MB
// read for 131 MFLOP per token, so the goal is HBM bandwidth):
//   - one warp owns R output rows for a group of NT <= 8 tokens; a grid of resident blocks walks
//     the row groups (grid-stride), so no block is launched per few rows;
//   - lane l reads the 16-byte chunks l, l + 32, l + 64, ... of each of its rows (16 Q8_0 quants
//     or 8 F16 values per chunk): every load is one aligned, coalesced 16-byte vector load, and
//     each row's chunk and its activations are loaded once for all NT tokens / R rows;
//   - each lane sums its chunks in order, then a 5-step butterfly adds the 32 lanes. The order of
//     every row's sum depends on n_in alone (never on R, NT or the grid): batch invariance.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/q8_0_planes.h"

namespace kvw::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;  // 128 threads: small blocks keep the grid-stride walk even
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
constexpr int kMaxGroupTokens = 8;  // tokens one pass over W serves (registers: acc[R][NT])
constexpr int kChunkBytes = 16;     // one vector load per lane
// 16-byte weight loads each lane issues before the first is used: U = kLoadsAhead / R chunks of
// each of its R rows (2 KB per warp), except that Q8_0 for one token takes at least 2 chunks
// per step. With one chunk per step (R = 4) the loop body is one block and ptxas spread the Q8_0
// loads between the long conversions, each waiting a full latency; the predicated loads of 2+
// chunks stay grouped. H200, run 3 (README): that exception took Q8_0 32000 x 2048 from 68% to
// 76% of copy bandwidth; 8 loads ahead everywhere was slower elsewhere (up to 1.2x, batch 8 and
// F16). -D overrides the default for comparison runs.
#ifndef KVW_CUDA_LOADS_AHEAD
#define KVW_CUDA_LOADS_AHEAD 4
#endif
constexpr int kLoadsAhead = KVW_CUDA_LOADS_AHEAD;

Error cuda_error(const std::string& what, cudaError_t err) {
  return Error{what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")",
               ErrorKind::kInternal};
}

// One 16-byte load of weights, which a matmul reads exactly once: cached in L2 but not allocated
// in L1, which stays for the activations that every warp re-reads. volatile: without it the
// compiler takes the asm for a pure function and sinks each load to its first use, so the R
// loads of a step went out one after another, each waiting a full memory latency (seen in the
// SASS of the first H200 run: Q8_0 32000 x 2048 at 68% of copy bandwidth).
__device__ __forceinline__ int4 load_weights16(const uint8_t* p) {
#if defined(KVW_CUDA_PLAIN_LOADS)
  return __ldg(reinterpret_cast<const int4*>(p));
#else
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

// A Q8_0 scale (fp16 bits), issued in program order with the weight loads for the same reason.
__device__ __forceinline__ uint16_t load_scale(const uint16_t* p) {
#if defined(KVW_CUDA_PLAIN_LOADS)
  return __ldg(p);
#else
  uint16_t v;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
#endif
}

__device__ __forceinline__ float half_to_float(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// Four int8 of one word to exact floats without I2F, a quarter-rate conversion (16 per clock
// per SM) that alone would cap a batch-1 Q8_0 GEMV near the ~17 bytes per clock per SM that HBM
// delivers: q + 128 becomes the low mantissa byte of 2^23 (one PRMT), and one FADD takes
// 2^23 + 128 away again.
__device__ __forceinline__ void int8x4_to_float(uint32_t word, float* f) {
  const uint32_t u = word ^ 0x80808080u;  // each byte q -> q + 128 in [0, 255]
  f[0] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u)) - 8388736.0f;
  f[1] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541u)) - 8388736.0f;
  f[2] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542u)) - 8388736.0f;
  f[3] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543u)) - 8388736.0f;
}

template <GgmlType kType>
struct WeightTraits;

// Q8_0 planes (q8_0_planes.h): a chunk is 16 quants, half of one block; the scale is applied
// once per chunk and token.
template <>
struct WeightTraits<GgmlType::kQ8_0> {
  static constexpr int kElems = 16;
  static __device__ __forceinline__ void convert(int4 v, float (&f)[kElems]) {
    int8x4_to_float((uint32_t)v.x, f + 0);
    int8x4_to_float((uint32_t)v.y, f + 4);
    int8x4_to_float((uint32_t)v.z, f + 8);
    int8x4_to_float((uint32_t)v.w, f + 12);
  }
};

// F16: a chunk is 8 values; element 2i is the low half of word i (little-endian).
template <>
struct WeightTraits<GgmlType::kF16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void convert(int4 v, float (&f)[kElems]) {
    const uint32_t w[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = half_to_float((uint16_t)(w[i] & 0xFFFFu));
      f[2 * i + 1] = half_to_float((uint16_t)(w[i] >> 16));
    }
  }
};

// acc[r][t] += d[r] * sum_j w[r][j] * x[t][j] over one chunk (kElems values) of each of R rows,
// d[r] the fp16 scale in d_bits[r] (Q8_0; F16 has none); x points at the chunk's first
// activation of token 0 (token t is n_in further per t). Every conversion of loaded data happens
// here, after all loads of the step were issued: a warp stalls at the first use of a load.
template <GgmlType kType, int NT, int R>
__device__ __forceinline__ void accumulate_chunk(const int4 (&raw)[R], const uint16_t (&d_bits)[R],
                                                 const float* x, int64_t n_in,
                                                 float (&acc)[R][NT]) {
  using Traits = WeightTraits<kType>;
  constexpr int kElems = Traits::kElems;
  float wf[R][kElems];
#pragma unroll
  for (int r = 0; r < R; ++r) Traits::convert(raw[r], wf[r]);
  float d[R];
#pragma unroll
  for (int r = 0; r < R; ++r) d[r] = kType == GgmlType::kQ8_0 ? half_to_float(d_bits[r]) : 1.0f;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float4* xp = reinterpret_cast<const float4*>(x + t * n_in);
    float xv[kElems];
#pragma unroll
    for (int j = 0; j < kElems / 4; ++j) {
      const float4 v = __ldg(xp + j);
      xv[4 * j] = v.x;
      xv[4 * j + 1] = v.y;
      xv[4 * j + 2] = v.z;
      xv[4 * j + 3] = v.w;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < kElems; ++j) s = fmaf(wf[r][j], xv[j], s);
      acc[r][t] = kType == GgmlType::kQ8_0 ? fmaf(d[r], s, acc[r][t]) : acc[r][t] + s;
    }
  }
}

// y[t][r] = sum_i W[r][i] * x[t][i] for NT tokens; w in the DeviceMatrix layout, x [NT][n_in],
// y [NT][n_rows]. Each warp takes R consecutive rows per step of a grid-stride walk; rows past
// n_rows read the last row again (valid memory) and store nothing.
template <GgmlType kType, int NT, int R>
__global__ void __launch_bounds__(kThreads)
    matmul_kernel(const uint8_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                  int64_t n_rows, int64_t n_in) {
  using Traits = WeightTraits<kType>;
  constexpr int kElems = Traits::kElems;
  constexpr bool kQ8 = kType == GgmlType::kQ8_0;
  constexpr int kMinSteps = kQ8 && NT == 1 ? 2 : 1;
  constexpr int U = kLoadsAhead / R > kMinSteps ? kLoadsAhead / R : kMinSteps;  // chunks per row
  const int lane = (int)(threadIdx.x % kWarpSize);
  const int64_t warp = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int64_t num_warps = (int64_t)gridDim.x * kWarpsPerBlock;
  const int n_chunks = (int)(n_in / kElems);
  const int64_t row_bytes = kQ8 ? n_in : n_in * 2;  // of the quants plane / the F16 rows
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(w + n_rows * n_in);  // Q8_0 only
  const int64_t n_blocks = n_in / kQK8_0;  // Q8_0 scales per row

  for (int64_t row0 = warp * R; row0 < n_rows; row0 += num_warps * R) {  // warp-uniform
    const uint8_t* wrow[R];
    const uint16_t* drow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r < n_rows ? row0 + r : n_rows - 1;
      wrow[r] = w + row * row_bytes;
      drow[r] = scales + row * n_blocks;
    }
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    }

    // U * R independent 16-byte loads per lane are issued before the first is used (4 or 8 per
    // lane, 2-4 KB per warp): with 16 warps per SM that is 32 KB or more in flight per SM, above
    // the ~17 KB that HBM's ~17 B/clk/SM times ~1000 cycles of latency asks for.
    for (int c0 = lane; c0 < n_chunks; c0 += U * kWarpSize) {
      int4 raw[U][R];
      uint16_t d_bits[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * kWarpSize;
        if (c < n_chunks) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            raw[u][r] = load_weights16(wrow[r] + (int64_t)c * kChunkBytes);
            d_bits[u][r] = kQ8 ? load_scale(drow[r] + c / 2) : uint16_t{0};
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + u * kWarpSize;
        if (c < n_chunks) {
          accumulate_chunk<kType, NT, R>(raw[u], d_bits[u], x + (int64_t)c * kElems, n_in, acc);
        }
      }
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
          acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], offset);
        }
      }
    }
    // Every lane now holds every sum; lane t stores token t's.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row0 + r < n_rows) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (lane == t) y[t * n_rows + row0 + r] = acc[r][t];
        }
      }
    }
  }
}

// Launches matmul_kernel<kType, nt, R> for a runtime nt in [1, kMaxGroupTokens] with as many
// blocks as fit on the device at once (grid-stride), or fewer when the rows are fewer.
template <GgmlType kType, int R, int NT = 1>
cudaError_t launch_group(int nt, const uint8_t* w, const float* x, float* y, int64_t n_rows,
                         int64_t n_in, int sm_count, cudaStream_t stream) {
  if constexpr (NT <= kMaxGroupTokens) {
    if (nt != NT) {
      return launch_group<kType, R, NT + 1>(nt, w, x, y, n_rows, n_in, sm_count, stream);
    }
    auto* kernel = &matmul_kernel<kType, NT, R>;
    static const int blocks_per_sm = [kernel] {
      int n = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
      }
      return std::max(n, 1);
    }();
    const int64_t warps_needed = (n_rows + R - 1) / R;
    const int64_t blocks_needed = (warps_needed + kWarpsPerBlock - 1) / kWarpsPerBlock;
    const int64_t grid = std::min<int64_t>(blocks_needed, (int64_t)blocks_per_sm * sm_count);
    kernel<<<(unsigned)grid, kThreads, 0, stream>>>(w, x, y, n_rows, n_in);
    return cudaGetLastError();
  } else {
    (void)nt, (void)w, (void)x, (void)y, (void)n_rows, (void)n_in, (void)sm_count, (void)stream;
    return cudaErrorInvalidValue;
  }
}

template <GgmlType kType>
cudaError_t launch(int rows_per_warp, int nt, const uint8_t* w, const float* x, float* y,
                   int64_t n_rows, int64_t n_in, int sm_count, cudaStream_t stream) {
  switch (rows_per_warp) {
    case 1:
      return launch_group<kType, 1>(nt, w, x, y, n_rows, n_in, sm_count, stream);
    case 2:
      return launch_group<kType, 2>(nt, w, x, y, n_rows, n_in, sm_count, stream);
    case 4:
      return launch_group<kType, 4>(nt, w, x, y, n_rows, n_in, sm_count, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// Multiprocessors of the current device, read once (a multi-GPU backend will keep one per
// device).
Result<int> current_sm_count() {
  static const Result<int> count = []() -> Result<int> {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    int n = 0;
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    }
    if (err != cudaSuccess) return cuda_error("reading the multiprocessor count", err);
    return n;
  }();
  return count;
}

}  // namespace

Result<DeviceInfo> device_info(int device) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) {
    return cuda_error("cudaGetDeviceProperties(" + std::to_string(device) + ")", err);
  }
  DeviceInfo info;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.mem_bytes = (int64_t)prop.totalGlobalMem;
  info.l2_bytes = prop.l2CacheSize;
  (void)cudaRuntimeGetVersion(&info.runtime_version);
  (void)cudaDriverGetVersion(&info.driver_version);
  return info;
}

Result<DeviceBuffer> DeviceBuffer::allocate(int64_t bytes) {
  if (bytes <= 0) {
    return Error{"cuda: cannot allocate " + std::to_string(bytes) + " bytes", ErrorKind::kInternal};
  }
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, (size_t)bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
    return cuda_error("cudaMalloc(" + std::to_string(bytes) + " bytes)", err);
  }
  return DeviceBuffer(ptr, bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status DeviceBuffer::upload(const void* src, int64_t bytes, int64_t offset) {
  if (bytes < 0 || offset < 0 || offset + bytes > bytes_) {
    return Error{"cuda upload: " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                     " leave a buffer of " + std::to_string(bytes_),
                 ErrorKind::kInternal};
  }
  const cudaError_t err =
      cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset, src, (size_t)bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return cuda_error("cudaMemcpy host to device", err);
  return Status::ok_status();
}

Status DeviceBuffer::download(void* dst, int64_t bytes, int64_t offset) const {
  if (bytes < 0 || offset < 0 || offset + bytes > bytes_) {
    return Error{"cuda download: " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                     " leave a buffer of " + std::to_string(bytes_),
                 ErrorKind::kInternal};
  }
  const cudaError_t err = cudaMemcpy(dst, static_cast<const uint8_t*>(ptr_) + offset, (size_t)bytes,
                                     cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return cuda_error("cudaMemcpy device to host", err);
  return Status::ok_status();
}

Result<DeviceMatrix> DeviceMatrix::upload(GgmlType type, const void* host_rows, int64_t n_rows,
                                          int64_t n_in) {
  const bool q8 = type == GgmlType::kQ8_0;
  if (!q8 && type != GgmlType::kF16) {
    return Error{"cuda matmul: weight type " + std::to_string((uint32_t)type) +
                     " is not supported (F16 and Q8_0 are)",
                 ErrorKind::kInvalidInput};
  }
  const int64_t multiple = q8 ? kQK8_0 : 8;  // one 16-byte chunk of F16 is 8 values
  if (host_rows == nullptr || n_rows < 1 || n_rows > INT32_MAX || n_in < 1 || n_in > INT32_MAX ||
      n_in % multiple != 0) {
    return Error{"cuda matmul: cannot upload a " + std::to_string(n_rows) + " x " +
                     std::to_string(n_in) + (q8 ? " Q8_0" : " F16") +
                     " matrix (n_in must be a positive multiple of " + std::to_string(multiple) +
                     ")",
                 ErrorKind::kInvalidInput};
  }
  const int64_t bytes = q8 ? q8_0_planes_bytes(n_rows, n_in) : n_rows * n_in * 2;
  auto buffer = DeviceBuffer::allocate(bytes);
  if (!buffer.ok()) return buffer.error();
  if (q8) {
    std::vector<uint8_t> planes((size_t)bytes);
    q8_0_to_planes(host_rows, n_rows, n_in, planes.data());
    KVW_RETURN_IF_ERROR(buffer->upload(planes.data(), bytes));
  } else {
    KVW_RETURN_IF_ERROR(buffer->upload(host_rows, bytes));
  }
  return DeviceMatrix(type, n_rows, n_in, std::move(buffer).value());
}

int matmul_rows_per_warp(int64_t n_rows, int64_t n_tokens, int sm_count) {
  const int64_t sms = std::max(sm_count, 1);
  if (n_tokens >= 4 || n_rows / 4 >= 16 * sms) return 4;
  return n_rows / 2 >= 2 * sms ? 2 : 1;
}

Status matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y,
              const MatmulOptions& opt) {
  if (w.data() == nullptr || x == nullptr || y == nullptr || n_tokens < 1) {
    return Error{"cuda matmul: empty matrix, null x or y, or n_tokens < 1 (" +
                     std::to_string(n_tokens) + ")",
                 ErrorKind::kInvalidInput};
  }
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return Error{"cuda matmul: x must be 16-byte aligned", ErrorKind::kInvalidInput};
  }
  const int rpw = opt.rows_per_warp;
  if (rpw != 0 && rpw != 1 && rpw != 2 && rpw != 4) {
    return Error{"cuda matmul: rows_per_warp " + std::to_string(rpw) + " is not 0, 1, 2 or 4",
                 ErrorKind::kInvalidInput};
  }
  const Result<int> sm_count_or = current_sm_count();
  if (!sm_count_or.ok()) return sm_count_or.error();
  const int sm_count = sm_count_or.value();
  const auto* wbytes = static_cast<const uint8_t*>(w.data());
  const int64_t n_rows = w.n_rows();
  const int64_t n_in = w.n_in();
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxGroupTokens) {
    const int nt = (int)std::min<int64_t>(kMaxGroupTokens, n_tokens - t0);
    const int rows_per_warp = rpw != 0 ? rpw : matmul_rows_per_warp(n_rows, nt, sm_count);
    const float* xg = x + t0 * n_in;
    float* yg = y + t0 * n_rows;
    const cudaError_t err = w.type() == GgmlType::kQ8_0
                                ? launch<GgmlType::kQ8_0>(rows_per_warp, nt, wbytes, xg, yg, n_rows,
                                                          n_in, sm_count, opt.stream)
                                : launch<GgmlType::kF16>(rows_per_warp, nt, wbytes, xg, yg, n_rows,
                                                         n_in, sm_count, opt.stream);
    if (err != cudaSuccess) return cuda_error("cuda matmul launch", err);
  }
  return Status::ok_status();
}

Status synchronize() {
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) return cuda_error("cudaDeviceSynchronize", err);
  return Status::ok_status();
}

}  // namespace kvw::cuda
