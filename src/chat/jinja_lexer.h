// chat/jinja_lexer.h: splits a Jinja template into text and tag tokens, applying whitespace
// control the way Hugging Face's chat-template environment does (trim_blocks=True,
// lstrip_blocks=True, plus the explicit `{%-`/`-%}`/`{{-`/`-}}`/`{%+`/`+%}` markers), so the
// parser never sees whitespace rules. Pure function; no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvw::jinja {

enum class TokKind {
  kText,       // literal template text (already whitespace-trimmed)
  kExprBegin,  // {{
  kExprEnd,    // }}
  kStmtBegin,  // {%
  kStmtEnd,    // %}
  kName,       // identifier or keyword
  kString,     // string literal, escapes decoded
  kInt,
  kFloat,
  kOp,  // punctuation / operator: text holds it ("==", "(", "|", ...)
  kEof,
};

struct Token {
  TokKind kind = TokKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;  // 1-based position in the template source
  int col = 1;
};

// Errors: an unterminated tag, comment or string, or an unexpected character, with line:col.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace kvw::jinja
