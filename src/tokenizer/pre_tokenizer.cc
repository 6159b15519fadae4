// tokenizer/pre_tokenizer.cc: see pre_tokenizer.h. The pattern strings are llama.cpp's
// (llama-vocab.cpp), with (?i:...) already expanded as llama.cpp does and non-ASCII characters
// written as \x{...} escapes.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <utility>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace kvw {
namespace {

// GPT-2: contractions, letters, numbers, other symbols, trailing whitespace.
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";

// Llama 3 (tiktoken cl100k style): numbers in groups of up to 3 digits.
constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Qwen2: as Llama 3 but every digit is its own word.
constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// GPT-4o / o200k (gpt-oss's tokenizer.json pattern, (?i:...) expanded): words split at case
// changes (an upper run then lower letters), contractions kept, numbers in groups of up to 3,
// '/' and newlines kept after a punctuation run. PCRE2 runs the original; llama.cpp rewrites it
// with lookaheads for its regex engine (the same pieces on ASCII text).
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)re"
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)re"
    R"re(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// DeepSeek LLM: the cased letters (Unicode Lu/Ll/Lt) as listed by the DeepSeek tokenizer.
constexpr const char* kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})re"
    R"re(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})re"
    R"re(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})re"
    R"re(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})re"
    R"re(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})re"
    R"re(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})re"
    R"re(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})re"
    R"re(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})re"
    R"re(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})re"
    R"re(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})re"
    R"re(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})re"
    R"re(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})re"
    R"re(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})re"
    R"re(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})re"
    R"re(\x{1E900}-\x{1E943}]+)re";

struct Family {
  std::vector<std::string_view> names;
  std::vector<const char*> patterns;
};

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = {
      {{"llama3", "llama-bpe", "dbrx", "smaug-bpe"}, {kLlama3}},
      {{"qwen2", "stablelm2"}, {kQwen2}},
      {{"gpt-4o"}, {kGpt4o}},
      {{"gpt2", "gpt-2", "mpt", "olmo"}, {kGpt2}},
      {{"starcoder", "refact", "smollm", "command-r"}, {R"re(\p{N})re", kGpt2}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLetters,
        R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
        R"re(\s+$)re", R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re",
        R"re(\p{N}+)re"}},
      {{"deepseek-v3"},
       {R"re(\p{N}{1,3})re", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      // llama.cpp's fallback for an empty or "default" pre.
      {{"", "default"},
       {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", R"re([0-9][0-9][0-9])re"}},
  };
  return kFamilies;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Result<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  std::string known;
  for (const Family& f : families()) {
    for (std::string_view name : f.names) {
      if (name == pre) {
        return from_patterns(std::vector<std::string>(f.patterns.begin(), f.patterns.end()));
      }
      if (!name.empty()) known += (known.empty() ? "" : ", ") + std::string(name);
    }
  }
  return Error{"unsupported pre-tokenizer '" + std::string(pre) + "' (supported: " + known + ")"};
}

Result<PreTokenizer> PreTokenizer::from_patterns(const std::vector<std::string>& patterns) {
  PreTokenizer pt;
  // MATCH_INVALID_UTF: text may hold any bytes; invalid ones simply never match.
  // DOLLAR_ENDONLY: '$' means end of piece, as in llama.cpp's std::regex (ECMAScript).
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
  for (const std::string& p : patterns) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto re = std::make_unique<Regex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), options, &err,
                             &err_offset, nullptr);
    if (re->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Error{"pre-tokenizer regex '" + p + "': " + reinterpret_cast<const char*>(msg) +
                   " at offset " + std::to_string(err_offset)};
    }
    // JIT is an optimisation only (a few times faster); without it pcre2_match interprets.
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    pt.regexes_.push_back(std::move(re));
  }
  return pt;
}

namespace {

struct Span {
  size_t begin, end;
};

// Splits text[piece] into matches of `code` and the unmatched runs between them.
void split_piece(pcre2_code* code, pcre2_match_data* md, std::string_view text, Span piece,
                 std::vector<Span>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
  const size_t len = piece.end - piece.begin;
  size_t prev = 0;  // end of the last match, relative to the piece
  size_t offset = 0;
  while (offset < len) {
    int rc = pcre2_match(code, subject, len, offset, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The 32 KiB JIT stack can run out on very long runs (e.g. 100k spaces); the
      // interpreter keeps its backtracking state on the heap instead.
      rc = pcre2_match(code, subject, len, offset, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    CHECK(rc > 0) << "pcre2_match failed with " << rc;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t ms = ov[0], me = ov[1];
    if (me == ms) {  // empty match: skip one character, as llama.cpp ignores empty matches
      if (ms >= len) break;
      offset = ms + utf8_next(text.substr(piece.begin + ms, len - ms)).len;
      continue;
    }
    if (ms > prev) out.push_back({piece.begin + prev, piece.begin + ms});
    out.push_back({piece.begin + ms, piece.begin + me});
    prev = offset = me;
  }
  if (prev < len) out.push_back({piece.begin + prev, piece.end});
}

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<Span> pieces;
  if (!text.empty()) pieces.push_back({0, text.size()});
  std::vector<Span> next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    CHECK(md != nullptr) << "out of memory";
    next.clear();
    for (const Span& p : pieces) split_piece(re->code, md, text, p, next);
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  std::vector<std::string_view> words;
  words.reserve(pieces.size());
  for (const Span& p : pieces) words.push_back(text.substr(p.begin, p.end - p.begin));
  return words;
}

}  // namespace kvw
