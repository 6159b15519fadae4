// tokenizer/byte_unicode.cc: see byte_unicode.h.
#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/utf8.h"

namespace kvw {
namespace {

constexpr uint32_t kNumMapped = 256 + 68;  // highest code point in the mapping is U+0143

bool maps_to_itself(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, kNumMapped> to_byte;  // code point -> byte, -1 if not in the mapping
  Tables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t cp = maps_to_itself(b) ? b : next++;
      append_utf8(to_unicode[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

uint32_t decode_code_point(std::string_view c) {  // c is one valid character
  const auto b0 = static_cast<uint8_t>(c[0]);
  if (c.size() == 1) return b0;
  uint32_t cp = b0 & (0xFF >> (c.size() + 1));
  for (size_t i = 1; i < c.size(); ++i) cp = (cp << 6) | (static_cast<uint8_t>(c[i]) & 0x3F);
  return cp;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) {
  return tables().to_unicode[b];
}

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += tables().to_unicode[static_cast<uint8_t>(c)];
  return out;
}

std::string unicode_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step step = utf8_next(text.substr(i));
    const std::string_view c = text.substr(i, step.len);
    if (step.status == Utf8Status::kValid) {
      const uint32_t cp = decode_code_point(c);
      if (cp < kNumMapped && tables().to_byte[cp] >= 0) {
        out += static_cast<char>(tables().to_byte[cp]);
        i += step.len;
        continue;
      }
    }
    out.append(c);
    i += step.len;
  }
  return out;
}

}  // namespace kvw
