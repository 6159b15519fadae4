// tokenizer/vocab_builder.cc: deterministic vocabularies from a word list, for test models
// (`kvwarden make-model`) and tests. See tokenizer.h for what each builder produces.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvw {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581

void add_token(Vocab& v, std::string text, TokenType type, float score = 0.0f) {
  v.tokens.push_back(std::move(text));
  v.types.push_back(type);
  v.scores.push_back(score);
}

std::vector<std::string> split_chars(std::string_view s) {
  std::vector<std::string> chars;
  for (size_t pos = 0; pos < s.size();) {
    const size_t len = utf8_next(s.substr(pos)).len;  // as spm.cc splits
    chars.emplace_back(s.substr(pos, len));
    pos += len;
  }
  return chars;
}

struct SpecialSet {
  std::vector<std::string> texts;
  int bos, eos, eot;  // indices into texts, -1 if none
  bool add_bos;
};

SpecialSet specials_for(std::string_view pre) {
  if (pre == "llama3" || pre == "llama-bpe") {
    return {{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|eot_id|>"},
            0,
            1,
            4,
            true};
  }
  if (pre == "qwen2") return {{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, 0, 0, 2, false};
  if (pre == "gpt-4o") {  // gpt-oss's o200k_harmony: eos <|return|>, end of a message <|end|>
    return {{"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|start|>", "<|end|>",
             "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>"},
            0,
            2,
            4,
            false};
  }
  if (pre == "deepseek-llm" || pre == "deepseek-v3") {
    // <｜begin▁of▁sentence｜>, <｜end▁of▁sentence｜> (fullwidth bars, U+2581 spaces)
    return {{"<\xEF\xBD\x9C"
             "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
             "<\xEF\xBD\x9C"
             "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"},
            0,
            1,
            -1,
            true};
  }
  return {{"<|endoftext|>"}, 0, 0, -1, false};
}

// Byte-level training words: each word with and without a leading space, cut by the family's
// pre-tokenizer exactly as encode() will cut text.
std::vector<std::string> bpe_training_words(const std::vector<std::string>& words,
                                            std::string_view pre) {
  Result<PreTokenizer> pt = PreTokenizer::create(pre);
  std::set<std::string> uniq;
  for (const std::string& w : words) {
    for (const std::string& variant : {w, " " + w}) {
      if (!pt.ok()) {
        uniq.insert(variant);
        continue;
      }
      for (std::string_view piece : pt->split(variant)) uniq.emplace(piece);
    }
  }
  return {uniq.begin(), uniq.end()};
}

// Greedy BPE: repeatedly merge the most frequent adjacent pair (ties: smallest (left, right)
// ids) in every word, until no word has two symbols left or the vocab reaches `max_tokens`.
void learn_merges(Vocab& v, const std::vector<std::string>& words, int64_t max_tokens) {
  std::vector<std::vector<int32_t>> seqs;
  for (const std::string& w : words) {
    std::vector<int32_t> seq;
    for (char c : w) seq.push_back(static_cast<uint8_t>(c));  // byte tokens have id = byte
    seqs.push_back(std::move(seq));
  }
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t id = 0; id < (int32_t)v.tokens.size(); ++id) ids.emplace(v.tokens[id], id);

  while ((int64_t)v.tokens.size() < max_tokens) {
    std::unordered_map<uint64_t, int32_t> counts;
    for (const auto& seq : seqs) {
      for (size_t i = 0; i + 1 < seq.size(); ++i) {
        ++counts[(uint64_t)seq[i] << 32 | (uint32_t)seq[i + 1]];
      }
    }
    if (counts.empty()) break;
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it) {
      if (it->second > best->second || (it->second == best->second && it->first < best->first)) {
        best = it;
      }
    }
    const auto left = (int32_t)(best->first >> 32);
    const auto right = (int32_t)(best->first & 0xFFFFFFFFu);
    const std::string merged = v.tokens[left] + v.tokens[right];
    v.merges.push_back(v.tokens[left] + " " + v.tokens[right]);
    auto [it, inserted] = ids.emplace(merged, (int32_t)v.tokens.size());
    if (inserted) add_token(v, merged, TokenType::kNormal);
    const int32_t merged_id = it->second;
    for (auto& seq : seqs) {  // apply left to right, non-overlapping, as encoding does
      std::vector<int32_t> next;
      for (size_t i = 0; i < seq.size(); ++i) {
        if (i + 1 < seq.size() && seq[i] == left && seq[i + 1] == right) {
          next.push_back(merged_id);
          ++i;
        } else {
          next.push_back(seq[i]);
        }
      }
      seq.swap(next);
    }
  }
}

}  // namespace

Vocab build_spm_vocab(const std::vector<std::string>& words, int32_t n_vocab_target) {
  Vocab v;
  v.model = "llama";
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_eos = false;
  v.add_space_prefix = true;
  add_token(v, "<unk>", TokenType::kUnknown);
  add_token(v, "<s>", TokenType::kControl);
  add_token(v, "</s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add_token(v, buf, TokenType::kByte);
  }
  // Pieces in first-seen order; earlier pieces score higher, as in SentencePiece models.
  std::vector<std::string> pieces;
  std::unordered_set<std::string> seen;
  auto add_piece = [&](std::string p) {
    if (seen.insert(p).second) pieces.push_back(std::move(p));
  };
  add_piece(std::string(kSpmSpace));
  for (const std::string& w : words) {
    std::string prefix(kSpmSpace);
    for (const std::string& c : split_chars(w)) {
      const std::string ch = c == " " ? std::string(kSpmSpace) : c;
      add_piece(ch);
      prefix += ch;
      add_piece(prefix);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    add_token(v, pieces[i], TokenType::kNormal, -(float)i);
  }
  for (int32_t i = 0; (int32_t)v.tokens.size() < n_vocab_target; ++i) {
    add_token(v, "<unused" + std::to_string(i) + ">", TokenType::kUnused, -1e9f);
  }
  return v;
}

Vocab build_bpe_vocab(const std::vector<std::string>& words, const std::string& pre,
                      int32_t n_vocab_target) {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.add_space_prefix = false;
  v.add_eos = false;
  for (int b = 0; b < 256; ++b) add_token(v, byte_to_unicode(b), TokenType::kNormal);

  const SpecialSet specials = specials_for(pre);
  const int64_t max_learned =
      n_vocab_target > 0
          ? std::max<int64_t>(256, (int64_t)n_vocab_target - (int64_t)specials.texts.size())
          : INT64_MAX;
  learn_merges(v, bpe_training_words(words, pre), max_learned);
  for (int32_t i = 0; v.tokens.size() + specials.texts.size() < (size_t)std::max(n_vocab_target, 0);
       ++i) {
    add_token(v, "<|unused_" + std::to_string(i) + "|>", TokenType::kUnused);
  }
  const auto first_special = (int32_t)v.tokens.size();
  for (const std::string& s : specials.texts) add_token(v, s, TokenType::kControl);
  auto special_id = [&](int idx) { return idx < 0 ? -1 : first_special + idx; };
  v.bos_id = special_id(specials.bos);
  v.eos_id = special_id(specials.eos);
  v.eot_id = special_id(specials.eot);
  v.add_bos = specials.add_bos;
  v.scores.clear();  // byte-level BPE ranks by merges, not scores
  return v;
}

}  // namespace kvw
