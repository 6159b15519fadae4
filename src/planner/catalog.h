// planner/catalog.h: built-in model and GPU catalogues, so `kvwarden plan --model llama-3-8b
// --gpu h100` needs no files. Every entry names its source; entries or values not checked
// against a primary copy of the published config or data sheet are marked unconfirmed.
// Immutable static data; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "planner/model_shape.h"

namespace kvw::planner {

struct GpuSpec {
  std::string name;           // catalogue key: "h100", "a100-80gb"
  std::string description;    // "NVIDIA H100 SXM 80 GB HBM3"
  uint64_t memory_bytes = 0;  // total as the device reports it (what utilisation multiplies)
  double bandwidth_gb_s = 0;  // memory bandwidth, GB/s (decimal)
  std::string source;
  bool unconfirmed = false;  // memory_bytes is the data sheet's decimal GB, not a device total
};

std::span<const ModelShape> model_catalog();
std::span<const GpuSpec> gpu_catalog();

// Case-insensitive lookup by catalogue key or Hugging Face id; nullptr when absent.
const ModelShape* find_model(const std::string& name);
const GpuSpec* find_gpu(const std::string& name);

}  // namespace kvw::planner
