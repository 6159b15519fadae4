// chat/jinja_eval.h: renders a parsed template against global variables.
// Thread safety: reads the (immutable) tree only; every call keeps its own values.
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"
#include "core/status.h"

namespace kvw::jinja {

// Errors: raise_exception(msg) returns exactly msg; runtime errors read
// "chat template LINE:COL: what went wrong".
Result<std::string> render_template(const NodeList& program, const ValueDict& globals);

}  // namespace kvw::jinja
