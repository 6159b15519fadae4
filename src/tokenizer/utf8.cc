// tokenizer/utf8.cc: see utf8.h.
#include "tokenizer/utf8.h"

#include "core/check.h"

namespace kvw {

Utf8Step utf8_next(std::string_view s) {
  DCHECK(!s.empty());
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {Utf8Status::kValid, 1};
  // Second-byte ranges exclude overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4).
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Status::kInvalid, 1};  // continuation byte, C0, C1, F5..FF
  }
  for (size_t i = 1; i < n; ++i) {
    if (i >= s.size()) return {Utf8Status::kIncomplete, s.size()};
    const auto b = static_cast<uint8_t>(s[i]);
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Status::kInvalid, i};
  }
  return {Utf8Status::kValid, n};
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = utf8_next(s.substr(i));
    if (step.status == Utf8Status::kValid) {
      out.append(s.substr(i, step.len));
    } else {
      out.append(kReplacementChar);
    }
    i += step.len;
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = utf8_next(s.substr(i));
    if (step.status != Utf8Status::kValid) return false;
    i += step.len;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  CHECK(cp <= 0x10FFFF) << "code point " << cp;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kvw
