#include "grammar/token_trie.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace kvw::grammar {

TokenTrie::TokenTrie(std::vector<std::string> bytes, std::vector<int32_t> eog_ids)
    : bytes_(std::move(bytes)), eog_ids_(std::move(eog_ids)) {
  std::sort(eog_ids_.begin(), eog_ids_.end());
  std::vector<int32_t> order;
  for (int32_t id = 0; id < (int32_t)bytes_.size(); ++id) {
    if (!bytes_[id].empty() && !is_eog(id)) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  // Sorted order visits the trie in preorder: each token adds nodes for the bytes past its
  // common prefix with the previous token; nodes deeper than that prefix are closed (skip set).
  std::vector<uint32_t> open;  // open[d - 1] = node index at depth d on the current path
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view cur = bytes_[id];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < cur.size() && prev[lcp] == cur[lcp]) ++lcp;
    while (open.size() > lcp) {
      nodes_[open.back()].skip = (uint32_t)nodes_.size();
      open.pop_back();
    }
    for (size_t d = lcp; d < cur.size(); ++d) {
      open.push_back((uint32_t)nodes_.size());
      Node n;
      n.byte = (uint8_t)cur[d];
      n.depth = (uint16_t)std::min<size_t>(d + 1, UINT16_MAX);
      n.tok_begin = n.tok_end = (uint32_t)token_ids_.size();
      nodes_.push_back(n);
      max_depth_ = std::max(max_depth_, n.depth);
    }
    Node& last = nodes_[open.back()];
    if (last.tok_end != token_ids_.size()) last.tok_begin = (uint32_t)token_ids_.size();
    token_ids_.push_back(id);
    last.tok_end = (uint32_t)token_ids_.size();
    prev = cur;
  }
  for (uint32_t i : open) nodes_[i].skip = (uint32_t)nodes_.size();
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const Tokenizer& tok) {
  std::vector<std::string> bytes(tok.n_vocab());
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_end_of_generation(id) || id == tok.eos_id()) {
      eog.push_back(id);
      continue;
    }
    const TokenType t = tok.token_type(id);
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused) continue;
    bytes[id] = tok.token_bytes(id);
  }
  return std::make_shared<const TokenTrie>(std::move(bytes), std::move(eog));
}

bool TokenTrie::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

size_t TokenTrie::memory_bytes() const {
  size_t n = nodes_.size() * sizeof(Node) + token_ids_.size() * 4 + eog_ids_.size() * 4;
  for (const auto& b : bytes_) n += sizeof(std::string) + (b.size() > 15 ? b.size() : 0);
  return n;
}

}  // namespace kvw::grammar
