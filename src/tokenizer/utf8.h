// tokenizer/utf8.h: small UTF-8 helpers shared by the tokenizers and the stream decoder.
// Validation follows the Unicode "maximal subpart" rule (also used by WHATWG and Python): an
// ill-formed sequence is replaced by one U+FFFD per maximal prefix that could have started a
// valid character. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvw {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status { kValid, kIncomplete, kInvalid };

struct Utf8Step {
  Utf8Status status;
  size_t len;  // kValid: the character's length; kIncomplete: s.size(); kInvalid: the maximal
               // subpart (>= 1 byte) to replace by one U+FFFD
};

// Classifies the character at the start of `s` (non-empty). kIncomplete means every byte so
// far is valid but the character needs more bytes than `s` holds.
Utf8Step utf8_next(std::string_view s);

// `s` with each maximal invalid subpart, and an incomplete tail, replaced by U+FFFD.
std::string to_valid_utf8(std::string_view s);

bool is_valid_utf8(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace kvw
