#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace kvw::server {

StopMatcher::StopMatcher(std::shared_ptr<const std::vector<std::string>> stops)
    : stops_(stops ? std::move(stops) : std::make_shared<const std::vector<std::string>>()) {}

bool StopMatcher::push(const std::string& text, std::string& out, bool check) {
  if (matched_) return true;
  const size_t old_size = held_.size();
  held_ += text;
  // The earliest match that ends in `text` wins, whichever stop string it is. (Checked, held_
  // never holds a whole match before `text`; unchecked pushes may have left one.)
  size_t first = std::string::npos;
  for (const auto& s : *stops_) {
    if (!check || s.empty()) continue;
    const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
    first = std::min(first, held_.find(s, from));
  }
  if (first != std::string::npos) {
    out.append(held_, 0, first);
    held_.clear();
    matched_ = true;
    return true;
  }
  size_t keep = 0;  // the longest suffix of held_ that is a proper prefix of some stop string
  for (const auto& s : *stops_) {
    if (s.empty()) continue;
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

std::string StopMatcher::flush() {
  return std::exchange(held_, {});
}

}  // namespace kvw::server
