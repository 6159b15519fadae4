// core/huge_pages.h: anonymous memory in 2 MiB-aligned transparent huge pages where the kernel
// allows them (MADV_HUGEPAGE, best effort). Long streams over 4 KiB pages spend their time in TLB
// misses: the model's weights live here, and the bandwidth probes measure the same kind of
// memory the weights are in.
#pragma once

#include <cstdint>

namespace kvw {

// Maps `bytes` rounded up to 2 MiB at a 2 MiB-aligned address and stores the mapped length in
// *mapped (give both to unmap_huge_pages). Returns nullptr, errno set, when mmap fails.
uint8_t* map_huge_pages(uint64_t bytes, uint64_t* mapped);
void unmap_huge_pages(uint8_t* p, uint64_t mapped);

}  // namespace kvw
