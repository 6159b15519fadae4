// tests/engine/engine_test_util.h: shared helpers for the engine tests: generated models, a
// budget sized in KV blocks, and running requests to completion.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvw::testutil {

// A generated llama model (MakeModelSpec defaults, `seed`) in the test temp dir.
std::string tiny_model_path(uint64_t seed = 1);
// Copy of `src` whose token_embd row `token` is set to `value` (f32 models only).
std::string poisoned_model_path(const std::string& src, int32_t token, float value);
// Config over `model` whose budget leaves exactly `num_blocks` KV blocks.
// `spec`: speculative decoding settings, planned with (its logit rows are a budget row).
EngineConfig config_with_blocks(const std::string& model, uint32_t num_blocks,
                                const SpecConfig& spec = {});
// Distinct prompts of `len` tokens from the non-special range of the vocabulary.
std::vector<int32_t> prompt(uint64_t seed, int len, int32_t n_vocab);

std::unique_ptr<Engine> make_engine(const EngineConfig& cfg);
// `max_tokens` greedy tokens after `p` (EOS ignored: random weights, and fixed lengths make
// outputs comparable); `s` may add penalties (still deterministic: argmax after them).
GenerationRequest greedy(std::vector<int32_t> p, int32_t max_tokens, const GenSampling& s = {});
TokenChannel::Collected run_one(Engine& e, const GenerationRequest& r);
// Submits all at once, collects all; the results in order.
std::vector<TokenChannel::Collected> run_batch(Engine& e, const std::vector<GenerationRequest>& rs);
// Shuts `e` down and checks that every KV block came back and no sequence is left.
void expect_all_free(Engine& e);

}  // namespace kvw::testutil
