// server/stop_matcher.h: matches OpenAI `stop` strings on streamed, detokenised text across
// token boundaries. Text that could still be the start of a stop string is held back, so a
// stop string never reaches the client, not even in part.
// Thread safety: one request's object; one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kvw::server {

class StopMatcher {
 public:
  // `stops` is shared by every choice of a request (one copy, charged once); empty strings
  // never match.
  explicit StopMatcher(std::shared_ptr<const std::vector<std::string>> stops);
  explicit StopMatcher(std::vector<std::string> stops)
      : StopMatcher(std::make_shared<const std::vector<std::string>>(std::move(stops))) {}
  // Appends `text`; appends to `out` what is safe to send. Returns true once a stop string
  // matched: `out` then ends just before it, and the rest (the stop string and anything after
  // it) is dropped. After a match further pushes are ignored. Only a match that ends in `text`
  // counts, and none while !`check` (min_tokens: vLLM skips the check for text of the first
  // min_tokens tokens, yet a match may start there).
  bool push(const std::string& text, std::string& out, bool check = true);
  // Ends the stream without a match: the held-back text.
  std::string flush();
  bool matched() const { return matched_; }

 private:
  std::shared_ptr<const std::vector<std::string>> stops_;
  std::string held_;  // at most the longest stop string's size - 1 between pushes
  bool matched_ = false;
};

}  // namespace kvw::server
