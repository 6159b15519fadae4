#include "tools/tool_stream.h"

#include "tools/tool_parser.h"

namespace kvw::tools {

ToolStreamFilter::ToolStreamFilter(ToolCallFormat format)
    : format_(format), markers_(call_start_markers(format)) {}

size_t ToolStreamFilter::find_start(size_t& partial) const {
  partial = std::string::npos;
  size_t start = std::string::npos;
  for (std::string_view m : markers_) start = std::min(start, held_.find(m));
  if (format_ == ToolCallFormat::kLlama3Json && !sent_text_) {
    // Llama 3 writes a call as the whole answer: '{' first (after spaces) decides it.
    const size_t first = held_.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && held_[first] == '{') start = std::min(start, first);
    if (first == std::string::npos) partial = 0;  // only spaces so far: undecided
  }
  if (start != std::string::npos) return start;
  // The longest tail of held_ that a marker begins with.
  for (std::string_view m : markers_) {
    for (size_t n = std::min(m.size() - 1, held_.size()); n > 0; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == m.substr(0, n)) {
        partial = std::min(partial, held_.size() - n);
        break;
      }
    }
  }
  return std::string::npos;
}

std::string ToolStreamFilter::push(std::string_view text) {
  held_ += text;
  if (in_call_) return {};
  size_t partial = 0;
  const size_t start = find_start(partial);
  const size_t keep_from = start != std::string::npos ? start : partial;
  std::string out = held_.substr(0, std::min(keep_from, held_.size()));
  held_.erase(0, out.size());
  in_call_ = start != std::string::npos;
  const bool blank = out.find_first_not_of(" \t\r\n") == std::string::npos;
  // Spaces before a call that opens the answer are not content (the whole answer's content is
  // trimmed the same way when it is not streamed).
  if (blank && in_call_ && !sent_text_) return {};
  if (!blank) sent_text_ = true;
  return out;
}

ParsedToolOutput ToolStreamFilter::finish() {
  ParsedToolOutput out;
  if (!in_call_) {
    out.content = std::move(held_);
    return out;
  }
  out = parse_tool_calls(format_, held_);
  held_.clear();
  return out;
}

}  // namespace kvw::tools
