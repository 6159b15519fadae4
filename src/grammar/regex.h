// grammar/regex.h: regular expressions (vLLM's guided_regex / structured_outputs.regex) and
// choice lists (guided_choice / structured_outputs.choice) -> GBNF -> Grammar.
// Regex subset: literals and escapes (\n \t \r \f \v \xHH \uHHHH, escaped metacharacters),
// classes [...] with ranges and ^, \d \w \s \D \W \S (inside classes only the positive ones),
// `.` (any code point but \n), groups ( ) (?: ) (?P<name> ) (?<name> ), `|`, quantifiers
// * + ? {m} {m,} {m,n} (a lazy `?` suffix is accepted: it does not change what matches), and
// ^ / $ only at the very ends (the whole output must match: anchors are implied). Refused with
// an error naming the construct: backreferences, lookaround, \b, possessive quantifiers, flags.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kvw::grammar {

Result<std::string> regex_to_gbnf(std::string_view regex);
Result<std::shared_ptr<const Grammar>> compile_regex(std::string_view regex,
                                                     size_t max_bytes = SIZE_MAX);
// Exactly one of `choices` (non-empty list; each string is matched literally).
Result<std::shared_ptr<const Grammar>> compile_choice(const std::vector<std::string>& choices,
                                                      size_t max_bytes = SIZE_MAX);

}  // namespace kvw::grammar
