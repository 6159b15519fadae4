// chat/jinja_parser.h: the recursive-descent parser behind parse_template() (internal to
// src/chat). Statements live in jinja_parser.cc, expressions in jinja_expr_parser.cc.
// One Parser per parse_template() call; not shared.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace kvw::jinja {

// "'if'", "a string", "end of template": how errors name a token.
std::string describe(const Token& t);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<NodeList> parse_all() {
    NodeList nodes;
    std::string stopped;
    KVW_RETURN_IF_ERROR(parse_body(&nodes, {}, "", &stopped));
    return nodes;
  }

 private:
  using Stops = std::vector<std::string_view>;

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool at_op(std::string_view op) const { return cur().kind == TokKind::kOp && cur().text == op; }
  bool at_name(std::string_view n) const { return cur().kind == TokKind::kName && cur().text == n; }
  bool accept_op(std::string_view op) {
    if (!at_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!at_name(n)) return false;
    advance();
    return true;
  }
  Error error(const std::string& what) const { return error_at(cur(), what); }
  static Error error_at(const Token& t, const std::string& what) {
    return Error{"chat template " + std::to_string(t.line) + ":" + std::to_string(t.col) + ": " +
                 what};
  }
  Status expect_op(std::string_view op) {
    if (accept_op(op)) return {};
    return error("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  Status expect_kind(TokKind kind, const char* what) {
    if (cur().kind == kind) {
      advance();
      return {};
    }
    return error(std::string("expected ") + what + ", got " + describe(cur()));
  }
  Result<std::string> expect_name() {
    if (cur().kind != TokKind::kName) return error("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  ExprPtr make_expr(ExprKind kind, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  Status parse_body(NodeList* out, const Stops& stops, const std::string& opened,
                    std::string* stopped_at);
  Result<NodePtr> parse_statement();
  Result<NodePtr> parse_if(const Token& at);
  Result<NodePtr> parse_for(const Token& at);
  Result<NodePtr> parse_set(const Token& at);
  Result<NodePtr> parse_macro(const Token& at);

  Result<ExprPtr> parse_expr();  // conditional expression
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_add();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_mul();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filters = true);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_postfix(ExprPtr e);
  Result<ExprPtr> parse_filters(ExprPtr e);
  Status parse_call_args(Expr* call);
  ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) const {
    auto e = make_expr(ExprKind::kBinary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  // Counts nested blocks and sub-expressions; past kMaxNesting parsing fails instead of
  // overflowing the stack on a hostile template ("((((...", thousands of nested ifs).
  static constexpr int kMaxNesting = 100;
  struct NestingGuard {
    explicit NestingGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~NestingGuard() { --*depth_; }
    int* depth_;
  };
  Status check_nesting() const {
    if (depth_ > kMaxNesting)
      return error("template nests deeper than " + std::to_string(kMaxNesting) + " levels");
    return {};
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace kvw::jinja
