// loadgen/sse.cc: line-oriented SSE parsing per the WHATWG event-stream rules (CR, LF or CRLF).
#include "loadgen/sse.h"

namespace kvw::loadgen {

void SseParser::feed(std::string_view bytes, std::vector<std::string>& events) {
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // second half of CRLF
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\r' || c == '\n') {
      end_line(events);
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::end_line(std::vector<std::string>& events) {
  if (line_.empty()) {  // blank line: dispatch
    if (has_data_) {
      if (data_ == "[DONE]") done_ = true;
      events.push_back(std::move(data_));
    }
    data_.clear();
    has_data_ = false;
    return;
  }
  std::string_view line(line_);
  if (line.substr(0, 5) == "data:") {
    std::string_view value = line.substr(5);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  }
  line_.clear();
}

}  // namespace kvw::loadgen
