// core/huge_page_usage.h: how many bytes of a memory range the kernel backs with 2 MiB pages,
// read from /proc/self/smaps. MADV_HUGEPAGE is only a request: this says whether it was granted
// (issue 29: decode speed varied 50-77 t/s between runs of the same binary and file).
// Stateless; safe from any thread (each call reads smaps afresh).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvw {

// Bytes of [begin, end) on PMD-mapped huge pages according to `smaps` (the text of
// /proc/<pid>/smaps): the sum over the mappings that overlap the range of AnonHugePages +
// ShmemPmdMapped + FilePmdMapped. smaps counts per mapping, not per address, so a mapping only
// partly inside the range contributes at most the 2 MiB-aligned 2 MiB blocks of the overlap
// (an upper bound for that mapping). Lines it does not understand are skipped.
uint64_t huge_page_bytes_in_smaps(std::string_view smaps, uintptr_t begin, uintptr_t end);

// The same for this process, live. nullopt when /proc/self/smaps cannot be read (not Linux,
// /proc not mounted). Costs a walk of the process's page tables: 18 ms per GiB of touched
// 4 KiB pages on the AMD EPYC VM (a 2 MiB page is one entry), so call it at load and per scrape,
// not per step.
std::optional<uint64_t> huge_page_bytes(const void* p, uint64_t len);

}  // namespace kvw
