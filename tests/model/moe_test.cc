// Mixtral-style MoE llama files end to end in the model: the invariants the engine rests on hold
// for routed experts (logits bit-identical alone, in batches, in chunks and with any thread
// count, for float and quantised experts), and inconsistent expert metadata or tensors are
// refused at load with one message naming the file, the key or tensor, and expected vs found.
#include <gtest/gtest.h>

#include "model_test_util.h"

namespace kvw {
namespace {

MakeModelSpec moe_spec(const std::string& type) {
  auto s = make_model_preset("mixtral-tiny");
  EXPECT_TRUE(s.ok());
  s->n_embd = 256;  // K-quant rows are whole 256-element super-blocks
  s->n_ff = 256;
  s->n_layer = 2;
  s->weight_type = *ggml_type_from_name(type);
  s->seed = 21;
  return *s;
}

using test::bit_equal;
using test::expect_refused;
using test::kKeepAll;
using test::random_tokens;
using test::rewrite;
using test::run_batch;
using test::write_model;

std::unique_ptr<Model> load(const std::string& path, int threads) {
  return test::load_model(path, threads);
}

class MoeForwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeForwardTest, LogitsAreBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const std::string path = write_model("moe_" + GetParam(), moe_spec(GetParam()));
  auto m = load(path, 1);
  ASSERT_EQ(m->hparams().moe.n_expert, 8);
  ASSERT_EQ(m->hparams().moe.n_expert_used, 2);
  test::expect_batch_invariant(path, KvDtype::kF16);
}

INSTANTIATE_TEST_SUITE_P(ExpertTypes, MoeForwardTest, ::testing::Values("f32", "q8_0", "q4_K"));

TEST(MoeForward, RoutingMatters) {
  // The same weights with one expert per token instead of two give other logits: the experts
  // and their weights really reach the output.
  MakeModelSpec s = moe_spec("f32");
  const std::string two = write_model("moe_k2", s);
  s.n_expert_used = 1;
  const std::string one = write_model("moe_k1", s);
  auto a = load(two, 1), b = load(one, 1);
  KvArena kva(a->kv_config(4, 16, KvDtype::kF32)), kvb(b->kv_config(4, 16, KvDtype::kF32));
  const auto tokens = random_tokens(20, a->hparams().n_vocab, 3);
  EXPECT_FALSE(bit_equal(run_batch(*a, kva, {tokens})[0], run_batch(*b, kvb, {tokens})[0]));
}

class MoeBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeModelSpec s = moe_spec("f32");
    s.n_embd = 64;
    s.n_ff = 128;
    good_ = write_model("moe_good", s);
  }
  std::string good_;
};

TEST_F(MoeBadInput, MoreExpertsUsedThanExist) {
  const std::string bad = rewrite(
      good_, "moe_used9", [](GgufWriter& w) { w.set_u32("llama.expert_used_count", 9); }, kKeepAll);
  expect_refused(bad, {"llama.expert_used_count", "expected 1..8", "found 9"});
}

TEST_F(MoeBadInput, ExpertsUsedWithoutExperts) {
  const std::string bad = rewrite(
      good_, "moe_count0", [](GgufWriter& w) { w.set_u32("llama.expert_count", 0); }, kKeepAll);
  expect_refused(bad, {"llama.expert_used_count", "expert_count is 0"});
}

TEST_F(MoeBadInput, ZeroExpertsUsed) {
  const std::string bad = rewrite(
      good_, "moe_used0", [](GgufWriter& w) { w.set_u32("llama.expert_used_count", 0); }, kKeepAll);
  expect_refused(bad, {"llama.expert_used_count", "expected 1..8", "found 0"});
}

TEST_F(MoeBadInput, MissingExpertTensor) {
  const std::string bad = rewrite(
      good_, "moe_noup", [](GgufWriter&) {},
      [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
        return t.name != "blk.1.ffn_up_exps.weight";
      });
  expect_refused(bad, {"blk.1.ffn_up_exps.weight", "missing"});
}

TEST_F(MoeBadInput, MissingRouter) {
  const std::string bad = rewrite(
      good_, "moe_norouter", [](GgufWriter&) {},
      [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
        return t.name != "blk.0.ffn_gate_inp.weight";
      });
  expect_refused(bad, {"blk.0.ffn_gate_inp.weight", "missing"});
}

TEST_F(MoeBadInput, ExpertTensorWithTooFewExperts) {
  // ffn_down_exps holding 7 experts' matrices where metadata says 8.
  const std::string bad = rewrite(
      good_, "moe_down7", [](GgufWriter&) {},
      [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
        if (t.name != "blk.0.ffn_down_exps.weight") return true;
        w.add_tensor(t.name, t.type, {t.shape[0], t.shape[1], 7},
                     std::vector<uint8_t>(p, p + t.num_bytes / 8 * 7));
        return false;
      });
  expect_refused(bad,
                 {"blk.0.ffn_down_exps.weight", "shape [128, 64, 7]", "expected [128, 64, 8]"});
}

TEST_F(MoeBadInput, ExpertTensorFlattenedTo2D) {
  const std::string bad = rewrite(
      good_, "moe_gate2d", [](GgufWriter&) {},
      [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
        if (t.name != "blk.1.ffn_gate_exps.weight") return true;
        w.add_tensor(t.name, t.type, {t.shape[0], t.shape[1] * t.shape[2]},
                     std::vector<uint8_t>(p, p + t.num_bytes));
        return false;
      });
  expect_refused(bad, {"blk.1.ffn_gate_exps.weight", "shape [64, 1024]", "expected [64, 128, 8]"});
}

TEST_F(MoeBadInput, PerExpertTensorsOfOlderConvertersAreNamed) {
  // blk.N.ffn_gate.E.weight per expert instead of the stacked blk.N.ffn_gate_exps.weight.
  const std::string bad = rewrite(
      good_, "moe_split", [](GgufWriter&) {},
      [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
        if (!t.name.ends_with("_exps.weight")) return true;
        const std::string stem = t.name.substr(0, t.name.size() - 12);  // "blk.0.ffn_gate"
        const uint64_t per = t.num_bytes / 8;
        for (int e = 0; e < 8; ++e) {
          w.add_tensor(stem + "." + std::to_string(e) + ".weight", t.type, {t.shape[0], t.shape[1]},
                       std::vector<uint8_t>(p + e * per, p + (e + 1) * per));
        }
        return false;
      });
  expect_refused(bad, {"blk.0.ffn_gate_exps.weight", "missing", "one tensor per expert",
                       "blk.0.ffn_gate.0.weight"});
}

TEST_F(MoeBadInput, DenseTensorsInsteadOfExperts) {
  // A dense llama file that claims experts: the router is the first thing missing.
  MakeModelSpec s;
  const std::string dense = write_model("dense_for_moe", s);
  const std::string bad = rewrite(
      dense, "dense_claims_moe",
      [](GgufWriter& w) {
        w.set_u32("llama.expert_count", 4);
        w.set_u32("llama.expert_used_count", 2);
      },
      kKeepAll);
  expect_refused(bad, {"blk.0.ffn_gate_inp.weight", "missing"});
}

}  // namespace
}  // namespace kvw
