// tests/kv/kv_test_util.h: test doubles for the KV manager tests.
// FakeStorage keeps one token id per slot, so a test can "run the forward" (write the tokens a
// sequence computed into its slots) and later read them back through any block table: prefix
// hits, copy-on-write and defragmentation moves must all preserve what a sequence reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kv/kv_storage.h"
#include "kv/swap_space.h"

namespace kvw::test {

class FakeStorage final : public KvStorage {
 public:
  FakeStorage(uint32_t num_blocks, int32_t block_size)
      : block_size_(block_size), slots_(size_t(num_blocks) * block_size, -1) {}

  uint32_t num_blocks() const override { return uint32_t(slots_.size() / block_size_); }
  uint64_t bytes_per_block() const override { return uint64_t(block_size_) * sizeof(int32_t); }
  void copy_block(BlockId src, BlockId dst) override {
    copies.emplace_back(index_of(src), index_of(dst));
    std::memcpy(slot_ptr(dst, 0), slot_ptr(src, 0), bytes_per_block());
  }
  void read_block(BlockId b, std::span<uint8_t> out) const override {
    CHECK(out.size() == bytes_per_block());
    std::memcpy(out.data(), slot_ptr(b, 0), out.size());
  }
  void write_block(BlockId b, std::span<const uint8_t> in) override {
    CHECK(in.size() == bytes_per_block());
    std::memcpy(slot_ptr(b, 0), in.data(), in.size());
  }

  // The "forward pass": writes tokens[p] into the slot of every position p in [begin, end).
  void write_tokens(std::span<const BlockId> table, std::span<const int32_t> tokens, int64_t begin,
                    int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      *slot_ptr(table[p / block_size_], p % block_size_) = tokens[p];
    }
  }
  // The "attention read": the token ids stored for positions [0, n).
  std::vector<int32_t> read_tokens(std::span<const BlockId> table, int64_t n) const {
    return read_range(table, 0, n);
  }
  // The same for positions [begin, end) (a sliding window's read; CHECKs it meets no hole).
  std::vector<int32_t> read_range(std::span<const BlockId> table, int64_t begin,
                                  int64_t end) const {
    std::vector<int32_t> out;
    for (int64_t p = begin; p < end; ++p) {
      const BlockId b = table[p / block_size_];
      CHECK(b != kNullBlock) << "read of position " << p << " in a released block";
      out.push_back(*slot_ptr(b, p % block_size_));
    }
    return out;
  }

  std::vector<std::pair<uint32_t, uint32_t>> copies;  // (src, dst) in call order

 private:
  int32_t* slot_ptr(BlockId b, int64_t slot) {
    return &slots_[size_t(index_of(b)) * block_size_ + size_t(slot)];
  }
  const int32_t* slot_ptr(BlockId b, int64_t slot) const {
    return &slots_[size_t(index_of(b)) * block_size_ + size_t(slot)];
  }

  int32_t block_size_;
  std::vector<int32_t> slots_;  // [num_blocks][block_size] token id per slot
};

// An in-memory swap file with injectable read/write errors.
class MemBlockFile final : public BlockFile {
 public:
  explicit MemBlockFile(uint64_t size) : bytes_(size) {}
  Status write_at(uint64_t offset, std::span<const uint8_t> data) override {
    if (fail_writes) return Error{"mem swap: injected write error"};
    std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return Status::ok_status();
  }
  Status read_at(uint64_t offset, std::span<uint8_t> data) override {
    if (fail_reads) return Error{"mem swap: injected read error"};
    std::memcpy(data.data(), bytes_.data() + offset, data.size());
    return Status::ok_status();
  }
  std::atomic<bool> fail_writes{false};  // read by the swap worker
  std::atomic<bool> fail_reads{false};

 private:
  std::vector<uint8_t> bytes_;
};

// Block ids as plain numbers, for EXPECT_EQ against literals.
inline std::vector<uint32_t> ids(std::span<const BlockId> blocks) {
  std::vector<uint32_t> out;
  for (BlockId b : blocks) out.push_back(index_of(b));
  return out;
}

// Tokens base, base+1, ..., base+n-1.
inline std::vector<int32_t> iota_tokens(int32_t n, int32_t base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = base + i;
  return t;
}

}  // namespace kvw::test
