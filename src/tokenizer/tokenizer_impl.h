// tokenizer/tokenizer_impl.h: internal to src/tokenizer: the two Tokenizer implementations'
// factories and the special-token splitting they share. Not part of the public contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kvw::tokenizer_internal {

struct SpecialToken {
  std::string text;
  int32_t id;
  bool always;  // user-defined: matched even when parse_special is false
};

// Control, unknown and user-defined tokens, longest text first (ties: lower id first).
std::vector<SpecialToken> collect_special_tokens(const Vocab& vocab);

struct Fragment {
  std::string_view text;  // raw text when token_id < 0
  int32_t token_id;       // >= 0: a special token matched in the text
};

// Splits `text` at occurrences of special tokens (longest first), as llama.cpp's
// tokenizer_st_partition. Empty raw fragments are dropped.
std::vector<Fragment> split_special(std::string_view text,
                                    const std::vector<SpecialToken>& specials, bool parse_special);

inline TokenType type_at(const Vocab& v, int32_t id) {
  return v.types.empty() ? TokenType::kNormal : v.types[id];
}

// Both take a vocab already checked by Tokenizer::create (sizes, id ranges).
Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(Vocab vocab);
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(Vocab vocab);

}  // namespace kvw::tokenizer_internal
