// fuzz/grammar_fuzz.cc: the constrained-decoding compilers on arbitrary bytes (they take request
// fields: llama-server's `grammar`, a JSON schema, vLLM's regex). First byte picks the
// compiler; a grammar that compiles is then driven with the rest of the input as output bytes
// and masked over a small vocabulary. Nothing may crash, recurse without bound or hang; a
// token the mask allows must be accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace {

std::shared_ptr<const kvw::grammar::TokenTrie> trie() {
  static const auto t = std::make_shared<const kvw::grammar::TokenTrie>(
      std::vector<std::string>{"", "{", "}", "\"", "a", "ab", " ", ",", ":", "1", "\xC3\xA9",
                               "\xE4", "\xB8\xAD", "[", "]", "true", "null", "\n", "-", "."},
      std::vector<int32_t>{0});
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = in.find('\0');
  const std::string_view spec = in.substr(0, split);
  const std::string_view drive = split == std::string_view::npos ? "" : in.substr(split + 1);
  constexpr size_t kMaxBytes = 1 << 20;
  kvw::Result<std::shared_ptr<const kvw::grammar::Grammar>> g = kvw::Error{""};
  switch (data[0] % 3) {
    case 0: g = kvw::grammar::parse_gbnf(spec, kMaxBytes); break;
    case 1: g = kvw::grammar::compile_json_schema(spec, kMaxBytes); break;
    default: g = kvw::grammar::compile_regex(spec, kMaxBytes); break;
  }
  if (!g.ok()) return 0;
  if (g.value()->size_bytes() > kMaxBytes) std::abort();
  kvw::grammar::GrammarConstraint c(g.value(), trie());
  std::vector<uint64_t> bits;
  for (char byte : drive.substr(0, 64)) {
    c.fill_allowed(&bits);
    const int32_t id = (uint8_t)byte % trie()->n_vocab();
    const bool allowed = (bits[id >> 6] >> (id & 63)) & 1;
    const bool ok = c.accept(id).ok();
    if (allowed && !ok && !c.matcher().overflowed()) std::abort();  // mask and accept disagree
    if (c.done()) break;
  }
  return 0;
}
