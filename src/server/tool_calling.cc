#include "server/tool_calling.h"

#include <algorithm>
#include <random>

#include "grammar/gbnf_parser.h"
#include "server/server_state.h"
#include "tools/tool_call_grammar.h"
#include "tools/tool_parser.h"
#include "tools/tool_prompt.h"

namespace kvw::server {

using nlohmann::json;

namespace {

// Why 24: OpenAI's call ids are "call_" + 24 characters.
std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

// Why 32 bytes: arguments stream in a few fragments, as a model's tokens would arrive, and a
// fragment never splits a UTF-8 character (each chunk must be valid JSON text).
constexpr size_t kFragmentBytes = 32;

// The vocabulary's control tokens that do not end generation (~0.1 ms at 152k tokens: once per
// request with tools).
std::vector<tools::ControlToken> control_tokens(const Tokenizer& tok) {
  std::vector<tools::ControlToken> out;
  const Vocab& v = tok.vocab();
  for (int32_t id = 0; id < (int32_t)v.types.size(); ++id) {
    if (v.types[id] == TokenType::kControl && !tok.is_end_of_generation(id)) {
      out.push_back({.id = id, .text = v.tokens[id]});
    }
  }
  return out;
}

// tool_choice "auto": the calls' grammar, switched on when the model starts a call (its
// format's trigger), so a call the model chooses to write follows its schema. Not with another
// structured output (it constrains the whole answer) or ignore_eos (the grammar ends at EOS).
std::optional<ApiError> lazy_call_grammar(const ServerState& st, const ToolRequest& tr,
                                          std::shared_ptr<const grammar::Grammar>& grammar,
                                          GenParams& p, size_t max_bytes) {
  std::vector<grammar::GrammarTrigger> triggers = tools::tool_call_triggers(st.tool_format);
  if (grammar || p.ignore_eos || triggers.empty()) return std::nullopt;
  // A schema the grammar cannot express (or too large) leaves "auto" as it was without one:
  // the schema only describes the calls here, and the call is still parsed.
  auto text = tools::tool_call_gbnf(st.tool_format, tr.functions, tr.parallel, /*lazy=*/true);
  if (!text.ok()) return std::nullopt;
  auto g = grammar::parse_gbnf(*text, max_bytes);
  if (!g.ok()) return std::nullopt;
  grammar = std::move(*g);
  p.constraint.triggers =
      tools::with_control_tokens(std::move(triggers), *text, control_tokens(st.tokenizer()));
  return std::nullopt;
}

}  // namespace

namespace {

bool in_vocab(const Tokenizer& tok, std::string_view text) {
  const auto& vocab = tok.vocab().tokens;
  return std::find(vocab.begin(), vocab.end(), text) != vocab.end();
}

}  // namespace

Result<tools::ToolCallFormat> choose_tool_format(const std::string& flag,
                                                 const ChatPrompter& prompter,
                                                 const Tokenizer& tok) {
  if (!flag.empty()) {
    auto f = tools::format_from_name(flag);
    if (!f) {
      return Error{"--tool-call-parser '" + flag + "' is not one of " + tools::format_names()};
    }
    return *f;
  }
  // A template without tool support gets the generic prompt, which asks for Hermes calls.
  if (!prompter.supports_tools()) return tools::ToolCallFormat::kHermes;
  return tools::detect_format(prompter.template_source(),
                              [&](std::string_view t) { return in_vocab(tok, t); });
}

bool writes_harmony(tools::ToolCallFormat tool_format, const ChatPrompter& prompter,
                    const Tokenizer& tok) {
  if (tool_format == tools::ToolCallFormat::kHarmony) return true;
  return tools::detect_format(prompter.template_source(), [&](std::string_view t) {
           return in_vocab(tok, t);
         }) == tools::ToolCallFormat::kHarmony;
}

std::optional<ApiError> apply_tools(const ServerState& st, const ToolRequest& tr,
                                    std::shared_ptr<const grammar::Grammar>& grammar, GenParams& p,
                                    size_t max_bytes) {
  if (!tr.active()) return std::nullopt;
  p.tool_format = st.tool_format;
  p.parallel_tool_calls = tr.parallel;
  if (!tr.forced()) return lazy_call_grammar(st, tr, grammar, p, max_bytes);
  if (grammar) {
    return invalid_param("tool_choice",
                         "'tool_choice' \"required\" or a named function constrains the output "
                         "to tool calls; it cannot be combined with response_format or another "
                         "structured output");
  }
  const std::vector<tools::FunctionSpec> fns = tr.callable();
  auto text = tools::tool_call_gbnf(st.tool_format, fns, tr.parallel);
  if (!text.ok()) return invalid_param("tools", "'tools': " + text.message());
  auto g = grammar::parse_gbnf(*text, max_bytes);
  if (!g.ok()) return invalid_param("tools", "'tools': " + g.message());
  grammar = std::move(*g);
  // Not lazy (nothing fires): the markers' control tokens only.
  p.constraint.triggers = tools::with_control_tokens({}, *text, control_tokens(st.tokenizer()));
  return std::nullopt;
}

Result<ChatPrompt> build_tool_prompt(const ServerState& st, std::span<const ChatMessage> messages,
                                     const ToolRequest& tr, bool with_turn_starts) {
  const nlohmann::ordered_json* offered = tr.active() ? &tr.tools : nullptr;
  if (st.prompter->supports_tools()) {
    auto p = st.prompter->build(messages, with_turn_starts, offered);
    if (p.ok()) return p;
    // Some templates concatenate the arguments as text ('...' + arguments): retry with the
    // client's JSON strings (llama.cpp probes templates for the same reason).
    std::vector<ChatMessage> as_text(messages.begin(), messages.end());
    bool changed = false;
    for (ChatMessage& m : as_text) {
      if (!m.tool_calls.is_array()) continue;
      for (auto& c : m.tool_calls) {
        auto& args = c["function"]["arguments"];
        if (args.is_string()) continue;
        args = args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        changed = true;
      }
    }
    return changed ? st.prompter->build(as_text, with_turn_starts, offered) : p;
  }
  bool history = false;  // tool turns the template cannot render as they are
  for (const ChatMessage& m : messages)
    history = history || m.role == "tool" || !m.tool_calls.is_null();
  if (offered == nullptr && !history) return st.prompter->build(messages, with_turn_starts);
  const std::vector<ChatMessage> rewritten =
      tools::generic_tool_messages(messages, offered ? *offered : nlohmann::ordered_json());
  return st.prompter->build(rewritten, with_turn_starts);
}

void limit_calls(std::vector<tools::ToolCall>& calls, bool parallel) {
  if (!parallel && calls.size() > 1) calls.resize(1);
}

json tool_calls_json(const std::vector<tools::ToolCall>& calls) {
  json out = json::array();
  for (const tools::ToolCall& c : calls) {
    out.push_back({{"id", new_call_id()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

std::vector<json> tool_call_deltas(const std::vector<tools::ToolCall>& calls, size_t first_index) {
  std::vector<json> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const size_t index = first_index + k;
    out.push_back({{"index", index},
                   {"id", new_call_id()},
                   {"type", "function"},
                   {"function", {{"name", calls[k].name}, {"arguments", ""}}}});
    const std::string& a = calls[k].arguments;
    for (size_t at = 0; at < a.size();) {
      size_t end = std::min(a.size(), at + kFragmentBytes);
      while (end < a.size() && ((unsigned char)a[end] & 0xC0) == 0x80) ++end;
      out.push_back({{"index", index}, {"function", {{"arguments", a.substr(at, end - at)}}}});
      at = end;
    }
  }
  return out;
}

json tool_call_delta_json(const tools::ToolCallDelta& d) {
  if (!d.name.empty()) {
    return {{"index", d.index},
            {"id", new_call_id()},
            {"type", "function"},
            {"function", {{"name", d.name}, {"arguments", ""}}}};
  }
  return {{"index", d.index}, {"function", {{"arguments", d.arguments}}}};
}

}  // namespace kvw::server
