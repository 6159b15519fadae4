// chat/jinja_expr_parser.cc: tokens -> expression trees.
// Operator precedence follows Jinja2's parser, lowest first:
//   a if c else b  <  or  <  and  <  not  <  == != < > <= >= in, not in  <  + -  <  ~
//   <  * / // %  <  **  <  unary - +  <  primary .attr [i] [a:b] (call)
// with `| filter` and `is test` applied to the unary/primary they follow, so `'x' + s | trim`
// trims only s, `-3 | abs` is 3, and `not x is defined` is `not (x is defined)`.
#include <algorithm>

#include "chat/jinja_parser.h"

namespace kvw::jinja {

Result<ExprPtr> Parser::parse_expr() {
  NestingGuard guard(&depth_);
  KVW_RETURN_IF_ERROR(check_nesting());
  const Token at = cur();
  auto then = parse_or();
  if (!then.ok()) return then;
  if (!accept_name("if")) return then;
  auto e = make_expr(ExprKind::kCond, at);
  auto cond = parse_or();
  if (!cond.ok()) return cond;
  e->args.push_back(std::move(then.value()));
  e->args.push_back(std::move(cond.value()));
  if (accept_name("else")) {
    auto other = parse_expr();
    if (!other.ok()) return other;
    e->args.push_back(std::move(other.value()));
  } else {
    e->args.push_back(nullptr);
  }
  return e;
}

Result<ExprPtr> Parser::parse_or() {
  auto left = parse_and();
  while (left.ok() && at_name("or")) {
    const Token at = cur();
    advance();
    auto right = parse_and();
    if (!right.ok()) return right;
    left = binary(at, "or", std::move(left.value()), std::move(right.value()));
  }
  return left;
}

Result<ExprPtr> Parser::parse_and() {
  auto left = parse_not();
  while (left.ok() && at_name("and")) {
    const Token at = cur();
    advance();
    auto right = parse_not();
    if (!right.ok()) return right;
    left = binary(at, "and", std::move(left.value()), std::move(right.value()));
  }
  return left;
}

Result<ExprPtr> Parser::parse_not() {
  NestingGuard guard(&depth_);
  KVW_RETURN_IF_ERROR(check_nesting());
  if (!at_name("not")) return parse_compare();
  const Token at = cur();
  advance();
  auto operand = parse_not();
  if (!operand.ok()) return operand;
  auto e = make_expr(ExprKind::kUnary, at);
  e->name = "not";
  e->args.push_back(std::move(operand.value()));
  return e;
}

Result<ExprPtr> Parser::parse_compare() {
  auto left = parse_add();
  while (left.ok()) {
    const Token at = cur();
    std::string op;
    if (at.kind == TokKind::kOp && (at.text == "==" || at.text == "!=" || at.text == "<" ||
                                    at.text == ">" || at.text == "<=" || at.text == ">=")) {
      op = at.text;
      advance();
    } else if (at_name("in")) {
      op = "in";
      advance();
    } else if (at_name("not") && peek().kind == TokKind::kName && peek().text == "in") {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    auto right = parse_add();
    if (!right.ok()) return right;
    left = binary(at, op, std::move(left.value()), std::move(right.value()));
  }
  return left;
}

Result<ExprPtr> Parser::parse_add() {
  auto left = parse_concat();
  while (left.ok() && (at_op("+") || at_op("-"))) {
    const Token at = cur();
    advance();
    auto right = parse_concat();
    if (!right.ok()) return right;
    left = binary(at, at.text, std::move(left.value()), std::move(right.value()));
  }
  return left;
}

Result<ExprPtr> Parser::parse_concat() {
  auto left = parse_mul();
  while (left.ok() && at_op("~")) {
    const Token at = cur();
    advance();
    auto right = parse_mul();
    if (!right.ok()) return right;
    left = binary(at, "~", std::move(left.value()), std::move(right.value()));
  }
  return left;
}

Result<ExprPtr> Parser::parse_mul() {
  auto left = parse_pow();
  while (left.ok() && (at_op("*") || at_op("/") || at_op("//") || at_op("%"))) {
    const Token at = cur();
    advance();
    auto right = parse_pow();
    if (!right.ok()) return right;
    left = binary(at, at.text, std::move(left.value()), std::move(right.value()));
  }
  return left;
}

Result<ExprPtr> Parser::parse_pow() {
  auto left = parse_unary();
  while (left.ok() && at_op("**")) {
    const Token at = cur();
    advance();
    auto right = parse_unary();
    if (!right.ok()) return right;
    left = binary(at, "**", std::move(left.value()), std::move(right.value()));
  }
  return left;
}

// As in Jinja, `-x | f` is f(-x): filters apply to the whole unary expression.
Result<ExprPtr> Parser::parse_unary(bool with_filters) {
  NestingGuard guard(&depth_);
  KVW_RETURN_IF_ERROR(check_nesting());
  Result<ExprPtr> e = ExprPtr();
  if (at_op("-") || at_op("+")) {
    const Token at = cur();
    advance();
    auto operand = parse_unary(false);
    if (!operand.ok()) return operand;
    auto u = make_expr(ExprKind::kUnary, at);
    u->name = at.text;
    u->args.push_back(std::move(operand.value()));
    e = std::move(u);
  } else {
    auto primary = parse_primary();
    if (!primary.ok()) return primary;
    e = parse_postfix(std::move(primary.value()));
    if (!e.ok()) return e;
  }
  return with_filters ? parse_filters(std::move(e.value())) : std::move(e);
}

Result<ExprPtr> Parser::parse_primary() {
  const Token at = cur();
  switch (at.kind) {
    case TokKind::kName: {
      advance();
      auto e = make_expr(ExprKind::kLiteral, at);
      if (at.text == "true" || at.text == "True") {
        e->value = Value::boolean(true);
      } else if (at.text == "false" || at.text == "False") {
        e->value = Value::boolean(false);
      } else if (at.text == "none" || at.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = at.text;
      }
      return e;
    }
    case TokKind::kString: {
      std::string s;
      while (cur().kind == TokKind::kString) {  // adjacent literals concatenate
        s += cur().text;
        advance();
      }
      auto e = make_expr(ExprKind::kLiteral, at);
      e->value = Value::string(std::move(s));
      return e;
    }
    case TokKind::kInt:
    case TokKind::kFloat: {
      advance();
      auto e = make_expr(ExprKind::kLiteral, at);
      e->value =
          at.kind == TokKind::kInt ? Value::integer(at.int_value) : Value::real(at.float_value);
      return e;
    }
    case TokKind::kOp:
      break;
    default:
      return error("expected an expression, got " + describe(at));
  }
  if (accept_op("(")) {
    if (accept_op(")")) return make_expr(ExprKind::kTuple, at);
    auto first = parse_expr();
    if (!first.ok()) return first;
    if (accept_op(")")) return first;
    auto tuple = make_expr(ExprKind::kTuple, at);
    tuple->args.push_back(std::move(first.value()));
    while (accept_op(",")) {
      if (at_op(")")) break;
      auto item = parse_expr();
      if (!item.ok()) return item;
      tuple->args.push_back(std::move(item.value()));
    }
    KVW_RETURN_IF_ERROR(expect_op(")"));
    return tuple;
  }
  if (accept_op("[")) {
    auto list = make_expr(ExprKind::kList, at);
    while (!at_op("]")) {
      auto item = parse_expr();
      if (!item.ok()) return item;
      list->args.push_back(std::move(item.value()));
      if (!accept_op(",")) break;
    }
    KVW_RETURN_IF_ERROR(expect_op("]"));
    return list;
  }
  if (accept_op("{")) {
    auto dict = make_expr(ExprKind::kDict, at);
    while (!at_op("}")) {
      auto key = parse_expr();
      if (!key.ok()) return key;
      KVW_RETURN_IF_ERROR(expect_op(":"));
      auto value = parse_expr();
      if (!value.ok()) return value;
      dict->args.push_back(std::move(key.value()));
      dict->args.push_back(std::move(value.value()));
      if (!accept_op(",")) break;
    }
    KVW_RETURN_IF_ERROR(expect_op("}"));
    return dict;
  }
  return error("expected an expression, got " + describe(at));
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr e) {
  while (true) {
    const Token at = cur();
    if (accept_op(".")) {
      if (cur().kind == TokKind::kInt) {  // items.0 is items[0]
        auto idx = make_expr(ExprKind::kIndex, at);
        auto lit = make_expr(ExprKind::kLiteral, cur());
        lit->value = Value::integer(cur().int_value);
        advance();
        idx->args.push_back(std::move(e));
        idx->args.push_back(std::move(lit));
        e = std::move(idx);
        continue;
      }
      auto name = expect_name();
      if (!name.ok()) return name.error();
      auto attr = make_expr(ExprKind::kAttr, at);
      attr->name = name.value();
      attr->args.push_back(std::move(e));
      e = std::move(attr);
    } else if (accept_op("[")) {
      ExprPtr parts[3];
      bool is_slice = false;
      for (int i = 0; i < 3; ++i) {
        if (!at_op(":") && !at_op("]")) {
          auto part = parse_expr();
          if (!part.ok()) return part;
          parts[i] = std::move(part.value());
        }
        if (i == 2 || !accept_op(":")) break;
        is_slice = true;
      }
      KVW_RETURN_IF_ERROR(expect_op("]"));
      auto sub = make_expr(is_slice ? ExprKind::kSlice : ExprKind::kIndex, at);
      sub->args.push_back(std::move(e));
      if (!is_slice && !parts[0]) return error_at(at, "empty subscript");
      for (int i = 0; i < (is_slice ? 3 : 1); ++i) sub->args.push_back(std::move(parts[i]));
      e = std::move(sub);
    } else if (at_op("(")) {
      auto call = make_expr(ExprKind::kCall, at);
      call->args.push_back(std::move(e));
      KVW_RETURN_IF_ERROR(parse_call_args(call.get()));
      e = std::move(call);
    } else {
      return e;
    }
  }
}

// At '(': appends positional args to call->args and keyword args to call->kwargs.
Status Parser::parse_call_args(Expr* call) {
  KVW_RETURN_IF_ERROR(expect_op("("));
  while (!at_op(")")) {
    if (cur().kind == TokKind::kName && peek().kind == TokKind::kOp && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      auto value = parse_expr();
      if (!value.ok()) return value.error();
      call->kwargs.emplace_back(std::move(key), std::move(value.value()));
    } else {
      if (!call->kwargs.empty()) return error("positional argument after keyword argument");
      auto value = parse_expr();
      if (!value.ok()) return value.error();
      call->args.push_back(std::move(value.value()));
    }
    if (!accept_op(",")) break;
  }
  return expect_op(")");
}

Result<ExprPtr> Parser::parse_filters(ExprPtr e) {
  while (true) {
    const Token at = cur();
    if (accept_op("|")) {
      auto name = expect_name();
      if (!name.ok()) return name.error();
      auto f = make_expr(ExprKind::kFilter, at);
      f->name = name.value();
      f->args.push_back(std::move(e));
      if (at_op("(")) KVW_RETURN_IF_ERROR(parse_call_args(f.get()));
      e = std::move(f);
    } else if (accept_name("is")) {
      auto t = make_expr(ExprKind::kTest, at);
      t->negated = accept_name("not");
      auto name = expect_name();
      if (!name.ok()) return name.error();
      t->name = name.value();
      t->args.push_back(std::move(e));
      if (at_op("(")) {
        KVW_RETURN_IF_ERROR(parse_call_args(t.get()));
      } else {
        // `is sameas false`, `is divisibleby 3`: one bare argument
        const Token& n = cur();
        static const char* const kStop[] = {"else", "or", "and", "if", "in", "is", "not"};
        bool arg = n.kind == TokKind::kString || n.kind == TokKind::kInt ||
                   n.kind == TokKind::kFloat ||
                   (n.kind == TokKind::kOp && (n.text == "[" || n.text == "{" || n.text == "("));
        if (n.kind == TokKind::kName)
          arg = std::none_of(std::begin(kStop), std::end(kStop),
                             [&](const char* s) { return n.text == s; });
        if (arg) {
          auto primary = parse_primary();
          if (!primary.ok()) return primary;
          auto post = parse_postfix(std::move(primary.value()));
          if (!post.ok()) return post;
          t->args.push_back(std::move(post.value()));
        }
      }
      e = std::move(t);
    } else {
      return e;
    }
  }
}

}  // namespace kvw::jinja
