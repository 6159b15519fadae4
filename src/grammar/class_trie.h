// grammar/class_trie.h: a TokenTrie folded by a ByteDfa's byte classes. Bytes of one class
// lead every DFA state to the same place, so tokens whose bytes fall in the same classes,
// position by position, share one path: when the grammar never tells two lowercase letters
// apart, every lowercase word of one length is one path. A mask's walk then costs a table
// lookup per class path plus a bit per allowed token, where the byte trie's costs a lookup
// per distinct byte prefix (~0.5-1 ms at 152k tokens). Layout as TokenTrie: DFS preorder,
// node.skip jumps over a subtree.
// Built once per DFA (DfaMaskCache); immutable, shared read-only (thread-safe reads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/token_trie.h"

namespace kvw::grammar {

class ClassTrie {
 public:
  struct Node {
    uint8_t cls = 0;         // byte class of this position
    uint16_t depth = 0;      // 1 for a token's first byte
    uint32_t skip = 0;       // index of the first node after this subtree
    uint32_t tok_begin = 0;  // tokens whose class path ends here: token_ids_[tok_begin, tok_end)
    uint32_t tok_end = 0;
  };

  // Null when folding gains little (over 3/4 of the byte trie's nodes left) or the folded trie
  // would take more than max_bytes.
  static std::unique_ptr<const ClassTrie> build(const ByteDfa& dfa, const TokenTrie& trie,
                                                size_t max_bytes);

  // walk_trie_dfa's mask (no leading-space stripping): sets bit id of `bits` ([n_vocab / 64],
  // zeroed by the caller) for every token whose bytes lead `dfa` (the one built for) from
  // `state` to a live state. states: scratch, resized here.
  void walk(const ByteDfa& dfa, uint32_t state, std::vector<uint32_t>* states,
            uint64_t* bits) const;

  uint32_t num_nodes() const { return (uint32_t)nodes_.size(); }
  size_t memory_bytes() const {
    return nodes_.capacity() * sizeof(Node) + token_ids_.capacity() * 4;
  }

 private:
  std::vector<Node> nodes_;         // DFS preorder
  std::vector<int32_t> token_ids_;  // grouped by node
  uint16_t max_depth_ = 0;
};

}  // namespace kvw::grammar
