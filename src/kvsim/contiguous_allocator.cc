// kvsim/contiguous_allocator.cc: first-fit over a sorted hole list, coalescing on free.
#include "kvsim/contiguous_allocator.h"

#include <algorithm>

#include "core/check.h"

namespace kvw::kvsim {

ContiguousAllocator::ContiguousAllocator(uint64_t capacity_bytes) : capacity_(capacity_bytes) {
  if (capacity_ > 0) holes_.emplace(0, capacity_);
}

std::optional<uint64_t> ContiguousAllocator::allocate(uint64_t bytes) {
  CHECK(bytes > 0) << "zero-byte allocation";
  // Linear scan: a simulation holds at most a few hundred holes, so O(holes) is fine.
  for (auto it = holes_.begin(); it != holes_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - bytes;
    holes_.erase(it);
    if (rest > 0) holes_.emplace(offset + bytes, rest);
    allocs_.emplace(offset, bytes);
    used_ += bytes;
    return offset;
  }
  return std::nullopt;
}

void ContiguousAllocator::free(uint64_t offset) {
  auto a = allocs_.find(offset);
  CHECK(a != allocs_.end()) << "free of offset " << offset << " that is not allocated";
  uint64_t start = offset;
  uint64_t size = a->second;
  used_ -= size;
  allocs_.erase(a);
  auto next = holes_.lower_bound(offset);
  if (next != holes_.end() && next->first == start + size) {  // merge with the hole after
    size += next->second;
    next = holes_.erase(next);
  }
  if (next != holes_.begin()) {  // merge with the hole before
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      holes_.erase(prev);
    }
  }
  holes_.emplace(start, size);
}

ContiguousStats ContiguousAllocator::stats() const {
  ContiguousStats s;
  s.capacity_bytes = capacity_;
  s.used_bytes = used_;
  s.free_bytes = capacity_ - used_;
  s.num_holes = static_cast<uint32_t>(holes_.size());
  s.num_allocations = static_cast<uint32_t>(allocs_.size());
  for (const auto& [off, size] : holes_)
    s.largest_hole_bytes = std::max(s.largest_hole_bytes, size);
  if (s.free_bytes > 0) {
    s.fragmentation = static_cast<double>(s.free_bytes - s.largest_hole_bytes) /
                      static_cast<double>(s.free_bytes);
  }
  return s;
}

void ContiguousAllocator::check_invariants() const {
  std::map<uint64_t, std::pair<uint64_t, bool>> all;  // offset -> (size, is_hole)
  for (const auto& [off, size] : holes_) all.emplace(off, std::make_pair(size, true));
  for (const auto& [off, size] : allocs_) {
    CHECK(all.emplace(off, std::make_pair(size, false)).second) << "overlap at " << off;
  }
  uint64_t expect = 0;
  bool prev_hole = false;
  uint64_t used = 0;
  for (const auto& [off, entry] : all) {
    CHECK(off == expect) << "gap or overlap at offset " << off << ", expected " << expect;
    CHECK(entry.first > 0) << "empty range at " << off;
    CHECK(!(prev_hole && entry.second)) << "adjacent holes not merged at " << off;
    prev_hole = entry.second;
    if (!entry.second) used += entry.first;
    expect = off + entry.first;
  }
  CHECK(expect == capacity_) << "ranges end at " << expect << ", capacity " << capacity_;
  CHECK(used == used_) << "used " << used_ << " but allocations sum to " << used;
}

}  // namespace kvw::kvsim
