#include "http/api_key.h"

#include <algorithm>
#include <cstdint>

namespace kvw::http {

ApiKey::ApiKey(std::string_view key) {
  if (!key.empty()) expected_ = "Bearer " + std::string(key);
}

bool ApiKey::matches(std::string_view authorization) const {
  return expected_.empty() || constant_time_equals(authorization, expected_);
}

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited; differences are OR-ed, never branched on.
  const size_t n = std::max(a.size(), b.size());
  uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t x = i < a.size() ? (uint8_t)a[i] : 0;
    const uint8_t y = i < b.size() ? (uint8_t)b[i] : 0;
    diff |= (uint8_t)(x ^ y);
  }
  return diff == 0;
}

}  // namespace kvw::http
