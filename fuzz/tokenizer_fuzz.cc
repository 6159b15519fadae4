// fuzz/tokenizer_fuzz.cc: both tokenizer paths on arbitrary bytes: SentencePiece-style BPE
// (byte fallback) and byte-level BPE with the llama3 pre-tokenizer regex, special tokens parsed.
// Every id is in range, decoding never fails, and byte-level BPE round-trips exactly.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

const std::vector<std::string>& words() {
  static const std::vector<std::string> w = {
      "the",   "cat",  "sat",    "on",  "mat",   "once",    "upon", "a",      "time",
      "hello", "world", "don't", "I'm", "12345", "naïve",  "日本", "emoji😀", "<|x|>",
      "  ",    "\t",   "\n\n",   "...", "über", "straße", "ab",   "ba",      "aaaa"};
  return w;
}

const kvw::Tokenizer& spm() {
  static auto t = kvw::Tokenizer::create(kvw::build_spm_vocab(words()));
  if (!t.ok()) std::abort();
  return **t;
}

const kvw::Tokenizer& bpe() {
  static auto t = kvw::Tokenizer::create(kvw::build_bpe_vocab(words(), "llama3"));
  if (!t.ok()) std::abort();
  return **t;
}

void check(const kvw::Tokenizer& tok, std::string_view text, bool exact) {
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/special, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.n_vocab()) std::abort();
    }
    const std::string back = tok.decode(ids);
    if (exact && !special && back != text) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check(spm(), text, /*exact=*/false);  // SPM normalises spaces
  check(bpe(), text, /*exact=*/true);   // byte-level: every byte string round-trips
  return 0;
}
