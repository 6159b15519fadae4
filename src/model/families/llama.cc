// model/families/llama.cc: Llama and the files that share its layout ("llama"): Llama 1-3,
// Mistral (attention.sliding_window on every layer), Mixtral-style MoE (expert_count; experts
// feed_forward_length wide, softmax top-k renormalised: hparams.cc's shared defaults). Its GGUF
// Q/K weights are permuted on conversion, so RoPE rotates adjacent pairs.
#include "model/families/family.h"
#include "model/families/tensor_table.h"

namespace kvw::families {
namespace {

void declare_llama(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

}  // namespace

// Listed in families.cc.
extern const ModelFamily kLlama;

const ModelFamily kLlama{.arch = "llama",
                         .tiny_preset = "tiny",
                         .hf = {.model_types = {"llama", "mistral", "mixtral"}},
                         .declare_tensors = declare_llama};

}  // namespace kvw::families
