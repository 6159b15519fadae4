// chat/jinja_value.h: the dynamic value type of the chat-template interpreter (Python semantics:
// str/int/float/bool/None, list, dict, Jinja's Undefined, namespace objects and macros).
// Owner: one render call; values are never shared between renders, so no locking.
// Lists and dicts are shared_ptr because Python containers are references: `ns.x = 1` must be
// visible through every alias of `ns`, and `set a = b` must not copy b's list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvw::jinja {

struct Node;  // a macro definition (jinja_ast.h)

// Deepest container nesting printed, compared or serialised; real chat data nests < 10.
inline constexpr int kMaxValueDepth = 64;
class Value;

using ValueList = std::vector<Value>;

// An insertion-ordered dict with string keys (chat templates only index by string); linear
// lookup because template dicts hold a handful of keys.
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // created by namespace(): the only dict `set x.attr = ...` may change

  const Value* find(std::string_view key) const;
  void set(std::string_view key, Value v);
};

enum class ValueKind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kMacro };

class Value {
 public:
  Value() = default;  // Undefined
  // hint: the error to report when the Undefined is used ('x' is undefined, ...)
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double f);
  static Value string(std::string s);
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);  // a list that prints as (a, b)
  static Value dict(ValueDict d = {});
  static Value macro(const Node* def);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_int() const { return kind_ == ValueKind::kInt || kind_ == ValueKind::kBool; }
  bool is_number() const { return is_int() || kind_ == ValueKind::kFloat; }

  // Accessors: call only after checking the kind.
  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == ValueKind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == ValueKind::kFloat ? f_ : (double)as_int(); }
  const std::string& as_string() const { return s_; }  // also the hint of an Undefined
  ValueList& items() const { return *list_; }
  ValueDict& entries() const { return *dict_; }
  const Node* macro_def() const { return macro_; }
  // Python `is` for containers: both values alias one list or dict.
  bool same_object(const Value& o) const {
    return (list_ && list_ == o.list_) || (dict_ && dict_ == o.dict_);
  }
  // The dict this value aliases (null for anything else): names one object across copies.
  const void* dict_identity() const { return dict_.get(); }

  bool truthy() const;
  // Python str(): what {{ }} prints. Containers nested deeper than kMaxValueDepth (only a
  // namespace that holds itself gets there) print as [...] instead of recursing forever.
  std::string str(int depth = 0) const;
  std::string repr(int depth = 0) const;  // Python repr(): how str() shows container items
  // JSON text as Python's json.dumps(ensure_ascii=False) writes it; indent < 0 is one line.
  // Errors: nesting deeper than kMaxValueDepth (a circular namespace).
  Result<std::string> to_json(int indent) const;
  const char* type_name() const;

 private:
  bool write_json(std::string& out, int indent, int depth) const;  // false: too deep

  ValueKind kind_ = ValueKind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;  // kList created as a tuple: only changes how it prints
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  const Node* macro_ = nullptr;
};

// Python ==: 1 == 1.0 == True, lists and dicts compare by content, Undefined equals Undefined.
// Containers nested deeper than kMaxValueDepth compare unequal.
bool values_equal(const Value& a, const Value& b, int depth = 0);

// Python repr of a float: the shortest digits that read back the same, always with a '.' or 'e'.
std::string format_float(double f);

// UTF-8 helpers: Python indexes strings by code point, not byte.
std::vector<size_t> code_point_offsets(std::string_view s);  // start offsets, plus s.size()

}  // namespace kvw::jinja
