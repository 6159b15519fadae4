#include "core/huge_page_usage.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "core/huge_pages.h"

namespace kvw {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Four mappings as the kernel prints them (fields trimmed): a 64 MiB anonymous one with 60 MiB
// on huge pages, a file mapping with 4 MiB PMD-mapped, a shmem one, and one with no huge pages.
constexpr const char* kSmaps =
    "7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n"
    "Size:              65536 kB\n"
    "Rss:               65536 kB\n"
    "AnonHugePages:     61440 kB\n"
    "ShmemPmdMapped:        0 kB\n"
    "FilePmdMapped:         0 kB\n"
    "VmFlags: rd wr mr mw me ac sd hg\n"
    "7f0004000000-7f0004800000 r--p 00000000 08:01 1234                       /models/m.gguf\n"
    "Size:               8192 kB\n"
    "AnonHugePages:         0 kB\n"
    "FilePmdMapped:      4096 kB\n"
    "VmFlags: rd mr mw me sd\n"
    "7f0004800000-7f0004c00000 rw-s 00000000 00:01 99                         /dev/shm/x\n"
    "AnonHugePages:         0 kB\n"
    "ShmemPmdMapped:     2048 kB\n"
    "7f0004c00000-7f0004e00000 rw-p 00000000 00:00 0                          [heap]\n"
    "AnonHugePages:         0 kB\n";

uint64_t in_range(uintptr_t lo, uintptr_t hi) {
  return huge_page_bytes_in_smaps(kSmaps, lo, hi);
}

TEST(HugePageUsage, SumsEveryHugePageFieldOfMappingsInsideTheRange) {
  EXPECT_EQ(in_range(0x7f0000000000, 0x7f0004000000), 60 * kMiB);
  EXPECT_EQ(in_range(0x7f0004000000, 0x7f0004800000), 4 * kMiB);
  EXPECT_EQ(in_range(0x7f0004800000, 0x7f0004c00000), 2 * kMiB);
  EXPECT_EQ(in_range(0x7f0000000000, 0x7f0004e00000), 66 * kMiB);
  EXPECT_EQ(in_range(0x7f0004c00000, 0x7f0004e00000), 0u);
}

TEST(HugePageUsage, MappingsOutsideTheRangeCountNothing) {
  EXPECT_EQ(in_range(0x100000, 0x200000), 0u);
  EXPECT_EQ(in_range(0x7f0004e00000, 0x7f0010000000), 0u);
  EXPECT_EQ(in_range(0x7f0004000000, 0x7f0004000000), 0u);  // empty range
}

TEST(HugePageUsage, APartlyCoveredMappingGivesAtMostItsAlignedHugeBlocksInTheRange) {
  // The first 8 MiB of the 64 MiB mapping: at most 4 huge pages, though the mapping has 30.
  EXPECT_EQ(in_range(0x7f0000000000, 0x7f0000800000), 8 * kMiB);
  // Unaligned ends: only the 2 MiB blocks wholly inside [1 MiB, 7 MiB) count (two: 2-4 and 4-6).
  EXPECT_EQ(in_range(0x7f0000100000, 0x7f0000700000), 4 * kMiB);
  // Less than a huge page of overlap can hold none.
  EXPECT_EQ(in_range(0x7f0000100000, 0x7f0000200000), 0u);
  // The last 6 MiB of the file mapping plus all of the shmem one: min(4, 6) + 2.
  EXPECT_EQ(in_range(0x7f0004200000, 0x7f0004c00000), 6 * kMiB);
}

TEST(HugePageUsage, SkipsLinesItDoesNotUnderstand) {
  const char* text =
      "garbage line\n"
      "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\n"
      "AnonHugePages: 2048 kB\n"
      "AnonHugePages: lots kB\n"
      "AnonHugePages: 2048 MB\n"
      "zz-7f0000400000 rw-p 00000000 00:00 0\n"
      "AnonHugePages:    2048 kB";  // no final newline
  EXPECT_EQ(huge_page_bytes_in_smaps(text, 0x7f0000000000, 0x7f0000400000), 4 * kMiB);
  EXPECT_EQ(huge_page_bytes_in_smaps("", 0, ~uintptr_t{0}), 0u);
}

TEST(HugePageUsage, LiveCountOfTouchedHugePageMemoryIsWholeHugePagesWithinTheLength) {
  uint64_t mapped = 0;
  uint8_t* p = map_huge_pages(16 * kMiB, &mapped);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, mapped);  // fault it in; THP may or may not back it (not asserted)
  const std::optional<uint64_t> huge = huge_page_bytes(p, mapped);
  ASSERT_TRUE(huge.has_value()) << "/proc/self/smaps unreadable";
  EXPECT_LE(*huge, mapped);
  EXPECT_EQ(*huge % (2 * kMiB), 0u);
  std::printf("live: %llu of %llu MiB on 2 MiB pages\n", (unsigned long long)(*huge / kMiB),
              (unsigned long long)(mapped / kMiB));
  unmap_huge_pages(p, mapped);
}

}  // namespace
}  // namespace kvw
