// tokenizer/bpe.cc: byte-level BPE ("gpt2" vocabularies), as llama.cpp's llm_tokenizer_bpe:
// special tokens are split out, the rest is cut into words by the family's pre-tokenizer
// regexes, and each word's bytes (as GPT-2 byte-unicode token ids) are merged by merge rank,
// lowest rank first, leftmost first among equal ranks. No per-word cache (bounded memory).
#include <array>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace kvw::tokenizer_internal {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(Vocab vocab, PreTokenizer pre);
  Status build_merges();
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string token_bytes(int32_t id, bool render_special) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result_id;
  };
  struct Symbol {
    int32_t id;  // token id; -1: a byte the vocab has no token for
    int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t left, right;  // symbol indices
    int32_t left_id, right_id;
    int32_t result_id;
  };
  struct CandidateOrder {  // lowest rank first, then leftmost
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };
  using CandidateQueue = std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder>;

  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void try_add_candidate(const std::vector<Symbol>& syms, int32_t left,
                         CandidateQueue& queue) const;
  int32_t find_token(std::string_view s) const {
    auto it = token_to_id_.find(s);
    return it == token_to_id_.end() ? -1 : it->second;
  }

  PreTokenizer pre_;
  // llama3 vocabularies (HF "ignore_merges"): a word that is itself a token is used whole.
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;  // normal
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left_id, right_id) -> rank, result
  std::array<int32_t, 256> byte_to_id_;         // -1 when the vocab lacks a byte's token
  std::vector<std::string> bytes_;              // [n_vocab] decoded bytes of normal tokens
  std::vector<SpecialToken> specials_;
};

BpeTokenizer::BpeTokenizer(Vocab vocab, PreTokenizer pre)
    : Tokenizer(std::move(vocab), false), pre_(std::move(pre)) {
  ignore_merges_ = vocab_.pre == "llama3" || vocab_.pre == "llama-bpe";
  bytes_.resize(vocab_.tokens.size());
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const TokenType t = type_at(vocab_, id);
    if (t == TokenType::kNormal || t == TokenType::kUndefined || t == TokenType::kByte) {
      token_to_id_.emplace(vocab_.tokens[id], id);  // first id wins for duplicate texts
      bytes_[id] = unicode_to_bytes(vocab_.tokens[id]);
    }
  }
  for (int b = 0; b < 256; ++b) byte_to_id_[b] = find_token(byte_to_unicode(b));
  specials_ = collect_special_tokens(vocab_);
}

Status BpeTokenizer::build_merges() {
  merges_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const std::string& m = vocab_.merges[rank];
    const size_t sep = m.find(' ', 1);
    if (sep == std::string::npos) {
      return Error{"tokenizer: merge " + std::to_string(rank) + " '" + m + "' has no separator"};
    }
    const std::string_view left = std::string_view(m).substr(0, sep);
    const std::string_view right = std::string_view(m).substr(sep + 1);
    const int32_t left_id = find_token(left);
    const int32_t right_id = find_token(right);
    if (left_id < 0 || right_id < 0) {
      return Error{"tokenizer: merge " + std::to_string(rank) + " '" + m +
                   "' refers to a token not in the vocabulary"};
    }
    // A merge whose result is not a token could never be emitted; llama.cpp would fall back
    // to bytes for it, which is what skipping it does.
    const int32_t result_id = find_token(std::string(left) + std::string(right));
    if (result_id < 0) continue;
    merges_.try_emplace(pair_key(left_id, right_id), Merge{(int32_t)rank, result_id});
  }
  return Status::ok_status();
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos_id);
  for (const Fragment& f : split_special(text, specials_, parse_special)) {
    if (f.token_id >= 0) {
      out.push_back(f.token_id);
      continue;
    }
    for (std::string_view word : pre_.split(f.text)) encode_word(word, out);
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos_id);
  return out;
}

void BpeTokenizer::try_add_candidate(const std::vector<Symbol>& syms, int32_t left,
                                     CandidateQueue& queue) const {
  if (left < 0) return;
  const int32_t right = syms[left].next;
  if (right < 0 || syms[left].id < 0 || syms[right].id < 0) return;
  auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
  if (it == merges_.end()) return;
  queue.push({it->second.rank, left, right, syms[left].id, syms[right].id, it->second.result_id});
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t id = find_token(bytes_to_unicode(word)); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> syms(word.size());
  for (int32_t i = 0; i < (int32_t)word.size(); ++i) {
    syms[i] = {byte_to_id_[static_cast<uint8_t>(word[i])], i - 1,
               i + 1 < (int32_t)word.size() ? i + 1 : -1, true};
  }
  CandidateQueue queue;
  for (int32_t i = 0; i + 1 < (int32_t)syms.size(); ++i) try_add_candidate(syms, i, queue);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[c.left];
    // Stale if either side was merged away or changed since the candidate was queued.
    if (!l.alive || l.next != c.right || l.id != c.left_id || syms[c.right].id != c.right_id) {
      continue;
    }
    Symbol& r = syms[c.right];
    l.id = c.result_id;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    try_add_candidate(syms, l.prev, queue);
    try_add_candidate(syms, c.left, queue);
  }

  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    if (syms[i].id >= 0) {
      out.push_back(syms[i].id);
    } else if (vocab_.unk_id >= 0) {
      out.push_back(vocab_.unk_id);
    }  // else: the vocab cannot represent this byte at all; it is dropped
  }
}

std::string BpeTokenizer::token_bytes(int32_t id, bool render_special) const {
  switch (token_type(id)) {  // CHECKs the range
    case TokenType::kControl:
    case TokenType::kUnused:
      return render_special ? vocab_.tokens[id] : std::string();
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return vocab_.tokens[id];  // added tokens are stored as plain text
    default:
      return bytes_[id];
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(Vocab vocab) {
  Result<PreTokenizer> pre = PreTokenizer::create(vocab.pre);
  if (!pre.ok()) return Error{"tokenizer: " + pre.message()};
  auto tok = std::make_unique<BpeTokenizer>(std::move(vocab), std::move(pre).value());
  KVW_RETURN_IF_ERROR(tok->build_merges());
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace kvw::tokenizer_internal
