// GPU catalogue. memory_bytes is the total the device reports (torch.cuda.mem_get_info() or
// nvidia-smi), which is what vLLM multiplies by --gpu-memory-utilization. Where no device
// report was available the entry uses the data sheet's "N GB" as decimal bytes, which
// under-states HBM parts slightly (an A100-80GB reports 79.2 GiB, 80e9 B is 74.5 GiB): the plan
// errs on the safe side, and the entry is marked unconfirmed.
#include <algorithm>
#include <cctype>
#include <vector>

#include "planner/catalog.h"

namespace kvw::planner {
namespace {

constexpr uint64_t kMiBytes = uint64_t{1} << 20;
constexpr uint64_t kGB = 1000000000ull;
const std::string kFacts = "model-facts.md (GPU table)";

const std::vector<GpuSpec>& gpus() {
  static const std::vector<GpuSpec> g = {
      {"a100-40gb", "NVIDIA A100 SXM 40 GB HBM2", 40 * kGB, 1555,
       kFacts + ": 40 GB, 1,555 GB/s; device total unconfirmed", true},
      {"a100-80gb", "NVIDIA A100 SXM 80 GB HBM2e", 85056798720ull, 2039,
       kFacts + ": torch total 85,056,798,720 B, 2,039 GB/s", false},
      {"h100", "NVIDIA H100 SXM 80 GB HBM3", 81559 * kMiBytes, 3350,
       kFacts + ": nvidia-smi 81,559 MiB, 3,350 GB/s", false},
      {"h200", "NVIDIA H200 SXM 141 GB HBM3e", 143771 * kMiBytes, 4800,
       kFacts + ": nvidia-smi 143,771 MiB, 4,800 GB/s", false},
      {"h20", "NVIDIA H20 96 GB HBM3", 96 * kGB, 4000,
       "NVIDIA H20 product brief (96 GB, 4.0 TB/s); not in model-facts.md, device total unknown",
       true},
      {"l40s", "NVIDIA L40S 48 GB GDDR6 (ECC on)", 46068 * kMiBytes, 864,
       kFacts + ": nvidia-smi 46,068 MiB with ECC, 864 GB/s", false},
      {"l4", "NVIDIA L4 24 GB GDDR6 (ECC on)", 23034 * kMiBytes, 300,
       kFacts + ": nvidia-smi 23,034 MiB with ECC, 300 GB/s", false},
      {"a10g", "NVIDIA A10G 24 GB GDDR6", 24 * kGB, 600,
       "AWS G5 documentation (24 GB, 600 GB/s); not in model-facts.md, device total unknown", true},
      {"rtx4090", "NVIDIA GeForce RTX 4090 24 GB GDDR6X", 24564 * kMiBytes, 1008,
       kFacts + ": nvidia-smi 24,564 MiB; 1,008 GB/s derived from 384-bit x 21 Gbps", false},
      {"rtx3090", "NVIDIA GeForce RTX 3090 24 GB GDDR6X", 24 * kGB, 936,
       "NVIDIA RTX 3090 specifications (24 GB, 936 GB/s); not in model-facts.md", true},
      {"mi300x", "AMD Instinct MI300X 192 GB HBM3", 192 * kGB, 5300,
       "AMD MI300X data sheet (192 GB, 5.3 TB/s); not in model-facts.md", true},
  };
  return g;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::span<const GpuSpec> gpu_catalog() {
  return gpus();
}

const GpuSpec* find_gpu(const std::string& name) {
  std::string n = lower(name);
  // Common spellings: "A100" means the 80 GB part, "H100-80GB", "rtx-4090", "4090".
  std::erase(n, ' ');
  if (n == "a100" || n == "a100-80g" || n == "a100-80") n = "a100-80gb";
  if (n == "a100-40g" || n == "a100-40") n = "a100-40gb";
  if (n == "h100-80gb" || n == "h100-sxm") n = "h100";
  if (n == "rtx-4090" || n == "4090") n = "rtx4090";
  if (n == "rtx-3090" || n == "3090") n = "rtx3090";
  for (const GpuSpec& g : gpus()) {
    if (g.name == n) return &g;
  }
  return nullptr;
}

}  // namespace kvw::planner
