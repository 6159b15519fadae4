// chat/jinja_parser.cc: tokens -> statement trees (if/for/set/macro/...), and parse_template().
#include "chat/jinja_parser.h"

#include <algorithm>

namespace kvw::jinja {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokKind::kText:
      return "template text";
    case TokKind::kExprBegin:
      return "'{{'";
    case TokKind::kExprEnd:
      return "'}}'";
    case TokKind::kStmtBegin:
      return "'{%'";
    case TokKind::kStmtEnd:
      return "'%}'";
    case TokKind::kName:
      return "'" + t.text + "'";
    case TokKind::kString:
      return "a string";
    case TokKind::kInt:
    case TokKind::kFloat:
      return "a number";
    case TokKind::kOp:
      return "'" + t.text + "'";
    case TokKind::kEof:
      return "end of template";
  }
  return "?";
}

// Parses nodes until `{% stop %}` for a stop in `stops`; leaves pos_ on the stop keyword.
Status Parser::parse_body(NodeList* out, const Stops& stops, const std::string& opened,
                          std::string* stopped_at) {
  NestingGuard guard(&depth_);
  KVW_RETURN_IF_ERROR(check_nesting());
  while (true) {
    const Token& t = cur();
    if (t.kind == TokKind::kEof) {
      if (stops.empty()) return {};
      return error("unexpected end of template: '" + opened + "' is never closed with '" +
                   std::string(stops.back()) + "'");
    }
    if (t.kind == TokKind::kText) {
      auto n = std::make_unique<Node>();
      n->kind = NodeKind::kText;
      n->line = t.line;
      n->text = t.text;
      out->push_back(std::move(n));
      advance();
    } else if (t.kind == TokKind::kExprBegin) {
      auto n = std::make_unique<Node>();
      n->kind = NodeKind::kOutput;
      n->line = t.line;
      advance();
      auto e = parse_expr();
      if (!e.ok()) return e.error();
      n->expr = std::move(e.value());
      KVW_RETURN_IF_ERROR(expect_kind(TokKind::kExprEnd, "'}}'"));
      out->push_back(std::move(n));
    } else if (t.kind == TokKind::kStmtBegin) {
      const Token& kw = peek();
      if (kw.kind == TokKind::kName &&
          std::find(stops.begin(), stops.end(), kw.text) != stops.end()) {
        advance();
        *stopped_at = kw.text;
        return {};
      }
      advance();
      auto n = parse_statement();
      if (!n.ok()) return n.error();
      if (n.value()) out->push_back(std::move(n.value()));
    } else {
      return error("unexpected " + describe(t));
    }
  }
}

Result<NodePtr> Parser::parse_statement() {
  const Token at = cur();
  if (at.kind != TokKind::kName) return error("expected a statement keyword, got " + describe(at));
  advance();
  if (at.text == "if") return parse_if(at);
  if (at.text == "for") return parse_for(at);
  if (at.text == "set") return parse_set(at);
  if (at.text == "macro") return parse_macro(at);
  if (at.text == "break" || at.text == "continue") {
    auto n = std::make_unique<Node>();
    n->kind = at.text == "break" ? NodeKind::kBreak : NodeKind::kContinue;
    n->line = at.line;
    KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
    return n;
  }
  if (at.text == "generation" || at.text == "endgeneration") {
    // Hugging Face's AssistantTracker marks: no effect on the rendered text.
    KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
    return NodePtr();
  }
  if (at.text == "elif" || at.text == "else" || at.text.rfind("end", 0, 3) == 0)
    return error_at(at, "unexpected '" + at.text + "' outside its block");
  return error_at(at, "unsupported statement '" + at.text + "'");
}

Result<NodePtr> Parser::parse_if(const Token& at) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::kIf;
  n->line = at.line;
  std::string keyword = "if";
  while (true) {
    auto cond = parse_expr();
    if (!cond.ok()) return cond.error();
    KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
    NodeList body;
    std::string stop;
    KVW_RETURN_IF_ERROR(parse_body(&body, {"elif", "else", "endif"}, "if", &stop));
    n->branches.emplace_back(std::move(cond.value()), std::move(body));
    advance();  // the stop keyword
    if (stop == "elif") continue;
    if (stop == "else") {
      KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
      KVW_RETURN_IF_ERROR(parse_body(&n->else_body, {"endif"}, "if", &stop));
      advance();
    }
    KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
    return n;
  }
}

