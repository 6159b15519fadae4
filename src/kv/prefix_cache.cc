#include "kv/prefix_cache.h"

#include <xxhash.h>

#include "core/check.h"

namespace kvw {

namespace {
thread_local uint64_t t_num_block_hashes = 0;
}  // namespace

uint64_t num_block_hashes_this_thread() {
  return t_num_block_hashes;
}

uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> block_tokens) {
  ++t_num_block_hashes;
  // Token ids are hashed as their in-memory bytes; every supported host is little-endian.
  return XXH64(block_tokens.data(), block_tokens.size_bytes(), parent_hash);
}

uint64_t hash_split_block(uint64_t parent_hash, TokenSpan block_tokens) {
  // One block of a few dozen tokens straddles the prompt's end per sequence: copied, per thread.
  thread_local std::vector<int32_t> scratch;
  return hash_block_tokens(parent_hash, block_tokens.contiguous(scratch));
}

void hash_full_blocks(TokenSpan tokens, int32_t block_size, size_t first_block,
                      uint64_t parent_hash, std::vector<uint64_t>& out) {
  CHECK(block_size > 0) << "block_size " << block_size;
  const size_t bs = static_cast<size_t>(block_size);
  const size_t num_full = tokens.size() / bs;
  uint64_t h = parent_hash;
  for (size_t i = first_block; i < num_full; ++i) {
    h = hash_split_block(h, tokens.subspan(i * bs, bs));
    out.push_back(h);
  }
}

void PrefixCache::erase(uint64_t hash, BlockId b) {
  auto it = map_.find(hash);
  CHECK(it != map_.end() && it->second == b)
      << "prefix cache entry for block " << index_of(b) << " missing";
  map_.erase(it);
}

void PrefixCache::rename(uint64_t hash, BlockId to) {
  auto it = map_.find(hash);
  CHECK(it != map_.end()) << "rename of missing prefix cache entry";
  it->second = to;
}

}  // namespace kvw
