// tokenizer/tokenizer.h: text <-> token ids for the vocabularies GGUF models carry.
// Two implementations: SentencePiece-style BPE with byte fallback ("llama") and byte-level BPE
// with merges and a per-family pre-tokenizer regex ("gpt2"). Special/control tokens written in the
// text are matched before splitting when parse_special is true.
// Thread safety: immutable after construction; encode/decode are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kvw {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Validates the vocabulary (ids in range, merges refer to tokens, regexes compile).
  static Result<std::unique_ptr<Tokenizer>> create(Vocab vocab);
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);

  // add_special: prepend BOS / append EOS as the vocab's add_bos / add_eos say.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // Raw bytes of one token (byte-fallback and byte-level tokens give their bytes; control
  // tokens give "" unless render_special). May be part of a UTF-8 character.
  virtual std::string token_bytes(int32_t id, bool render_special = false) const = 0;
  // Whole text of a sequence. Invalid UTF-8 produced by byte tokens is passed through as bytes.
  // SPM: strips the single leading space that add_space_prefix introduced.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return (int32_t)vocab_.tokens.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // End of generation: EOS, EOT, or any other token the vocab marks as ending a turn.
  bool is_end_of_generation(int32_t id) const;

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  Vocab vocab_;
};

// Streaming detokeniser: push token ids one at a time, get text that is always whole UTF-8
// characters; bytes of an incomplete character are held until completed (or flushed).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);  // text now complete; may be empty
  std::string flush();           // what is still held (possibly invalid UTF-8, passed through)

 private:
  const Tokenizer& tok_;
  std::string pending_;  // bytes of an incomplete UTF-8 character
  bool first_ = true;    // SPM leading-space handling
};

// Builders used by `kvwarden make-model` and tests: a vocabulary from a word list such that any
// text made of those words (and, through byte fallback / byte tokens, any other text) round-trips.
// n_vocab_target pads with extra merges/pieces up to that size when given (0 = as built).
Vocab build_spm_vocab(const std::vector<std::string>& words, int32_t n_vocab_target = 0);
Vocab build_bpe_vocab(const std::vector<std::string>& words, const std::string& pre,
                      int32_t n_vocab_target = 0);

}  // namespace kvw
