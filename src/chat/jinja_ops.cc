// chat/jinja_ops.cc: operators, indexing, slicing and Python str/dict methods (Python semantics:
// `/` is true division, `%` and `//` floor toward -inf, strings index by code point).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "chat/jinja_builtins.h"

namespace kvw::jinja {

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < args.size()) return &args[i];
  return kwarg(name);
}

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

namespace {

Error type_error(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return Error{a.as_string()};
  if (b.is_undefined()) return Error{b.as_string()};
  return Error{"unsupported operand types for " + std::string(op) + ": " + a.type_name() + " and " +
               b.type_name()};
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Result<Value> repeat(const Value& seq, int64_t n) {
  n = std::max<int64_t>(n, 0);
  if (seq.is_string()) {
    if ((double)seq.as_string().size() * (double)n > (double)kMaxBuiltBytes)
      return Error{"string repeat too large"};
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  if ((double)seq.items().size() * (double)n > (double)kMaxBuiltBytes)
    return Error{"list repeat too large"};
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out));
}

Result<Value> arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) return type_error(op, a, b);
  const bool ints = a.is_int() && b.is_int();
  const double x = a.as_double(), y = b.as_double();
  if (op == "/") {
    if (y == 0) return Error{"division by zero"};
    return Value::real(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return Error{op == "//" ? "integer division by zero" : "modulo by zero"};
    if (ints) {
      const int64_t q = floor_div(a.as_int(), b.as_int());
      return Value::integer(op == "//" ? q : a.as_int() - q * b.as_int());
    }
    const double q = std::floor(x / y);
    return Value::real(op == "//" ? q : x - q * y);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) return Value::integer((int64_t)std::llround(std::pow(x, y)));
    return Value::real(std::pow(x, y));
  }
  if (ints) {
    const int64_t i = a.as_int(), j = b.as_int();
    if (op == "+") return Value::integer(i + j);
    if (op == "-") return Value::integer(i - j);
    return Value::integer(i * j);
  }
  if (op == "+") return Value::real(x + y);
  if (op == "-") return Value::real(x - y);
  return Value::real(x * y);
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kString:
      if (!item.is_string())
        return Error{std::string("'in <string>' requires a string, not ") + item.type_name()};
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      return std::any_of(container.items().begin(), container.items().end(),
                         [&](const Value& v) { return values_equal(v, item); });
    case ValueKind::kDict:
      return item.is_string() && container.entries().find(item.as_string()) != nullptr;
    case ValueKind::kUndefined:
      return false;
    default:
      return Error{std::string("argument of type ") + container.type_name() + " is not iterable"};
  }
}

Result<bool> less(std::string_view op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  return type_error(op, a, b);
}

}  // namespace

Result<Value> binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(a.str() + b.str());
  if (op == "==") return Value::boolean(values_equal(a, b));
  if (op == "!=") return Value::boolean(!values_equal(a, b));
  if (op == "in" || op == "notin") {
    auto r = contains(b, a);
    if (!r.ok()) return r.error();
    return Value::boolean(r.value() == (op == "in"));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    const bool swap = op == ">" || op == "<=";
    auto lt = swap ? less(op, b, a) : less(op, a, b);
    if (!lt.ok()) return lt.error();
    return Value::boolean((op == "<" || op == ">") ? lt.value() : !lt.value());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxBuiltBytes)
        return Error{"string too large"};
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_int()) return repeat(b, a.as_int());
  }
  return arithmetic(op, a, b);
}

Result<Value> unary_op(std::string_view op, const Value& a) {
  if (op == "not") return Value::boolean(!a.truthy());
  if (!a.is_number()) {
    if (a.is_undefined()) return Error{a.as_string()};
    return Error{std::string("bad operand type for unary ") + std::string(op) + ": " +
                 a.type_name()};
  }
  if (op == "+") return a.kind() == ValueKind::kBool ? Value::integer(a.as_int()) : a;
  if (a.is_int()) return Value::integer(-a.as_int());
  return Value::real(-a.as_double());
}

