// model/seen_tokens.h: the distinct token ids one sequence has held (prompt, then each output
// token), sorted: what vLLM's repetition_penalty reads (SampleInputs::seen), so a draw touches
// only those tokens, never the whole vocabulary.
// Sized by what the sequence can hold: the capacity given at construction (min(n_vocab, prompt
// + max_tokens) ids, charged to the request's memory by the server) is reserved once, and adding
// never allocates beyond it.
// Owner: one sequence's sampler (engine thread); not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvw {

class SeenTokens {
 public:
  explicit SeenTokens(size_t capacity) { ids_.reserve(capacity); }
  // Adds every id of `tokens` (duplicates and known ids are ignored). O(k log k + n) for k new
  // tokens over n known: the prompt goes in as one batch.
  void add(std::span<const int32_t> tokens);
  // One id: a binary search, and a shift of the larger ids when it is new (~4 B per known id).
  void add(int32_t id);
  std::span<const int32_t> ids() const { return ids_; }
  size_t memory_bytes() const { return ids_.capacity() * sizeof(int32_t); }

 private:
  std::vector<int32_t> ids_;  // [<= capacity] distinct, ascending
};

}  // namespace kvw
