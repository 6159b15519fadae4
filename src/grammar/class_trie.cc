#include "grammar/class_trie.h"

#include <algorithm>
#include <utility>

namespace kvw::grammar {
namespace {

// The build's child table ([node][num_classes] child ids) may take this much: a DFA with many
// classes folds little, and gives up here before the table grows large.
constexpr size_t kMaxTableBytes = 16u << 20;

}  // namespace

std::unique_ptr<const ClassTrie> ClassTrie::build(const ByteDfa& dfa, const TokenTrie& trie,
                                                  size_t max_bytes) {
  const size_t nc = dfa.num_classes();
  const std::vector<TokenTrie::Node>& bnodes = trie.nodes();
  const size_t max_nodes = bnodes.size() * 3 / 4 + 1;
  // Build nodes: 0 is the root; child[u * nc + c] = child of u by class c (0 = none).
  std::vector<uint32_t> child(nc, 0);
  std::vector<uint8_t> cls_of = {0};
  std::vector<uint16_t> depth_of = {0};
  std::vector<uint32_t> path(trie.max_depth() + 1u, 0);  // path[d]: node at depth d
  std::vector<std::pair<uint32_t, int32_t>> toks;        // (build node, token id)
  toks.reserve(trie.token_ids().size());
  const int32_t* ids = trie.token_ids().data();
  auto ct = std::make_unique<ClassTrie>();
  for (const TokenTrie::Node& bn : bnodes) {
    const size_t at = (size_t)path[bn.depth - 1] * nc + dfa.byte_class(bn.byte);
    if (child[at] == 0) {
      if (cls_of.size() > max_nodes || (child.size() + nc) * 4 > kMaxTableBytes) return nullptr;
      child[at] = (uint32_t)cls_of.size();
      cls_of.push_back((uint8_t)dfa.byte_class(bn.byte));
      depth_of.push_back(bn.depth);
      child.resize(child.size() + nc, 0);
      ct->max_depth_ = std::max(ct->max_depth_, bn.depth);
    }
    const uint32_t u = child[at];
    path[bn.depth] = u;
    for (uint32_t t = bn.tok_begin; t < bn.tok_end; ++t) toks.push_back({u, ids[t]});
  }
  const size_t n = cls_of.size() - 1;  // without the root
  if (n * sizeof(Node) + toks.size() * 4 > max_bytes) return nullptr;
  // Preorder: a node's index, then its subtree's, then skip.
  std::vector<uint32_t> index_of(cls_of.size(), 0);
  ct->nodes_.reserve(n);
  std::vector<std::pair<uint32_t, uint32_t>> stack = {{0, 0}};  // (node, next class to try)
  while (!stack.empty()) {
    const uint32_t u = stack.back().first;
    uint32_t c = stack.back().second;
    while (c < nc && child[(size_t)u * nc + c] == 0) ++c;
    if (c == nc) {
      if (u != 0) ct->nodes_[index_of[u]].skip = (uint32_t)ct->nodes_.size();
      stack.pop_back();
      continue;
    }
    stack.back().second = c + 1;
    const uint32_t v = child[(size_t)u * nc + c];
    index_of[v] = (uint32_t)ct->nodes_.size();
    ct->nodes_.push_back(Node{.cls = cls_of[v], .depth = depth_of[v]});
    stack.push_back({v, 0});
  }
  // Tokens grouped by node, in preorder (a counting sort).
  std::vector<uint32_t> begin(n + 1, 0);
  for (const auto& t : toks) ++begin[index_of[t.first] + 1];
  for (size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
  for (size_t i = 0; i < n; ++i) {
    ct->nodes_[i].tok_begin = begin[i];
    ct->nodes_[i].tok_end = begin[i + 1];
  }
  ct->token_ids_.resize(toks.size());
  for (const auto& [u, id] : toks) ct->token_ids_[begin[index_of[u]]++] = id;
  return ct;
}

void ClassTrie::walk(const ByteDfa& dfa, uint32_t state, std::vector<uint32_t>* states,
                     uint64_t* bits) const {
  states->resize(max_depth_ + 1u);
  uint32_t* at = states->data();  // at[d] = state after the current node's first d classes
  at[0] = state;
  const Node* nodes = nodes_.data();
  const int32_t* ids = token_ids_.data();
  const uint32_t n = (uint32_t)nodes_.size();
  for (uint32_t i = 0; i < n;) {
    const Node& nd = nodes[i];
    const uint32_t next = dfa.next_by_class(at[nd.depth - 1], nd.cls);
    if (next == ByteDfa::kDead) {
      i = nd.skip;  // no token below continues the language
      continue;
    }
    at[nd.depth] = next;
    for (uint32_t t = nd.tok_begin; t < nd.tok_end; ++t) {
      bits[ids[t] >> 6] |= uint64_t{1} << (ids[t] & 63);
    }
    ++i;
  }
}

}  // namespace kvw::grammar
