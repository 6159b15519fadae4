// Shared by the grammar tests: the default model's tokenizer (real 4k SPM vocabulary).
#pragma once

#include <memory>

#include "core/check.h"
#include "gguf/gguf_file.h"
#include "grammar/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace kvw::grammar {

inline const Tokenizer& default_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    auto f = GgufFile::open(KVW_DEFAULT_MODEL_PATH);
    CHECK(f.ok()) << f.message();
    auto t = Tokenizer::from_gguf(*f.value());
    CHECK(t.ok()) << t.message();
    return std::move(t.value());
  }();
  return *tok;
}

inline std::shared_ptr<const TokenTrie> default_trie() {
  static const auto trie = TokenTrie::from_tokenizer(default_tokenizer());
  return trie;
}

}  // namespace kvw::grammar
