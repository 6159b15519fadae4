// tokenizer/spm.cc: SentencePiece-style BPE ("llama" vocabularies), as llama.cpp's
// llm_tokenizer_spm: spaces become U+2581, the text is split into UTF-8 characters, and the
// adjacent pair whose concatenation is the highest-scoring vocabulary piece is merged until no
// pair is a piece. Characters that are not pieces fall back to <0xNN> byte tokens, else <unk>.
#include <array>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace kvw::tokenizer_internal {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";         // U+2581, SentencePiece's space
constexpr std::string_view kUnknownGlyph = "\xE2\x96\x85";  // U+2585, as llama.cpp renders <unk>

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// "<0x41>" -> 0x41; -1 if the text is not of that form.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v *= 16;
    if (c >= '0' && c <= '9')
      v += c - '0';
    else if (c >= 'A' && c <= 'F')
      v += c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v += c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    out.append(s.substr(pos, hit == std::string_view::npos ? s.npos : hit - pos));
    if (hit == std::string_view::npos) return out;
    out.append(to);
    pos = hit + from.size();
  }
}

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab);
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;
  std::string token_bytes(int32_t id, bool render_special) const override;

 private:
  struct Symbol {
    size_t begin, len;  // bytes of the escaped text; len 0 once merged into its left neighbour
    int32_t prev, next;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    size_t len;  // left.len + right.len when queued; stale if either changed since
  };
  struct BigramOrder {  // highest score first, then leftmost
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  using BigramQueue = std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder>;

  void encode_piece(std::string_view text, std::vector<int32_t>& out) const;
  void try_add_bigram(std::string_view text, const std::vector<Symbol>& syms, int32_t left,
                      int32_t right, BigramQueue& queue) const;
  int32_t find_piece(std::string_view s) const {
    auto it = piece_to_id_.find(s);
    return it == piece_to_id_.end() ? -1 : it->second;
  }
  float score(int32_t id) const { return vocab_.scores.empty() ? 0.0f : vocab_.scores[id]; }

  // Normal and user-defined pieces only: control, byte and unused tokens are never produced
  // by merging (so "<s>" in plain text stays text).
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> piece_to_id_;
  std::array<int32_t, 256> byte_to_id_;  // <0xNN> tokens; -1 when the vocab lacks one
  std::vector<std::string> bytes_;       // [n_vocab] decoded bytes of text-like tokens
  std::vector<SpecialToken> specials_;
};

SpmTokenizer::SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab), false) {
  strip_leading_space_ = vocab_.add_space_prefix;
  byte_to_id_.fill(-1);
  bytes_.resize(vocab_.tokens.size());
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (type_at(vocab_, id)) {
      case TokenType::kByte:
        if (const int b = parse_byte_token(text); b >= 0) {
          if (byte_to_id_[b] < 0) byte_to_id_[b] = id;
          bytes_[id] = std::string(1, static_cast<char>(b));
        } else {
          bytes_[id] = replace_all(text, kSpace, " ");
        }
        break;
      case TokenType::kNormal:
      case TokenType::kUndefined:
      case TokenType::kUserDefined:
        piece_to_id_.emplace(text, id);  // first id wins for duplicate texts
        bytes_[id] = replace_all(text, kSpace, " ");
        break;
      case TokenType::kUnknown:
        bytes_[id] = std::string(kUnknownGlyph);
        break;
      case TokenType::kControl:
      case TokenType::kUnused:
        break;
    }
  }
  specials_ = collect_special_tokens(vocab_);
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos_id);
  bool prev_special = true;  // the text start counts as following a special token
  for (const Fragment& f : split_special(text, specials_, parse_special)) {
    if (f.token_id >= 0) {
      out.push_back(f.token_id);
      prev_special = true;
      continue;
    }
    std::string escaped = (vocab_.add_space_prefix && prev_special) ? std::string(kSpace) : "";
    escaped += replace_all(f.text, " ", kSpace);
    encode_piece(escaped, out);
    prev_special = false;
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos_id);
  return out;
}

void SpmTokenizer::try_add_bigram(std::string_view text, const std::vector<Symbol>& syms,
                                  int32_t left, int32_t right, BigramQueue& queue) const {
  if (left < 0 || right < 0) return;
  const size_t len = syms[left].len + syms[right].len;
  const int32_t id = find_piece(text.substr(syms[left].begin, len));
  if (id < 0) return;
  queue.push({score(id), left, right, len});
}

void SpmTokenizer::encode_piece(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < text.size();) {
    // Valid characters as llama.cpp; an invalid run is cut at its maximal subparts so it can
    // never swallow the start of the next valid character (e.g. a U+2581).
    const size_t len = utf8_next(text.substr(pos)).len;
    const auto idx = (int32_t)syms.size();
    syms.push_back({pos, len, idx - 1, pos + len < text.size() ? idx + 1 : -1});
    pos += len;
  }
  BigramQueue queue;
  for (int32_t i = 1; i < (int32_t)syms.size(); ++i) try_add_bigram(text, syms, i - 1, i, queue);

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = syms[bg.left];
    Symbol& r = syms[bg.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    try_add_bigram(text, syms, l.prev, bg.left, queue);
    try_add_bigram(text, syms, bg.left, l.next, queue);
  }

  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].begin, syms[i].len);
    if (const int32_t id = find_piece(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {  // byte fallback
      const int32_t id = byte_to_id_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out.push_back(id);
      } else if (vocab_.unk_id >= 0) {
        out.push_back(vocab_.unk_id);
      }  // else: the vocab cannot represent this byte at all; it is dropped
    }
  }
}

std::string SpmTokenizer::token_bytes(int32_t id, bool render_special) const {
  const TokenType t = token_type(id);  // CHECKs the range
  if (t == TokenType::kControl || t == TokenType::kUnused) {
    return render_special ? vocab_.tokens[id] : std::string();
  }
  return bytes_[id];
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(Vocab vocab) {
  return std::unique_ptr<Tokenizer>(std::make_unique<SpmTokenizer>(std::move(vocab)));
}

}  // namespace kvw::tokenizer_internal
