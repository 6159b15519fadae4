// chat/jinja_eval.h: renders a parsed template against global variables.
// Thread safety: reads the (immutable) tree only; every call keeps its own values.
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"
#include "core/status.h"

namespace kvw::jinja {

// The global holding strftime_now's time (an integer, seconds since the epoch); its name is no
// Jinja identifier, so no template can read or shadow it.
inline constexpr const char* kNowGlobal = "\x01now_unix";

// Errors: raise_exception(msg) returns exactly msg; runtime errors read
// "chat template LINE:COL: what went wrong".
Result<std::string> render_template(const NodeList& program, const ValueDict& globals);

}  // namespace kvw::jinja
