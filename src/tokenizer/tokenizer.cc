// tokenizer/tokenizer.cc: vocabulary validation, the shared decode path, special-token
// splitting, and StreamDecoder. The encoders live in spm.cc and bpe.cc.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace kvw {

using tokenizer_internal::Fragment;
using tokenizer_internal::SpecialToken;
using tokenizer_internal::type_at;

namespace {

Status check_id(const Vocab& v, int32_t id, const char* what) {
  if (id < -1 || id >= (int32_t)v.tokens.size()) {
    return Error{std::string("tokenizer: ") + what + " id " + std::to_string(id) +
                 " out of range (n_vocab " + std::to_string(v.tokens.size()) + ")"};
  }
  return Status::ok_status();
}

Status validate(const Vocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) return Error{"tokenizer: empty vocabulary"};
  if (n > (size_t)INT32_MAX) return Error{"tokenizer: vocabulary too large"};
  if (!v.scores.empty() && v.scores.size() != n) {
    return Error{"tokenizer: " + std::to_string(v.scores.size()) + " scores for " +
                 std::to_string(n) + " tokens"};
  }
  if (!v.types.empty() && v.types.size() != n) {
    return Error{"tokenizer: " + std::to_string(v.types.size()) + " token types for " +
                 std::to_string(n) + " tokens"};
  }
  for (TokenType t : v.types) {
    if ((int32_t)t < 0 || (int32_t)t > (int32_t)TokenType::kByte) {
      return Error{"tokenizer: invalid token type " + std::to_string((int32_t)t)};
    }
  }
  KVW_RETURN_IF_ERROR(check_id(v, v.bos_id, "bos"));
  KVW_RETURN_IF_ERROR(check_id(v, v.eos_id, "eos"));
  KVW_RETURN_IF_ERROR(check_id(v, v.unk_id, "unk"));
  KVW_RETURN_IF_ERROR(check_id(v, v.pad_id, "pad"));
  KVW_RETURN_IF_ERROR(check_id(v, v.eot_id, "eot"));
  if (v.add_bos && v.bos_id < 0) return Error{"tokenizer: add_bos is set but there is no BOS"};
  if (v.add_eos && v.eos_id < 0) return Error{"tokenizer: add_eos is set but there is no EOS"};
  return Status::ok_status();
}

// <|call|>: gpt-oss ends a tool call's message with it and waits for the tool's answer (its
// generation_config lists it among the eos ids; llama.cpp adds it to the end tokens by name).
bool names_end_of_turn(std::string_view text) {
  static constexpr std::string_view kNames[] = {
      "<|eot_id|>",    "<|eom_id|>",      "<|im_end|>", "<|end|>",  "<end_of_turn>",
      "<|endoftext|>", "<|end_of_text|>", "<EOT>",      "<|call|>", "<|return|>"};
  return std::find(std::begin(kNames), std::end(kNames), text) != std::end(kNames);
}

// gpt-oss's harmony format: <|end|> closes a message (the analysis before the final answer)
// and the model goes on with <|start|>assistant...; only <|return|> and <|call|> end its turn.
// A vocabulary with both as control tokens is harmony's: its <|end|> (id returned, else -1)
// ends nothing, whatever the file names as eot (llama.cpp drops it on the same test).
int32_t harmony_end_of_message(const Vocab& v) {
  int32_t end = -1;
  bool has_return = false, has_call = false;
  for (int32_t id = 0; id < (int32_t)v.tokens.size(); ++id) {
    if (type_at(v, id) != TokenType::kControl) continue;
    const std::string& t = v.tokens[id];
    if (t == "<|end|>") end = id;
    has_return = has_return || t == "<|return|>";
    has_call = has_call || t == "<|call|>";
  }
  return has_return && has_call ? end : -1;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(Vocab vocab) {
  KVW_RETURN_IF_ERROR(validate(vocab));
  if (vocab.model == "llama") return tokenizer_internal::make_spm_tokenizer(std::move(vocab));
  if (vocab.model == "gpt2") return tokenizer_internal::make_bpe_tokenizer(std::move(vocab));
  return Error{"tokenizer: unsupported model '" + vocab.model + "' (supported: llama, gpt2)"};
}

Tokenizer::Tokenizer(Vocab vocab, bool strip_leading_space)
    : vocab_(std::move(vocab)), strip_leading_space_(strip_leading_space) {
  const int32_t end_of_message = harmony_end_of_message(vocab_);
  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (id == end_of_message) continue;
    const bool named =
        token_type(id) == TokenType::kControl && names_end_of_turn(vocab_.tokens[id]);
    if (id == vocab_.eos_id || id == vocab_.eot_id || named) eog_ids_.push_back(id);
  }
}

TokenType Tokenizer::token_type(int32_t id) const {
  CHECK(id >= 0 && id < n_vocab()) << "token id " << id << " out of range " << n_vocab();
  return type_at(vocab_, id);
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  bool at_start = strip_leading_space_;
  for (int32_t id : ids) {
    std::string piece = token_bytes(id, render_special);
    if (at_start && token_type(id) != TokenType::kControl) {
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      at_start = false;
    }
    out += piece;
  }
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_bytes(id, render_special_);
  if (first_ && tok_.token_type(id) != TokenType::kControl) {
    if (tok_.strips_leading_space() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    first_ = false;
  }
  pending_ += piece;
  return drain(/*final=*/false);
}

std::string StreamDecoder::flush() {
  std::string out = drain(/*final=*/true);
  first_ = strip_first_;
  return out;
}

std::string StreamDecoder::drain(bool final) {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step step = utf8_next(std::string_view(pending_).substr(i));
    if (step.status == Utf8Status::kIncomplete && !final) break;
    if (step.status == Utf8Status::kValid) {
      out.append(pending_, i, step.len);
    } else {
      out.append(kReplacementChar);
    }
    i += step.len;
  }
  pending_.erase(0, i);
  return out;
}

namespace tokenizer_internal {

std::vector<SpecialToken> collect_special_tokens(const Vocab& vocab) {
  std::vector<SpecialToken> specials;
  for (int32_t id = 0; id < (int32_t)vocab.tokens.size(); ++id) {
    const TokenType t = type_at(vocab, id);
    if (vocab.tokens[id].empty()) continue;
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) {
      specials.push_back({vocab.tokens[id], id, t == TokenType::kUserDefined});
    }
  }
  std::stable_sort(specials.begin(), specials.end(),
                   [](const auto& a, const auto& b) { return a.text.size() > b.text.size(); });
  return specials;
}

std::vector<Fragment> split_special(std::string_view text,
                                    const std::vector<SpecialToken>& specials, bool parse_special) {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({text, -1});
  std::vector<Fragment> next;
  for (const SpecialToken& st : specials) {
    if (!parse_special && !st.always) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token_id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = 0;
      while (true) {
        const size_t hit = f.text.find(st.text, pos);
        if (hit == std::string_view::npos) break;
        if (hit > pos) next.push_back({f.text.substr(pos, hit - pos), -1});
        next.push_back({{}, st.id});
        pos = hit + st.text.size();
      }
      if (pos < f.text.size()) next.push_back({f.text.substr(pos), -1});
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace tokenizer_internal
}  // namespace kvw
