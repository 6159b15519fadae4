#include "server/structured_output.h"

#include <string>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace kvw::server {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;
using GrammarPtr = std::shared_ptr<const grammar::Grammar>;
using Outcome = std::variant<GrammarPtr, ApiError>;

// The fields that ask for a constraint, in the order they are reported when two are given.
constexpr const char* kFields[] = {"response_format", "structured_outputs", "guided_json",
                                   "guided_regex",    "guided_choice",      "guided_grammar",
                                   "grammar",         "json_schema"};

bool asks(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (std::string(key) == "response_format") {
    const json& t = it->is_object() ? it->value("type", json()) : json();
    return !(t.is_string() && t.get<std::string>() == "text");
  }
  return true;
}

Outcome from(Result<GrammarPtr> r, const std::string& param) {
  if (!r.ok()) return invalid_param(param, "'" + param + "': " + r.message());
  return *r;
}

// `path` leads from the body to a schema; it is read from the ordered parse of `raw`.
Outcome schema_at(std::string_view raw, const std::vector<std::string>& path,
                  const std::string& param, size_t max_bytes) {
  ordered doc = ordered::parse(raw, nullptr, /*allow_exceptions=*/false);
  const ordered* at = &doc;
  for (const std::string& key : path) {
    if (!at->is_object() || !at->contains(key)) {
      return invalid_param(param, "'" + param + "' needs a schema object");
    }
    at = &(*at)[key];
  }
  if (at->is_string())
    return from(grammar::compile_json_schema(std::string_view(at->get_ref<const std::string&>()),
                                             max_bytes),
                param);
  if (!at->is_object() && !at->is_boolean()) {
    return invalid_param(param, "'" + param + "': the schema must be a JSON object");
  }
  return from(grammar::compile_json_schema(*at, max_bytes), param);
}

Outcome choice_of(const json& v, const std::string& param, size_t max_bytes) {
  if (!v.is_array() || v.empty()) {
    return invalid_param(param, "'" + param + "' must be a non-empty list of strings");
  }
  std::vector<std::string> choices;
  for (const json& c : v) {
    if (!c.is_string()) return invalid_param(param, "'" + param + "' must be a list of strings");
    choices.push_back(c.get<std::string>());
  }
  return from(grammar::compile_choice(choices, max_bytes), param);
}

Outcome text_of(const json& v, const std::string& param,
                Result<GrammarPtr> (*compile)(std::string_view, size_t), size_t max_bytes) {
  if (!v.is_string()) return invalid_param(param, "'" + param + "' must be a string");
  return from(compile(v.get<std::string>(), max_bytes), param);
}

Result<GrammarPtr> gbnf(std::string_view text, size_t max_bytes) {
  auto g = grammar::parse_gbnf(text, max_bytes);
  if (!g.ok()) return g;
  // A regular grammar also gets a DFA (masks by table lookups); others keep the Matcher walk.
  return grammar::with_dfa(std::move(g.value()), max_bytes);
}
Result<GrammarPtr> regex(std::string_view text, size_t max_bytes) {
  return grammar::compile_regex(text, max_bytes);
}

Outcome response_format(const json& rf, std::string_view raw, size_t max_bytes) {
  const std::string type = rf.is_object() ? rf.value("type", std::string()) : std::string();
  if (type == "json_object")
    return from(grammar::compile_json_object(max_bytes), "response_format");
  if (type == "json_schema") {
    return schema_at(raw, {"response_format", "json_schema", "schema"}, "response_format",
                     max_bytes);
  }
  return invalid_param("response_format",
                       "'response_format' type must be text, json_object or json_schema");
}

// vLLM's structured_outputs: exactly one of json, regex, choice, grammar, json_object.
Outcome structured_outputs(const json& so, std::string_view raw, size_t max_bytes) {
  const std::string p = "structured_outputs";
  if (!so.is_object()) return invalid_param(p, "'" + p + "' must be an object");
  std::vector<std::string> keys;
  for (const char* k : {"json", "regex", "choice", "grammar", "json_object"}) {
    if (so.contains(k) && !so[k].is_null()) keys.push_back(k);
  }
  if (keys.size() != 1) {
    return invalid_param(p, "'" + p +
                                "' takes exactly one of json, regex, choice, grammar, "
                                "json_object");
  }
  const std::string& k = keys[0];
  if (k == "json") return schema_at(raw, {p, "json"}, p, max_bytes);
  if (k == "regex") return text_of(so[k], p, regex, max_bytes);
  if (k == "choice") return choice_of(so[k], p, max_bytes);
  if (k == "grammar") return text_of(so[k], p, gbnf, max_bytes);
  return from(grammar::compile_json_object(max_bytes), p);
}

}  // namespace

Outcome requested_grammar(const json& body, std::string_view raw, size_t max_bytes) {
  const char* given = nullptr;
  for (const char* key : kFields) {
    if (!asks(body, key)) continue;
    if (given != nullptr) {
      return invalid_param(key, std::string("'") + given + "' and '" + key +
                                    "' both constrain the output; give one");
    }
    given = key;
  }
  if (given == nullptr) return GrammarPtr();
  const std::string key = given;
  const json& v = body[key];
  if (key == "response_format") return response_format(v, raw, max_bytes);
  if (key == "structured_outputs") return structured_outputs(v, raw, max_bytes);
  if (key == "guided_json" || key == "json_schema") return schema_at(raw, {key}, key, max_bytes);
  if (key == "guided_regex") return text_of(v, key, regex, max_bytes);
  if (key == "guided_choice") return choice_of(v, key, max_bytes);
  return text_of(v, key, gbnf, max_bytes);  // guided_grammar, grammar
}

}  // namespace kvw::server
