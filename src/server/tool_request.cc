#include "server/tool_request.h"

namespace kvw::server {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;

const ordered* field(const ordered& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

ApiError bad(const std::string& param, const std::string& what) {
  return invalid_param(param, "'" + param + "' " + what);
}

// OpenAI's rule for function names: a-z, A-Z, 0-9, underscores and dashes, at most 64.
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!isalnum((unsigned char)c) && c != '_' && c != '-') return false;
  }
  return true;
}

// One function object ({name, description?, parameters?, strict?}) at `param`.
std::optional<ApiError> read_function(const ordered& f, const std::string& param,
                                      tools::FunctionSpec& out) {
  if (!f.is_object()) return bad(param, "must be an object");
  const ordered* name = field(f, "name");
  if (name == nullptr || !name->is_string() || !valid_name(name->get<std::string>())) {
    return bad(param + ".name",
               "must be a string of a-z, A-Z, 0-9, underscores or dashes (at most 64)");
  }
  out.name = name->get<std::string>();
  if (const ordered* d = field(f, "description")) {
    if (!d->is_string()) return bad(param + ".description", "must be a string");
    out.description = d->get<std::string>();
  }
  if (const ordered* p = field(f, "parameters")) {
    if (!p->is_object()) return bad(param + ".parameters", "must be a JSON Schema object");
    out.parameters = *p;
  }
  if (const ordered* s = field(f, "strict"); s != nullptr && !s->is_boolean()) {
    return bad(param + ".strict", "must be a boolean");
  }
  return std::nullopt;
}

std::optional<ApiError> read_tools(const ordered& body, ToolRequest& r) {
  const ordered* tools = field(body, "tools");
  const ordered* functions = field(body, "functions");
  if (tools != nullptr && functions != nullptr) {
    return bad("functions", "is the legacy form of 'tools'; give one of them");
  }
  const char* key = tools != nullptr ? "tools" : "functions";
  const ordered* list = tools != nullptr ? tools : functions;
  if (list == nullptr) return std::nullopt;
  if (!list->is_array()) return bad(key, "must be a list");
  if (list->size() > kMaxTools) {
    return bad(key, "takes at most " + std::to_string(kMaxTools) + " functions");
  }
  r.tools = ordered::array();
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string param = std::string(key) + "[" + std::to_string(i) + "]";
    const ordered& t = (*list)[i];
    tools::FunctionSpec spec;
    if (tools != nullptr) {
      if (!t.is_object()) return bad(param, "must be an object");
      const ordered* type = field(t, "type");
      if (type == nullptr || *type != "function") {
        return bad(param + ".type", "must be \"function\" (the only tool type supported)");
      }
      const ordered* f = field(t, "function");
      if (f == nullptr) return bad(param + ".function", "is required");
      if (auto e = read_function(*f, param + ".function", spec)) return e;
      r.tools.push_back(t);
    } else {
      if (auto e = read_function(t, param, spec)) return e;
      r.tools.push_back(ordered{{"type", "function"}, {"function", t}});
    }
    for (const auto& other : r.functions) {
      if (other.name == spec.name) return bad(param, "repeats the function name " + spec.name);
    }
    r.functions.push_back(std::move(spec));
  }
  return std::nullopt;
}

std::optional<ApiError> read_choice(const ordered& body, ToolRequest& r) {
  const ordered* choice = field(body, "tool_choice");
  const ordered* legacy = field(body, "function_call");
  if (choice != nullptr && legacy != nullptr) {
    return bad("function_call", "is the legacy form of 'tool_choice'; give one of them");
  }
  const char* key = choice != nullptr ? "tool_choice" : "function_call";
  const ordered* c = choice != nullptr ? choice : legacy;
  if (c == nullptr) return std::nullopt;
  const std::string allowed = legacy != nullptr ? "\"none\", \"auto\" or {\"name\": ...}"
                                                : "\"none\", \"auto\", \"required\" or "
                                                  "{\"type\": \"function\", \"function\": "
                                                  "{\"name\": ...}}";
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") {
      r.choice = ToolChoice::kNone;
    } else if (s == "auto") {
      r.choice = ToolChoice::kAuto;
    } else if (s == "required" && legacy == nullptr) {
      r.choice = ToolChoice::kRequired;
    } else {
      return bad(key, "must be " + allowed);
    }
  } else if (c->is_object()) {
    const ordered* f = legacy != nullptr ? c : field(*c, "function");
    const ordered* type = field(*c, "type");
    if ((legacy == nullptr && (type == nullptr || *type != "function")) || f == nullptr ||
        !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
      return bad(key, "must be " + allowed);
    }
    r.choice = ToolChoice::kNamed;
    r.named = (*f)["name"].get<std::string>();
  } else {
    return bad(key, "must be " + allowed);
  }
  if (r.choice == ToolChoice::kNone) return std::nullopt;
  if (r.functions.empty()) return bad(key, "needs 'tools' (only \"none\" is allowed without)");
  if (r.choice == ToolChoice::kNamed) {
    bool known = false;
    for (const auto& f : r.functions) known = known || f.name == r.named;
    if (!known) return bad(key, "names the function '" + r.named + "', which is not in the tools");
  }
  return std::nullopt;
}

}  // namespace

