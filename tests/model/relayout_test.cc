// make-model --from (model/relayout.h) on trained weights: stories260K and kvwarden-default
// rewritten as phi3 (fused attn_qkv and gate/up ffn_up, NEOX rope), qwen2 (zero Q/K/V biases,
// NEOX rope) and Mistral (llama with a window as long as the context) are the same model, so
// those families' code paths greedy-decode the original llama file's tokens exactly: alone,
// batched, with chunked prefill, over f16 and int8 KV. Trained weights have no near-tied
// logits, unlike the families' random-weight tests. (A window shorter than the context is
// checked against the numpy reference: tests/reference, stories260k_mistral_window.)
#include "model/relayout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "gguf/gguf_file.h"
#include "greedy_batched.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

using Tokens = std::vector<int32_t>;

const std::vector<std::string> kPrompts = {"Once upon a time", "Tom and his dog went to the park",
                                           "The little bird", "Lily was sad because"};
constexpr int kNew = 40;

std::string stories_path() {
  const char* dir = std::getenv("KVW_TEST_MODELS");
  return dir == nullptr ? "" : std::string(dir) + "/stories260K.gguf";
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::vector<Tokens> prompts;
};

Loaded load(const std::string& path) {
  Loaded r;
  ModelOptions opt;
  opt.n_threads = 2;
  opt.max_batch_tokens = 256;
  auto m = Model::load(path, opt);
  EXPECT_TRUE(m.ok()) << path << ": " << (m.ok() ? "" : m.message());
  if (!m.ok()) return r;
  r.model = std::move(m.value());
  auto tok = Tokenizer::from_gguf(r.model->file());
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.message());
  if (!tok.ok()) return r;
  for (const std::string& p : kPrompts) r.prompts.push_back((*tok)->encode(p, true, false));
  return r;
}

std::vector<Tokens> greedy(Model& m, const std::vector<Tokens>& prompts, int chunk,
                           KvDtype kv_dtype) {
  return testutil::greedy_batched(m, prompts, kNew, chunk, kv_dtype, 8);
}

// Each prompt decoded on its own, with whole-prompt prefill.
std::vector<Tokens> greedy_alone(Model& m, const std::vector<Tokens>& prompts, KvDtype kv_dtype) {
  std::vector<Tokens> out;
  for (const Tokens& p : prompts) out.push_back(greedy(m, {p}, 256, kv_dtype)[0]);
  return out;
}

struct Layout {
  const char* arch;
  bool mistral;  // llama with attention.sliding_window = the trained context
};

// The converted file is what the family loads: its architecture, NEOX rope, the fused or biased
// tensors, the window.
void expect_layout(const Model& m, const Layout& l) {
  const ModelHParams& hp = m.hparams();
  EXPECT_EQ(hp.arch, l.arch);
  const bool neox = std::string(l.arch) != "llama";
  EXPECT_EQ(hp.rope.style, neox ? RopeStyle::kNeox : RopeStyle::kNormal);
  EXPECT_EQ(hp.qkv_fused, std::string(l.arch) == "phi3");
  EXPECT_EQ(hp.gate_up_fused, std::string(l.arch) == "phi3");
  EXPECT_EQ(hp.qkv_bias, std::string(l.arch) == "qwen2");
  EXPECT_EQ(hp.sliding_window, l.mistral ? hp.n_ctx_train : 0);
}

// kv_dtypes as in engine_relayout_test: under the sanitizers the default model runs f16 KV
// alone (stories260K keeps int8 there; the default model's int8 runs in Release).
void check_same_greedy_in_every_layout(const std::string& source, const std::string& tag,
                                       std::vector<KvDtype> kv_dtypes) {
  ASSERT_TRUE(std::filesystem::exists(source)) << source;
  Loaded original = load(source);
  ASSERT_NE(original.model, nullptr);
  for (KvDtype kv : kv_dtypes) {
    const auto want = greedy_alone(*original.model, original.prompts, kv);
    for (const Layout& l : {Layout{"phi3", false}, Layout{"qwen2", false}, Layout{"llama", true}}) {
      SCOPED_TRACE(tag + " as " + l.arch + (l.mistral ? " (Mistral)" : "") +
                   (kv == KvDtype::kInt8 ? ", int8 KV" : ", f16 KV"));
      const std::string out = ::testing::TempDir() + "/relayout_" + tag + "_" + l.arch + ".gguf";
      const int32_t window = l.mistral ? original.model->hparams().n_ctx_train : 0;
      const Status st = relayout_llama(source, {.arch = l.arch, .sliding_window = window}, out);
      ASSERT_TRUE(st.ok()) << st.message();
      Loaded converted = load(out);
      ASSERT_NE(converted.model, nullptr);
      expect_layout(*converted.model, l);
      ASSERT_EQ(converted.prompts, original.prompts);  // the tokenizer came along
      EXPECT_EQ(greedy_alone(*converted.model, converted.prompts, kv), want);
      EXPECT_EQ(greedy(*converted.model, converted.prompts, 256, kv), want);
      EXPECT_EQ(greedy(*converted.model, converted.prompts, 3, kv), want);  // chunked prefill
    }
  }
}

TEST(Relayout, Stories260KGreedyIsTheLlamaFilesInPhi3Qwen2AndMistralLayouts) {
  check_same_greedy_in_every_layout(stories_path(), "stories", {KvDtype::kF16, KvDtype::kInt8});
}

TEST(Relayout, DefaultModelGreedyIsTheLlamaFilesInPhi3Qwen2AndMistralLayouts) {
  std::vector<KvDtype> kv_dtypes = {KvDtype::kF16, KvDtype::kInt8};
  if (std::getenv("KVW_SANITIZED") != nullptr) kv_dtypes = {KvDtype::kF16};
  check_same_greedy_in_every_layout(KVW_DEFAULT_MODEL_FILE, "default", kv_dtypes);
}

// A file the rewrite cannot express as the same model is refused naming the file and why.
TEST(Relayout, RefusesFilesThatAreNotLlamaOrNotTheSameModelInTheTarget) {
  const std::string phi3 = ::testing::TempDir() + "/relayout_refuse_phi3.gguf";
  ASSERT_TRUE(relayout_llama(stories_path(), {.arch = "phi3"}, phi3).ok());
  const std::string out = ::testing::TempDir() + "/relayout_refused.gguf";
  Status st = relayout_llama(phi3, {.arch = "qwen2"}, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs a llama file, found 'phi3'"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(phi3), std::string::npos) << st.message();
  st = relayout_llama(stories_path(), {.arch = "gemma2"}, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("phi3, qwen2 or llama"), std::string::npos) << st.message();
  st = relayout_llama(stories_path(), {.arch = "llama", .sliding_window = -1}, out);
  EXPECT_FALSE(st.ok());
}

}  // namespace
}  // namespace kvw
