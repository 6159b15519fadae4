// Issue 31: streamed output never leaks the start of a tool call as content, and whatever is
// held back comes out (as content or calls) when the output ends.
#include "tools/tool_stream.h"

#include <gtest/gtest.h>

namespace kvw::tools {
namespace {

// Feeds `text` one byte at a time (the worst split) and returns what was sent as content.
std::string feed_bytewise(ToolStreamFilter& f, std::string_view text) {
  std::string sent;
  for (char c : text) sent += f.push(std::string_view(&c, 1));
  return sent;
}

TEST(ToolStreamFilter, HoldsBackAPossibleMarkerAndSendsTheCallAtTheEnd) {
  ToolStreamFilter f(ToolCallFormat::kHermes);
  const std::string sent = feed_bytewise(
      f, "Checking <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>");
  EXPECT_EQ(sent, "Checking ");
  EXPECT_TRUE(f.in_call());
  ParsedToolOutput end = f.finish();
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");
  EXPECT_EQ(end.calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(end.content, "");
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
  EXPECT_EQ(feed_bytewise(f, "x[TOOL_CALLS][{\"name\": "), "x");
  ParsedToolOutput end = f.finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(end.content, "[TOOL_CALLS][{\"name\": ");
}

TEST(ToolStreamFilter, Llama3JsonDecidesOnTheFirstCharacter) {
  ToolStreamFilter call(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(feed_bytewise(call, "  {\"name\": \"f\", \"parameters\": {}}"), "");
  EXPECT_EQ(call.finish().calls.size(), 1u);
  ToolStreamFilter text(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(feed_bytewise(text, "Hi {x}"), "Hi {x}");  // a brace later is plain text
  EXPECT_TRUE(text.finish().calls.empty());
}

}  // namespace
}  // namespace kvw::tools
