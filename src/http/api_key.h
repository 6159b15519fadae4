// http/api_key.h: the --api-key check. The comparison takes the same time whatever the header
// holds (no early exit on the first differing byte), so response timing does not reveal how
// much of a guessed key was right (CWE-208).
// Thread safety: immutable after construction; matches() from any thread.
#pragma once

#include <string>
#include <string_view>

namespace kvw::http {

class ApiKey {
 public:
  explicit ApiKey(std::string_view key);  // empty: no key (everything matches)
  bool required() const { return !expected_.empty(); }
  // True when no key is set or `authorization` is exactly "Bearer <key>".
  bool matches(std::string_view authorization) const;

 private:
  std::string expected_;  // "Bearer <key>", or empty
};

// Equality in time that depends only on the lengths (the expected length is not secret).
bool constant_time_equals(std::string_view a, std::string_view b);

}  // namespace kvw::http
