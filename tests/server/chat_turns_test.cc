// Turn offsets for --overflow sliding-window (issue 30): one traced render instead of one render
// and tokenisation per message prefix, with the same offsets as rendering every prefix.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "server/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvw::server {
namespace {

const std::vector<std::string> kWords = {"Once", "upon",  "a",      "time", "hello",     "ok",
                                         "Be",   "brief", "system", "user", "assistant", "there"};

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind) {
  Vocab v = kind == "spm" ? build_spm_vocab(kWords) : build_bpe_vocab(kWords, kind);
  auto t = Tokenizer::create(std::move(v));
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(*t);
}

// system, then user/assistant turns, ending with a user turn.
std::vector<ChatMessage> conversation(size_t n, bool with_system) {
  std::vector<ChatMessage> m;
  if (with_system) m.push_back({"system", "Be brief"});
  for (size_t i = 0; m.size() < n; ++i) {
    m.push_back({i % 2 == 0 ? "user" : "assistant",
                 kWords[i % kWords.size()] + " " + kWords[(i * 7 + 3) % kWords.size()]});
  }
  if (m.back().role == "assistant") m.pop_back();
  return m;
}

// The definition: turn k starts at the token count of the template's render of messages
// [0, k) without the generation prompt, which must be a prefix of the whole prompt (the
// server's algorithm before issue 30, one render and tokenisation per prefix).
std::vector<int64_t> offsets_by_prefix(const Tokenizer& tok, const std::string& source,
                                       std::span<const ChatMessage> messages,
                                       const ChatPrompt& whole) {
  const std::string bos = tok.bos_id() >= 0 ? tok.token_bytes(tok.bos_id(), true) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_bytes(tok.eos_id(), true) : "";
  std::optional<ChatTemplate> tmpl;
  if (!source.empty()) tmpl.emplace(std::move(*ChatTemplate::parse(source)));
  std::vector<int64_t> starts{0};
  for (size_t k = 1; k < messages.size(); ++k) {
    std::string prefix;
    if (tmpl) {
      auto r = tmpl->render(messages.first(k),
                            {.add_generation_prompt = false, .bos_token = bos, .eos_token = eos});
      if (!r.ok()) return {};
      prefix = *r;
    } else {
      for (const ChatMessage& m : messages.first(k))
        prefix += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
    if (!whole.text.starts_with(prefix)) return {};
    const bool has_bos = !bos.empty() && prefix.starts_with(bos);
    const auto n = (int64_t)tok.encode(prefix, !has_bos, true).size();
    if (n <= starts.back() || n >= (int64_t)whole.tokens.size()) return {};
    starts.push_back(n);
  }
  return starts;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every shipped template (and the ChatML fallback) over SentencePiece and byte-level
// vocabularies whose special tokens mark the turns or do not: the same offsets as rendering
// each prefix, or none where that gives none.
TEST(ChatTurns, OffsetsEqualRenderingEachPrefix) {
  std::vector<std::pair<std::string, std::string>> sources = {{"chatml fallback", ""}};
  for (const auto& e : std::filesystem::directory_iterator(KVW_CHAT_TEMPLATE_DIR)) {
    if (e.path().extension() == ".jinja")
      sources.emplace_back(e.path().filename(), read_file(e.path()));
  }
  int compared = 0, with_offsets = 0;
  for (const std::string kind : {"spm", "qwen2", "llama3", "deepseek-llm"}) {
    auto tok = make_tokenizer(kind);
    for (const auto& [name, source] : sources) {
      auto prompter = ChatPrompter::create(*tok, source);
      ASSERT_TRUE(prompter.ok()) << name << ": " << prompter.message();
      for (size_t n = 1; n <= 7; ++n) {
        for (bool sys : {false, true}) {
          const std::vector<ChatMessage> msgs = conversation(n, sys);
          auto p = (*prompter)->build(msgs, /*with_turn_starts=*/true);
          if (!p.ok()) continue;  // a template that refuses this conversation
          const auto want = offsets_by_prefix(*tok, source, msgs, *p);
          EXPECT_EQ(p->turn_starts, want) << name << " over " << kind << ", " << msgs.size()
                                          << " messages, system " << sys << "\n"
                                          << p->text;
          ++compared;
          with_offsets += want.size() > 1;
        }
      }
    }
  }
  EXPECT_GT(compared, 300);
  EXPECT_GT(with_offsets, 200) << "most cases should have offsets to compare";
}

// Turns of uneven shape: one to five words, some on several lines, some empty.
std::vector<ChatMessage> uneven_conversation(size_t n, bool with_system) {
  std::vector<ChatMessage> m;
  if (with_system) m.push_back({"system", "Be brief\nsystem"});
  for (size_t i = 0; m.size() < n; ++i) {
    std::string text;
    const size_t words = i % 7 == 4 ? 0 : 1 + (i * 5) % 5;
    for (size_t w = 0; w < words; ++w) {
      if (w > 0) text += (i + w) % 4 == 0 ? "\n" : " ";
      text += kWords[(i * 3 + w * 5) % kWords.size()];
    }
    m.push_back({i % 2 == 0 ? "user" : "assistant", text});
  }
  if (m.back().role == "assistant") m.pop_back();
  return m;
}

// The traced offsets are checked against the template's own prefix renders at four turns only
// (1, 2, n-2, n-1); this checks every turn boundary of longer conversations against rendering
// each prefix, for every shipped template over every vocabulary kind. A template that renders
// a middle turn differently from its prefix render would show here. Where the server gives no
// offsets (prefix renders past the work bound), there is nothing to compare.
TEST(ChatTurns, EveryTurnBoundaryOfALongConversationEqualsRenderingItsPrefix) {
  std::vector<std::pair<std::string, std::string>> sources = {{"chatml fallback", ""}};
  for (const auto& e : std::filesystem::directory_iterator(KVW_CHAT_TEMPLATE_DIR)) {
    if (e.path().extension() == ".jinja")
      sources.emplace_back(e.path().filename(), read_file(e.path()));
  }
  int compared = 0, boundaries = 0, none_given = 0;
  for (const std::string kind : {"spm", "qwen2", "llama3", "deepseek-llm"}) {
    auto tok = make_tokenizer(kind);
    for (const auto& [name, source] : sources) {
      auto prompter = ChatPrompter::create(*tok, source);
      ASSERT_TRUE(prompter.ok()) << name << ": " << prompter.message();
      for (size_t n : {24, 41}) {
        for (bool sys : {false, true}) {
          for (bool uneven : {false, true}) {
            const std::vector<ChatMessage> msgs =
                uneven ? uneven_conversation(n, sys) : conversation(n, sys);
            auto p = (*prompter)->build(msgs, /*with_turn_starts=*/true);
            if (!p.ok()) continue;  // a template that refuses this conversation
            const auto want = offsets_by_prefix(*tok, source, msgs, *p);
            if (p->turn_starts.empty()) {  // no offsets given (prefix renders past the bound)
              none_given += want.size() > 1;
              continue;
            }
            ASSERT_EQ(p->turn_starts, want)
                << name << " over " << kind << ", " << msgs.size() << " messages, system " << sys
                << ", uneven " << uneven << "\n"
                << p->text;
            ++compared;
            boundaries += (int)want.size() - 1;
          }
        }
      }
    }
  }
  std::printf(
      "%d conversations, %d turn boundaries equal to prefix renders; %d had offsets by "
      "prefix renders but none given\n",
      compared, boundaries, none_given);
  EXPECT_GT(compared, 150);
  EXPECT_GT(boundaries, 4000) << "most conversations should have offsets to compare";
}

// The quadratic path: 4,000 messages rendered and tokenised once each plus a few checks, not
// 4,000 prefix renders (~2e8 bytes; 20,000 messages would be ~5e9). Fails if the offsets go
// back to one render per prefix.
TEST(ChatTurns, FourThousandMessagesCostAFewRendersNotOnePerMessage) {
  auto tok = make_tokenizer("qwen2");
  const std::string qwen =
      read_file(std::string(KVW_CHAT_TEMPLATE_DIR) + "/qwen2.5-instruct.jinja");
  for (const std::string& source : {std::string(), qwen}) {
    auto prompter = ChatPrompter::create(*tok, source);
    ASSERT_TRUE(prompter.ok()) << prompter.message();
    const std::vector<ChatMessage> msgs = conversation(4001, true);
    auto p = (*prompter)->build(msgs, /*with_turn_starts=*/true);
    ASSERT_TRUE(p.ok()) << p.message();
    ASSERT_EQ(p->turn_starts.size(), msgs.size()) << "every message has its offset";
    EXPECT_LE(p->num_renders, 5);
    EXPECT_LE(p->num_tokenized_bytes, 3 * p->text.size());
    // Spot checks against the definition at both ends.
    const auto head = offsets_by_prefix(*tok, source, std::span(msgs).first(5),
                                        *(*prompter)->build(std::span(msgs).first(5), true));
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(p->turn_starts[k], head[k]) << k;
  }
}

// A vocabulary without turn markers among its special tokens (one fragment of text): the
// offsets are still exact, and the work stays within the factor (or no offsets are given).
TEST(ChatTurns, TextOnlyTurnMarkersStayExactWithinTheWorkBound) {
  auto tok = make_tokenizer("spm");  // no <|im_start|>: ChatML's markers are plain text here
  auto prompter = ChatPrompter::create(*tok, "");
  ASSERT_TRUE(prompter.ok());
  const std::vector<ChatMessage> small = conversation(7, true);
  auto p = (*prompter)->build(small, true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->turn_starts, offsets_by_prefix(*tok, "", small, *p));
  const std::vector<ChatMessage> big = conversation(4001, true);
  auto q = (*prompter)->build(big, true);
  ASSERT_TRUE(q.ok());
  EXPECT_LE(q->num_tokenized_bytes, (kTurnWorkFactor + 2) * q->text.size());
  EXPECT_LE(q->num_renders, 5);
}

}  // namespace
}  // namespace kvw::server
