// tokenizer/vocab_gguf.cc: reads tokenizer.ggml.* metadata from a GGUF file. Kept apart from
// the rest of the tokenizer so that it alone depends on the GGUF reader.
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kvw {
namespace {

// Optional token id: absent, negative or 0xFFFFFFFF (how converters write "none") is -1.
Result<int32_t> optional_id(const GgufFile& f, std::string_view key, int32_t fallback,
                            size_t n_vocab) {
  if (f.find(key) == nullptr) return fallback;
  Result<int64_t> v = f.get_int(key);
  if (!v.ok()) return v.error();
  if (*v < 0 || *v == 0xFFFFFFFFll) return -1;
  if (*v >= (int64_t)n_vocab) {
    return Error{f.path() + ": key '" + std::string(key) + "': token id " + std::to_string(*v) +
                 " out of range (n_vocab " + std::to_string(n_vocab) + ")"};
  }
  return (int32_t)*v;
}

Result<bool> optional_bool(const GgufFile& f, std::string_view key, bool fallback) {
  if (f.find(key) == nullptr) return fallback;
  return f.get_bool(key);
}

Result<std::string> optional_string(const GgufFile& f, std::string_view key) {
  if (f.find(key) == nullptr) return std::string();
  return f.get_string(key);
}

}  // namespace

Result<Vocab> vocab_from_gguf(const GgufFile& f) {
  Vocab v;
  Result<std::string> model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return model.error();
  v.model = *model;
  if (v.model != "llama" && v.model != "gpt2") {
    return Error{f.path() + ": key 'tokenizer.ggml.model': unsupported tokenizer '" + v.model +
                 "' (supported: llama, gpt2)"};
  }
  const bool spm = v.model == "llama";
  Result<std::string> pre = optional_string(f, "tokenizer.ggml.pre");
  if (!pre.ok()) return pre.error();
  v.pre = *pre;

  Result<std::vector<std::string>> tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.error();
  v.tokens = std::move(tokens).value();
  const size_t n = v.tokens.size();
  if (n == 0) return Error{f.path() + ": key 'tokenizer.ggml.tokens': empty"};

  if (f.find("tokenizer.ggml.scores") != nullptr) {
    Result<std::vector<float>> scores = f.get_float_array("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.error();
    v.scores = std::move(scores).value();
    if (v.scores.size() != n) {
      return Error{f.path() + ": key 'tokenizer.ggml.scores': " + std::to_string(v.scores.size()) +
                   " entries for " + std::to_string(n) + " tokens"};
    }
  }
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    Result<std::vector<int32_t>> types = f.get_int_array("tokenizer.ggml.token_type");
    if (!types.ok()) return types.error();
    if (types->size() != n) {
      return Error{f.path() + ": key 'tokenizer.ggml.token_type': " +
                   std::to_string(types->size()) + " entries for " + std::to_string(n) + " tokens"};
    }
    for (int32_t t : *types) {
      if (t < 0 || t > (int32_t)TokenType::kByte) {
        return Error{f.path() + ": key 'tokenizer.ggml.token_type': invalid type " +
                     std::to_string(t)};
      }
      v.types.push_back(static_cast<TokenType>(t));
    }
  }
  if (f.find("tokenizer.ggml.merges") != nullptr) {
    Result<std::vector<std::string>> merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.error();
    v.merges = std::move(merges).value();
  } else if (!spm) {
    return Error{f.path() + ": key 'tokenizer.ggml.merges': missing (required for gpt2)"};
  }

  // Defaults as llama.cpp: SPM vocabularies conventionally have <unk> <s> </s> at 0, 1, 2.
  struct IdKey {
    const char* key;
    int32_t* dst;
    int32_t fallback;
  };
  const IdKey ids[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos_id, spm ? 1 : -1},
      {"tokenizer.ggml.eos_token_id", &v.eos_id, spm ? 2 : -1},
      {"tokenizer.ggml.unknown_token_id", &v.unk_id, spm ? 0 : -1},
      {"tokenizer.ggml.padding_token_id", &v.pad_id, -1},
      {"tokenizer.ggml.eot_token_id", &v.eot_id, -1},
  };
  for (const IdKey& k : ids) {
    Result<int32_t> id = optional_id(f, k.key, k.fallback, n);
    if (!id.ok()) return id.error();
    *k.dst = *id;
  }

  const bool bos_by_default = spm || v.pre == "llama3" || v.pre == "llama-bpe" ||
                              v.pre == "deepseek-llm" || v.pre == "deepseek-v3";
  Result<bool> add_bos = optional_bool(f, "tokenizer.ggml.add_bos_token", bos_by_default);
  Result<bool> add_eos = optional_bool(f, "tokenizer.ggml.add_eos_token", false);
  Result<bool> add_space = optional_bool(f, "tokenizer.ggml.add_space_prefix", spm);
  if (!add_bos.ok()) return add_bos.error();
  if (!add_eos.ok()) return add_eos.error();
  if (!add_space.ok()) return add_space.error();
  v.add_bos = *add_bos && v.bos_id >= 0;
  v.add_eos = *add_eos && v.eos_id >= 0;
  v.add_space_prefix = *add_space;

  Result<std::string> tmpl = optional_string(f, "tokenizer.chat_template");
  if (!tmpl.ok()) return tmpl.error();
  v.chat_template = *tmpl;
  return v;
}

void vocab_to_gguf(const Vocab& v, GgufWriter& w) {
  w.set_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.set_f32_array("tokenizer.ggml.scores", v.scores);
  if (!v.types.empty()) {
    std::vector<int32_t> types;
    types.reserve(v.types.size());
    for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
    w.set_i32_array("tokenizer.ggml.token_type", types);
  }
  if (!v.merges.empty()) w.set_string_array("tokenizer.ggml.merges", v.merges);
  const std::pair<const char*, int32_t> ids[] = {
      {"tokenizer.ggml.bos_token_id", v.bos_id},     {"tokenizer.ggml.eos_token_id", v.eos_id},
      {"tokenizer.ggml.unknown_token_id", v.unk_id}, {"tokenizer.ggml.padding_token_id", v.pad_id},
      {"tokenizer.ggml.eot_token_id", v.eot_id},
  };
  for (const auto& [key, id] : ids) {  // -1 as 0xFFFFFFFF, so defaults do not kick in
    w.set_u32(key, id >= 0 ? static_cast<uint32_t>(id) : 0xFFFFFFFFu);
  }
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!v.chat_template.empty()) w.set_string("tokenizer.chat_template", v.chat_template);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  Result<Vocab> vocab = vocab_from_gguf(file);
  if (!vocab.ok()) return vocab.error();
  Result<std::unique_ptr<Tokenizer>> tok = create(std::move(vocab).value());
  if (!tok.ok()) return Error{file.path() + ": " + tok.message()};
  return tok;
}

}  // namespace kvw