Result<NodePtr> Parser::parse_for(const Token& at) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::kFor;
  n->line = at.line;
  const bool paren = accept_op("(");
  do {
    auto name = expect_name();
    if (!name.ok()) return name.error();
    n->targets.push_back(name.value());
  } while (accept_op(","));
  if (paren) KVW_RETURN_IF_ERROR(expect_op(")"));
  if (!accept_name("in")) return error("expected 'in' in for loop, got " + describe(cur()));
  // No conditional expression here: a trailing `if` filters the loop instead.
  auto iter = parse_or();
  if (!iter.ok()) return iter.error();
  n->expr = std::move(iter.value());
  if (accept_name("if")) {
    auto cond = parse_expr();
    if (!cond.ok()) return cond.error();
    n->filter = std::move(cond.value());
  }
  if (accept_name("recursive")) return error("recursive loops are not supported");
  KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
  std::string stop;
  KVW_RETURN_IF_ERROR(parse_body(&n->body, {"else", "endfor"}, "for", &stop));
  advance();
  if (stop == "else") {
    KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
    KVW_RETURN_IF_ERROR(parse_body(&n->else_body, {"endfor"}, "for", &stop));
    advance();
  }
  KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
  return n;
}

Result<NodePtr> Parser::parse_set(const Token& at) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::kSet;
  n->line = at.line;
  auto first = expect_name();
  if (!first.ok()) return first.error();
  n->targets.push_back(first.value());
  if (accept_op(".")) {
    auto attr = expect_name();
    if (!attr.ok()) return attr.error();
    n->attr = attr.value();
  } else {
    while (accept_op(",")) {
      auto name = expect_name();
      if (!name.ok()) return name.error();
      n->targets.push_back(name.value());
    }
  }
  if (cur().kind == TokKind::kStmtEnd && n->attr.empty() && n->targets.size() == 1) {
    advance();
    n->kind = NodeKind::kSetBlock;
    std::string stop;
    KVW_RETURN_IF_ERROR(parse_body(&n->body, {"endset"}, "set", &stop));
    advance();
    KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
    return n;
  }
  KVW_RETURN_IF_ERROR(expect_op("="));
  auto value = parse_expr();
  if (!value.ok()) return value.error();
  if (n->targets.size() > 1 && accept_op(",")) {
    // `set a, b = 1, 2`: the right side is an unparenthesised tuple
    auto tuple = make_expr(ExprKind::kTuple, at);
    tuple->args.push_back(std::move(value.value()));
    do {
      auto item = parse_expr();
      if (!item.ok()) return item.error();
      tuple->args.push_back(std::move(item.value()));
    } while (accept_op(","));
    n->expr = std::move(tuple);
  } else {
    n->expr = std::move(value.value());
  }
  KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
  return n;
}

Result<NodePtr> Parser::parse_macro(const Token& at) {
  auto n = std::make_unique<Node>();
  n->kind = NodeKind::kMacro;
  n->line = at.line;
  auto name = expect_name();
  if (!name.ok()) return name.error();
  n->text = name.value();
  KVW_RETURN_IF_ERROR(expect_op("("));
  while (!at_op(")")) {
    auto param = expect_name();
    if (!param.ok()) return param.error();
    n->targets.push_back(param.value());
    ExprPtr def;
    if (accept_op("=")) {
      auto d = parse_expr();
      if (!d.ok()) return d.error();
      def = std::move(d.value());
    }
    n->defaults.push_back(std::move(def));
    if (!accept_op(",")) break;
  }
  KVW_RETURN_IF_ERROR(expect_op(")"));
  KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
  std::string stop;
  KVW_RETURN_IF_ERROR(parse_body(&n->body, {"endmacro"}, "macro", &stop));
  advance();
  KVW_RETURN_IF_ERROR(expect_kind(TokKind::kStmtEnd, "'%}'"));
  return n;
}

Result<NodeList> parse_template(std::string_view source) {
  auto tokens = tokenize(source);
  if (!tokens.ok()) return tokens.error();
  return Parser(std::move(tokens.value())).parse_all();
}

}  // namespace kvw::jinja
