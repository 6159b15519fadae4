// chat/jinja_ast.h: the parsed form of a chat template: expression and statement trees.
// Owner: ChatTemplate::Program; immutable after parse(), so renders on many threads may read it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"
#include "core/status.h"

namespace kvw::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kList,     // args: items
  kTuple,    // args: items (evaluates to a list)
  kDict,     // args: key0, value0, key1, value1, ...
  kAttr,     // args[0].name
  kIndex,    // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]]; missing parts are null
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs)
  kTest,     // args[0] is [not] name(args[1..])
  kUnary,    // op args[0]: "not", "-", "+"
  kBinary,   // args[0] op args[1]: and or == != < > <= >= in notin + - * / // % ** ~
  kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int col = 0;
  Value value;           // kLiteral
  std::string name;      // kName, kAttr, kFilter, kTest; the operator for kUnary/kBinary
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

enum class NodeKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches; else_body
  kFor,       // for targets in expr [if filter]: body [else: else_body]
  kSet,       // set targets = expr, or set name.attr = expr (attr non-empty)
  kSetBlock,  // set targets[0] %}body{% endset
  kMacro,     // macro name(params = defaults): body
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  std::string text;                                    // kText; the macro name for kMacro
  ExprPtr expr;                                        // kOutput, kFor (iterable), kSet (value)
  ExprPtr filter;                                      // kFor: `for x in xs if cond`
  std::vector<std::string> targets;                    // kFor / kSet names; kMacro parameter names
  std::string attr;                                    // kSet: `set ns.attr = ...`
  std::vector<ExprPtr> defaults;                       // kMacro: one per parameter, null when none
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // kIf: (condition, body) for if/elif
  NodeList body;
  NodeList else_body;
};

// Errors: "chat template LINE:COL: ..." naming what was expected or not understood.
Result<NodeList> parse_template(std::string_view source);

}  // namespace kvw::jinja
