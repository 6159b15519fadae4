// kvsim/contiguous_allocator.h: the naive baseline. Each sequence reserves one contiguous byte
// range (max_model_len tokens of KV) in a fixed arena, chosen first-fit; freeing coalesces with
// neighbouring holes. Exists only so kvsim can compare it with paged allocation.
// Owner: one simulation (not thread-safe).
//
//   arena  [ seq A (reserved) | hole | seq C | hole ................ ]
//   offset 0                  a      b       c                      capacity
//   fragmentation = (free - largest hole) / free      (0 when free is one hole, or 0 bytes)
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace kvw::kvsim {

struct ContiguousStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // reserved by live allocations
  uint64_t free_bytes = 0;
  uint64_t largest_hole_bytes = 0;
  uint32_t num_holes = 0;
  uint32_t num_allocations = 0;
  double fragmentation = 0;  // (free - largest hole) / free
};

class ContiguousAllocator {
 public:
  explicit ContiguousAllocator(uint64_t capacity_bytes);

  // Lowest-offset hole of at least `bytes` bytes; returns its offset, or nullopt (and changes
  // nothing) when no single hole is large enough, even if the free total would be. bytes > 0.
  std::optional<uint64_t> allocate(uint64_t bytes);
  // Frees the allocation that starts at `offset` and merges it with adjacent holes.
  // CHECK-fails on an offset that is not a live allocation (double free).
  void free(uint64_t offset);

  ContiguousStats stats() const;
  uint64_t capacity_bytes() const { return capacity_; }
  // CHECKs holes and allocations tile [0, capacity) exactly, and no two holes are adjacent.
  void check_invariants() const;

 private:
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> holes_;   // offset -> size, sorted by offset (first-fit order)
  std::map<uint64_t, uint64_t> allocs_;  // offset -> size of live allocations
};

}  // namespace kvw::kvsim
