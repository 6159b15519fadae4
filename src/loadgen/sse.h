// loadgen/sse.h: incremental parser for a text/event-stream body (the OpenAI streaming format).
// Bytes arrive in arbitrary pieces (an event split across reads, several events in one read);
// feed() returns each completed event's data (its "data:" lines joined by '\n'). Comments
// (":..."), other fields and blank events are skipped. Not thread-safe; one per response.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvw::loadgen {

class SseParser {
 public:
  // Appends the data of every event completed by `bytes` to `events`.
  void feed(std::string_view bytes, std::vector<std::string>& events);
  // True once an event whose data is exactly "[DONE]" was seen (OpenAI's end marker).
  bool done() const { return done_; }
  // Bytes held for an event not yet terminated by a blank line.
  size_t num_pending_bytes() const { return line_.size() + data_.size(); }

 private:
  void end_line(std::vector<std::string>& events);

  std::string line_;  // the current, unterminated line
  std::string data_;  // data lines of the current event, joined by '\n'
  bool has_data_ = false;
  bool last_was_cr_ = false;  // a "\r\n" may be split between two feeds
  bool done_ = false;
};

}  // namespace kvw::loadgen
