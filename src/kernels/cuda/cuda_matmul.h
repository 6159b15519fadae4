// kernels/cuda/cuda_matmul.h: the first brick of the CUDA backend: weight matrices resident in
// device memory and the decode GEMV / small-batch matmul over them (F16 and Q8_0 weights, f32
// activations and outputs). This header includes no CUDA header, so code that only holds these
// types compiles without the CUDA toolkit; the definitions (cuda_matmul.cu) need nvcc and link
// the CUDA runtime. Built only with -DKVW_CUDA=ON (src/kernels/cuda/CMakeLists.txt).
// Owner: any one host thread at a time per object; calls on one stream run in issue order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"
#include "gguf/tensor_types.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here so no CUDA header is needed

namespace kvw::cuda {

struct DeviceInfo {
  std::string name;  // "NVIDIA H200"
  int cc_major = 0;  // compute capability, 9.0 for Hopper
  int cc_minor = 0;
  int sm_count = 0;         // multiprocessors
  int64_t mem_bytes = 0;    // total device memory
  int64_t l2_bytes = 0;     // L2 cache size
  int runtime_version = 0;  // CUDA runtime, 13000 for 13.0
  int driver_version = 0;   // highest CUDA version the driver supports
};

// Properties of device `device`; an error when there is no usable CUDA device.
Result<DeviceInfo> device_info(int device = 0);

// Move-only owner of one cudaMalloc allocation (never managed memory). Copies are synchronous.
class DeviceBuffer {
 public:
  // Errors: bytes <= 0, or cudaMalloc failed (message carries the size and CUDA's reason).
  static Result<DeviceBuffer> allocate(int64_t bytes);

  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }

  // Host -> device / device -> host of `bytes` bytes at byte `offset` of this buffer.
  // Errors: the range leaves the buffer, or the copy failed.
  Status upload(const void* src, int64_t bytes, int64_t offset = 0);
  Status download(void* dst, int64_t bytes, int64_t offset = 0) const;

 private:
  DeviceBuffer(void* ptr, int64_t bytes) : ptr_(ptr), bytes_(bytes) {}
  void* ptr_ = nullptr;  // device memory, bytes_ long
  int64_t bytes_ = 0;
};

// A weight matrix W [n_rows][n_in] in device memory, uploaded from GGUF rows (the layout of a
// WeightMatrix with packed == false). Device layout, the same byte count as the GGUF rows:
//   F16:  [n_rows][n_in] fp16, as in GGUF.
//   Q8_0: two planes (q8_0_planes.h): qs [n_rows][n_in] int8, then d [n_rows][n_in/32] fp16.
//         Splitting the 34-byte blocks lets every thread read its quants with one aligned
//         16-byte load; in GGUF a block starts at any even byte.
class DeviceMatrix {
 public:
  // Errors: a type other than F16/Q8_0; n_rows < 1; n_in < 1 or not a multiple of 8 (F16) or
  // 32 (Q8_0); device allocation or copy failed. Synchronous (the host rows may be freed after).
  static Result<DeviceMatrix> upload(GgmlType type, const void* host_rows, int64_t n_rows,
                                     int64_t n_in);

  GgmlType type() const { return type_; }
  int64_t n_rows() const { return n_rows_; }
  int64_t n_in() const { return n_in_; }
  // Bytes of weights one matmul reads (each once): n_rows * n_in * 2 (F16), * 34/32 (Q8_0).
  int64_t weight_bytes() const { return data_.bytes(); }
  const void* data() const { return data_.data(); }

 private:
  DeviceMatrix(GgmlType type, int64_t n_rows, int64_t n_in, DeviceBuffer data)
      : type_(type), n_rows_(n_rows), n_in_(n_in), data_(std::move(data)) {}
  GgmlType type_ = GgmlType::kF16;
  int64_t n_rows_ = 0;
  int64_t n_in_ = 0;
  DeviceBuffer data_;  // layout above
};

struct MatmulOptions {
  // Output rows one warp computes (it reads each activation once for all of them): 1, 2 or 4;
  // 0 chooses from the shape and the device (matmul_rows_per_warp). Results are bit-identical
  // for every value: each output row is reduced in the same order.
  int rows_per_warp = 0;
  CUstream_st* stream = nullptr;  // nullptr: the default stream
};

// y[t][r] = sum_i W[r][i] * x[t][i] for r in [0, n_rows), t in [0, n_tokens), accumulated in
// f32 over the dequantised weights (Q8_0: d * q; F16: exact), with activations kept in f32
// (unlike the CPU tables, which quantise them to Q8_0 for Q8_0 weights).
// x: device memory [n_tokens][n_in] f32, 16-byte aligned; y: device memory [n_tokens][n_rows]
// f32. Tokens go through in groups of up to 8, each group reading W once: the GEMV of decode
// is n_tokens == 1. Every output row has a fixed reduction order independent of n_tokens, the
// group it falls in and rows_per_warp, so results are batch-invariant.
// Asynchronous on opt.stream: returns argument and launch errors only; a fault while the kernel
// runs surfaces at the next synchronising call (synchronize(), a download).
Status matmul(const DeviceMatrix& w, const float* x, int64_t n_tokens, float* y,
              const MatmulOptions& opt = {});

// rows_per_warp that matmul() uses for rows_per_warp == 0, for a group of n_tokens (<= 8) tokens
// (from the H200 runs, README): 4 for 4 or more tokens (each activation load then serves 4
// rows) or when that still leaves 16 warps per multiprocessor (n_rows / 4 >= 16 * sm_count);
// else 2, or 1 for matrices too small to give every multiprocessor 2 warps with 2 rows each.
int matmul_rows_per_warp(int64_t n_rows, int64_t n_tokens, int sm_count);

// Waits for all work on the device; returns the first error of any of it.
Status synchronize();

}  // namespace kvw::cuda
