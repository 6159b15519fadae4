// tests/tokenizer/utf8_test.cc: UTF-8 classification, replacement and byte<->unicode mapping.
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_unicode.h"

namespace kvw {
namespace {

const std::string kFffd(kReplacementChar);

TEST(Utf8, NextClassifiesValidIncompleteAndInvalid) {
  EXPECT_EQ(utf8_next("a").status, Utf8Status::kValid);
  EXPECT_EQ(utf8_next("\xC3\xA9").len, 2u);
  EXPECT_EQ(utf8_next("\xF0\x9F\x98\x80").len, 4u);
  EXPECT_EQ(utf8_next("\xF0\x9F\x98").status, Utf8Status::kIncomplete);
  EXPECT_EQ(utf8_next("\xE2").status, Utf8Status::kIncomplete);
  // Maximal subparts: the bytes that could still have begun a valid character.
  EXPECT_EQ(utf8_next("\xE2\x82"
                      "A")
                .status,
            Utf8Status::kInvalid);
  EXPECT_EQ(utf8_next("\xE2\x82"
                      "A")
                .len,
            2u);
  EXPECT_EQ(utf8_next("\x80").len, 1u);
  EXPECT_EQ(utf8_next("\xC0\xAF").len, 1u);          // overlong lead
  EXPECT_EQ(utf8_next("\xE0\x80\x80").len, 1u);      // overlong 3-byte
  EXPECT_EQ(utf8_next("\xED\xA0\x80").len, 1u);      // surrogate
  EXPECT_EQ(utf8_next("\xF4\x90\x80\x80").len, 1u);  // > U+10FFFF
  EXPECT_EQ(utf8_next("\xFF").status, Utf8Status::kInvalid);
}

TEST(Utf8, ToValidReplacesEachMaximalSubpartOnce) {
  EXPECT_EQ(to_valid_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(to_valid_utf8("\xE2\x82"
                          "A"),
            kFffd + "A");
  EXPECT_EQ(to_valid_utf8("\xFF\xFE"), kFffd + kFffd);
  EXPECT_EQ(to_valid_utf8("a\xF0\x9F\x98"), "a" + kFffd);  // incomplete tail
  EXPECT_TRUE(is_valid_utf8(to_valid_utf8("\xC0\x80\xED\xA0\x80\xF8")));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));
}

TEST(ByteUnicode, MapsGpt2StyleAndInverts) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // soft hyphen is the last remapped: U+0143
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(unicode_to_bytes(bytes_to_unicode(all)), all);
  // Characters outside the mapping pass through.
  EXPECT_EQ(unicode_to_bytes("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

}  // namespace
}  // namespace kvw
