// tokenizer/vocab.h: the tokenizer description as stored in GGUF metadata (tokenizer.ggml.*),
// independent of the file so that tests can build vocabularies by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvw {

class GgufFile;
class GgufWriter;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  // "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE).
  std::string model;
  // gpt2 pre-tokenizer: "llama3"/"llama-bpe", "qwen2", "deepseek-llm", "deepseek-v3",
  // "default"/"gpt2" (pre_tokenizer.h lists every accepted name).
  std::string pre;
  // [n_vocab] token text (SPM uses U+2581 for space; gpt2 the GPT-2 byte-to-unicode mapping).
  std::vector<std::string> tokens;
  std::vector<float> scores;  // [n_vocab] SPM merge priority (higher first); may be empty for gpt2
  std::vector<TokenType> types;     // [n_vocab]; empty means all kNormal
  std::vector<std::string> merges;  // gpt2: "a b" pairs in priority order
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t eot_id = -1;  // end of turn, if the vocab has one
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM: prepend a space to the text before encoding
  std::string chat_template;     // tokenizer.chat_template, if present
};

// Reads tokenizer.ggml.* from a GGUF file. Errors name the file and the key.
// Defaults when a key is absent (as llama.cpp): llama: bos 1, eos 2, unk 0, add_bos true,
// add_space_prefix true; gpt2: ids -1, add_space_prefix false, add_bos true only for the llama3
// and deepseek families. An id stored as 0xFFFFFFFF (or negative) means none (-1).
Result<Vocab> vocab_from_gguf(const GgufFile& file);

// Writes `vocab` as tokenizer.ggml.* / tokenizer.chat_template metadata (the inverse of
// vocab_from_gguf; empty scores/types/merges/chat_template are left out; -1 ids are
// written as 0xFFFFFFFF).
void vocab_to_gguf(const Vocab& vocab, GgufWriter& writer);

}  // namespace kvw
