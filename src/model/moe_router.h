// model/moe_router.h: which experts a token goes to, and with what weight, in a mixture-of-experts
// layer (llama.cpp's llm_build_moe_ffn routing; Mixtral, DeepSeek-V2 and DeepSeek-V3 conventions).
// Pure functions of one token's router logits: the forward pass calls them per token, so routing
// never depends on what else is in the batch.
//
//   scores   = softmax(logits), sigmoid(logits), or the logits as they are (gpt-oss)
//   select   = scores + bias                                (exp_probs_b; selection only)
//   groups   : keep the n_group_used groups whose two best `select` values sum highest, mask the
//              rest (expert_group_count > 1: DeepSeek-V3's group-limited routing)
//   ids      = top n_expert_used of `select`, best first, ties to the lower expert id
//   weights  = scores[ids] (gpt-oss: softmax over scores[ids]), / their sum if
//              expert_weights_norm, x expert_weights_scale
#pragma once

#include <cstdint>

#include "model/hparams.h"

namespace kvw {

// Floats of scratch route_token needs for `m`: 2 x n_expert.
int64_t router_scratch_floats(const MoeParams& m);

// logits: [n_expert] router outputs, overwritten with the gating scores. bias: [n_expert] or null.
// Writes ids [n_expert_used] and weights [n_expert_used]. scratch: router_scratch_floats(m).
void route_token(const MoeParams& m, float* logits, const float* bias, int32_t* ids, float* weights,
                 float* scratch);

}  // namespace kvw
