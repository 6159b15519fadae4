#include "grammar/json_schema.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "grammar/gbnf_parser.h"
#include "grammar/gbnf_text.h"

namespace kvw::grammar {
namespace {

using Json = nlohmann::ordered_json;

struct SchemaError {
  std::string message;
};

const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "default",  "examples",  "$schema", "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
const std::set<std::string, std::less<>> kHandled = {
    "type",     "properties", "required",  "additionalProperties",
    "enum",     "const",      "items",     "minItems",
    "maxItems", "minLength",  "maxLength", "anyOf",
    "oneOf",    "$ref",       "nullable",  "strict"};

class Translator {
 public:
  Translator(const Json& root, const GbnfNaming& naming) : root_(root), naming_(naming) {}

  std::string run() {
    const std::string top = rule_for(root_, "#", "root_value", 0);
    std::string out = naming_.root + " ::= " + top + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    if (naming_.with_common_rules) out += json_common_gbnf();
    return out;
  }

 private:
  [[noreturn]] static void fail(const std::string& msg) { throw SchemaError{msg}; }

  std::string new_name(std::string_view hint) {
    std::string name;
    for (char c : hint) {
      if (isalnum((unsigned char)c))
        name += c;
      else if (!name.empty() && name.back() != '-')
        name += '-';
      if (name.size() > 24) break;
    }
    return naming_.rule_prefix + std::to_string(counter_++) + (name.empty() ? "" : "-" + name);
  }

  std::string add_rule(std::string_view hint, std::string body) {
    std::string name = new_name(hint);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  // A GBNF expression (a rule name or literal) matching `s`.
  std::string rule_for(const Json& s, const std::string& path, std::string_view hint, int depth) {
    if (depth > kMaxSchemaDepth)
      fail("schema nesting deeper than " + std::to_string(kMaxSchemaDepth) + " at " + path);
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("schema 'false' at " + path + " allows no value");
      return "value";
    }
    if (!s.is_object()) fail("schema at " + path + " must be an object or a boolean");
    for (const auto& [key, v] : s.items()) {
      if (!kAnnotations.count(key) && !kHandled.count(key)) {
        fail("unsupported JSON Schema keyword '" + key + "' at " + path);
      }
    }
    std::string expr = rule_body(s, path, hint, depth);
    if (s.contains("nullable") && s["nullable"] == true) expr = "(" + expr + " | null)";
    return expr;
  }

  // enum, const, anyOf, oneOf and $ref decide the value alone; other keywords beside them
  // would be silently dropped, so they are refused (a "type" beside enum/const is fine).
  static void check_exclusive(const Json& s, const std::string& path) {
    static const char* kStructural[] = {
        "type",      "properties", "required", "additionalProperties",
        "items",     "minItems",   "maxItems", "minLength",
        "maxLength", "enum",       "const",    "anyOf",
        "oneOf",     "$ref"};
    for (const char* ex : {"$ref", "const", "enum", "anyOf", "oneOf"}) {
      if (!s.contains(ex)) continue;
      const bool typed_ok = std::string_view(ex) == "enum" || std::string_view(ex) == "const";
      for (const char* other : kStructural) {
        if (std::string_view(other) == ex || !s.contains(other)) continue;
        if (typed_ok && std::string_view(other) == "type") continue;
        fail(std::string("unsupported JSON Schema: '") + other + "' beside '" + ex + "' at " +
             path);
      }
    }
  }

