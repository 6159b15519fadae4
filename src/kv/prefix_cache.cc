#include "kv/prefix_cache.h"

// The state struct on the stack (streaming a block in two parts) needs the static-linking API.
#define XXH_STATIC_LINKING_ONLY
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
  if (block_tokens.tail().empty() || block_tokens.head().empty()) {
    return hash_block_tokens(
        parent_hash, block_tokens.tail().empty() ? block_tokens.head() : block_tokens.tail());
  }
  // A block that straddles the prompt's end: its two parts are streamed into one hash (XXH64's
  // streaming digest equals the one-shot hash of the concatenation), so no copy and no scratch
  // buffer outside the start-up budget (issue 30).
  ++t_num_block_hashes;
  XXH64_state_t state;
  XXH64_reset(&state, parent_hash);
  XXH64_update(&state, block_tokens.head().data(), block_tokens.head().size_bytes());
  XXH64_update(&state, block_tokens.tail().data(), block_tokens.tail().size_bytes());
  return XXH64_digest(&state);
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
