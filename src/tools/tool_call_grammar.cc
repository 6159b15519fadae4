#include "tools/tool_call_grammar.h"

#include "grammar/gbnf_text.h"
#include "grammar/json_schema.h"

namespace kvw::tools {
namespace {

using grammar::gbnf_literal;

// A function without parameters takes any object (OpenAI: parameters may be omitted).
nlohmann::ordered_json schema_of(const FunctionSpec& f) {
  if (f.parameters.is_null()) return nlohmann::ordered_json{{"type", "object"}};
  return f.parameters;
}

// One call of function `f` (its arguments are rule `args`) in the family's wrapper.
std::string call_expr(ToolCallFormat format, const FunctionSpec& f, const std::string& args) {
  const std::string name_json = nlohmann::json(f.name).dump();
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      return gbnf_literal("{\"name\": " + name_json + ", \"parameters\": ") + " " + args + " " +
             gbnf_literal("}");
    case ToolCallFormat::kDeepSeekV3:
      return gbnf_literal("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + f.name + "\n```json\n") +
             " " + args + " " + gbnf_literal("\n```<｜tool▁call▁end｜>");
    case ToolCallFormat::kHarmony:
      return gbnf_literal("<|channel|>commentary to=functions." + f.name +
                          " <|constrain|>json<|message|>") +
             " " + args;
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kMistral:
      break;
  }
  return gbnf_literal("{\"name\": " + name_json + ", \"arguments\": ") + " " + args + " " +
         gbnf_literal("}");
}

// root in terms of `call` (one call of any function).
std::string root_rule(ToolCallFormat format, bool parallel, bool lazy) {
  switch (format) {
    case ToolCallFormat::kLlama3Json: {
      const std::string tag = lazy ? gbnf_literal("<|python_tag|>") + "? " : "";
      return "root ::= " + tag + (parallel ? "call (\"; \" call)*\n" : "call\n");
    }
    case ToolCallFormat::kMistral:
      return std::string("root ::= ") + gbnf_literal("[TOOL_CALLS][") +
             (parallel ? " call (\", \" call)* " : " call ") + gbnf_literal("]") + "\n";
    case ToolCallFormat::kDeepSeekV3:
      return std::string("root ::= ") + gbnf_literal("<｜tool▁calls▁begin｜>") +
             (parallel ? " call+ " : " call ") + gbnf_literal("<｜tool▁calls▁end｜>") + "\n";
    case ToolCallFormat::kHarmony:
      // One message per call; the model's <|call|> (an end-of-generation token) ends it.
      return "root ::= call\n";
    case ToolCallFormat::kHermes:
      break;
  }
  const std::string one = gbnf_literal("<tool_call>\n") + " call " + gbnf_literal("\n</tool_call>");
  return parallel ? "root ::= " + one + " (\"\\n\" " + one + ")*\n" : "root ::= " + one + "\n";
}

}  // namespace

Result<std::string> tool_call_gbnf(ToolCallFormat format, std::span<const FunctionSpec> functions,
                                   bool parallel, bool lazy) {
  if (functions.empty()) return Error{"no function to call"};
  std::string rules, calls;
  for (size_t k = 0; k < functions.size(); ++k) {
    const std::string args = "f" + std::to_string(k) + "-args";
    auto text = grammar::json_schema_to_gbnf(
        schema_of(functions[k]), grammar::GbnfNaming{.root = args,
                                                     .rule_prefix = "f" + std::to_string(k) + "-",
                                                     .with_common_rules = false});
    if (!text.ok()) return Error{"function '" + functions[k].name + "': " + text.message()};
    rules += *text;
    calls += (calls.empty() ? "call ::= " : " | ") + call_expr(format, functions[k], args);
  }
  return root_rule(format, parallel, lazy) + calls + "\n" + rules +
         std::string(grammar::json_common_gbnf());
}

std::vector<grammar::GrammarTrigger> tool_call_triggers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      return {{.text = "<|python_tag|>", .at_start = false},
              {.text = "{\"name\"", .at_start = true}};
    case ToolCallFormat::kMistral:
      return {{.text = "[TOOL_CALLS]", .at_start = false}};
    case ToolCallFormat::kDeepSeekV3:
      return {{.text = "<｜tool▁calls▁begin｜>", .at_start = false}};
    case ToolCallFormat::kHarmony:
      return {};
    case ToolCallFormat::kHermes:
      break;
  }
  return {{.text = "<tool_call>", .at_start = false}};
}

std::vector<grammar::GrammarTrigger> with_control_tokens(
    std::vector<grammar::GrammarTrigger> triggers, std::string_view gbnf,
    std::span<const ControlToken> control_tokens) {
  for (const ControlToken& c : control_tokens) {
    if (c.text.empty()) continue;
    bool is_trigger = false;
    for (grammar::GrammarTrigger& t : triggers) {
      if (t.text == c.text && t.fires) t.token_id = c.id, is_trigger = true;
    }
    if (!is_trigger && gbnf.find(c.text) != std::string_view::npos) {
      triggers.push_back({.text = c.text, .at_start = false, .token_id = c.id, .fires = false});
    }
  }
  return triggers;
}

}  // namespace kvw::tools
