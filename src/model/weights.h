// model/weights.h: typed views of a model's tensors inside the mmapped GGUF file. Matrices stay
// in their stored type (no whole-model dequantisation); small vectors (norms, biases) are
// converted to f32 once at load.
// Thread safety: immutable after load; the GgufFile must outlive the weights.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "gguf/tensor_types.h"
#include "model/hparams.h"

namespace kvw {

class GgufFile;

// n_rows rows of n_in elements each, stored in `type` (ggml shape [n_in, n_rows]).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_in = 0;
  uint64_t row_bytes = 0;
};

struct LayerWeights {
  std::vector<float> attn_norm;   // [n_embd]
  WeightMatrix wq, wk, wv, wo;    // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
  std::vector<float> bq, bk, bv;  // qwen2 biases [q_dim], [kv_dim], [kv_dim]; empty otherwise
  std::vector<float> ffn_norm;    // [n_embd]
  WeightMatrix gate, up, down;    // [n_ff x n_embd] x2, [n_embd x n_ff]
};

struct ModelWeights {
  WeightMatrix token_embd;  // [n_vocab x n_embd]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [n_embd]
  WeightMatrix output;             // [n_vocab x n_embd]; == token_embd when tied
  std::vector<float> rope_freqs;   // [n_rot/2] optional per-pair frequency divisors
  uint64_t total_bytes = 0;        // bytes of all tensors in the file
};

// Finds and shape-checks every tensor; errors name the file and tensor.
Result<ModelWeights> weights_from_gguf(const GgufFile& file, const ModelHParams& hp);

}  // namespace kvw
