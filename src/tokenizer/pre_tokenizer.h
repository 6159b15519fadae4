// tokenizer/pre_tokenizer.h: splits text into words before byte-level BPE, with the regex
// sequence llama.cpp uses for each tokenizer.ggml.pre family (llama-vocab.cpp,
// LLAMA_VOCAB_PRE_TYPE_*), compiled with PCRE2 (UTF + UCP so \p{L} etc. work; JIT if available).
// Regexes apply in sequence as in llama.cpp's unicode_regex_split: each one splits every piece
// the previous ones produced into its matches and the unmatched text between them.
// Thread safety: immutable after create(); split() is const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvw {

class PreTokenizer {
 public:
  // `pre` is tokenizer.ggml.pre: "llama3"/"llama-bpe" (also "dbrx", "smaug-bpe"), "qwen2"
  // (also "stablelm2"), "deepseek-llm", "deepseek-v3", "default"/"gpt2"/"" (GPT-2 regex; ""
  // and "default" use llama.cpp's default set), "starcoder"/"refact"/"smollm"/"command-r".
  // Unknown names are an error naming the supported ones.
  static Result<PreTokenizer> create(std::string_view pre);
  // Custom regex sequence (tests). Errors give PCRE2's message and offset.
  static Result<PreTokenizer> from_patterns(const std::vector<std::string>& patterns);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Words in order; their concatenation is exactly `text`. Bytes that are not valid UTF-8 never
  // match a regex (PCRE2_MATCH_INVALID_UTF) and so end up in unmatched pieces of their own.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Regex;
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvw
