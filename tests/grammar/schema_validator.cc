#include "schema_validator.h"

#include <cmath>

namespace kvw::grammar {
namespace {

using Json = nlohmann::ordered_json;

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += ((uint8_t)c & 0xC0) != 0x80;
  return n;
}

bool has_type(const Json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     v.get<double>() == std::floor(v.get<double>()));
  }
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

}  // namespace

std::string validate_json(const Json& v, const Json& s, const Json& root, const std::string& path) {
  if (s.is_boolean()) return s.get<bool>() ? "" : path + ": schema false";
  if (s.contains("nullable") && s["nullable"] == true && v.is_null()) return "";
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    const std::string key = ref.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return validate_json(v, root[key][ref.substr(key.size() + 3)], root, path);
  }
  if (s.contains("const") && v != s["const"]) return path + ": not the const";
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found |= e == v;
    if (!found) return path + ": not in enum";
  }
  if (s.contains("anyOf") || s.contains("oneOf")) {
    const bool one = s.contains("oneOf");
    int ok = 0;
    for (const auto& alt : s[one ? "oneOf" : "anyOf"])
      ok += validate_json(v, alt, root, path).empty();
    if (ok == 0) return path + ": no alternative matches";
    if (one && ok > 1) return path + ": more than one oneOf alternative matches";
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array()) {
      for (const auto& t : s["type"]) ok |= has_type(v, t);
    } else {
      ok = has_type(v, s["type"]);
    }
    if (!ok) return path + ": wrong type, want " + s["type"].dump() + " got " + v.dump();
  }
  if (v.is_object() && s.contains("properties")) {
    const Json& props = s["properties"];
    for (const auto& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return path + ": missing required " + r.dump();
    }
    // Our generator emits declared properties only, in the schema's order.
    auto it = props.begin();
    for (const auto& [k, sub] : v.items()) {
      while (it != props.end() && it.key() != k) ++it;
      if (it == props.end()) return path + ": property '" + k + "' undeclared or out of order";
      std::string e = validate_json(sub, it.value(), root, path + "." + k);
      if (!e.empty()) return e;
    }
  }
  if (v.is_object() && s.value("additionalProperties", Json(true)) == false &&
      !s.contains("properties") && !v.empty())
    return path + ": additional properties";
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
      return path + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
      return path + ": too many items";
    if (s.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        std::string e = validate_json(v[i], s["items"], root, path + "[" + std::to_string(i) + "]");
        if (!e.empty()) return e;
      }
    }
  }
  if (v.is_string()) {
    const size_t n = utf8_length(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return path + ": too short";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return path + ": too long";
  }
  return "";
}

}  // namespace kvw::grammar
