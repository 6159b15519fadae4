// server/stop_matcher.h: matches OpenAI `stop` strings on streamed, detokenised text across
// token boundaries. Text that could still be the start of a stop string is held back, so a
// stop string never reaches the client, not even in part.
// Thread safety: one request's object; one thread at a time.
#pragma once

#include <string>
#include <vector>

namespace kvw::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text`; appends to `out` what is safe to send. Returns true once a stop string
  // matched: `out` then ends just before it, and the rest (the stop string and anything after
  // it) is dropped. After a match further pushes are ignored.
  bool push(const std::string& text, std::string& out);
  // Ends the stream without a match: the held-back text.
  std::string flush();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings only
  std::string held_;
  bool matched_ = false;
};

}  // namespace kvw::server
