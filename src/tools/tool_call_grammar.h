// tools/tool_call_grammar.h: the GBNF grammar that makes a model write tool calls in its
// family's wrapper with arguments that follow each function's JSON Schema (tool_choice
// "required" or a named function). Each function's schema becomes its own rules (prefix
// f<k>-), the shared JSON rules are appended once.
// Pure functions; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
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

// A control token of the vocabulary (rendered only on request, so absent from the token trie).
struct ControlToken {
  int32_t id = -1;
  std::string text;
};
// `triggers` with the ids of the control tokens whose text they are, plus (fires = false) each
// other control token whose text `gbnf` (a tool_call_gbnf grammar) writes in a literal, so the
// model may write a marker as its one control token wherever the grammar expects the marker's
// text. The stream decodes control tokens as text when tools are on, so the parsers see them.
std::vector<grammar::GrammarTrigger> with_control_tokens(
    std::vector<grammar::GrammarTrigger> triggers, std::string_view gbnf,
    std::span<const ControlToken> control_tokens);

}  // namespace kvw::tools