Value subscript(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    const Value* v = key.is_string() ? obj.entries().find(key.as_string()) : nullptr;
    return v ? *v : Value::undefined("'dict object' has no attribute " + key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    if (obj.is_list()) {
      const int64_t n = (int64_t)obj.items().size();
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list object has no element " + key.str());
      return obj.items()[(size_t)i];
    }
    const std::vector<size_t> cp = code_point_offsets(obj.as_string());
    const int64_t n = (int64_t)cp.size() - 1;
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value::string(obj.as_string().substr(cp[(size_t)i], cp[(size_t)i + 1] - cp[(size_t)i]));
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no element " +
                          key.repr());
}

Value get_attribute(const Value& obj, std::string_view name) {
  if (obj.is_dict()) {
    const Value* v = obj.entries().find(name);
    if (v) return *v;
  }
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" +
                          std::string(name) + "'");
}

Result<Value> slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (!obj.is_list() && !obj.is_string()) {
    if (obj.is_undefined()) return Error{obj.as_string()};
    return Error{std::string("cannot slice a ") + obj.type_name()};
  }
  auto as_index = [](const Value* v, int64_t* out) -> Status {
    if (!v || v->is_none() || v->is_undefined()) return {};
    if (!v->is_int()) return Error{"slice indices must be integers"};
    *out = v->as_int();
    return {};
  };
  std::vector<size_t> cp;
  int64_t n;
  if (obj.is_string()) {
    cp = code_point_offsets(obj.as_string());
    n = (int64_t)cp.size() - 1;
  } else {
    n = (int64_t)obj.items().size();
  }
  int64_t st = 1;
  KVW_RETURN_IF_ERROR(as_index(step, &st));
  if (st == 0) return Error{"slice step cannot be zero"};
  // Python's slice.indices(): clamp, with defaults that depend on the step's sign.
  int64_t lo = st > 0 ? 0 : n - 1, hi = st > 0 ? n : -1;
  auto clamp = [&](const Value* v, int64_t* out) -> Status {
    int64_t i = 0;
    if (!v || v->is_none() || v->is_undefined()) return {};
    KVW_RETURN_IF_ERROR(as_index(v, &i));
    if (i < 0) i += n;
    *out = st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    return {};
  };
  KVW_RETURN_IF_ERROR(clamp(start, &lo));
  KVW_RETURN_IF_ERROR(clamp(stop, &hi));
  std::string s;
  ValueList items;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
    if (obj.is_string()) {
      s.append(obj.as_string(), cp[(size_t)i], cp[(size_t)i + 1] - cp[(size_t)i]);
    } else {
      items.push_back(obj.items()[(size_t)i]);
    }
  }
  return obj.is_string() ? Value::string(std::move(s)) : Value::list(std::move(items));
}

Result<ValueList> iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kList:
      return v.items();
    case ValueKind::kUndefined:
      return ValueList{};
    case ValueKind::kDict: {
      ValueList keys;
      for (const auto& [k, _] : v.entries().items) keys.push_back(Value::string(k));
      return keys;
    }
    case ValueKind::kString: {
      const std::vector<size_t> cp = code_point_offsets(v.as_string());
      ValueList chars;
      for (size_t i = 0; i + 1 < cp.size(); ++i)
        chars.push_back(Value::string(v.as_string().substr(cp[i], cp[i + 1] - cp[i])));
      return chars;
    }
    default:
      return Error{std::string("'") + v.type_name() + "' object is not iterable"};
  }
}

namespace {

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

std::string strip(const std::string& s, std::string_view chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && chars.find(s[b]) != std::string_view::npos) ++b;
  }
  if (right) {
    while (e > b && chars.find(s[e - 1]) != std::string_view::npos) --e;
  }
  return s.substr(b, e - b);
}

