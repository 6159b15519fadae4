// Memory is the product: while a load runs, the process's resident memory stays within the
// start-up budget plus a fixed overhead. kFixedOverheadBytes covers what the budget does not
// model and does not grow with load: the test binary and shared libraries already resident at
// the baseline are subtracted; what remains is thread stacks actually touched, malloc arena
// headers of the worker threads, and request bookkeeping bounded by --max-num-seqs and the
// request queue capacity. Load-proportional growth outside the pools would exceed it quickly:
// this load runs 48 requests x 96 tokens through a pool sized for far fewer at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

constexpr uint64_t kFixedOverheadBytes = 16ull << 20;

uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}

TEST(EngineMemory, PeakRssStaysUnderBudgetPlusFixedOverheadUnderLoad) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's shadow memory inflates RSS (measured in the Release build)";
#endif
  MakeModelSpec s;
  s.n_embd = 256;
  s.n_layer = 4;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.n_ff = 768;
  s.n_vocab = 4096;
  s.weight_type = GgmlType::kQ8_0;
  const std::string path = ::testing::TempDir() + "/rss_model.gguf";
  ASSERT_TRUE(make_model(s, path).ok());

  const uint64_t baseline = rss_bytes();
  EngineConfig cfg = testutil::config_with_blocks(path, 40);
  auto created = Engine::create(cfg);
  ASSERT_TRUE(created.ok()) << created.message();
  Engine& e = **created;
  const uint64_t budget = e.budget().total_bytes;

  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{rss_bytes()};
  std::thread sampler([&] {
    while (!done.load()) {
      peak.store(std::max(peak.load(), rss_bytes()));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (int i = 0; i < 48; ++i) {
    GenerationRequest r;
    r.prompt = testutil::prompt(100 + i, 32, e.model().hparams().n_vocab);
    r.max_tokens = 64;
    r.ignore_eos = true;
    auto ch = e.submit(r);
    ASSERT_TRUE(ch.ok()) << ch.message();
    chs.push_back(*ch);
  }
  for (auto& ch : chs) EXPECT_EQ(ch->collect().reason, FinishReason::kLength);
  done = true;
  sampler.join();
  EXPECT_GT(e.stats().num_preemptions, 0u) << "the load should press on the KV pool";
  const uint64_t grown = peak.load() > baseline ? peak.load() - baseline : 0;
  std::printf("baseline %.1f MiB, peak %.1f MiB, budget %.1f MiB, grown %.1f MiB\n",
              baseline / 1048576.0, peak.load() / 1048576.0, budget / 1048576.0, grown / 1048576.0);
  EXPECT_LE(grown, budget + kFixedOverheadBytes);
  e.shutdown();
}

// The start-up table is the planner's (`kvwarden plan --engine`) and matches what was allocated.
TEST(EngineMemory, StartupTableEqualsThePlanAndTheAllocations) {
  MakeModelSpec s;
  s.weight_type = GgmlType::kQ8_0;
  const std::string path = ::testing::TempDir() + "/table_model.gguf";
  ASSERT_TRUE(make_model(s, path).ok());
  EngineConfig cfg = testutil::config_with_blocks(path, 50);
  auto created = Engine::create(cfg);
  ASSERT_TRUE(created.ok()) << created.message();
  Engine& e = **created;
  const auto& b = e.budget();
  EXPECT_EQ(b.weights_bytes, e.model().weights().total_bytes);
  EXPECT_EQ(b.workspace_bytes, e.model().workspace_bytes());
  EXPECT_EQ(b.num_blocks, 50u);
  EXPECT_EQ(b.kv_pool_bytes, b.num_blocks * b.kv_bytes_per_block);
  EXPECT_EQ(b.total_bytes, b.weights_bytes + b.workspace_bytes + b.kv_pool_bytes + b.reserve_bytes);
  EXPECT_LE(b.total_bytes, cfg.memory_budget_bytes);
  e.shutdown();
  EXPECT_EQ(e.kv_manager().num_blocks(), 50u);
  EXPECT_EQ(b.kv_bytes_per_block,
            KvArena::block_bytes(KvArenaConfig{.n_layer = e.model().hparams().n_layer,
                                               .n_kv_heads = e.model().hparams().n_head_kv,
                                               .head_dim = e.model().hparams().head_dim,
                                               .block_size = cfg.block_size,
                                               .num_blocks = 1,
                                               .dtype = cfg.kv_dtype}));
}

}  // namespace
}  // namespace kvw
