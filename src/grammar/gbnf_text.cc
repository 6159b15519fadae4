#include "grammar/gbnf_text.h"

namespace kvw::grammar {

std::string gbnf_literal(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto b = (uint8_t)c;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (b < 0x20 || b == 0x7F) {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string_view json_common_gbnf() {
  return R"(ws ::= "" | " " | "\n" " "{0,8}
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (member (ws "," ws member)*)? ws "}"
member ::= string ws ":" ws value
array ::= "[" ws (value (ws "," ws value)*)? ws "]"
)";
}

}  // namespace kvw::grammar
