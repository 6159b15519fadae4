#include "grammar/gbnf_text.h"

#include <algorithm>

namespace kvw::grammar {

std::string gbnf_literal(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto b = (uint8_t)c;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (b < 0x20 || b == 0x7F) {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

namespace {

// Nested groups the factored form may open; deeper branches fall back to a plain alternation
// (the GBNF parser allows kMaxGroupDepth, and the expression may sit inside a few groups).
constexpr int kMaxFactorDepth = 32;

size_t code_point_len(std::string_view s, size_t at) {
  const auto b = (uint8_t)s[at];
  const size_t n = b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - at);
}

// One code point (its UTF-8 bytes) inside a character class.
std::string class_member(std::string_view cp) {
  if (cp.size() == 1 && std::string_view("\\]-^[").find(cp[0]) != std::string_view::npos)
    return "\\" + std::string(cp);
  if (cp.size() == 1 && ((uint8_t)cp[0] < 0x20 || cp[0] == 0x7F)) {
    return gbnf_literal(cp).substr(1, 4);  // \xHH
  }
  return std::string(cp);
}

struct Factorer {
  const std::vector<std::string>& v;  // sorted, unique
  std::string_view what;
  std::string error;

  // Appends an expression matching the suffixes from byte d of v[lo, hi), which share [0, d).
  void emit(size_t lo, size_t hi, size_t d, int depth, std::string* out) {
    if (hi - lo == 1) {
      *out += gbnf_literal(std::string_view(v[lo]).substr(d));
      return;
    }
    const std::string &first = v[lo], &last = v[hi - 1];  // sorted: their prefix is everyone's
    size_t end = d;
    while (end < first.size() && end < last.size() && first[end] == last[end]) ++end;
    while (end > d && end < first.size() && ((uint8_t)first[end] & 0xC0) == 0x80) --end;
    if (end > d) *out += gbnf_literal(std::string_view(first).substr(d, end - d)) + " ";
    d = end;
    const bool optional = first.size() == d;  // one text ends here; the others go on
    if (optional) ++lo;
    *out += "(";
    if (depth >= kMaxFactorDepth) {
      for (size_t i = lo; i < hi; ++i)
        *out += (i > lo ? " | " : "") + gbnf_literal(std::string_view(v[i]).substr(d));
    } else {
      emit_branches(lo, hi, d, depth, out);
    }
    *out += optional ? ")?" : ")";
  }

  // Groups v[lo, hi) by their code point at d: one alternative per group, with the groups that
  // end right after that code point merged into one class.
  void emit_branches(size_t lo, size_t hi, size_t d, int depth, std::string* out) {
    std::string singles;
    size_t num_alts = 0;
    for (size_t i = lo; i < hi;) {
      const std::string_view cp = std::string_view(v[i]).substr(d, code_point_len(v[i], d));
      size_t j = i + 1;
      while (j < hi && std::string_view(v[j]).substr(d, cp.size()) == cp) ++j;
      if (j == i + 1 && v[i].size() == d + cp.size()) {
        singles += class_member(cp);
      } else {
        *out += num_alts++ ? " | " : "";
        emit(i, j, d, depth + 1, out);
      }
      i = j;
    }
    if (!singles.empty()) *out += (num_alts++ ? " | [" : "[") + singles + "]";
    if (num_alts > kMaxLiteralFanOut && error.empty()) {
      error = std::string(what) + ": " + std::to_string(num_alts) +
              " values differ at one character after a common prefix (at most " +
              std::to_string(kMaxLiteralFanOut) + ")";
    }
  }
};

}  // namespace

Result<std::string> gbnf_alternatives(std::vector<std::string> texts, std::string_view what) {
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  if (texts.empty()) return Error{std::string(what) + ": no values"};
  Factorer f{texts, what, {}};
  std::string out;
  f.emit(0, texts.size(), 0, 0, &out);
  if (!f.error.empty()) return Error{f.error};
  return out;
}

std::string_view json_common_gbnf() {
  return R"(ws ::= "" | " " | "\n" " "{0,8}
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (member (ws "," ws member)*)? ws "}"
member ::= string ws ":" ws value
array ::= "[" ws (value (ws "," ws value)*)? ws "]"
)";
}

}  // namespace kvw::grammar
