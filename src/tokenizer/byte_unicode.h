// tokenizer/byte_unicode.h: GPT-2's reversible byte <-> unicode mapping used by byte-level BPE
// vocabularies: printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves,
// the other 68 (space, controls, ...) to U+0100..U+0143 in byte order, so a space is "Ġ".
// Pure functions over static tables; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvw {

// UTF-8 text of the character byte `b` maps to.
const std::string& byte_to_unicode(uint8_t b);
// Maps each byte of `bytes` ("hi there" -> "hiĠthere").
std::string bytes_to_unicode(std::string_view bytes);
// Inverse: each character of `text` that is in the mapping becomes its byte; other characters
// (and invalid UTF-8) are passed through unchanged.
std::string unicode_to_bytes(std::string_view text);

}  // namespace kvw
