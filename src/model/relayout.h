// model/relayout.h: rewrites a llama GGUF file into another family's layout that computes the
// same function, so the family's code paths can be checked token for token against the llama
// file on trained weights (`kvwarden make-model --from`):
//   phi3:  one attn_qkv (Q, K, V rows) and ffn_up holding the gate rows then the up rows;
//   qwen2: zero attn_{q,k,v}.bias;
//   both:  NEOX rope, so Q/K rows un-permuted (llama's converter interleaves each head's halves:
//          its row 2j + t is Hugging Face's row t * head_len / 2 + j);
//   llama: the same tensors, with attention.sliding_window (Mistral's layout).
// Every other key, the tokenizer included, is copied in order under the new architecture.
// Stateless; safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace kvw {

struct RelayoutSpec {
  std::string arch;            // "phi3", "qwen2" or "llama"
  int32_t sliding_window = 0;  // attention.sliding_window to write; 0: none (phi3 writes 0)
};

// Reads `from` (a dense llama file whose rope rotates whole heads, without Q/K/V biases; for
// phi3, heads of embedding_length / head_count) and writes `out`. Rope scaling keys are copied:
// every family reads them (Phi-3's own files carry LongRoPE factors instead). Errors name the
// file and what it has that the target cannot hold.
Status relayout_llama(const std::string& from, const RelayoutSpec& spec, const std::string& out);

}  // namespace kvw
