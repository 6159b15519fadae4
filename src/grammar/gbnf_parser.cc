#include "grammar/gbnf_parser.h"

#include <map>
#include <string>
#include <vector>

namespace kvw::grammar {
namespace {

using Seq = std::vector<Elem>;
using Alts = std::vector<Seq>;

struct ParseError {
  std::string message;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class Parser {
 public:
  Parser(std::string_view s, size_t max_bytes) : s_(s), max_elems_(max_bytes / sizeof(Elem)) {}

  Grammar run() {
    skip_space();
    while (pos_ < s_.size()) {
      const std::string name = parse_name();
      skip_space();
      if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const uint32_t id = rule_id(name);
      if (defined_[id]) fail("rule '" + name + "' defined twice");
      defined_[id] = true;
      alts_[id] = parse_alternates(false);
      skip_space();
    }
    return finish();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    throw ParseError{"grammar line " + std::to_string(line) + ", column " + std::to_string(col) +
                     ": " + what};
  }

  // Spaces, tabs, newlines and # comments.
  void skip_space() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  // At `name ::=` (the start of the next rule)?
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, added] = ids_.emplace(name, (uint32_t)names_.size());
    if (added) {
      names_.push_back(name);
      alts_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base, Alts alts) {
    const uint32_t id = rule_id(base + "_" + std::to_string(names_.size()));
    alts_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }

  Alts parse_alternates(bool nested) {
    Alts alts;
    alts.push_back(parse_sequence(nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  Seq parse_sequence(bool nested) {
    Seq seq;
    for (;;) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] == '|' || s_[pos_] == ')') break;
      if (!nested && at_rule_start()) break;
      Seq atom = parse_atom();
      skip_space();
      apply_postfix(&atom);
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
    return seq;
  }

  Seq parse_atom() {
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      Seq seq;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        const uint32_t cp = parse_char();
        CharClass cls;
        cls.ranges.push_back({cp, cp});
        seq.push_back({Op::kChars, class_id(std::move(cls))});
      }
      if (pos_ >= s_.size()) fail("unterminated string literal");
      ++pos_;
      return seq;
    }
    if (c == '[') return {{Op::kChars, parse_class()}};
    if (c == '.') {
      ++pos_;
      CharClass any;
      any.negated = true;
      return {{Op::kChars, class_id(std::move(any))}};
    }
    if (c == '(') {
      ++pos_;
      if (++group_depth_ > kMaxGroupDepth)
        fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
      Alts inner = parse_alternates(true);
      --group_depth_;
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')'");
      ++pos_;
      if (inner.size() == 1) return inner[0];  // a plain group: inline it
      return {{Op::kRef, new_rule("group", std::move(inner))}};
    }
    if (is_name_char(c)) return {{Op::kRef, rule_id(parse_name())}};
    fail(std::string("unexpected character '") + c + "'");
  }

