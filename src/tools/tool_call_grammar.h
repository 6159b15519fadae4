// tools/tool_call_grammar.h: the GBNF grammar that makes a model write tool calls in its
// family's wrapper with arguments that follow each function's JSON Schema (tool_choice
// "required" or a named function). Each function's schema becomes its own rules (prefix
// f<k>-), the shared JSON rules are appended once.
// Pure functions; thread-safe.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/grammar_trigger.h"
#include "tools/tool_call.h"

namespace kvw::tools {

// `functions`: the callable ones (one for a named choice). `parallel`: one or more calls, else
// exactly one. Errors: a schema the grammar cannot express, naming the function and keyword.
// lazy: for tool_choice "auto", where the grammar starts at a trigger (tool_call_triggers):
// Llama 3's calls may then open with <|python_tag|>.
Result<std::string> tool_call_gbnf(ToolCallFormat format, std::span<const FunctionSpec> functions,
                                   bool parallel, bool lazy = false);

// The texts with which a model of this format starts its calls, where the grammar of
// tool_call_gbnf(lazy = true) begins (the grammar's first bytes): <tool_call> (hermes),
// [TOOL_CALLS] (mistral), the calls-begin token (DeepSeek), and for Llama 3 <|python_tag|> or
// {"name" opening the answer. Empty for harmony (its calls follow an analysis message written
// in control tokens): no lazy grammar.
std::vector<grammar::GrammarTrigger> tool_call_triggers(ToolCallFormat format);

}  // namespace kvw::tools
