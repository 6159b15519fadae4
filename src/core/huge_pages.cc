#include "core/huge_pages.h"

#include <sys/mman.h>

namespace kvw {

uint8_t* map_huge_pages(uint64_t bytes, uint64_t* mapped) {
  constexpr uint64_t kHuge = uint64_t{2} << 20;
  const uint64_t len = (bytes + kHuge - 1) / kHuge * kHuge;
  *mapped = 0;
  if (len == 0) return nullptr;
  // Over-allocate by one huge page, then trim to a 2 MiB-aligned start.
  void* raw =
      ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHuge - 1) & ~(uintptr_t)(kHuge - 1);
  const uintptr_t head = aligned - start, tail = kHuge - head;  // head + len + tail = mapped
  if (head > 0) ::munmap(raw, head);
  ::munmap(reinterpret_cast<void*>(aligned + len), tail);
  auto* p = reinterpret_cast<uint8_t*>(aligned);
  ::madvise(p, len, MADV_HUGEPAGE);  // best effort: without THP the memory still works
  *mapped = len;
  return p;
}

void unmap_huge_pages(uint8_t* p, uint64_t mapped) {
  if (p != nullptr && mapped > 0) ::munmap(p, mapped);
}

}  // namespace kvw
