// Greedy decoding of several prompts together through Model::forward alone (no engine): one
// forward per step with every unfinished sequence, prefill in chunks of `chunk` tokens batched
// with the others' decodes. The model tests compare it alone vs batched vs chunked.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace kvw::testutil {

// Returns each prompt's n_new generated tokens (prompt excluded). Each sequence gets
// `blocks_per_seq` KV blocks of 16 tokens.
inline std::vector<std::vector<int32_t>> greedy_batched(
    Model& m, const std::vector<std::vector<int32_t>>& prompts, size_t n_new, int chunk,
    KvDtype kv_dtype, uint32_t blocks_per_seq) {
  const int32_t V = m.hparams().n_vocab;
  const size_t n = prompts.size();
  std::vector<std::vector<int32_t>> toks = prompts;
  std::vector<std::vector<uint32_t>> tables(n);
  std::vector<size_t> done(n, 0);
  KvArena kv(m.kv_config(blocks_per_seq * (uint32_t)n, 16, kv_dtype));
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t b = 0; b < blocks_per_seq; ++b) {
      tables[i].push_back((uint32_t)(i * blocks_per_seq + b));
    }
  }
  auto generated = [&](size_t i) { return toks[i].size() - prompts[i].size(); };
  std::vector<float> logits(n * V);
  while (true) {
    std::vector<SeqInput> in;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      if (generated(i) >= n_new && done[i] == toks[i].size()) continue;
      const size_t len = std::min<size_t>(chunk, toks[i].size() - done[i]);
      in.push_back({.tokens = std::span(toks[i]).subspan(done[i], len),
                    .start_pos = (int64_t)done[i],
                    .block_table = tables[i]});
      who.push_back(i);
    }
    if (in.empty()) break;
    const Status st = m.forward(in, kv, logits.data());
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) break;
    for (size_t k = 0; k < who.size(); ++k) {
      const size_t i = who[k];
      done[i] += in[k].tokens.size();
      if (done[i] == toks[i].size() && generated(i) < n_new) {
        const float* row = logits.data() + k * V;
        toks[i].push_back((int32_t)(std::max_element(row, row + V) - row));
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    toks[i].erase(toks[i].begin(), toks[i].begin() + prompts[i].size());
  return toks;
}

}  // namespace kvw::testutil
