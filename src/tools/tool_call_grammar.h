// tools/tool_call_grammar.h: the GBNF grammar that makes a model write tool calls in its
// family's wrapper with arguments that follow each function's JSON Schema (tool_choice
// "required" or a named function). Each function's schema becomes its own rules (prefix
// f<k>-), the shared JSON rules are appended once.
// Pure functions; thread-safe.
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "tools/tool_call.h"

namespace kvw::tools {

// `functions`: the callable ones (one for a named choice). `parallel`: one or more calls, else
// exactly one. Errors: a schema the grammar cannot express, naming the function and keyword.
Result<std::string> tool_call_gbnf(ToolCallFormat format, std::span<const FunctionSpec> functions,
                                   bool parallel);

}  // namespace kvw::tools
