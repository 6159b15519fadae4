// grammar/token_trie.h: every token's bytes in one prefix tree, laid out in DFS preorder so a
// walk is a forward scan that jumps over a rejected subtree in O(1) (node.skip).
// Control, unknown and unused tokens (and tokens with no bytes) are left out: a grammar never
// allows them. End-of-generation ids are listed apart (allowed only where the grammar may end).
// Built once per tokenizer; immutable and shared by every sequence (thread-safe reads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvw {
class Tokenizer;
}

namespace kvw::grammar {

class TokenTrie {
 public:
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;      // 1 for the first byte of a token
    uint32_t skip = 0;       // index of the first node after this subtree
    uint32_t tok_begin = 0;  // tokens whose bytes end here: token_ids()[tok_begin, tok_end)
    uint32_t tok_end = 0;
  };

  // bytes[id]: the token's bytes, empty for tokens never allowed. eog_ids: end-of-generation ids.
  TokenTrie(std::vector<std::string> bytes, std::vector<int32_t> eog_ids);
  static std::shared_ptr<const TokenTrie> from_tokenizer(const Tokenizer& tok);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool is_eog(int32_t id) const;
  std::string_view token_bytes(int32_t id) const { return bytes_[id]; }
  int32_t n_vocab() const { return (int32_t)bytes_.size(); }
  uint16_t max_depth() const { return max_depth_; }
  size_t memory_bytes() const;

 private:
  std::vector<std::string> bytes_;  // [n_vocab]
  std::vector<Node> nodes_;         // DFS preorder
  std::vector<int32_t> token_ids_;  // grouped by node
  std::vector<int32_t> eog_ids_;    // sorted
  uint16_t max_depth_ = 0;
};

}  // namespace kvw::grammar
