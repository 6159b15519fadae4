// Issue 31: streamed output never leaks the start of a tool call as content, each call goes out
// as soon as it is whole, and whatever is held back comes out (as content or calls) when the
// output ends.
#include "tools/tool_stream.h"

#include <gtest/gtest.h>

#include "tools/tool_parser.h"

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

// Hand-written DeepSeek outputs: V3 / R1 (the name after "function", fenced JSON, a newline
// between calls) and V3.1 (name<｜tool▁sep｜>JSON).
constexpr std::string_view kDeepSeekV3 =
    "Let me check "
    "both.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
    "<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekV31 =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\", "
    "\"days\": "
    "2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜>";

// Streamed in two pieces cut at byte `cut`, calls taken after each piece.
Fed feed_split(ToolStreamFilter& f, std::string_view text, size_t cut) {
  Fed out;
  for (std::string_view piece : {text.substr(0, cut), text.substr(cut)}) {
    out.content += f.push(piece);
    size_t first = 0;
    for (ToolCall& c : f.take_calls(&first)) out.calls.push_back(std::move(c));
  }
  return out;
}

// What a client reassembles (content and calls, the calls that finish() adds included) equals
// the non-streamed parse.
void expect_adds_up(ToolStreamFilter& f, Fed fed, std::string_view text, ToolCallFormat format) {
  size_t first = 0;
  ParsedToolOutput end = f.finish(&first);
  EXPECT_EQ(first, fed.calls.size());
  for (ToolCall& c : end.calls) fed.calls.push_back(std::move(c));
  const ParsedToolOutput whole = parse_tool_calls(format, text);
  EXPECT_EQ(trim(fed.content + end.content), trim(whole.content));
  ASSERT_EQ(fed.calls.size(), whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    EXPECT_EQ(fed.calls[i].name, whole.calls[i].name);
    EXPECT_EQ(fed.calls[i].arguments, whole.calls[i].arguments);
  }
}

// Issue 31: each DeepSeek call goes out as soon as it closes (the list's end marker is not
// content), and at every split the stream adds up to the whole parse.
TEST(ToolStreamFilter, DeepSeekCallsGoOutOneByOne) {
  for (std::string_view text : {kDeepSeekV3, kDeepSeekV31}) {
    SCOPED_TRACE(std::string(text.substr(0, 40)));
    ToolStreamFilter f(ToolCallFormat::kDeepSeekV3);
    Fed fed = feed_bytewise(f, text);
    ASSERT_EQ(fed.calls.size(), 2u);
    EXPECT_EQ(fed.calls[0].name, "get_weather");
    EXPECT_EQ(fed.calls[1].name, "get_time");
    EXPECT_EQ(fed.calls[1].arguments, "{}");
    EXPECT_LT(fed.ready_at[0], text.find("get_time")) << "out before the next call is written";
    EXPECT_EQ(fed.ready_at[1], text.size());
    EXPECT_EQ(fed.content, text == kDeepSeekV3 ? "Let me check both." : "");
    expect_adds_up(f, std::move(fed), text, ToolCallFormat::kDeepSeekV3);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      ToolStreamFilter g(ToolCallFormat::kDeepSeekV3);
      expect_adds_up(g, feed_split(g, text, cut), text, ToolCallFormat::kDeepSeekV3);
    }
  }
}

// A call that does not parse, and one cut off by max_tokens, come back as content, as the
// non-streamed parse gives them.
TEST(ToolStreamFilter, MalformedDeepSeekCallsDegradeToContent) {
  const std::vector<std::string_view> texts = {
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Pa",
      "<｜tool▁calls▁begin｜>not a call<｜tool▁calls▁end｜>"};
  for (std::string_view text : texts) {
    ToolStreamFilter f(ToolCallFormat::kDeepSeekV3);
    Fed fed = feed_bytewise(f, text);
    EXPECT_TRUE(fed.calls.empty());
    ParsedToolOutput end = f.finish();
    EXPECT_TRUE(end.calls.empty());
    EXPECT_EQ(fed.content + end.content, text);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      ToolStreamFilter g(ToolCallFormat::kDeepSeekV3);
      expect_adds_up(g, feed_split(g, text, cut), text, ToolCallFormat::kDeepSeekV3);
    }
  }
}

}  // namespace
}  // namespace kvw::tools
