// model/model_maker.h: writes GGUF models with seeded random weights in real architectures
// (llama: Llama-2/3, TinyLlama, Mistral with sliding window, Mixtral-style mixture of experts;
// qwen2: QKV biases), with a tokenizer
// built from a word list. Used by `kvwarden make-model`, tests and benchmarks; the files are
// ordinary GGUF files that any GGUF reader accepts.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "gguf/tensor_types.h"
#include "model/hparams.h"

namespace kvw {

struct MakeModelSpec {
  std::string arch = "llama";  // "llama" or "qwen2"
  std::string name = "kvwarden-random";
  int32_t n_embd = 64;
  int32_t n_layer = 2;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t n_ff = 256;         // dense FFN width, and each expert's width when n_expert > 0
  int32_t n_expert = 0;       // llama only: > 0 writes Mixtral-style ffn_*_exps layers
  int32_t n_expert_used = 0;  // experts per token (top-k)
  int32_t n_vocab = 0;        // pad the tokenizer to this size (0: as built)
  int32_t n_ctx = 512;
  int32_t sliding_window = 0;  // 0: full attention
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale = 1.0f;
  int32_t rope_orig_ctx = 0;              // YaRN: original context (0: n_ctx)
  GgmlType weight_type = GgmlType::kF32;  // every matrix; norms and biases stay f32
  bool tied = false;                      // no output.weight: logits reuse token_embd
  std::string vocab_type = "spm";         // "spm" (tokenizer.ggml.model llama) or "bpe" (gpt2)
  uint64_t seed = 1;
  uint32_t gguf_version = 3;

  Status validate() const;  // messages name the make-model flag
};

// Named shapes: "tiny" (the default dims above), "tinyllama-1.1b", "mixtral-tiny" (tiny with 8
// experts, 2 per token, as Mixtral-8x7B routes) and "mixtral-1b" (Mixtral's proportions at
// dim 1024: 0.79B parameters, 0.26B active).
Result<MakeModelSpec> make_model_preset(const std::string& name);

Status make_model(const MakeModelSpec& spec, const std::string& path);

}  // namespace kvw
