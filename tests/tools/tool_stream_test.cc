// Issue 31: streamed output never leaks the start of a tool call as content, each call goes out
// as soon as it is whole, and whatever is held back comes out (as content or calls) when the
// output ends.
#include "tools/tool_stream.h"

#include <gtest/gtest.h>

namespace kvw::tools {
namespace {

struct Fed {
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<size_t> ready_at;  // [calls] bytes fed when the call was handed out
};

// Feeds `text` one byte at a time (the worst split); calls are taken after every byte, as the
// server does after every token.
Fed feed_bytewise(ToolStreamFilter& f, std::string_view text) {
  Fed out;
  for (size_t i = 0; i < text.size(); ++i) {
    out.content += f.push(text.substr(i, 1));
    size_t first = 0;
    for (ToolCall& c : f.take_calls(&first)) {
      EXPECT_EQ(first, out.calls.size()) << "indices follow the calls' order";
      out.calls.push_back(std::move(c));
      out.ready_at.push_back(i + 1);
      ++first;
    }
  }
  return out;
}

TEST(ToolStreamFilter, HoldsBackAPossibleMarkerAndSendsTheCallWhenItCloses) {
  ToolStreamFilter f(ToolCallFormat::kHermes);
  const std::string text =
      "Checking <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  Fed fed = feed_bytewise(f, text);
  EXPECT_EQ(fed.content, "Checking ");
  ASSERT_EQ(fed.calls.size(), 1u);
  EXPECT_EQ(fed.ready_at[0], text.size()) << "out at its closing tag, not at the end";
  EXPECT_EQ(fed.calls[0].name, "f");
  EXPECT_EQ(fed.calls[0].arguments, R"({"a":1})");
  ParsedToolOutput end = f.finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(end.content, "");
  EXPECT_EQ(f.num_calls(), 1u);
}

TEST(ToolStreamFilter, EachHermesCallGoesOutBeforeTheNextIsWritten) {
  ToolStreamFilter f(ToolCallFormat::kHermes);
  const std::string one = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  const std::string two = "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  const std::string text = "Two calls. " + one + "\n" + two + "\n";
  Fed fed = feed_bytewise(f, text);
  EXPECT_EQ(fed.content, "Two calls. ") << "the newlines between and after calls are no content";
  ASSERT_EQ(fed.calls.size(), 2u);
  EXPECT_EQ(fed.calls[0].name, "f");
  EXPECT_EQ(fed.calls[1].name, "g");
  EXPECT_EQ(fed.ready_at[0], 11 + one.size());
  EXPECT_EQ(fed.ready_at[1], 11 + one.size() + 1 + two.size());
  ParsedToolOutput end = f.finish();
  EXPECT_EQ(end.content, "");
  EXPECT_TRUE(end.calls.empty());
}

TEST(ToolStreamFilter, TextAfterACallIsContentAgain) {
  ToolStreamFilter f(ToolCallFormat::kHermes);
  Fed fed = feed_bytewise(f, "<tool_call>{\"name\": \"f\"}</tool_call>\nDone <tool");
  ASSERT_EQ(fed.calls.size(), 1u);
  EXPECT_EQ(fed.calls[0].arguments, "{}");
  EXPECT_EQ(fed.content, "Done ");
  EXPECT_EQ(f.finish().content, "<tool");
}

TEST(ToolStreamFilter, WithoutParallelCallsOnlyTheFirstGoesOut) {
  ToolStreamFilter f(ToolCallFormat::kHermes, /*parallel=*/false);
  Fed fed = feed_bytewise(f,
                          "<tool_call>{\"name\": \"f\"}</tool_call>\n"
                          "<tool_call>{\"name\": \"g\"}</tool_call>");
  ASSERT_EQ(fed.calls.size(), 1u);
  EXPECT_EQ(fed.calls[0].name, "f");
  EXPECT_TRUE(f.finish().calls.empty());
}

TEST(ToolStreamFilter, ReleasesTextThatTurnsOutNotToBeAMarker) {
  ToolStreamFilter f(ToolCallFormat::kHermes);
  EXPECT_EQ(f.push("a <tool"), "a ");  // "<tool" may begin "<tool_call>"
  EXPECT_EQ(f.push("box> b"), "<toolbox> b");
  EXPECT_EQ(f.push(" <to"), " ");
  ParsedToolOutput end = f.finish();  // the held "<to" is content after all
  EXPECT_EQ(end.content, "<to");
  EXPECT_TRUE(end.calls.empty());
}

TEST(ToolStreamFilter, MalformedCallComesBackAsContent) {
  ToolStreamFilter f(ToolCallFormat::kMistral);
  EXPECT_EQ(feed_bytewise(f, "x[TOOL_CALLS][{\"name\": ").content, "x");
  ParsedToolOutput end = f.finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(end.content, "[TOOL_CALLS][{\"name\": ");
  // A whole call that does not parse: it and what follows are decided at the end.
  ToolStreamFilter h(ToolCallFormat::kHermes);
  Fed fed = feed_bytewise(h,
                          "<tool_call>{\"name\": \"f\"}</tool_call>"
                          "<tool_call>{\"oops\": 1}</tool_call><tool_call>{\"name\": \"g\"}");
  ASSERT_EQ(fed.calls.size(), 1u);
  end = h.finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(end.content, "<tool_call>{\"oops\": 1}</tool_call><tool_call>{\"name\": \"g\"}");
}

TEST(ToolStreamFilter, Llama3JsonDecidesOnTheFirstCharacter) {
  ToolStreamFilter call(ToolCallFormat::kLlama3Json);
  const std::string one = "  {\"name\": \"f\", \"parameters\": {\"x\": \"}\"}}";
  Fed fed = feed_bytewise(call, one + "; {\"name\": \"g\", \"parameters\": {}}");
  EXPECT_EQ(fed.content, "");
  ASSERT_EQ(fed.calls.size(), 2u);
  EXPECT_EQ(fed.ready_at[0], one.size()) << "out at the object's last brace";
  EXPECT_EQ(fed.calls[0].arguments, R"({"x":"}"})");
  EXPECT_EQ(fed.calls[1].name, "g");
  EXPECT_TRUE(call.finish().calls.empty());
  ToolStreamFilter tagged(ToolCallFormat::kLlama3Json);
  fed = feed_bytewise(tagged,
                      "Let me look. <|python_tag|>{\"name\": \"f\", \"parameters\": {}}; "
                      "{\"name\": \"g\", \"parameters\": {}}");
  EXPECT_EQ(fed.content, "Let me look. ");
  EXPECT_EQ(fed.calls.size(), 2u) << "a ';' after a call opens the next one";
  ToolStreamFilter text(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(feed_bytewise(text, "Hi {x}").content, "Hi {x}");  // a brace later is plain text
  EXPECT_TRUE(text.finish().calls.empty());
  ToolStreamFilter odd(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(feed_bytewise(odd, "{x} y").content, "");
  EXPECT_EQ(odd.finish().content, "{x} y");  // not a call after all: the whole answer
}

TEST(ToolStreamFilter, MistralListAndArgsFormsGoOutWhenTheyClose) {
  ToolStreamFilter list(ToolCallFormat::kMistral);
  const std::string calls =
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {}}]";
  Fed fed = feed_bytewise(list, "ok" + calls);
  EXPECT_EQ(fed.content, "ok");
  ASSERT_EQ(fed.calls.size(), 2u);
  EXPECT_EQ(fed.ready_at[0], 2 + calls.size());
  ToolStreamFilter args(ToolCallFormat::kMistral);
  const std::string first = "[TOOL_CALLS]f[ARGS]{\"a\": [1]}";
  fed = feed_bytewise(args, first + "[TOOL_CALLS]g[ARGS]{}");
  ASSERT_EQ(fed.calls.size(), 2u);
  EXPECT_EQ(fed.ready_at[0], first.size());
  EXPECT_EQ(fed.calls[0].arguments, R"({"a":[1]})");
  EXPECT_EQ(fed.calls[1].name, "g");
}

TEST(ToolStreamFilter, DeepSeekCallsAreDecidedAtTheEnd) {
  ToolStreamFilter f(ToolCallFormat::kDeepSeekV3);
  Fed fed = feed_bytewise(f,
                          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n"
                          "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_TRUE(fed.calls.empty());
  ParsedToolOutput end = f.finish();
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");
}

}  // namespace
}  // namespace kvw::tools
