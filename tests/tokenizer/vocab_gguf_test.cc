// tests/tokenizer/vocab_gguf_test.cc: tokenizer.ggml.* metadata <-> Vocab, and the real
// 512-token SentencePiece vocabulary of stories260K.gguf (skipped if KVW_TEST_MODELS is unset).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "corpus.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kvw {
namespace {

using Ids = std::vector<int32_t>;

std::unique_ptr<GgufFile> open_stories() {
  const char* dir = std::getenv("KVW_TEST_MODELS");
  if (dir == nullptr) return nullptr;
  auto f = GgufFile::open(std::string(dir) + "/stories260K.gguf");
  EXPECT_TRUE(f.ok()) << f.message();
  return f.ok() ? std::move(f).value() : nullptr;
}

TEST(VocabGguf, Stories260KEncodesOnceUponATime) {
  auto file = open_stories();
  ASSERT_TRUE(file) << "KVW_TEST_MODELS/stories260K.gguf not found (tests/models)";
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ((*tok)->n_vocab(), 512);
  EXPECT_EQ((*tok)->vocab().model, "llama");
  // <s> "▁Once" "▁upon" "▁a" "▁time": each word is one piece of this vocabulary.
  const Ids ids = (*tok)->encode("Once upon a time", true, false);
  EXPECT_EQ(ids, (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ((*tok)->decode(ids), "Once upon a time");
  EXPECT_TRUE((*tok)->is_end_of_generation(2));
}

TEST(VocabGguf, Stories260KRoundTripsAStoryAndTheTortureCorpus) {
  auto file = open_stories();
  ASSERT_TRUE(file) << "KVW_TEST_MODELS/stories260K.gguf not found (tests/models)";
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.message();
  const std::string story =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "sunshine. One day, she saw a big, red ball in the park. \"Can I play with you?\" she "
      "asked.\nThe ball bounced high, and Lily laughed. They were happy friends forever!";
  const Ids ids = (*tok)->encode(story, true, false);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_LT(ids.size(), story.size() / 2) << "merges should make words into few tokens";
  EXPECT_EQ((*tok)->decode(ids), story);
  for (const std::string& text : testing::torture_corpus()) {
    EXPECT_EQ((*tok)->decode((*tok)->encode(text, true, false)), text);
  }
}

TEST(VocabGguf, WrittenVocabReadsBackAndTokenizesTheSame) {
  for (bool spm : {true, false}) {
    Vocab v = spm ? build_spm_vocab(testing::test_words(), 600)
                  : build_bpe_vocab(testing::test_words(), "llama3", 600);
    v.chat_template = "{{ messages }}";
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    vocab_to_gguf(v, w);
    const std::string path = ::testing::TempDir() + (spm ? "/spm_vocab.gguf" : "/bpe_vocab.gguf");
    ASSERT_TRUE(w.write(path).ok());
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    Result<Vocab> back = vocab_from_gguf(**file);
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->tokens, v.tokens);
    EXPECT_EQ(back->types, v.types);
    EXPECT_EQ(back->merges, v.merges);
    EXPECT_EQ(back->bos_id, v.bos_id);
    EXPECT_EQ(back->eos_id, v.eos_id);
    EXPECT_EQ(back->unk_id, v.unk_id);
    EXPECT_EQ(back->eot_id, v.eot_id);
    EXPECT_EQ(back->pad_id, -1);
    EXPECT_EQ(back->add_bos, v.add_bos);
    EXPECT_EQ(back->add_space_prefix, v.add_space_prefix);
    EXPECT_EQ(back->chat_template, v.chat_template);
    auto a = Tokenizer::create(v);
    auto b = Tokenizer::create(std::move(back).value());
    ASSERT_TRUE(a.ok() && b.ok());
    const std::string text = "Hello world, the cat sat on the mat 12345 \xF0\x9F\x98\x80";
    EXPECT_EQ((*a)->encode(text, true, true), (*b)->encode(text, true, true));
  }
}

TEST(VocabGguf, MissingOrBadKeysAreErrorsNamingTheKey) {
  const std::string path = ::testing::TempDir() + "/bad_vocab.gguf";
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
    ASSERT_TRUE(w.write(path).ok());
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok());
    Result<Vocab> v = vocab_from_gguf(**file);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.message().find("tokenizer.ggml.merges"), std::string::npos) << v.message();
  }
  {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    w.set_u32("tokenizer.ggml.bos_token_id", 7);
    ASSERT_TRUE(w.write(path).ok());
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok());
    Result<Vocab> v = vocab_from_gguf(**file);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.message().find("bos_token_id"), std::string::npos) << v.message();
  }
}

}  // namespace
}  // namespace kvw
