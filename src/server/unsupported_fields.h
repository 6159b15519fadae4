// server/unsupported_fields.h: request fields that would change the answer but that kvwarden
// does not implement yet are refused with 400 naming them, never accepted and ignored (a
// client cannot see that its tools or echo were dropped). Fields that do not
// change the output (user, metadata, store, ...) are accepted and ignored; the README lists both.
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_error.h"

namespace kvw::server {

enum class Endpoint { kCompletions, kChat };

// The first unsupported field the body sets to a value that changes the output, as a 400.
std::optional<ApiError> refuse_unsupported_fields(const nlohmann::json& body, Endpoint endpoint);

}  // namespace kvw::server
