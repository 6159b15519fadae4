#include "grammar/regex.h"

#include "grammar/byte_dfa.h"
#include "grammar/gbnf_parser.h"
#include "grammar/gbnf_text.h"

namespace kvw::grammar {
namespace {

struct RegexError {
  std::string message;
};

// Translates by recursive descent straight into GBNF expression text.
class RegexTranslator {
 public:
  explicit RegexTranslator(std::string_view re) : re_(re) {}

  std::string run() {
    if (!re_.empty() && re_.front() == '^') re_.remove_prefix(1);
    if (!re_.empty() && re_.back() == '$' && (re_.size() < 2 || re_[re_.size() - 2] != '\\'))
      re_.remove_suffix(1);
    std::string body = alternation();
    if (pos_ < re_.size()) fail("unbalanced ')'");
    return "root ::= " + (body.empty() ? std::string("\"\"") : body) + "\n";
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw RegexError{"regex at offset " + std::to_string(pos_) + ": " + what};
  }
  bool more() const { return pos_ < re_.size(); }
  char peek() const { return re_[pos_]; }

  std::string alternation() {
    std::string out = sequence();
    bool alt = false;
    while (more() && peek() == '|') {
      ++pos_;
      out += " | " + sequence();
      alt = true;
    }
    return alt ? "(" + out + ")" : out;
  }

  std::string sequence() {
    std::string out;
    while (more() && peek() != '|' && peek() != ')') {
      std::string a = atom();
      a += quantifier();
      out += (out.empty() ? "" : " ") + a;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantifier() {
    if (!more()) return "";
    std::string q;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = re_.find('}', pos_);
      if (close == std::string_view::npos) fail("unterminated {m,n}");
      const std::string_view inner = re_.substr(pos_ + 1, close - pos_ - 1);
      if (inner.empty() || inner.find_first_not_of("0123456789,") != std::string_view::npos ||
          inner[0] == ',')
        fail("bad repetition {" + std::string(inner) + "}");
      q = "{" + std::string(inner) + "}";
      pos_ = close + 1;
    } else {
      return "";
    }
    if (more() && peek() == '?') ++pos_;  // lazy: the same language for a whole match
    if (more() && peek() == '+') fail("possessive quantifiers are not supported");
    if (more() && (peek() == '*' || peek() == '{')) fail("nothing to repeat");
    return q;
  }

  std::string atom() {
    const char c = re_[pos_++];
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          ++pos_;
          if (more() && peek() == ':') {
            ++pos_;
          } else if (more() && (peek() == 'P' || peek() == '<') && re_.substr(pos_, 2) != "<=" &&
                     re_.substr(pos_, 2) != "<!") {
            const size_t close = re_.find('>', pos_);
            if (close == std::string_view::npos) fail("unterminated group name");
            pos_ = close + 1;
          } else {
            fail("lookaround and inline flags are not supported");
          }
        }
        if (++depth_ > kMaxGroupDepth)
          fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
        std::string inner = alternation();
        if (!more() || peek() != ')') fail("missing ')'");
        ++pos_;
        --depth_;
        return "(" + inner + ")";
      }
      case '[':
        return char_class();
      case '.':
        return "[^\\n]";
      case '\\':
        return escape(false);
      case '*':
      case '+':
      case '?':
      case '{':
        fail("nothing to repeat");
      case '^':
      case '$':
        fail("anchors are only supported at the ends of the pattern");
      case ')':
        fail("unbalanced ')'");
      default: {
        // Whole UTF-8 character as a literal.
        std::string ch(1, c);
        while (more() && ((uint8_t)peek() & 0xC0) == 0x80) ch += re_[pos_++];
        return gbnf_literal(ch);
      }
    }
  }

  // After a backslash. Returns a GBNF atom, or (in_class) class-body text.
  std::string escape(bool in_class) {
    if (!more()) fail("trailing backslash");
    const char e = re_[pos_++];
    auto cls = [&](const char* body, bool negated) -> std::string {
      if (in_class) {
        if (negated) fail(std::string("\\") + e + " inside a class is not supported");
        return body;
      }
      return std::string(negated ? "[^" : "[") + body + "]";
    };
    switch (e) {
      case 'd':
        return cls("0-9", false);
      case 'D':
        return cls("0-9", true);
      case 'w':
        return cls("a-zA-Z0-9_", false);
      case 'W':
        return cls("a-zA-Z0-9_", true);
      case 's':
        return cls(" \\t\\n\\r\\x0b\\x0c", false);
      case 'S':
        return cls(" \\t\\n\\r\\x0b\\x0c", true);
      case 'n':
        return lit("\\n", in_class);
      case 't':
        return lit("\\t", in_class);
      case 'r':
        return lit("\\r", in_class);
      case 'f':
        return lit("\\x0c", in_class);
      case 'v':
        return lit("\\x0b", in_class);
      case 'x':
      case 'u': {
        const size_t n = e == 'x' ? 2 : 4;
        std::string hex(re_.substr(pos_, n));
        if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
          fail("bad \\" + std::string(1, e) + " escape");
        pos_ += n;
        return lit("\\" + std::string(1, e) + hex, in_class);
      }
      default:
        if (isalnum((unsigned char)e)) fail(std::string("escape \\") + e + " is not supported");
        // An escaped metacharacter (or any other punctuation) is itself.
        if (in_class)
          return e == ']' || e == '\\' || e == '^' || e == '-' ? std::string("\\") + e
                                                               : std::string(1, e);
        return gbnf_literal(std::string(1, e));
    }
  }

  static std::string lit(const std::string& esc, bool in_class) {
    return in_class ? esc : "\"" + esc + "\"";
  }

  std::string char_class() {
    std::string body;
    if (more() && peek() == '^') body += '^', ++pos_;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      const char c = re_[pos_++];
      if (c == '\\') {
        body += escape(true);
      } else if (c == '[' && more() && peek() == ':') {
        fail("POSIX classes [:name:] are not supported");
      } else if (c == '"' || c == ']' || c == '^') {
        body += std::string("\\") + c;
      } else if ((uint8_t)c < 0x20) {
        static const char* kHex = "0123456789abcdef";
        body += std::string("\\x") + kHex[(uint8_t)c >> 4] + kHex[c & 15];
      } else {
        body += c;
      }
    }
    if (!more()) fail("unterminated character class");
    ++pos_;
    return "[" + body + "]";
  }

  std::string_view re_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view regex) {
  try {
    return RegexTranslator(regex).run();
  } catch (const RegexError& e) {
    return Error{e.message};
  }
}

Result<std::shared_ptr<const Grammar>> compile_regex(std::string_view regex, size_t max_bytes) {
  auto text = regex_to_gbnf(regex);
  if (!text.ok()) return text.error();
  auto g = parse_gbnf(text.value(), max_bytes);
  if (!g.ok()) return Error{"regex: " + g.message()};
  return with_dfa(std::move(g.value()), max_bytes);
}

Result<std::shared_ptr<const Grammar>> compile_choice(const std::vector<std::string>& choices,
                                                      size_t max_bytes) {
  if (choices.empty()) return Error{"choice: the list of choices is empty"};
  auto body = gbnf_alternatives(choices, "choice");
  if (!body.ok()) return body.error();
  auto g = parse_gbnf("root ::= " + body.value() + "\n", max_bytes);
  if (!g.ok()) return g.error();
  return with_dfa(std::move(g.value()), max_bytes);
}

}  // namespace kvw::grammar
