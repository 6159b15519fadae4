// chat/jinja_filters.cc: Jinja's built-in filters and tests, as far as chat templates use them
// (trim, length, default, tojson, selectattr, map, join, ... and defined, none, string, ...).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "chat/jinja_builtins.h"

namespace kvw::jinja {
namespace {

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

// "a.b" looks up obj.a.b, as Jinja's attribute= arguments do.
Value attribute_path(const Value& obj, const std::string& path) {
  Value v = obj;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = numeric ? subscript(v, Value::integer(std::atoll(part.c_str()))) : get_attribute(v, part);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string case_map(const std::string& s, std::string_view mode) {
  std::string out = s;
  bool word_start = true;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char c = (unsigned char)out[i];
    if (mode == "upper") {
      out[i] = (char)std::toupper(c);
    } else if (mode == "lower") {
      out[i] = (char)std::tolower(c);
    } else if (mode == "capitalize") {
      out[i] = (char)(i == 0 ? std::toupper(c) : std::tolower(c));
    } else {  // title: upper after a non-letter, lower elsewhere
      out[i] = (char)(word_start ? std::toupper(c) : std::tolower(c));
      word_start = !std::isalpha(c);
    }
  }
  return out;
}

// Runs test `args[first]` with the remaining args on v; with no test name, truthiness.
Result<bool> run_select_test(const Value& v, const CallArgs& args, size_t first) {
  if (args.args.size() <= first) return v.truthy();
  if (!args.args[first].is_string()) return Error{"test name must be a string"};
  CallArgs rest;
  rest.args.assign(args.args.begin() + (long)first + 1, args.args.end());
  return apply_test(args.args[first].as_string(), v, rest);
}

Result<Value> select_filter(std::string_view name, const Value& subject, const CallArgs& args) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_if = name == "selectattr" || name == "select";
  auto items = iterate(subject);
  if (!items.ok()) return items.error();
  if (by_attr && (args.args.empty() || !args.args[0].is_string()))
    return Error{std::string(name) + " needs an attribute name"};
  ValueList out;
  for (const Value& item : items.value()) {
    const Value probe = by_attr ? attribute_path(item, args.args[0].as_string()) : item;
    auto r = run_select_test(probe, args, by_attr ? 1 : 0);
    if (!r.ok()) return r.error();
    if (r.value() == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> map_filter(const Value& subject, const CallArgs& args) {
  auto items = iterate(subject);
  if (!items.ok()) return items.error();
  ValueList out;
  const Value* attr = args.kwarg("attribute");
  if (attr) {
    const Value* def = args.kwarg("default");
    for (const Value& item : items.value()) {
      Value v = attribute_path(item, attr->str());
      out.push_back(v.is_undefined() && def ? *def : v);
    }
    return Value::list(std::move(out));
  }
  if (args.args.empty() || !args.args[0].is_string())
    return Error{"map needs a filter name or attribute="};
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  for (const Value& item : items.value()) {
    auto v = apply_filter(args.args[0].as_string(), item, rest);
    if (!v.ok()) return v;
    out.push_back(std::move(v.value()));
  }
  return Value::list(std::move(out));
}

Result<Value> length_of(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kString:
      return Value::integer((int64_t)code_point_offsets(v.as_string()).size() - 1);
    case ValueKind::kList:
      return Value::integer((int64_t)v.items().size());
    case ValueKind::kDict:
      return Value::integer((int64_t)v.entries().items.size());
    case ValueKind::kUndefined:
      return Value::integer(0);
    default:
      return Error{std::string("object of type ") + v.type_name() + " has no length"};
  }
}

Result<Value> first_or_last(const Value& v, bool first) {
  auto items = iterate(v);
  if (!items.ok()) return items.error();
  if (items->empty())
    return Value::undefined(std::string("No ") + (first ? "first" : "last") +
                            " item, sequence was empty.");
  return first ? items->front() : items->back();
}

Result<Value> to_number(const Value& v, const CallArgs& args, bool want_int) {
  const Value* def = args.get(0, "default");
  Value fallback = def ? *def : (want_int ? Value::integer(0) : Value::real(0));
  if (v.is_number())
    return want_int ? Value::integer((int64_t)v.as_double()) : Value::real(v.as_double());
  if (!v.is_string()) return fallback;
  const std::string s(v.as_string());
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str() ||
      std::string_view(end).find_first_not_of(kWhitespace) != std::string_view::npos)
    return fallback;
  return want_int ? Value::integer((int64_t)d) : Value::real(d);
}

Result<Value> sort_filter(const Value& subject, const CallArgs& args) {
  auto items = iterate(subject);
  if (!items.ok()) return items.error();
  ValueList out = std::move(items.value());
  const Value* reverse = args.get(0, "reverse");
  const Value* attr = args.get(2, "attribute");
  auto key = [&](const Value& v) { return attr ? attribute_path(v, attr->str()) : v; };
  Status failed;
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    auto lt = binary_op("<", key(a), key(b));
    if (!lt.ok()) {
      failed = lt.error();
      return false;
    }
    return lt->truthy();
  });
  if (!failed.ok()) return Error{failed.message()};
  if (reverse && reverse->truthy()) std::reverse(out.begin(), out.end());
  return Value::list(std::move(out));
}

