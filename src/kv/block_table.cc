#include "kv/block_table.h"

#include "core/check.h"
#include "kv/prefix_cache.h"

namespace kvw {

uint64_t BlockTable::last_hash() const {
  return hashes_.empty() ? kPrefixHashSeed : hashes_.back();
}

uint32_t BlockTable::num_blocks_needed(int64_t num_new_tokens) const {
  CHECK(num_new_tokens >= 0) << "num_new_tokens " << num_new_tokens;
  const int64_t total = num_tokens_ + num_new_tokens;
  const int64_t blocks = (total + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(num_blocks());
  return blocks > have ? static_cast<uint32_t>(blocks - have) : 0;
}

void BlockTable::count_holes_from(size_t first) {
  const std::span<const BlockId> b = blocks();
  for (size_t i = first; i < b.size(); ++i) {
    if (b[i] != kNullBlock) continue;
    CHECK(i == num_holes_) << "hole at block " << i << " after a live block";
    ++num_holes_;
  }
}

uint32_t BlockTable::release_leading(size_t n) {
  if (n <= num_holes_) return 0;
  const uint32_t freed = lease_.release_front(n);
  num_holes_ = n;
  return freed;
}

void BlockTable::append(BlockLease&& blocks, int64_t num_new_tokens) {
  CHECK(num_new_tokens >= 0) << "num_new_tokens " << num_new_tokens;
  const size_t first = num_blocks();
  lease_.append(std::move(blocks));
  count_holes_from(first);
  num_tokens_ += num_new_tokens;
  const int64_t want = (num_tokens_ + block_size_ - 1) / block_size_;
  CHECK(want == static_cast<int64_t>(num_blocks()))
      << "table has " << num_blocks() << " blocks for " << num_tokens_ << " tokens";
}

void BlockTable::truncate(int64_t n) {
  CHECK(n >= num_computed_ && n <= num_tokens_)
      << "truncate to " << n << " of " << num_tokens_ << " slots, " << num_computed_ << " computed";
  const size_t keep = static_cast<size_t>((n + block_size_ - 1) / block_size_);
  CHECK(keep >= hashes_.size() && keep >= num_holes_) << "truncate into hashed blocks or holes";
  lease_.release_back(num_blocks() - keep);
  num_tokens_ = n;
}

void BlockTable::append_cached(BlockLease&& blocks, std::span<const uint64_t> hashes) {
  CHECK(blocks.size() == hashes.size()) << "hit blocks vs hashes";
  CHECK(num_tokens_ == num_computed_ && num_tokens_ % block_size_ == 0 &&
        hashes_.size() == num_blocks())
      << "prefix hit appended after uncomputed or unhashed tokens";
  const int64_t n = static_cast<int64_t>(blocks.size()) * block_size_;
  const size_t first = num_blocks();
  lease_.append(std::move(blocks));
  count_holes_from(first);
  hashes_.insert(hashes_.end(), hashes.begin(), hashes.end());
  num_tokens_ += n;
  num_computed_ += n;
}

void BlockTable::set_num_computed(int64_t n, uint64_t step) {
  CHECK(n >= 0 && n <= num_tokens_) << "num_computed " << n << " > num_tokens " << num_tokens_;
  num_computed_ = n;
  last_commit_step_ = step;
}

uint32_t BlockTable::num_runs() const {
  const auto b = blocks().subspan(num_holes_);
  if (b.empty()) return 0;
  uint32_t runs = 1;
  for (size_t i = 1; i < b.size(); ++i) {
    if (index_of(b[i]) != index_of(b[i - 1]) + 1) ++runs;
  }
  return runs;
}

void BlockTable::copy_counts_from(const BlockTable& o) {
  num_tokens_ = o.num_tokens_;
  num_computed_ = o.num_computed_;
  hashes_ = o.hashes_;
  last_commit_step_ = o.last_commit_step_;
}

void BlockTable::clear() {
  lease_.reset();
  num_holes_ = 0;
  num_tokens_ = num_computed_ = 0;
  hashes_.clear();
}

}  // namespace kvw
