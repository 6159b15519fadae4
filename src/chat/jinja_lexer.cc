// chat/jinja_lexer.cc: template text -> tokens. Whitespace rules follow Jinja2's lexer:
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after it.
//   - trim_blocks: the first newline after `%}` or `#}` is removed (unless `+%}`).
//   - lstrip_blocks: spaces/tabs between a line start and `{%` or `{#` are removed (unless `{%+`).
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace kvw::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<std::vector<Token>> run();

 private:
  void position(size_t pos, int* line, int* col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t idx = (size_t)(it - line_starts_.begin()) - 1;
    *line = (int)idx + 1;
    *col = (int)(pos - line_starts_[idx]) + 1;
  }
  Error error_at(size_t pos, const std::string& what) const {
    int line, col;
    position(pos, &line, &col);
    return Error{"chat template " + std::to_string(line) + ":" + std::to_string(col) + ": " + what};
  }
  Token make(TokKind kind, size_t pos, std::string text = {}) const {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    position(pos, &t.line, &t.col);
    return t;
  }
  void emit_text(std::string text, size_t pos) {
    if (!text.empty()) out_.push_back(make(TokKind::kText, pos, std::move(text)));
  }
  // Reads tokens inside {{ }} or {% %} from pos_ up to and including the closing delimiter.
  // Sets *strip_after to '-', '+' or 0 from the close marker.
  Status lex_tag(bool is_stmt, size_t open_pos, char* strip_after);
  Status lex_string(size_t start);
  void lex_number(size_t start);

  std::string_view src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
};

Result<std::vector<Token>> Lexer::run() {
  bool line_starting = true;  // the next text begins a line (Jinja's lstrip_blocks rule)
  char pending = 0;           // how the previous tag treats the text after it: '-', 'n' or 0
  while (pos_ <= src_.size()) {
    size_t tag = pos_;
    while (tag + 1 < src_.size() &&
           !(src_[tag] == '{' &&
             (src_[tag + 1] == '{' || src_[tag + 1] == '%' || src_[tag + 1] == '#')))
      ++tag;
    if (tag + 1 >= src_.size()) tag = src_.size();
    const size_t text_pos = pos_;
    std::string text(src_.substr(pos_, tag - pos_));
    size_t consumed = 0;  // characters removed from the front of text by the previous tag
    if (pending == '-') {
      while (consumed < text.size() && is_space(text[consumed])) ++consumed;
    } else if (pending == 'n' && !text.empty() && text[0] == '\n') {
      consumed = 1;
    }
    if (consumed > 0) line_starting = text[consumed - 1] == '\n';
    text.erase(0, consumed);
    if (tag == src_.size()) {
      emit_text(std::move(text), text_pos);
      break;
    }
    const char kind = src_[tag + 1];
    const char mod = tag + 2 < src_.size() ? src_[tag + 2] : 0;
    if (mod == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && mod != '+') {
      const size_t nl = text.rfind('\n');
      const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
      if ((line_start > 0 || line_starting) &&
          text.find_first_not_of(" \t", line_start) == std::string::npos)
        text.resize(line_start);
    }
    emit_text(std::move(text), text_pos);
    pos_ = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
    char strip_after = 0;
    if (kind == '#') {
      const size_t end = src_.find("#}", pos_);
      if (end == std::string_view::npos) return error_at(tag, "unclosed comment '{#'");
      if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) strip_after = src_[end - 1];
      pos_ = end + 2;
    } else {
      KVW_RETURN_IF_ERROR(lex_tag(kind == '%', tag, &strip_after));
    }
    if (strip_after == '-') {
      pending = '-';
    } else if (kind != '{' && strip_after != '+') {
      pending = 'n';
    } else {
      pending = 0;
    }
    line_starting = false;
  }
  out_.push_back(make(TokKind::kEof, src_.size()));
  return std::move(out_);
}

