// tests/tokenizer/stream_decoder_test.cc: streaming detokenisation never emits part of a UTF-8
// character, and replaces bytes that can never become valid with U+FFFD (as documented).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "corpus.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvw {
namespace {

using Ids = std::vector<int32_t>;
const std::string kFffd(kReplacementChar);

// Pure byte-level vocabulary: token id = byte value, no merges.
std::unique_ptr<Tokenizer> byte_tokenizer() {
  Vocab v;
  v.model = "gpt2";
  v.pre = "llama3";
  v.add_bos = false;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_unicode(b));
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

Ids byte_ids(const std::string& s) {
  Ids ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(StreamDecoder, NeverEmitsHalfACharacter) {
  auto tok = byte_tokenizer();
  // Family ZWJ sequence (25 bytes) and a 4-byte emoji, fed one byte per token.
  const std::string text = "hi \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F600!";
  const Ids ids = byte_ids(text);
  ASSERT_EQ(tok->encode(text, false, false).size(), text.size());  // really byte by byte
  StreamDecoder sd(*tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "emitted a partial character";
    out += piece;
  }
  out += sd.flush();
  EXPECT_EQ(out, text);
}

TEST(StreamDecoder, HoldsIncompleteCharacterUntilItCompletes) {
  auto tok = byte_tokenizer();
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(0xF0), "");
  EXPECT_EQ(sd.push(0x9F), "");
  EXPECT_EQ(sd.push(0x98), "");
  EXPECT_EQ(sd.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  auto tok = byte_tokenizer();
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(0xFF), kFffd);  // can never be valid: replaced at once, not held
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push(0x82), "");
  EXPECT_EQ(sd.push('A'), kFffd + "A");  // one U+FFFD for the maximal subpart E2 82
  EXPECT_EQ(sd.push(0x80), kFffd);       // stray continuation byte
  EXPECT_EQ(sd.push(0xC3), "");
  EXPECT_EQ(sd.flush(), kFffd);  // incomplete at the end of the stream
  EXPECT_EQ(sd.push('x'), "x");  // flush reset the decoder
}

TEST(StreamDecoder, MatchesBatchDecodeOnRandomBytes) {
  auto tok = byte_tokenizer();
  std::mt19937 rng(1234);
  // Bias towards lead/continuation bytes so that partial and broken sequences are common.
  const uint8_t alphabet[] = {'a',  ' ',  0x80, 0x9F, 0xBF, 0xC3, 0xA9, 0xE2, 0x82, 0xAC,
                              0xED, 0xA0, 0xF0, 0x9F, 0x98, 0xF4, 0x90, 0xFF, 0xC0};
  for (int iter = 0; iter < 500; ++iter) {
    Ids ids(rng() % 24);
    for (int32_t& id : ids) id = alphabet[rng() % sizeof(alphabet)];
    StreamDecoder sd(*tok);
    std::string out;
    for (int32_t id : ids) {
      const std::string piece = sd.push(id);
      ASSERT_TRUE(is_valid_utf8(piece));
      out += piece;
    }
    out += sd.flush();
    EXPECT_EQ(out, to_valid_utf8(tok->decode(ids)));
  }
}

TEST(StreamDecoder, SpmByteFallbackEmojiAndLeadingSpace) {
  auto tok = Tokenizer::create(build_spm_vocab(testing::test_words()));
  ASSERT_TRUE(tok.ok());
  const std::string text = "the cat \U0001F408\u200D\u2B1B sat";
  const Ids ids = (*tok)->encode(text, true, false);
  StreamDecoder sd(**tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(is_valid_utf8(piece));
    out += piece;
  }
  out += sd.flush();
  EXPECT_EQ(out, text);  // the prefix space after BOS is stripped, as decode() does
  EXPECT_EQ(out, (*tok)->decode(ids));
}

// Generated text continues its prompt: "the" + "▁cat" streams as " cat", so prompt + answer
// reads "the cat" (llama-server and vLLM return the space too); the mode survives flush().
TEST(StreamDecoder, ContinuationKeepsTheSpmLeadingSpace) {
  auto tok = Tokenizer::create(build_spm_vocab(testing::test_words()));
  ASSERT_TRUE(tok.ok());
  const Ids prompt = (*tok)->encode("the", true, false);
  const Ids answer = (*tok)->encode("the cat sat", true, false);
  const Ids tail(answer.begin() + (long)prompt.size(), answer.end());
  ASSERT_FALSE(tail.empty());
  StreamDecoder sd(**tok, false, StreamDecoder::Start::kContinuation);
  for (int round = 0; round < 2; ++round) {
    std::string out;
    for (int32_t id : tail) out += sd.push(id);
    out += sd.flush();
    EXPECT_EQ(out, " cat sat") << "round " << round;
  }
  StreamDecoder whole(**tok);
  std::string out;
  for (int32_t id : tail) out += whole.push(id);
  EXPECT_EQ(out + whole.flush(), "cat sat");
}

TEST(StreamDecoder, TortureCorpusStreamsLikeDecode) {
  for (bool spm : {true, false}) {
    auto tok = Tokenizer::create(spm ? build_spm_vocab(testing::test_words())
                                     : build_bpe_vocab(testing::test_words(), "qwen2"));
    ASSERT_TRUE(tok.ok());
    for (const std::string& text : testing::torture_corpus()) {
      StreamDecoder sd(**tok);
      std::string out;
      for (int32_t id : (*tok)->encode(text, true, false)) out += sd.push(id);
      out += sd.flush();
      EXPECT_EQ(out, text);
    }
  }
}

}  // namespace
}  // namespace kvw
