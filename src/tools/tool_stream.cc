#include "tools/tool_stream.h"

#include <utility>

#include "tools/tool_parser.h"

namespace kvw::tools {

ToolStreamFilter::ToolStreamFilter(ToolCallFormat format, bool parallel)
    : format_(format), parallel_(parallel), markers_(call_start_markers(format)) {}

size_t ToolStreamFilter::find_start(size_t& partial) const {
  partial = std::string::npos;
  size_t start = std::string::npos;
  for (std::string_view m : markers_) start = std::min(start, held_.find(m));
  if (format_ == ToolCallFormat::kLlama3Json && (!sent_text_ || after_call_)) {
    // Llama 3 writes a call as the whole answer: '{' first (after spaces, or after the ';'
    // that follows a call) decides it.
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

std::string ToolStreamFilter::take_content() {
  if (after_call_) {
    // Between calls: newlines (and Llama 3's ';') separate them and are not content.
    const char* separators = format_ == ToolCallFormat::kLlama3Json ? " \t\r\n;" : " \t\r\n";
    held_.erase(0, std::min(held_.size(), held_.find_first_not_of(separators)));
    if (held_.empty()) return {};
  }
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
  if (!blank) sent_text_ = true, after_call_ = false;
  return out;
}

std::string ToolStreamFilter::push(std::string_view text) {
  held_ += text;
  std::string out;
  const size_t calls_before = ready_.size();
  while (true) {
    if (!in_call_) {
      if (ready_.size() > calls_before) break;  // content after a new call waits: order
      out += take_content();
      if (!in_call_) break;
    }
    if (decide_at_end_) break;
    LeadingCalls lead = leading_calls(format_, held_);
    if (lead.malformed) decide_at_end_ = true;
    if (lead.bytes == 0) break;
    held_.erase(0, lead.bytes);
    in_call_ = false;
    after_call_ = true;
    add_calls(std::move(lead.calls));
  }
  return out;
}

void ToolStreamFilter::add_calls(std::vector<ToolCall> calls) {
  for (ToolCall& c : calls) {
    if (!parallel_ && num_calls_ > 0) return;
    ready_.push_back(std::move(c));
    ++num_calls_;
  }
}

std::vector<ToolCall> ToolStreamFilter::take_calls(size_t* first_index) {
  *first_index = num_taken_;
  num_taken_ += ready_.size();
  return std::exchange(ready_, {});
}

ParsedToolOutput ToolStreamFilter::finish(size_t* first_index) {
  // A push stops after a call that became whole (the text after it waits, to keep the order);
  // decide that text now, as further pushes would.
  std::string pushed;
  for (size_t held = SIZE_MAX, ready = SIZE_MAX; held != held_.size() || ready != ready_.size();) {
    held = held_.size();
    ready = ready_.size();
    pushed += push("");
  }
  ParsedToolOutput out;
  if (!in_call_) {
    // Separators after the last call are not content.
    if (!after_call_ || held_.find_first_not_of(" \t\r\n;") != std::string::npos) {
      out.content = std::move(held_);
    }
  } else {
    out = parse_tool_calls(format_, held_);
  }
  out.content = pushed + out.content;
  held_.clear();
  add_calls(std::exchange(out.calls, {}));  // after the calls not taken yet
  size_t first = 0;
  out.calls = take_calls(&first);
  if (first_index) *first_index = first;
  return out;
}

}  // namespace kvw::tools