  std::string rule_body(const Json& s, const std::string& path, std::string_view hint, int depth) {
    check_exclusive(s, path);
    if (s.contains("$ref")) return ref_rule(s, path, depth);
    if (s.contains("const")) return gbnf_literal(s["const"].dump());
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail("'enum' at " + path + " must be a non-empty array");
      std::vector<std::string> values;
      for (const auto& v : e) values.push_back(v.dump());
      auto body = gbnf_alternatives(std::move(values), "'enum' at " + path);
      if (!body.ok()) fail(body.message());
      return add_rule(hint, body.value());
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& alts = s[key];
      if (!alts.is_array() || alts.empty())
        fail(std::string("'") + key + "' at " + path + " must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string p = path + "/" + key + "/" + std::to_string(i);
        body += (body.empty() ? "" : " | ") + rule_for(alts[i], p, hint, depth + 1);
      }
      return add_rule(hint, body);
    }
    if (!s.contains("type")) {
      // No type: objects and arrays by their keywords, else any value.
      if (s.contains("properties")) return object_rule(s, path, hint, depth);
      if (s.contains("items")) return array_rule(s, path, hint, depth);
      return "value";
    }
    const Json& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) fail("'type' at " + path + " is an empty list");
      std::string body;
      for (const auto& one : t)
        body += (body.empty() ? "" : " | ") + type_rule(s, one, path, hint, depth);
      return add_rule(hint, body);
    }
    return type_rule(s, t, path, hint, depth);
  }

  std::string type_rule(const Json& s, const Json& t, const std::string& path,
                        std::string_view hint, int depth) {
    if (!t.is_string()) fail("'type' at " + path + " must be a string or a list of strings");
    const std::string type = t.get<std::string>();
    if (type == "object") return object_rule(s, path, hint, depth);
    if (type == "array") return array_rule(s, path, hint, depth);
    if (type == "string") return string_rule(s, path, hint);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
    fail("unsupported JSON Schema type '" + type + "' at " + path);
  }

  static uint32_t bound(const Json& s, const char* key, const std::string& path, uint32_t dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(std::string("'") + key + "' at " + path + " must be a non-negative integer");
    if (v.get<int64_t>() > kMaxRepeat)
      fail(std::string("'") + key + "' at " + path + " is over " + std::to_string(kMaxRepeat));
    return (uint32_t)v.get<int64_t>();
  }

  static std::string repeat_suffix(uint32_t lo, uint32_t hi) {  // hi == UINT32_MAX: unbounded
    if (lo == 0 && hi == UINT32_MAX) return "*";
    if (hi == UINT32_MAX) return "{" + std::to_string(lo) + ",}";
    return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  std::string string_rule(const Json& s, const std::string& path, std::string_view hint) {
    const uint32_t lo = bound(s, "minLength", path, 0);
    const uint32_t hi = bound(s, "maxLength", path, UINT32_MAX);
    if (hi < lo) fail("'maxLength' < 'minLength' at " + path);
    if (lo == 0 && hi == UINT32_MAX) return "string";
    return add_rule(hint, "\"\\\"\" char" + repeat_suffix(lo, hi) + " \"\\\"\"");
  }

  std::string array_rule(const Json& s, const std::string& path, std::string_view hint, int depth) {
    std::string item = "value";
    if (s.contains("items")) {
      if (s["items"].is_array())
        fail("unsupported JSON Schema keyword 'items' as a list (tuple) at " + path);
      item = rule_for(s["items"], path + "/items", std::string(hint) + "-item", depth + 1);
    }
    const uint32_t lo = bound(s, "minItems", path, 0);
    const uint32_t hi = bound(s, "maxItems", path, UINT32_MAX);
    if (hi < lo) fail("'maxItems' < 'minItems' at " + path);
    if (hi == 0) return add_rule(hint, "\"[\" ws \"]\"");
    const std::string more = "(ws \",\" ws " + item + ")";
    const uint32_t more_hi = hi == UINT32_MAX ? UINT32_MAX : hi - 1;
    std::string body;
    if (lo == 0) {
      body = "\"[\" ws (" + item + " " + more + repeat_suffix(0, more_hi) + ")? ws \"]\"";
    } else {
      body = "\"[\" ws " + item + " " + more + repeat_suffix(lo - 1, more_hi) + " ws \"]\"";
    }
    return add_rule(hint, body);
  }

  std::string object_rule(const Json& s, const std::string& path, std::string_view hint,
                          int depth) {
    if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean()) {
      fail("unsupported JSON Schema keyword 'additionalProperties' (a schema) at " + path);
    }
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
    if (!s.contains("properties")) return closed ? add_rule(hint, "\"{\" ws \"}\"") : "object";
    const Json& props = s["properties"];
    if (!props.is_object()) fail("'properties' at " + path + " must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("'required' at " + path + " must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>())) {
          fail("'required' at " + path + " names " + r.dump() + ", which is not in 'properties'");
        }
        required.insert(r.get<std::string>());
      }
    }
    // kv[i]: one member; first[i]/rest[i]: members i.. before/after the first one emitted.
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const auto& [name, sub] : props.items()) {
      const std::string value = rule_for(sub, path + "/properties/" + name, name, depth + 1);
      kv.push_back(add_rule(name, gbnf_literal(Json(name).dump()) + " ws \":\" ws " + value));
      req.push_back(required.count(name) > 0);
    }
    const size_t n = kv.size();
    std::vector<std::string> first(n + 1), rest(n + 1);  // "" = empty
    for (size_t i = n; i-- > 0;) {
      const std::string tail = rest[i + 1].empty() ? "" : " " + rest[i + 1];
      const std::string member = "ws \",\" ws " + kv[i];
      rest[i] = add_rule(std::string(hint) + "-rest",
                         req[i] ? member + tail : "(" + member + ")?" + tail);
      const std::string here = kv[i] + tail;
      if (req[i])
        first[i] = add_rule(std::string(hint) + "-first", here);
      else
        first[i] = add_rule(std::string(hint) + "-first",
                            here + (first[i + 1].empty() ? " | \"\"" : " | " + first[i + 1]));
    }
    return add_rule(hint, "\"{\" ws " + (first[0].empty() ? "" : first[0] + " ") + "ws \"}\"");
  }

  std::string ref_rule(const Json& s, const std::string& path, int depth) {
    if (!s["$ref"].is_string()) fail("'$ref' at " + path + " must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    std::string key;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (ref.rfind(prefix, 0) == 0)
        key = std::string(prefix).substr(2, std::string(prefix).size() - 3);
    }
    const std::string name = key.empty() ? "" : ref.substr(key.size() + 3);
    if (key.empty() || name.find('/') != std::string::npos || !root_.contains(key) ||
        !root_[key].contains(name)) {
      fail("unsupported or unresolved '$ref' \"" + ref + "\" at " + path +
           " (only #/$defs/NAME and #/definitions/NAME)");
    }
    // Name the rule before translating it, so a recursive reference finds it.
    const std::string rule = new_name(name);
    refs_[ref] = rule;
    const size_t slot = rules_.size();
    rules_.emplace_back(rule, "");
    rules_[slot].second =
        rule_for(root_[key][name], ref, name, depth + 1);  // a chain of refs nests
    return rule;
  }

  const Json& root_;
  const GbnfNaming naming_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                        const GbnfNaming& naming) {
  try {
    return Translator(schema, naming).run();
  } catch (const SchemaError& e) {
    return Error{e.message};
  }
}

Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema,
                                                           size_t max_bytes) {
  auto text = json_schema_to_gbnf(schema);
  if (!text.ok()) return text.error();
  return parse_gbnf(text.value(), max_bytes);
}

Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_text,
                                                           size_t max_bytes) {
  auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return Error{"JSON schema is not valid JSON"};
  return compile_json_schema(schema, max_bytes);
}

Result<std::shared_ptr<const Grammar>> compile_json_object(size_t max_bytes) {
  return parse_gbnf("root ::= object\n" + std::string(json_common_gbnf()), max_bytes);
}

}  // namespace kvw::grammar
