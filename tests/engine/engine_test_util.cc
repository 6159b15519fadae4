#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model_maker.h"

namespace kvw::testutil {

std::string tiny_model_path(uint64_t seed) {
  const std::string path = ::testing::TempDir() + "/engine_tiny_" + std::to_string(seed) + ".gguf";
  MakeModelSpec spec;
  spec.seed = seed;
  Status st = make_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

std::string poisoned_model_path(const std::string& src, int32_t token, float value) {
  auto file = GgufFile::open(src);
  EXPECT_TRUE(file.ok()) << file.message();
  GgufWriter w((*file)->version(), (*file)->alignment());
  for (const auto& kv : (*file)->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : (*file)->tensors()) {
    const uint8_t* d = (*file)->tensor_data(t);
    std::vector<uint8_t> bytes(d, d + t.num_bytes);
    if (t.name == "token_embd.weight") {
      EXPECT_EQ(t.type, GgmlType::kF32);
      const int64_t n_embd = t.shape[0];
      auto* row = reinterpret_cast<float*>(bytes.data()) + token * n_embd;
      for (int64_t i = 0; i < n_embd; ++i) row[i] = value;
    }
    w.add_tensor(t.name, t.type, t.shape, std::move(bytes));
  }
  const std::string path = ::testing::TempDir() + "/engine_poisoned.gguf";
  Status st = w.write(path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

EngineConfig config_with_blocks(const std::string& model, uint32_t num_blocks,
                                const SpecConfig& spec) {
  EngineConfig cfg;
  cfg.sched.spec = spec;
  cfg.model_path = model;
  cfg.n_threads = 1;
  cfg.reserve_bytes = 1 << 20;
  cfg.sched.max_num_batched_tokens = 256;
  cfg.sched.max_num_seqs = 16;
  cfg.sched.max_model_len = 512;
  cfg.check_invariants_every_step = true;
  // Plan once with a generous budget to learn the fixed rows and the block size in bytes.
  cfg.memory_budget_bytes = uint64_t{32} << 20;
  auto e = Engine::create(cfg);
  EXPECT_TRUE(e.ok()) << e.message();
  const auto& b = (*e)->budget();
  // A draft model's pool has as many blocks as the target's (planner::plan_engine_budget).
  cfg.memory_budget_bytes = b.total_bytes - b.kv_pool_bytes - b.draft_kv_pool_bytes +
                            b.kv_pool_bytes_for(num_blocks) +
                            num_blocks * b.draft_kv_bytes_per_block;
  return cfg;
}

std::vector<int32_t> prompt(uint64_t seed, int len, int32_t n_vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, n_vocab - 1);  // skip unk/bos/eos
  std::vector<int32_t> p((size_t)len);
  for (auto& t : p) t = d(rng);
  return p;
}

std::unique_ptr<Engine> make_engine(const EngineConfig& cfg) {
  auto e = Engine::create(cfg);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(*e) : nullptr;
}

GenerationRequest greedy(std::vector<int32_t> p, int32_t max_tokens, const GenSampling& s) {
  GenerationRequest r;
  r.prompt = std::move(p);
  r.max_tokens = max_tokens;
  r.sampling = s;
  r.ignore_eos = true;
  return r;
}

TokenChannel::Collected run_one(Engine& e, const GenerationRequest& r) {
  auto ch = e.submit(r);
  EXPECT_TRUE(ch.ok()) << ch.message();
  return (*ch)->collect();
}

std::vector<TokenChannel::Collected> run_batch(Engine& e,
                                               const std::vector<GenerationRequest>& rs) {
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (const auto& r : rs) {
    auto ch = e.submit(r);
    EXPECT_TRUE(ch.ok()) << ch.message();
    if (ch.ok()) chs.push_back(*ch);
  }
  std::vector<TokenChannel::Collected> out;
  for (auto& ch : chs) out.push_back(ch->collect());
  return out;
}

void expect_all_free(Engine& e) {
  e.shutdown();
  const KvManager& kv = e.kv_manager();
  kv.check_invariants();
  EXPECT_EQ(kv.num_sequences(), 0u);
  EXPECT_EQ(kv.num_allocatable_blocks(), kv.num_blocks());
}

}  // namespace kvw::testutil
