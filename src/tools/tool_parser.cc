// tools/tool_parser.cc: format names, detection, dispatch and the JSON helpers the per-format
// parsers share.
#include "tools/tool_parser.h"

namespace kvw::tools {

using ordered = nlohmann::ordered_json;

namespace {

struct FormatName {
  ToolCallFormat format;
  const char* name;
};
constexpr FormatName kNames[] = {{ToolCallFormat::kHermes, "hermes"},
                                 {ToolCallFormat::kLlama3Json, "llama3_json"},
                                 {ToolCallFormat::kMistral, "mistral"},
                                 {ToolCallFormat::kDeepSeekV3, "deepseek_v3"},
                                 {ToolCallFormat::kHarmony, "openai"}};

}  // namespace

const char* format_name(ToolCallFormat f) {
  for (const FormatName& n : kNames) {
    if (n.format == f) return n.name;
  }
  return "hermes";
}

std::optional<ToolCallFormat> format_from_name(std::string_view name) {
  for (const FormatName& n : kNames) {
    if (name == n.name) return n.format;
  }
  if (name == "qwen" || name == "qwen3") return ToolCallFormat::kHermes;  // same wrapper
  if (name == "llama3" || name == "llama4_json") return ToolCallFormat::kLlama3Json;
  if (name == "deepseek" || name == "deepseek_v31") return ToolCallFormat::kDeepSeekV3;
  if (name == "harmony" || name == "gpt-oss") return ToolCallFormat::kHarmony;
  return std::nullopt;
}

std::string format_names() {
  std::string out;
  for (const FormatName& n : kNames) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      return parse_llama3_json(text);
    case ToolCallFormat::kMistral:
      return parse_mistral(text);
    case ToolCallFormat::kDeepSeekV3:
      return parse_deepseek_v3(text);
    case ToolCallFormat::kHarmony:
      return parse_harmony(text);
    case ToolCallFormat::kHermes:
      break;
  }
  return parse_hermes(text);
}

std::vector<std::string_view> call_start_markers(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      return {"<|python_tag|>"};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS]"};
    case ToolCallFormat::kDeepSeekV3:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"};
    case ToolCallFormat::kHarmony:
      return {"<|channel|>", "<|start|>"};  // every harmony message is decided at its end
    case ToolCallFormat::kHermes:
      break;
  }
  return {"<tool_call>"};
}

ToolCallFormat detect_format(std::string_view tmpl,
                             const std::function<bool(std::string_view)>& has_token) {
  auto seen = [&](std::string_view marker) {
    return tmpl.find(marker) != std::string_view::npos || (has_token && has_token(marker));
  };
  // Most specific first: harmony and DeepSeek templates also mention JSON and "tools".
  if (seen("<|channel|>") && seen("<|call|>")) return ToolCallFormat::kHarmony;
  if (seen("<｜tool▁calls▁begin｜>")) return ToolCallFormat::kDeepSeekV3;
  if (seen("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (seen("<tool_call>")) return ToolCallFormat::kHermes;
  if (seen("<|python_tag|>") || (tmpl.find("<|start_header_id|>") != std::string_view::npos &&
                                 tmpl.find("tools") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

size_t json_value_end(std::string_view text, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) return depth == 0 ? i + 1 : std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

std::optional<ToolCall> call_from_parts(std::string_view name, std::string_view arguments) {
  const std::string_view n = trim(name);
  if (n.empty()) return std::nullopt;
  ordered args = ordered::parse(trim(arguments), nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) return std::nullopt;
  return ToolCall{.name = std::string(n),
                  .arguments = args.dump(-1, ' ', false, ordered::error_handler_t::replace)};
}

std::optional<ToolCall> call_from_json(const ordered& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  const ordered* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    if (j.contains(key)) args = &j[key];
  }
  if (args == nullptr) return ToolCall{.name = name->get<std::string>(), .arguments = "{}"};
  if (args->is_string()) return call_from_parts(name->get<std::string>(), args->get<std::string>());
  if (!args->is_object()) return std::nullopt;
  return ToolCall{.name = name->get<std::string>(),
                  .arguments = args->dump(-1, ' ', false, ordered::error_handler_t::replace)};
}

}  // namespace kvw::tools