  uint32_t parse_class() {
    ++pos_;  // '['
    CharClass cls;
    if (pos_ < s_.size() && s_[pos_] == '^') cls.negated = true, ++pos_;
    while (pos_ < s_.size() && s_[pos_] != ']') {
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail("character range is reversed");
      }
      cls.ranges.push_back({lo, hi});
    }
    if (pos_ >= s_.size()) fail("unterminated character class");
    ++pos_;
    return class_id(std::move(cls));
  }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (pos_ >= s_.size()) fail("truncated escape");
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        fail("bad hex digit in escape");
    }
    if (v > 0x10FFFF) fail("code point out of range");
    return v;
  }

  // One code point of a literal or class: an escape or one UTF-8 character.
  uint32_t parse_char() {
    const auto b = (uint8_t)s_[pos_++];
    if (b == '\\') {
      if (pos_ >= s_.size()) fail("truncated escape");
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return (uint8_t)e;
        default:
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    if (b < 0x80) return b;
    const int n = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
    if (n < 0 || b >= 0xF8) fail("invalid UTF-8 in grammar");
    uint32_t cp = b & (0x3F >> n);
    for (int i = 0; i < n; ++i) {
      if (pos_ >= s_.size() || ((uint8_t)s_[pos_] & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | ((uint8_t)s_[pos_++] & 0x3F);
    }
    return cp;
  }

  uint32_t parse_int() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9' && v <= kMaxRepeat)
      v = v * 10 + (s_[pos_++] - '0');
    if (pos_ == start) fail("expected a number in {m,n}");
    if (v > kMaxRepeat) fail("repetition count over " + std::to_string(kMaxRepeat));
    return (uint32_t)v;
  }

  void apply_postfix(Seq* atom) {
    if (pos_ >= s_.size()) return;
    const char c = s_[pos_];
    uint32_t lo = 0, hi = 0;  // hi == UINT32_MAX: unbounded
    if (c == '*')
      lo = 0, hi = UINT32_MAX, ++pos_;
    else if (c == '+')
      lo = 1, hi = UINT32_MAX, ++pos_;
    else if (c == '?')
      lo = 0, hi = 1, ++pos_;
    else if (c == '{') {
      ++pos_;
      skip_space();
      lo = hi = parse_int();
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_space();
        hi = (pos_ < s_.size() && s_[pos_] == '}') ? UINT32_MAX : parse_int();
        skip_space();
      }
      if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
      ++pos_;
      if (hi < lo) fail("repetition {m,n} with n < m");
    } else {
      return;
    }
    *atom = repeat(*atom, lo, hi);
  }

  // item{lo,hi} as right-recursive helper rules (tail positions cost no stack depth).
  Seq repeat(const Seq& atom, uint32_t lo, uint32_t hi) {
    if (atom.empty()) return {};
    // Repeats add up (an item is a rule reference), so a running count bounds the compiled size
    // before it is built: x{4096} nested in y{4096} costs ~2 * 3 * 4096 elements, not 4096^2.
    repeat_elems_ += uint64_t{lo} + (hi == UINT32_MAX ? 3 : 3 * uint64_t{hi - lo});
    if (repeat_elems_ > max_elems_)
      fail("repetitions exceed the compiled-size limit (max_grammar_bytes)");
    const Elem item = atom.size() == 1 ? atom[0] : Elem{Op::kRef, new_rule("seq", {atom})};
    Seq out(lo, item);
    if (hi == UINT32_MAX) {
      const uint32_t star = rule_id("star_" + std::to_string(names_.size()));
      alts_[star] = {{item, {Op::kRef, star}}, {}};
      defined_[star] = true;
      out.push_back({Op::kRef, star});
    } else if (hi > lo) {
      uint32_t opt = new_rule("opt", {{item}, {}});
      for (uint32_t k = lo + 1; k < hi; ++k) opt = new_rule("opt", {{item, {Op::kRef, opt}}, {}});
      out.push_back({Op::kRef, opt});
    }
    return out;
  }

  uint32_t class_id(CharClass cls) {
    cls.finish();
    std::string key(1, cls.negated ? '^' : '=');
    for (auto [lo, hi] : cls.ranges) key += std::to_string(lo) + "-" + std::to_string(hi) + ",";
    auto [it, added] = class_ids_.emplace(key, (uint32_t)classes_.size());
    if (added) classes_.push_back(std::move(cls));
    return it->second;
  }

  Grammar finish() {
    if (names_.size() > kMaxRules) {
      throw ParseError{"grammar has " + std::to_string(names_.size()) +
                       " rules after lowering, over the limit of " + std::to_string(kMaxRules)};
    }
    Grammar g;
    for (size_t r = 0; r < names_.size(); ++r) {
      if (!defined_[r])
        throw ParseError{"grammar rule '" + names_[r] + "' is used but not defined"};
      Rule rule{names_[r], {}};
      for (const Seq& seq : alts_[r]) {
        rule.alts.push_back((uint32_t)g.elems.size());
        g.elems.insert(g.elems.end(), seq.begin(), seq.end());
        g.elems.push_back({Op::kEnd, 0});
      }
      g.rules.push_back(std::move(rule));
    }
    auto it = ids_.find("root");
    if (it == ids_.end()) throw ParseError{"grammar has no 'root' rule"};
    g.root = it->second;
    g.char_classes = std::move(classes_);
    return g;
  }

  std::string_view s_;
  size_t pos_ = 0;
  uint64_t max_elems_ = 0;
  int group_depth_ = 0;
  uint64_t repeat_elems_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Alts> alts_;
  std::vector<bool> defined_;
  std::map<std::string, uint32_t> class_ids_;
  std::vector<CharClass> classes_;
};

}  // namespace

Result<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text, size_t max_bytes) {
  Grammar g;
  try {
    g = Parser(text, max_bytes).run();
  } catch (const ParseError& e) {
    return Error{e.message};
  }
  const size_t bytes = g.size_bytes();
  if (bytes > max_bytes) {
    return Error{"compiled grammar needs " + std::to_string(bytes) + " bytes, over the limit of " +
                 std::to_string(max_bytes) + " bytes (max_grammar_bytes)"};
  }
  KVW_RETURN_IF_ERROR(g.validate());
  return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(g)));
}

}  // namespace kvw::grammar
