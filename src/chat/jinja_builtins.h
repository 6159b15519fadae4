// chat/jinja_builtins.h: the operators, filters, tests and methods of the chat-template
// interpreter, as pure functions over Values. Errors carry no position; the evaluator prefixes
// the template line:col. Thread safety: stateless.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"
#include "core/status.h"

namespace kvw::jinja {

// Arguments of a filter, test, method or function call, already evaluated.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // The i-th positional argument, else the keyword argument `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
  const Value* kwarg(std::string_view name) const;  // keyword-only arguments
};

// Largest string/list an operation may build (stops `'x' * 10**12` from taking the host down).
inline constexpr size_t kMaxBuiltBytes = 16u << 20;

// op: + - * / // % ** ~ == != < > <= >= in notin (not and/or, which short-circuit).
Result<Value> binary_op(std::string_view op, const Value& a, const Value& b);
Result<Value> unary_op(std::string_view op, const Value& a);
Value subscript(const Value& obj, const Value& key);  // Undefined when missing, like Jinja
Result<Value> slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
Value get_attribute(const Value& obj, std::string_view name);  // dict key, else Undefined
// Iteration order of a value in a for loop or filter (a dict yields its keys).
Result<ValueList> iterate(const Value& v);

Result<Value> apply_filter(std::string_view name, const Value& subject, const CallArgs& args);
Result<bool> apply_test(std::string_view name, const Value& subject, const CallArgs& args);
// Python str/dict methods: s.strip(), s.split(','), d.items(), d.get('k', 0), ...
Result<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args);

}  // namespace kvw::jinja