std::vector<tools::FunctionSpec> ToolRequest::callable() const {
  if (choice != ToolChoice::kNamed) return functions;
  std::vector<tools::FunctionSpec> one;
  for (const auto& f : functions) {
    if (f.name == named) one.push_back(f);
  }
  return one;
}

std::variant<ToolRequest, ApiError> parse_tool_request(const json& body, std::string_view raw) {
  ToolRequest r;
  bool any = false;
  for (const char* key : {"tools", "functions", "tool_choice", "function_call"}) {
    any = any || (body.contains(key) && !body[key].is_null());
  }
  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("parallel_tool_calls", "must be a boolean");
    r.parallel = it->get<bool>();
  }
  if (!any) return r;
  // Only the tool fields are kept from this second, ordered parse, so it costs at most what
  // they already cost in the request's first (budgeted) parse.
  auto keep_tool_fields = [](int depth, ordered::parse_event_t event, ordered& parsed) {
    if (depth != 1 || event != ordered::parse_event_t::key) return true;
    const std::string& k = parsed.get_ref<const std::string&>();
    return k == "tools" || k == "functions" || k == "tool_choice" || k == "function_call";
  };
  const ordered doc = ordered::parse(raw, keep_tool_fields, /*allow_exceptions=*/false);
  if (!doc.is_object()) return bad("tools", "could not be read");  // parse_body accepted it
  if (auto e = read_tools(doc, r)) return *e;
  if (auto e = read_choice(doc, r)) return *e;
  return r;
}

std::optional<ApiError> read_message_tool_fields(const json& m, const std::string& param,
                                                 ChatMessage& out) {
  if (out.role == "tool") {
    auto id = m.find("tool_call_id");
    if (id == m.end() || !id->is_string()) {
      return bad(param + ".tool_call_id", "is required (a string) for a tool message");
    }
    out.tool_call_id = id->get<std::string>();
  }
  if (auto n = m.find("name"); n != m.end() && !n->is_null()) {
    if (!n->is_string()) return bad(param + ".name", "must be a string");
    out.name = n->get<std::string>();
  }
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return std::nullopt;
  const std::string p = param + ".tool_calls";
  if (out.role != "assistant") return bad(p, "is only allowed in an assistant message");
  if (!calls->is_array()) return bad(p, "must be a list");
  out.tool_calls = ordered::array();
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& c = (*calls)[i];
    const std::string pi = p + "[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      return bad(pi,
                 "must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                 "\"arguments\"}}");
    }
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      return bad(pi + ".function.name", "is required");
    ordered args = ordered::object();
    if (auto a = f.find("arguments"); a != f.end() && !a->is_null()) {
      if (!a->is_string()) return bad(pi + ".function.arguments", "must be a JSON string");
      // Templates index the arguments (Qwen: tool_call.arguments | tojson), so they get the
      // object; text that is not JSON stays a string.
      ordered parsed = ordered::parse(a->get<std::string>(), nullptr, false);
      args = parsed.is_discarded() ? ordered(a->get<std::string>()) : std::move(parsed);
    }
    out.tool_calls.push_back(
        ordered{{"id", c.value("id", "")},
                {"type", "function"},
                {"function", {{"name", f["name"].get<std::string>()}, {"arguments", args}}}});
  }
  return std::nullopt;
}

}  // namespace kvw::server
