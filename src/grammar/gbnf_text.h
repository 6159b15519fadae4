// grammar/gbnf_text.h: small helpers for writing GBNF text (shared by the JSON Schema, regex and
// choice translators, which all emit GBNF and compile it with parse_gbnf).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvw::grammar {

// `s` as a GBNF string literal, quotes included ("a\"b" for a"b). Control bytes become \xHH;
// other bytes (UTF-8 included) are copied.
std::string gbnf_literal(std::string_view s);

// A GBNF expression matching exactly one of `texts` (each matched literally; duplicates and order
// do not matter), factored by common prefixes: "ab" | "ac" becomes "a" ("b" | "c"). A plain
// alternation of n strings starts n matcher stacks (past Matcher::kMaxStacks for a long enum);
// the factored form starts one per distinct next character. Alternatives that end after one
// character share a class ([bc]). Error (naming `what`) when more than kMaxLiteralFanOut
// strings still differ at one character after a shared prefix.
inline constexpr size_t kMaxLiteralFanOut = 256;
Result<std::string> gbnf_alternatives(std::vector<std::string> texts, std::string_view what);

// The rules every JSON grammar shares: ws (bounded: none, one space, or one newline and up to 8
// spaces, so a model cannot spend its tokens on whitespace), string, char, number, integer,
// boolean, null, and any JSON value (value, object, array). Numbers have at most 16 integer
// digits, 16 fraction digits and a 2-digit exponent, so every output parses as a finite double
// (nlohmann and Python refuse or overflow on 1e999; a random model would write such numbers).
std::string_view json_common_gbnf();

}  // namespace kvw::grammar