ValueList split(const std::string& s, const Value* sep, int64_t maxsplit) {
  ValueList out;
  if (!sep || sep->is_none()) {  // runs of whitespace, ends ignored
    size_t i = 0;
    while (true) {
      while (i < s.size() && kWhitespace.find(s[i]) != std::string_view::npos) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && (int64_t)out.size() == maxsplit) {
        out.push_back(Value::string(strip(s.substr(i), kWhitespace, false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() && kWhitespace.find(s[j]) == std::string_view::npos) ++j;
      out.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& d = sep->as_string();
  size_t i = 0;
  while (maxsplit < 0 || (int64_t)out.size() < maxsplit) {
    const size_t j = s.find(d, i);
    if (j == std::string::npos) break;
    out.push_back(Value::string(s.substr(i, j - i)));
    i = j + d.size();
  }
  out.push_back(Value::string(s.substr(i)));
  return out;
}

Result<bool> affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& a) -> Result<bool> {
    if (!a.is_string()) return Error{"startswith/endswith need a string"};
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (!arg.is_list()) return one(arg);
  for (const Value& a : arg.items()) {
    auto r = one(a);
    if (!r.ok() || r.value()) return r;
  }
  return false;
}

Result<Value> string_method(const std::string& s, std::string_view name, const CallArgs& args) {
  const Value* a0 = args.get(0, "");
  const bool none0 = !a0 || a0->is_none();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    if (!none0 && !a0->is_string())
      return Error{std::string(name) + "() argument must be a string"};
    const std::string_view chars = none0 ? kWhitespace : std::string_view(a0->as_string());
    return Value::string(strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    if (!a0) return Error{std::string(name) + "() takes 1 argument"};
    auto r = affix_match(s, *a0, name == "startswith");
    if (!r.ok()) return r.error();
    return Value::boolean(r.value());
  }
  if (name == "split") {
    const Value* sep = args.get(0, "sep");
    const Value* maxsplit = args.get(1, "maxsplit");
    if (sep && !sep->is_none() && (!sep->is_string() || sep->as_string().empty()))
      return Error{"split() separator must be a non-empty string"};
    return Value::list(split(s, sep, maxsplit && maxsplit->is_int() ? maxsplit->as_int() : -1));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    CallArgs none;
    return apply_filter(name, Value::string(s), none);
  }
  if (name == "replace") {
    CallArgs fwd = args;
    return apply_filter("replace", Value::string(s), fwd);
  }
  if (name == "find" || name == "count") {
    if (!a0 || !a0->is_string()) return Error{std::string(name) + "() needs a string"};
    const std::string& sub = a0->as_string();
    if (name == "find") {
      const size_t at = s.find(sub);
      return Value::integer(
          at == std::string::npos ? -1 : (int64_t)(code_point_offsets(s.substr(0, at)).size() - 1));
    }
    if (sub.empty()) return Value::integer((int64_t)code_point_offsets(s).size());
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    if (!a0) return Error{"join() takes 1 argument"};
    auto items = iterate(*a0);
    if (!items.ok()) return items.error();
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i) out += s;
      out += (*items)[i].str();
    }
    return Value::string(std::move(out));
  }
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
    if (s.empty()) return Value::boolean(false);
    for (unsigned char c : s) {
      const bool ok = name == "isspace"   ? kWhitespace.find((char)c) != std::string_view::npos
                      : name == "isdigit" ? std::isdigit(c) != 0
                      : name == "isalpha" ? std::isalpha(c) != 0
                                          : std::isalnum(c) != 0;
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  return Error{"string has no method '" + std::string(name) + "'"};
}

}  // namespace

Result<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args) {
  if (obj.is_string()) return string_method(obj.as_string(), name, args);
  if (obj.is_dict() && !obj.entries().is_namespace) {
    if (name == "items") return apply_filter("items", obj, args);
    if (name == "keys" || name == "values") {
      ValueList out;
      for (const auto& [k, v] : obj.entries().items)
        out.push_back(name == "keys" ? Value::string(k) : v);
      return Value::list(std::move(out));
    }
    if (name == "get") {
      const Value* key = args.get(0, "key");
      if (!key) return Error{"get() takes a key"};
      Value v = subscript(obj, *key);
      if (!v.is_undefined()) return v;
      const Value* def = args.get(1, "default");
      return def ? *def : Value::none();
    }
  }
  if (obj.is_undefined()) return Error{obj.as_string()};
  return Error{std::string(obj.type_name()) + " has no method '" + std::string(name) + "'"};
}

}  // namespace kvw::jinja
