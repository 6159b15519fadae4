// tokenizer/tokenizer.h: text <-> token ids for the vocabularies GGUF models carry.
// Two implementations: SentencePiece-style BPE with byte fallback ("llama") and byte-level BPE
// with merges and a per-family pre-tokenizer regex ("gpt2"). Special/control tokens written in the
// text are matched before splitting when parse_special is true.
// Thread safety: immutable after construction; encode/decode are const and thread-safe.
// StreamDecoder is a small per-request object: one thread at a time.
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
  // parse_special: control (and unknown) tokens written in the text, e.g. "<|eot_id|>", become
  // those tokens; otherwise they are encoded as plain text. User-defined tokens are matched in
  // either case (as llama.cpp does). Longer special tokens win over shorter ones.
  // SPM (as llama.cpp): with add_space_prefix, a space is prepended to the text and to each run
  // of text that follows a special token. Empty text gives just the added specials.
  // Any bytes are accepted; text that is not valid UTF-8 is encoded byte by byte (byte tokens),
  // so decode() gives it back unchanged.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // Raw bytes of one token (byte-fallback and byte-level tokens give their bytes; control
  // tokens give "" unless render_special). May be part of a UTF-8 character.
  // SPM unknown tokens give U+2585 as llama.cpp does. `id` must be in [0, n_vocab) (CHECKed).
  virtual std::string token_bytes(int32_t id, bool render_special = false) const = 0;
  // Whole text of a sequence. Invalid UTF-8 produced by byte tokens is passed through as bytes
  // (use to_valid_utf8() from tokenizer/utf8.h, or StreamDecoder, for text that must be valid).
  // SPM: strips the single leading space that add_space_prefix introduced, from the first token
  // that is not a control token (so "<s> Once" decodes as "Once").
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return (int32_t)vocab_.tokens.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  TokenType token_type(int32_t id) const;
  // True for SPM vocabularies with add_space_prefix (decode strips the first leading space).
  bool strips_leading_space() const { return strip_leading_space_; }
  // End of generation: EOS, EOT, or any other token the vocab marks as ending a turn
  // (control tokens named <|eot_id|>, <|eom_id|>, <|im_end|>, <|end|>, <end_of_turn>,
  // <|endoftext|>, <|end_of_text|>, <EOT>).
  bool is_end_of_generation(int32_t id) const;
  std::span<const int32_t> end_of_generation_ids() const { return eog_ids_; }  // sorted

 protected:
  Tokenizer(Vocab vocab, bool strip_leading_space);
  Vocab vocab_;
  bool strip_leading_space_ = false;
  std::vector<int32_t> eog_ids_;  // sorted
};

// Streaming detokeniser: push token ids one at a time, get text that is always whole UTF-8
// characters; bytes of an incomplete character are held until completed (or flushed).
// Invalid UTF-8: the output is always valid UTF-8. Bytes that can never become part of a valid
// character are replaced by U+FFFD, one per maximal invalid subpart (the Unicode/WHATWG rule:
// "\xE2\x82" followed by "A" gives U+FFFD then "A"; a lone "\xFF" gives one U+FFFD). They are
// replaced as soon as they are known to be invalid, never held. So the concatenated output of
// push()...flush() equals to_valid_utf8(tok.decode(ids)).
//
// kContinuation keeps the SPM leading space: generated text continues a prompt, so "Once upon a"
// + "▁time" must read " time" (llama-server and vLLM give the same), while decode() of a whole
// sequence strips the space that add_space_prefix put before its first word.
class StreamDecoder {
 public:
  enum class Start { kSequence, kContinuation };
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false,
                         Start start = Start::kSequence)
      : tok_(tok),
        render_special_(render_special),
        strip_first_(start == Start::kSequence),
        first_(strip_first_) {}
  std::string push(int32_t id);  // text now complete; may be empty
  // Ends the stream: a held incomplete character becomes one U+FFFD. The decoder is then reset.
  std::string flush();

 private:
  std::string drain(bool final);

  const Tokenizer& tok_;
  bool render_special_ = false;
  std::string pending_;      // bytes of an incomplete UTF-8 character (at most 3)
  bool strip_first_ = true;  // kSequence: the first non-control piece loses its SPM space
  bool first_ = true;        // that piece is still to come
};

// Builders used by `kvwarden make-model` and tests: a vocabulary from a word list such that any
// text made of those words (and, through byte fallback / byte tokens, any other text) round-trips.
// n_vocab_target pads with extra merges/pieces up to that size when given (0 = as built).
//
// build_spm_vocab: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>, "▁", every character
// of the words, and "▁" + each prefix of each word, so each word after a space (or at the start
// of the text) becomes one token. Padding: kUnused "<unused{i}>" tokens.
// build_bpe_vocab: the 256 byte tokens (id = byte value, GPT-2 byte-to-unicode text), then merges
// learned greedily (most frequent pair first, ties to the smaller pair) over each word with and
// without a leading space until every such word is one token, then kUnused "<|unused_{i}|>"
// padding, then the family's special tokens last (`pre` picks them: llama3/llama-bpe:
// <|begin_of_text|> <|end_of_text|> <|start_header_id|> <|end_header_id|> <|eot_id|>; qwen2:
// <|endoftext|> <|im_start|> <|im_end|>; deepseek-*: <｜begin▁of▁sentence｜> <｜end▁of▁sentence｜>;
// others: <|endoftext|>). With a target, learning stops early if the vocab would exceed it.
// Both are deterministic. A target smaller than the built vocab is ignored (never truncates).
Vocab build_spm_vocab(const std::vector<std::string>& words, int32_t n_vocab_target = 0);
Vocab build_bpe_vocab(const std::vector<std::string>& words, const std::string& pre,
                      int32_t n_vocab_target = 0);

}  // namespace kvw
