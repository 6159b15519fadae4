// chat/jinja_value.cc: Value construction, truthiness, Python str()/repr() and JSON output.
#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvw::jinja {

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void ValueDict::set(std::string_view key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::string(key), std::move(v));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.i_ = i;
  return v;
}

Value Value::real(double f) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.s_ = std::move(s);
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = ValueKind::kList;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::dict(ValueDict d) {
  Value v;
  v.kind_ = ValueKind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(d));
  return v;
}

Value Value::macro(const Node* def) {
  Value v;
  v.kind_ = ValueKind::kMacro;
  v.macro_ = def;
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return b_;
    case ValueKind::kInt:
      return i_ != 0;
    case ValueKind::kFloat:
      return f_ != 0;
    case ValueKind::kString:
      return !s_.empty();
    case ValueKind::kList:
      return !list_->empty();
    case ValueKind::kDict:
      return !dict_->items.empty();
    case ValueKind::kMacro:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "undefined";
    case ValueKind::kNone:
      return "none";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "string";
    case ValueKind::kList:
      return "list";
    case ValueKind::kDict:
      return dict_->is_namespace ? "namespace" : "dict";
    case ValueKind::kMacro:
      return "macro";
  }
  return "?";
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Fewest significant digits that read back as f, then Python's layout: positional for
  // exponents -4..15 ("100.0", "0.0001"), scientific otherwise ("1e+16", "2.5e-07").
  char buf[64];
  int digits = 1;
  for (; digits < 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, f);
  const int exp10 = std::atoi(std::strchr(buf, 'e') + 1);
  if (exp10 < -4 || exp10 >= 16) return buf;
  std::snprintf(buf, sizeof(buf), "%.*f", std::max(digits - 1 - exp10, 0), f);
  std::string s = buf;
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

static std::string repr_string(const std::string& s) {
  // Python prefers single quotes unless the text holds one and no double quote.
  const char q =
      (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  out += q;
  return out;
}

std::string Value::str(int depth) const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return b_ ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(i_);
    case ValueKind::kFloat:
      return format_float(f_);
    case ValueKind::kString:
      return s_;
    case ValueKind::kList: {
      if (depth > kMaxValueDepth) return "[...]";
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr(depth + 1);
      }
      if (tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case ValueKind::kDict: {
      if (depth > kMaxValueDepth) return "{...}";
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += repr_string(dict_->items[i].first) + ": " + dict_->items[i].second.repr(depth + 1);
      }
      return out + (dict_->is_namespace ? "}>" : "}");
    }
    case ValueKind::kMacro:
      return "<macro>";
  }
  return "";
}

std::string Value::repr(int depth) const {
  return kind_ == ValueKind::kString ? repr_string(s_) : str(depth);
}

static void write_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += (char)c;
        }
    }
  }
  out += '"';
}

bool Value::write_json(std::string& out, int indent, int depth) const {
  if (depth > kMaxValueDepth) return false;
  // Python's json.dumps separators: ", " and ": " on one line; "," plus a newline when indenting.
  auto newline = [&](int d) {
    out += '\n';
    out.append((size_t)(indent * d), ' ');
  };
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kMacro:
      out += "null";
      return true;
    case ValueKind::kBool:
      out += b_ ? "true" : "false";
      return true;
    case ValueKind::kInt:
      out += std::to_string(i_);
      return true;
    case ValueKind::kFloat:
      out += std::isfinite(f_) ? format_float(f_)
                               : (std::isnan(f_) ? "NaN" : (f_ > 0 ? "Infinity" : "-Infinity"));
      return true;
    case ValueKind::kString:
      write_json_string(out, s_);
      return true;
    case ValueKind::kList: {
      if (list_->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        if (!(*list_)[i].write_json(out, indent, depth + 1)) return false;
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return true;
    }
    case ValueKind::kDict: {
      if (dict_->items.empty()) {
        out += "{}";
        return true;
      }
      out += '{';
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        write_json_string(out, dict_->items[i].first);
        out += ": ";
        if (!dict_->items[i].second.write_json(out, indent, depth + 1)) return false;
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return true;
    }
  }
  return true;
}

Result<std::string> Value::to_json(int indent) const {
  std::string out;
  if (!write_json(out, indent, 0))
    return Error{"tojson: value nests deeper than " + std::to_string(kMaxValueDepth) +
                 " levels (circular?)"};
  return out;
}

bool values_equal(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  if (a.same_object(b)) return true;
  // A namespace has no __eq__ in Python: only the same object is equal.
  if (a.is_dict() && (a.entries().is_namespace || b.entries().is_namespace)) return false;
  if (depth > kMaxValueDepth) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kList: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!values_equal(a.items()[i], b.items()[i], depth + 1)) return false;
      return true;
    }
    case ValueKind::kDict: {
      if (a.entries().items.size() != b.entries().items.size()) return false;
      for (const auto& [k, v] : a.entries().items) {
        const Value* other = b.entries().find(k);
        if (!other || !values_equal(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case ValueKind::kMacro:
      return a.macro_def() == b.macro_def();
    default:
      return false;  // numbers were handled above
  }
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i)
    if (((unsigned char)s[i] & 0xC0) != 0x80) offsets.push_back(i);
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace kvw::jinja
