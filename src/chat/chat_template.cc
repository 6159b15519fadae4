// chat/chat_template.cc: ChatTemplate = parse once (jinja_parser.cc), render per request
// (jinja_eval.cc) with the variables Hugging Face's apply_chat_template passes.
//
// Supported Jinja subset (what Llama-2/3.x, Mistral, Qwen2.5/ChatML, DeepSeek, Gemma, Phi-3 use):
//   {{ }}, {% %}, {# #}; whitespace control `-` and `+`, with trim_blocks and lstrip_blocks on.
//   Statements: if/elif/else, for (tuple targets, `if` filter, else, loop.index/index0/revindex/
//     revindex0/first/last/length/previtem/nextitem), break/continue, set (names, tuples,
//     ns.attr, set blocks), macro, generation (ignored).
//   Expressions: str/int/float/bool/none literals, lists, tuples, dicts, .attr, [i], [a:b:c],
//     + - * / // % ** ~, comparisons, and/or/not, in/not in, `x if c else y`, calls.
//   Filters: trim length count upper lower capitalize title default/d tojson string list items
//     join first last select reject selectattr rejectattr map replace int float abs round
//     reverse unique sort indent escape safe.
//   Tests: defined undefined none string number integer float boolean true false mapping
//     iterable sequence callable lower upper odd even divisibleby sameas eq/ne/lt/gt/le/ge/in.
//   Methods: str strip/lstrip/rstrip/startswith/endswith/split/upper/lower/title/capitalize/
//     replace/find/count/join/is*; dict items/keys/values/get.
//   Functions: raise_exception, namespace, dict, range, strftime_now (UTC, from
//     ChatRenderOptions::now_unix or the clock).
// Undefined (a missing variable, key or index) behaves as in Jinja: it prints as "", is falsy,
// iterates as empty and has length 0; using it further (x.attr, x[0], x + 1) is an error that
// names it ("list object has no element 0").
#include "chat/chat_template.h"

#include <ctime>

#include "chat/jinja_ast.h"
#include "chat/jinja_eval.h"
#include "chat/json_value.h"

namespace kvw {

struct ChatTemplate::Program {
  jinja::NodeList nodes;
};

ChatTemplate::ChatTemplate(std::unique_ptr<const Program> p) : program_(std::move(p)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  auto nodes = jinja::parse_template(source);
  if (!nodes.ok()) return nodes.error();
  auto p = std::make_unique<Program>();
  p->nodes = std::move(nodes.value());
  return ChatTemplate(std::move(p));
}

Result<std::string> ChatTemplate::render(std::span<const ChatMessage> messages,
                                         const ChatRenderOptions& options,
                                         std::vector<int64_t>* message_starts) const {
  using jinja::Value;
  jinja::ValueList list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::ValueDict d;
    d.items = {{"role", Value::string(m.role)}, {"content", Value::string(m.content)}};
    // Absent fields stay undefined, so `message.tool_calls is defined` tests work as in HF.
    if (!m.tool_calls.is_null()) d.items.emplace_back("tool_calls", value_from_json(m.tool_calls));
    if (!m.tool_call_id.empty())
      d.items.emplace_back("tool_call_id", Value::string(m.tool_call_id));
    if (!m.name.empty()) d.items.emplace_back("name", Value::string(m.name));
    list.push_back(Value::dict(std::move(d)));
  }
  jinja::ValueDict globals;
  globals.items = {
      {"messages", Value::list(std::move(list))},
      {"add_generation_prompt", Value::boolean(options.add_generation_prompt)},
      {"bos_token", Value::string(options.bos_token)},
      {"eos_token", Value::string(options.eos_token)},
      {jinja::kNowGlobal,
       Value::integer(options.now_unix >= 0 ? options.now_unix : (int64_t)std::time(nullptr))}};
  if (options.tools != nullptr)
    globals.items.emplace_back("tools", value_from_json(*options.tools));
  if (message_starts == nullptr) return jinja::render_template(program_->nodes, globals);
  jinja::ItemStarts trace;
  const jinja::ValueList& items = globals.items[0].second.items();
  for (size_t i = 0; i < items.size(); ++i) trace.index.emplace(items[i].dict_identity(), i);
  trace.starts.assign(items.size(), -1);
  auto text = jinja::render_template(program_->nodes, globals, &trace);
  *message_starts = std::move(trace.starts);
  return text;
}

}  // namespace kvw