std::string indent_text(const std::string& s, const CallArgs& args) {
  const Value* width = args.get(0, "width");
  const Value* first = args.get(1, "first");
  const Value* blank = args.get(2, "blank");
  const std::string pad = width && width->is_string()
                              ? width->as_string()
                              : std::string(width ? (size_t)width->as_int() : 4, ' ');
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    const std::string line =
        s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool add =
        is_first ? (first && first->truthy()) : (!line.empty() || (blank && blank->truthy()));
    if (add) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}

}  // namespace

Result<Value> apply_filter(std::string_view name, const Value& subject, const CallArgs& args) {
  if (name == "trim") {
    const Value* chars = args.get(0, "chars");
    const std::string s = subject.str();
    const std::string_view set =
        chars && chars->is_string() ? std::string_view(chars->as_string()) : kWhitespace;
    const size_t b = s.find_first_not_of(set);
    if (b == std::string::npos) return Value::string("");
    return Value::string(s.substr(b, s.find_last_not_of(set) - b + 1));
  }
  if (name == "length" || name == "count") return length_of(subject);
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title")
    return Value::string(case_map(subject.str(), name));
  if (name == "default" || name == "d") {
    const Value* def = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    const bool use = subject.is_undefined() || (boolean && boolean->truthy() && !subject.truthy());
    return use ? (def ? *def : Value::string("")) : subject;
  }
  if (name == "tojson") {
    const Value* indent = args.get(0, "indent");
    auto json = subject.to_json(indent && indent->is_int() ? (int)indent->as_int() : -1);
    if (!json.ok()) return json.error();
    return Value::string(std::move(json.value()));
  }
  if (name == "string") return subject.is_string() ? subject : Value::string(subject.str());
  if (name == "safe") return subject;
  if (name == "list") {
    auto items = iterate(subject);
    if (!items.ok()) return items.error();
    return Value::list(std::move(items.value()));
  }
  if (name == "items") {
    if (subject.is_undefined()) return Value::list();
    if (!subject.is_dict())
      return Error{std::string("items() needs a dict, got ") + subject.type_name()};
    ValueList out;
    for (const auto& [k, v] : subject.entries().items)
      out.push_back(Value::tuple({Value::string(k), v}));
    return Value::list(std::move(out));
  }
  if (name == "join") {
    auto items = iterate(subject);
    if (!items.ok()) return items.error();
    const Value* sep = args.get(0, "d");
    const Value* attr = args.get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i && sep) out += sep->str();
      out += (attr ? attribute_path((*items)[i], attr->str()) : (*items)[i]).str();
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") return first_or_last(subject, name == "first");
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_filter(name, subject, args);
  if (name == "map") return map_filter(subject, args);
  if (name == "replace") {
    const Value* from = args.get(0, "old");
    const Value* to = args.get(1, "new");
    const Value* count = args.get(2, "count");
    if (!from || !to) return Error{"replace needs old and new strings"};
    const std::string s = subject.str(), a = from->str(), b = to->str();
    int64_t left = count && count->is_int() ? count->as_int() : -1;
    std::string out;
    size_t i = 0;
    while (left != 0) {
      const size_t j = a.empty() ? (i <= s.size() ? i : std::string::npos) : s.find(a, i);
      if (j == std::string::npos) break;
      out.append(s, i, j - i);
      out += b;
      if (a.empty()) {
        if (j < s.size()) out += s[j];
        i = j + 1;
      } else {
        i = j + a.size();
      }
      if (out.size() > kMaxBuiltBytes) return Error{"replace result too large"};
      --left;
    }
    if (i < s.size()) out.append(s, i, std::string::npos);
    return Value::string(std::move(out));
  }
  if (name == "int" || name == "float") return to_number(subject, args, name == "int");
  if (name == "abs") {
    if (!subject.is_number())
      return Error{std::string("bad operand type for abs(): ") + subject.type_name()};
    return subject.is_int() ? Value::integer(std::llabs(subject.as_int()))
                            : Value::real(std::fabs(subject.as_double()));
  }
  if (name == "round") {
    const Value* precision = args.get(0, "precision");
    const double scale =
        std::pow(10.0, precision && precision->is_int() ? (double)precision->as_int() : 0.0);
    return Value::real(std::round(subject.as_double() * scale) / scale);
  }
  if (name == "reverse") {
    if (subject.is_string()) {
      auto chars = iterate(subject);
      std::string out;
      for (auto it = chars->rbegin(); it != chars->rend(); ++it) out += it->as_string();
      return Value::string(std::move(out));
    }
    auto items = iterate(subject);
    if (!items.ok()) return items.error();
    return Value::list(ValueList(items->rbegin(), items->rend()));
  }
  if (name == "unique") {
    auto items = iterate(subject);
    if (!items.ok()) return items.error();
    ValueList out;
    for (const Value& v : items.value())
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return values_equal(o, v); }))
        out.push_back(v);
    return Value::list(std::move(out));
  }
  if (name == "sort") return sort_filter(subject, args);
  if (name == "indent") return Value::string(indent_text(subject.str(), args));
  if (name == "escape" || name == "e") {
    std::string out;
    for (char c : subject.str()) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value::string(std::move(out));
  }
  return Error{"unknown filter '" + std::string(name) + "'"};
}

