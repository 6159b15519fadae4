// grammar/json_schema.h: JSON Schema (OpenAI response_format json_schema, vLLM guided_json) and
// json_object -> GBNF -> Grammar.
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties (emitted in the schema's order; properties not in `required` may be skipped),
// required, additionalProperties true/false (extra properties are never generated, so `false`
// and strict mode hold by construction), enum, const, items, minItems/maxItems,
// minLength/maxLength, anyOf/oneOf (as alternation; oneOf's exclusivity is not enforced), $ref
// to #/$defs/NAME or #/definitions/NAME (recursion allowed), nullable, and the annotations
// title/description/default/examples/$schema/$id/$comment. Every other keyword is refused with
// an error naming it and where it is ("pattern" at #/properties/zip).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kvw::grammar {

inline constexpr int kMaxSchemaDepth = 64;  // nesting of sub-schemas (bounds the translator)

// The schema must be an ordered_json so properties keep the client's order (parse the request
// body with nlohmann::ordered_json, or pass the schema's text).
// How the emitted rules are named, so several schemas can share one grammar (tool calling
// puts each function's arguments in one GBNF): the schema's rule, the prefix of its helper
// rules, and whether the shared JSON rules (json_common_gbnf) are appended.
struct GbnfNaming {
  std::string root = "root";
  std::string rule_prefix = "s";
  bool with_common_rules = true;
};
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                        const GbnfNaming& naming = {});

// Compiled grammars; max_bytes bounds the compiled form (see parse_gbnf).
Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema,
                                                           size_t max_bytes = SIZE_MAX);
Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_text,
                                                           size_t max_bytes = SIZE_MAX);
// Any JSON object (response_format {"type": "json_object"}).
Result<std::shared_ptr<const Grammar>> compile_json_object(size_t max_bytes = SIZE_MAX);

}  // namespace kvw::grammar
