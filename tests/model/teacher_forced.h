// tests/model/teacher_forced.h: the oracle for prompt logprobs (echo, prompt_logprobs): one
// forward over the whole prompt with every position's logits, log-softmaxed in double here,
// independent of the engine's prefill chunks and of its log-softmax.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/kv_dtype.h"
#include "kv/kv_arena.h"
#include "model/model.h"

namespace kvw::testing {

// log_softmax of every row of a teacher-forced forward over `tokens`: [n][n_vocab].
inline std::vector<std::vector<double>> teacher_forced_logprobs(const std::string& path,
                                                                const std::vector<int32_t>& tokens,
                                                                int32_t block_size,
                                                                KvDtype kv_dtype) {
  ModelOptions opt;
  opt.n_threads = 1;
  opt.max_batch_tokens = (int32_t)tokens.size();
  auto m = Model::load(path, opt);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return {};
  const int32_t V = (*m)->hparams().n_vocab;
  const uint32_t blocks = (uint32_t)(tokens.size() / block_size + 1);
  KvArena kv((*m)->kv_config(blocks, block_size, kv_dtype));
  std::vector<uint32_t> table(blocks);
  for (uint32_t i = 0; i < blocks; ++i) table[i] = i;
  SeqInput in{.tokens = tokens, .start_pos = 0, .block_table = table, .all_logits = true};
  std::vector<float> logits(tokens.size() * (size_t)V);
  EXPECT_TRUE((*m)->forward({&in, 1}, kv, logits.data()).ok());
  std::vector<std::vector<double>> out;
  for (size_t p = 0; p < tokens.size(); ++p) {
    const float* row = logits.data() + p * (size_t)V;
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < V; ++i) mx = std::max(mx, (double)row[i]);
    for (int32_t i = 0; i < V; ++i) sum += std::exp((double)row[i] - mx);
    std::vector<double> lp((size_t)V);
    for (int32_t i = 0; i < V; ++i) lp[(size_t)i] = (double)row[i] - mx - std::log(sum);
    out.push_back(std::move(lp));
  }
  return out;
}

}  // namespace kvw::testing
