// grammar/gbnf_parser.h: GBNF text (llama-server's `grammar` field) -> Grammar.
// Syntax: `name ::= alternatives` rules (a rule ends where the next `name ::=` begins), `|`,
// sequences, `( )` groups, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}`, "literals" and [classes]
// (ranges, `^` negation) with escapes \n \r \t \\ \" \] \xHH \uHHHH \UHHHHHHHH, `.` (any code
// point), `#` comments. The start rule is `root`. Pure function; thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kvw::grammar {

inline constexpr uint32_t kMaxRepeat = 4096;  // largest m or n in x{m,n}
inline constexpr int kMaxGroupDepth = 64;     // nested ( ) in GBNF and regex (parser recursion)
inline constexpr uint32_t kMaxRules = 20000;  // rules after lowering (validate() is O(rules^2))

// Errors (kInvalidInput): syntax ("line 3, column 7: expected '::='"), undefined or missing
// `root` rule, left recursion, a rule that can never finish, groups nested deeper than
// kMaxGroupDepth, more than kMaxRules rules, rules nested more than Grammar::kMaxLeftDepth deep
// without consuming input, and a compiled form larger than `max_bytes` (the message names the
// size and the limit). Recursion in the parser and the matcher is bounded by these limits, so
// untrusted text cannot overflow the stack.
Result<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text,
                                                  size_t max_bytes = SIZE_MAX);

}  // namespace kvw::grammar
