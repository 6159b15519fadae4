// chat/json_value.h: JSON (request data such as tools and tool_calls) -> template values, keys in
// document order. Pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "chat/jinja_value.h"

namespace kvw {

// Nesting is bounded by the request parser (kMaxJsonDepth), far below the stack's reach.
jinja::Value value_from_json(const nlohmann::ordered_json& j);

}  // namespace kvw
