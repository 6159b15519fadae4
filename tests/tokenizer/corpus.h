// tests/tokenizer/corpus.h: shared UTF-8 torture corpus and word list for tokenizer tests.
#pragma once

#include <string>
#include <vector>

namespace kvw::testing {

inline std::vector<std::string> torture_corpus() {
  return {
      "",
      " ",
      "a",
      "Hello world",
      " leading space",
      "trailing space ",
      "  two leading, two trailing  ",
      "          ten spaces before and after          ",
      "\n",
      "\n\n\n",
      "line one\nline two\r\nline three\n\n\nend",
      "\ttab\tseparated\t\tvalues\t",
      " \t \n \r\n mixed whitespace \u00a0 nbsp \u2003 em space",
      "don't won't I'M YOU'LL we've they'd it's",
      "The year 2024 had 365 days; pi is 3.14159265 and 1,000,000 > 999.",
      "emoji: \U0001F600 \U0001F44B\U0001F3FD waves",
      // ZWJ family, flag (regional indicators), keycap, skin tone
      "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 \U0001F1EF\U0001F1F5 "
      "1\uFE0F\u20E3",
      "CJK: \u6F22\u5B57\u3068\u304B\u306A\u3001\u4E2D\u6587\uFF0C\uD55C\uAD6D\uC5B4",
      "combining: e\u0301 a\u0308 n\u0303 \u1EC7 Z\u0351\u0352\u0353\u0354",
      "Arabic: \u0645\u0631\u062D\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 123",
      "Hebrew: \u05E9\u05DC\u05D5\u05DD \u05E2\u05D5\u05DC\u05DD!",
      "Greek \u0391\u03B8\u03AE\u03BD\u03B1 and Cyrillic \u041C\u043E\u0441\u043A\u0432\u0430",
      "symbols: <>&\"'`~!@#$%^*()_+-=[]{}|\\;:,./?",
      "math: \u2200x\u2208\u211D, x\u00B2 \u2265 0 \u2211 \u221E",
      "\U00010400\U0001D11E\U0001F9D1\u200D\U0001F4BB supplementary planes",
      "no-spaces-at-all_just_one_long_token_here_1234567890",
      std::string(300, ' ') + "x" + std::string(300, '\n'),
      "mixed\u00A0\u3000ideographic space",
      "The cat sat on the mat. The dog ate the cat's food!",
  };
}

inline std::vector<std::string> test_words() {
  return {"the",   "cat",  "sat",   "on", "mat",  "The",   "dog", "ate",    "food", "Hello",
          "world", "once", "upon",  "a",  "time", "there", "was", "little", "girl", "named",
          "Lily",  "she",  "liked", "to", "play", "with",  "her", "ball",   "café", "日本"};
}

}  // namespace kvw::testing