Result<bool> apply_test(std::string_view name, const Value& v, const CallArgs& args) {
  const Value* arg = args.get(0, "");
  auto need_arg = [&]() -> Status {
    if (!arg) return Error{"test '" + std::string(name) + "' needs an argument"};
    return {};
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == ValueKind::kInt;
  if (name == "float") return v.kind() == ValueKind::kFloat;
  if (name == "boolean") return v.kind() == ValueKind::kBool;
  if (name == "true") return v.kind() == ValueKind::kBool && v.as_bool();
  if (name == "false") return v.kind() == ValueKind::kBool && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.kind() == ValueKind::kMacro;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return v.as_string() == case_map(v.as_string(), name);
  }
  if (name == "odd" || name == "even") {
    if (!v.is_int()) return Error{std::string("test '") + std::string(name) + "' needs an integer"};
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    KVW_RETURN_IF_ERROR(need_arg());
    if (!v.is_int() || !arg->is_int() || arg->as_int() == 0)
      return Error{"divisibleby needs non-zero integers"};
    return v.as_int() % arg->as_int() == 0;
  }
  if (name == "sameas") {
    KVW_RETURN_IF_ERROR(need_arg());
    return v.kind() == arg->kind() && values_equal(v, *arg);
  }
  static const std::pair<const char*, const char*> kCompare[] = {
      {"eq", "=="}, {"equalto", "=="},    {"==", "=="},      {"ne", "!="},
      {"!=", "!="}, {"lt", "<"},          {"lessthan", "<"}, {"<", "<"},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},        {"le", "<="},
      {"<=", "<="}, {"ge", ">="},         {">=", ">="},      {"in", "in"}};
  for (const auto& [test, op] : kCompare) {
    if (name != test) continue;
    KVW_RETURN_IF_ERROR(need_arg());
    auto r = binary_op(op, v, *arg);
    if (!r.ok()) return r.error();
    return r->truthy();
  }
  return Error{"unknown test '" + std::string(name) + "'"};
}

}  // namespace kvw::jinja
