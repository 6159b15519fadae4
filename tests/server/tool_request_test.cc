// Issue 31: the tool fields of a chat request: legacy functions / function_call map onto tools,
// tool_choice is read in all its shapes, and messages keep their tool_calls and tool_call_id.
#include "server/tool_request.h"

#include <gtest/gtest.h>

namespace kvw::server {
namespace {

using nlohmann::json;

ToolRequest parse_ok(const std::string& raw) {
  auto r = parse_tool_request(json::parse(raw), raw);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<ToolRequest>(r) ? std::get<ToolRequest>(r) : ToolRequest{};
}

TEST(ToolRequest, ReadsToolsInDocumentOrderAndEveryChoiceShape) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}},
      {"type": "function", "function": {"name": "g"}}])";
  ToolRequest r = parse_ok("{" + tools + "}");
  ASSERT_EQ(r.functions.size(), 2u);
  EXPECT_EQ(r.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.active());
  EXPECT_FALSE(r.forced());
  EXPECT_EQ(r.functions[0].parameters["properties"].begin().key(), "zeta");
  EXPECT_TRUE(r.functions[1].parameters.is_null());
  r = parse_ok("{" + tools + R"(, "tool_choice": "required", "parallel_tool_calls": false})");
  EXPECT_TRUE(r.forced());
  EXPECT_FALSE(r.parallel);
  EXPECT_EQ(r.callable().size(), 2u);
  r = parse_ok("{" + tools +
               R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})");
  EXPECT_EQ(r.choice, ToolChoice::kNamed);
  ASSERT_EQ(r.callable().size(), 1u);
  EXPECT_EQ(r.callable()[0].name, "g");
  r = parse_ok("{" + tools + R"(, "tool_choice": "none"})");
  EXPECT_FALSE(r.active());
}

TEST(ToolRequest, LegacyFunctionsMapOntoTools) {
  ToolRequest r = parse_ok(
      R"({"functions": [{"name": "f", "description": "d"}], "function_call": {"name": "f"}})");
  ASSERT_EQ(r.functions.size(), 1u);
  EXPECT_EQ(r.tools[0]["type"], "function");
  EXPECT_EQ(r.tools[0]["function"]["description"], "d");
  EXPECT_EQ(r.choice, ToolChoice::kNamed);
  auto bad = parse_tool_request(json::parse(R"({"functions": [{"name": "f"}],
                                                "function_call": "required"})"),
                                R"({"functions": [{"name": "f"}], "function_call": "required"})");
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_EQ(std::get<ApiError>(bad).param, "function_call");
}

TEST(ToolRequest, MessagesKeepToolCallsWithParsedArguments) {
  const json m = json::parse(R"({"role": "assistant", "tool_calls": [{"id": "call_1",
      "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]})");
  ChatMessage out{.role = "assistant", .content = ""};
  EXPECT_FALSE(read_message_tool_fields(m, "messages[1]", out).has_value());
  ASSERT_TRUE(out.tool_calls.is_array());
  const auto& args = out.tool_calls[0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args.begin().key(), "b");  // the client's order
  ChatMessage tool{.role = "tool", .content = "3"};
  EXPECT_FALSE(
      read_message_tool_fields(json{{"role", "tool"}, {"tool_call_id", "call_1"}}, "m", tool));
  EXPECT_EQ(tool.tool_call_id, "call_1");
}

}  // namespace
}  // namespace kvw::server
