// Renders the real chat templates of popular model families (tests/chat/templates/*.jinja, as
// published in their tokenizer_config.json) and checks the exact prompt text. Expected strings
// follow each template's semantics and were cross-checked against Python Jinja2 3.1 with
// Hugging Face's settings (see render_reference.py).
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvw {
namespace {

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(KVW_CHAT_TEMPLATE_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing template file " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// system + user + assistant + user; the assistant turn has padding some templates strip.
const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", " Hi there "},
    {"user", "Who are you?"},
};
const std::vector<ChatMessage> kNoSystem(kConversation.begin() + 1, kConversation.end());

Result<std::string> render_file(const std::string& file, const std::vector<ChatMessage>& messages,
                                const std::string& bos, const std::string& eos,
                                bool add_generation_prompt = true) {
  auto tmpl = ChatTemplate::parse(read_template(file));
  if (!tmpl.ok()) return tmpl.error();
  ChatRenderOptions opts;
  opts.add_generation_prompt = add_generation_prompt;
  opts.bos_token = bos;
  opts.eos_token = eos;
  opts.now_unix = 1754438400;  // 2025-08-06 00:00 UTC, for templates that call strftime_now
  return tmpl->render(messages, opts);
}

std::string render_ok(const std::string& file, const std::vector<ChatMessage>& messages,
                      const std::string& bos, const std::string& eos,
                      bool add_generation_prompt = true) {
  auto r = render_file(file, messages, bos, eos, add_generation_prompt);
  EXPECT_TRUE(r.ok()) << file << ": " << (r.ok() ? "" : r.message());
  return r.ok() ? r.value() : "";
}

TEST(ChatTemplate, Llama2ChatFoldsSystemIntoFirstInstAndStripsTurns) {
  EXPECT_EQ(
      render_ok("llama2-chat.jinja", kConversation, "<s>", "</s>"),
      "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s>"
      "<s>[INST] Who are you? [/INST]");
}

TEST(ChatTemplate, Llama2ChatRejectsNonAlternatingRoles) {
  const std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  auto r = render_file("llama2-chat.jinja", bad, "<s>", "</s>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplate, Llama3InstructTrimsContentAndOpensAssistantHeader) {
  EXPECT_EQ(render_ok("llama3-instruct.jinja", kConversation, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
            "assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama3InstructWithoutGenerationPromptEndsAfterLastTurn) {
  const std::string out = render_ok("llama3-instruct.jinja", kNoSystem, "<|begin_of_text|>",
                                    "<|eot_id|>", /*add_generation_prompt=*/false);
  EXPECT_EQ(out,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>");
}

TEST(ChatTemplate, Llama32InstructWritesDatedSystemHeader) {
  // No strftime_now is provided, so the template falls back to its fixed date.
  EXPECT_EQ(render_ok("llama3.2-instruct.jinja", kConversation, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "You are a helpful assistant<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama32InstructWithoutSystemHasEmptySystemBlock) {
  EXPECT_EQ(
      render_ok("llama3.2-instruct.jinja", {{"user", "Hi"}}, "<|begin_of_text|>", "<|eot_id|>"),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MistralV01RendersInstTurns) {
  EXPECT_EQ(render_ok("mistral-v0.1.jinja", kNoSystem, "<s>", "</s>"),
            "<s>[INST] Hello [/INST] Hi there </s>[INST] Who are you? [/INST]");
}

TEST(ChatTemplate, MistralV01RejectsSystemRole) {
  auto r = render_file("mistral-v0.1.jinja", kConversation, "<s>", "</s>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplate, MistralNemoPutsSystemIntoLastUserTurn) {
  EXPECT_EQ(render_ok("mistral-nemo.jinja", kConversation, "<s>", "</s>"),
            "<s>[INST]Hello[/INST] Hi there </s>[INST]You are a helpful assistant\n\nWho are "
            "you?[/INST]");
}

TEST(ChatTemplate, MistralNemoRejectsTwoUserTurnsInARow) {
  const std::vector<ChatMessage> bad = {{"system", "s"}, {"user", "a"}, {"user", "b"}};
  auto r = render_file("mistral-nemo.jinja", bad, "<s>", "</s>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(),
            "After the optional system message, conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(ChatTemplate, Qwen25UsesGivenSystemMessage) {
  EXPECT_EQ(render_ok("qwen2.5-instruct.jinja", kConversation, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n Hi there <|im_end|>\n"
            "<|im_start|>user\nWho are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen25AddsDefaultSystemMessageWhenNoneGiven) {
  EXPECT_EQ(render_ok("qwen2.5-instruct.jinja", {{"user", "Hello"}}, "", "<|im_end|>"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen25RejectsEmptyConversationLikeJinja) {
  // messages[0]['role'] on an empty list is an error in Jinja, not an empty role.
  auto r = render_file("qwen2.5-instruct.jinja", {}, "", "<|im_end|>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "chat template 15:23: list object has no element 0");
}

TEST(ChatTemplate, Qwen3KeepsReasoningOnlyAfterTheLastUserQuery) {
  // Earlier assistant turns lose their <think> block; the one after the last query keeps it.
  const std::vector<ChatMessage> msgs = {{"user", "2+2?"},
                                         {"assistant", "<think>\nadd them\n</think>\n\n4"},
                                         {"user", "and 3+3?"},
                                         {"assistant", "<think>\nagain\n</think>\n\n6"}};
  EXPECT_EQ(
      render_ok("qwen3.jinja", msgs, "", "<|im_end|>"),
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
      "<|im_start|>user\nand 3+3?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nagain\n</think>\n\n6<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      render_ok("qwen3.jinja", kConversation, "", "<|im_end|>"),
      "<|im_start|>system\nYou are a helpful "
      "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
      "<|im_start|>assistant\n Hi there <|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
      "<|im_start|>assistant\n");
}

TEST(ChatTemplate, DeepSeekV2UsesUserAssistantPrefixes) {
  EXPECT_EQ(render_ok("deepseek-v2.jinja", kConversation, "<｜begin▁of▁sentence｜>",
                      "<｜end▁of▁sentence｜>"),
            "<｜begin▁of▁sentence｜>You are a helpful assistant\n\nUser: Hello\n\n"
            "Assistant:  Hi there <｜end▁of▁sentence｜>User: Who are you?\n\nAssistant:");
}

TEST(ChatTemplate, DeepSeekR1DistillOpensThinkBlock) {
  EXPECT_EQ(render_ok("deepseek-r1-distill.jinja", kConversation, "<｜begin▁of▁sentence｜>",
                      "<｜end▁of▁sentence｜>"),
            "<｜begin▁of▁sentence｜>You are a helpful assistant<｜User｜>Hello"
            "<｜Assistant｜> Hi there <｜end▁of▁sentence｜><｜User｜>Who are "
            "you?<｜Assistant｜><think>\n");
}

TEST(ChatTemplate, DeepSeekR1DistillDropsReasoningBeforeThinkEnd) {
  const std::vector<ChatMessage> msgs = {
      {"user", "2+2?"}, {"assistant", "<think>\nadd\n</think>\n\n4"}, {"user", "and 3+3?"}};
  EXPECT_EQ(render_ok("deepseek-r1-distill.jinja", msgs, "<s>", "</s>"),
            "<s><｜User｜>2+2?<｜Assistant｜>\n\n4<｜end▁of▁sentence｜><｜User｜>and "
            "3+3?<｜Assistant｜><think>\n");
}

TEST(ChatTemplate, Gemma2MapsAssistantToModelAndTrims) {
  EXPECT_EQ(render_ok("gemma-2-it.jinja", kNoSystem, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n"
            "<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nWho are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
}

TEST(ChatTemplate, Gemma2RaisesOnSystemRole) {
  auto r = render_file("gemma-2-it.jinja", kConversation, "<bos>", "<eos>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "System role not supported");
}

TEST(ChatTemplate, Gemma2RaisesWhenRolesDoNotAlternate) {
  const std::vector<ChatMessage> bad = {{"user", "a"}, {"assistant", "b"}, {"assistant", "c"}};
  auto r = render_file("gemma-2-it.jinja", bad, "<bos>", "<eos>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplate, Phi35MiniTagsEveryTurn) {
  EXPECT_EQ(render_ok("phi-3.5-mini.jinja", kConversation, "<s>", "<|endoftext|>"),
            "<|system|>\nYou are a helpful assistant<|end|>\n"
            "<|user|>\nHello<|end|>\n"
            "<|assistant|>\n Hi there <|end|>\n"
            "<|user|>\nWho are you?<|end|>\n"
            "<|assistant|>\n");
}

TEST(ChatTemplate, Phi35MiniEndsWithEosWithoutGenerationPrompt) {
  EXPECT_EQ(render_ok("phi-3.5-mini.jinja", {{"user", "Hi"}}, "<s>", "<|endoftext|>", false),
            "<|user|>\nHi<|end|>\n<|endoftext|>");
}

TEST(ChatTemplate, ModelMakerChatMlTemplateRenders) {
  // src/model/model_maker.h kChatMlTemplate, character for character.
  const char* const kChatMl =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  auto tmpl = ChatTemplate::parse(kChatMl);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  auto out = tmpl->render(kConversation, ChatRenderOptions{});
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(out.value(),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n Hi there <|im_end|>\n"
            "<|im_start|>user\nWho are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

// gpt-oss's harmony format (templates/gpt-oss-harmony.jinja, a fixture in the shape of its
// template): the system header from a macro, the system role as a developer message, assistant
// turns on the final channel, <|start|>assistant as the generation prompt.
TEST(ChatTemplate, GptOssHarmonyRendersChannelsAndDeveloperMessage) {
  const std::string header =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-06\n\nReasoning: medium\n\n# Valid "
      "channels: analysis, "
      "commentary, final. Channel must be included for every message.<|end|>";
  EXPECT_EQ(render_ok("gpt-oss-harmony.jinja", kConversation, "<|startoftext|>", "<|return|>"),
            header +
                "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant<|end|>"
                "<|start|>user<|message|>Hello<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Hi there<|end|>"
                "<|start|>user<|message|>Who are you?<|end|>"
                "<|start|>assistant");
  // A final answer after the last user turn ends with <|return|>, as harmony's last message.
  EXPECT_EQ(render_ok("gpt-oss-harmony.jinja", {{"user", "Hi"}, {"assistant", "Hello!"}},
                      "<|startoftext|>", "<|return|>", false),
            header +
                "<|start|>user<|message|>Hi<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>");
  EXPECT_FALSE(render_file("gpt-oss-harmony.jinja", {{"tool", "x"}}, "", "").ok());
}

TEST(ChatTemplate, StrftimeNowFormatsTheRenderTimeInUtc) {
  auto tmpl =
      ChatTemplate::parse("{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ChatRenderOptions opts;
  opts.now_unix = 1754438400 + 13 * 3600 + 5 * 60;
  auto out = tmpl->render({}, opts);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(out.value(), "2025-08-06 13:05|06 Aug 2025");
  // Unpinned: today's date, whatever it is, in the same shape.
  auto today = tmpl->render({}, ChatRenderOptions{});
  ASSERT_TRUE(today.ok());
  EXPECT_EQ(today.value().size(), out.value().size());
  EXPECT_FALSE(ChatTemplate::parse("{{ strftime_now(3) }}")->render({}, opts).ok());
}

TEST(ChatTemplate, ModelMakerHarmonyTemplateRenders) {
  // src/model/families/gpt_oss.cc kHarmonyTemplate, character for character.
  const char* const kHarmony =
      "{%- for message in messages -%}"
      "{%- if message['role'] == 'assistant' -%}"
      "{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' -}}"
      "{%- else -%}"
      "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' -}}"
      "{%- endif -%}"
      "{%- endfor -%}"
      "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}";
  auto tmpl = ChatTemplate::parse(kHarmony);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  const std::vector<ChatMessage> turns = {{"user", "Hello"}, {"assistant", "Hi"}, {"user", "Bye"}};
  auto out = tmpl->render(turns, ChatRenderOptions{});
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(out.value(),
            "<|start|>user<|message|>Hello<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hi<|end|>"
            "<|start|>user<|message|>Bye<|end|><|start|>assistant");
}

TEST(ChatTemplate, ParsedTemplateRendersRepeatedlyAndAfterMove) {
  auto tmpl = ChatTemplate::parse(read_template("qwen2.5-instruct.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ChatTemplate moved = std::move(tmpl.value());
  auto a = moved.render(kConversation, ChatRenderOptions{});
  auto b = moved.render(kConversation, ChatRenderOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value(), b.value());
}

}  // namespace
}  // namespace kvw
