// server/structured_output.h: the grammar a request asks its output to follow (issue 31), from
// OpenAI's response_format (json_object, json_schema), vLLM's structured_outputs and guided_*
// fields, and llama-server's grammar / json_schema. At most one may be given.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <variant>

#include "server/api_error.h"

namespace kvw::grammar {
struct Grammar;
}

namespace kvw::server {

// Null when the request asks for no constraint. `raw` is the body's text: a JSON schema is read
// from it again in document order (nlohmann::json sorts object keys, and the output must list
// properties in the schema's order). Errors are 400s naming the field; `max_bytes` bounds the
// compiled grammar.
std::variant<std::shared_ptr<const grammar::Grammar>, ApiError> requested_grammar(
    const nlohmann::json& body, std::string_view raw, size_t max_bytes);

}  // namespace kvw::server