Status Lexer::lex_tag(bool is_stmt, size_t open_pos, char* strip_after) {
  out_.push_back(make(is_stmt ? TokKind::kStmtBegin : TokKind::kExprBegin, open_pos));
  const char close = is_stmt ? '%' : '}';
  int depth = 0;  // open (, [, { inside the tag: a '}' then is punctuation, not the close
  while (true) {
    while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    if (pos_ >= src_.size())
      return error_at(open_pos, std::string("unclosed tag '") + (is_stmt ? "{%" : "{{") + "'");
    const char c = src_[pos_];
    const char next = pos_ + 1 < src_.size() ? src_[pos_ + 1] : 0;
    const char next2 = pos_ + 2 < src_.size() ? src_[pos_ + 2] : 0;
    if ((c == '-' || c == '+') && next == close && next2 == '}' && depth == 0) {
      *strip_after = c;
      out_.push_back(make(is_stmt ? TokKind::kStmtEnd : TokKind::kExprEnd, pos_));
      pos_ += 3;
      return {};
    }
    if (c == close && next == '}' && depth == 0) {
      out_.push_back(make(is_stmt ? TokKind::kStmtEnd : TokKind::kExprEnd, pos_));
      pos_ += 2;
      return {};
    }
    if (std::isalpha((unsigned char)c) || c == '_') {
      const size_t start = pos_;
      while (pos_ < src_.size() && (std::isalnum((unsigned char)src_[pos_]) || src_[pos_] == '_'))
        ++pos_;
      out_.push_back(make(TokKind::kName, start, std::string(src_.substr(start, pos_ - start))));
    } else if (std::isdigit((unsigned char)c)) {
      lex_number(pos_);
    } else if (c == '\'' || c == '"') {
      KVW_RETURN_IF_ERROR(lex_string(pos_));
    } else {
      static const char* const kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* two : kTwoChar)
        if (c == two[0] && next == two[1]) op = two;
      if (op.size() == 1 &&
          std::string_view("+-*/%~<>=()[]{}.,:|").find(c) == std::string_view::npos)
        return error_at(pos_, std::string("unexpected character '") + c + "'");
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      out_.push_back(make(TokKind::kOp, pos_, op));
      pos_ += op.size();
    }
  }
}

void Lexer::lex_number(size_t start) {
  size_t p = start;
  while (p < src_.size() && (std::isdigit((unsigned char)src_[p]) || src_[p] == '_')) ++p;
  bool is_float = false;
  if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit((unsigned char)src_[p + 1])) {
    is_float = true;
    ++p;
    while (p < src_.size() && std::isdigit((unsigned char)src_[p])) ++p;
  }
  if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
    size_t q = p + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < src_.size() && std::isdigit((unsigned char)src_[q])) {
      is_float = true;
      p = q;
      while (p < src_.size() && std::isdigit((unsigned char)src_[p])) ++p;
    }
  }
  std::string digits;
  for (size_t i = start; i < p; ++i)
    if (src_[i] != '_') digits += src_[i];
  Token t = make(is_float ? TokKind::kFloat : TokKind::kInt, start, digits);
  if (is_float) {
    t.float_value = std::strtod(digits.c_str(), nullptr);
  } else {
    t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
  }
  out_.push_back(std::move(t));
  pos_ = p;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

Status Lexer::lex_string(size_t start) {
  const char quote = src_[start];
  std::string value;
  size_t p = start + 1;
  while (true) {
    if (p >= src_.size()) return error_at(start, "unterminated string literal");
    const char c = src_[p];
    if (c == quote) break;
    if (c != '\\' || p + 1 >= src_.size()) {
      value += c;
      ++p;
      continue;
    }
    const char e = src_[p + 1];
    p += 2;
    switch (e) {
      case 'n':
        value += '\n';
        break;
      case 't':
        value += '\t';
        break;
      case 'r':
        value += '\r';
        break;
      case 'b':
        value += '\b';
        break;
      case 'f':
        value += '\f';
        break;
      case 'v':
        value += '\v';
        break;
      case '0':
        value += '\0';
        break;
      case '\\':
        value += '\\';
        break;
      case '\'':
        value += '\'';
        break;
      case '"':
        value += '"';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        if (p + n > src_.size())
          return error_at(p - 2, "truncated \\" + std::string(1, e) + " escape");
        const std::string hex(src_.substr(p, n));
        char* end = nullptr;
        const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
        if (end != hex.c_str() + n)
          return error_at(p - 2, "bad \\" + std::string(1, e) + " escape");
        append_utf8(value, (uint32_t)cp);
        p += n;
        break;
      }
      default:  // Python keeps unknown escapes verbatim
        value += '\\';
        value += e;
    }
  }
  out_.push_back(make(TokKind::kString, start, std::move(value)));
  pos_ = p + 1;
  return {};
}

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace kvw::jinja
