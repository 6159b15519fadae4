#include "model/model_maker_gptoss.h"

#include <cmath>
#include <string>

namespace kvw::maker {

// The shape of gpt-oss's own template (its messages in the harmony format, an assistant's
// final answer on the "final" channel, the generation prompt opening an assistant message)
// without its tool and reasoning branches.
const char* const kHarmonyTemplate =
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- else -%}"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}";

MakeModelSpec gptoss_tiny() {
  MakeModelSpec s;
  s.arch = "gpt-oss";
  s.name = "gpt-oss-tiny-random";
  s.n_embd = 128;
  s.n_layer = 4;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 32;
  s.n_ff = 64;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_ff_exp = 64;
  s.n_ctx = 2048;
  s.sliding_window = 16;
  s.norm_eps = 1e-5f;
  s.rope_theta = 150000.0f;
  s.rope_scaling = RopeScaling::kYarn;
  s.rope_scale = 32.0f;
  s.rope_orig_ctx = 64;
  s.vocab_type = "bpe";
  s.expert_type = GgmlType::kMXFP4;
  return s;
}

Status validate_gptoss(const MakeModelSpec& s) {
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ctx <= 0)
    return Error{"--dim, --layers, --heads, --kv-heads and --context must be > 0"};
  if (s.head_dim < 0 || s.head_len() % 2 != 0)
    return Error{"head dimension (--head-dim or --dim / --heads) must be even and > 0"};
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    return Error{"--dim must be a multiple of --heads"};
  if (s.n_head % s.n_head_kv != 0) return Error{"--heads must be a multiple of --kv-heads"};
  if (s.n_expert <= 0)
    return Error{"--experts must be > 0 for --arch gpt-oss (every layer is MoE)"};
  if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
    return Error{"--experts-used must be between 1 and --experts"};
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 for --arch gpt-oss"};
  if (s.sliding_window <= 0) return Error{"--sliding-window must be > 0 for --arch gpt-oss"};
  if (s.tied) return Error{"--tied: gpt-oss files always carry output.weight"};
  if (s.n_ff_shexp != 0 || s.n_expert_shared != 0 || s.kv_lora_rank != 0 || s.probs_bias)
    return Error{"--shared-expert-ffn, --experts-shared, MLA and --probs-bias: not gpt-oss"};
  if (s.weight_type == GgmlType::kQ8_K || s.expert_type == GgmlType::kQ8_K)
    return Error{"--weight-type / --expert-type q8_K is not a weight type"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_embd % blk != 0 || ((int64_t)s.n_head * s.head_len()) % blk != 0)
    return Error{"--dim and --heads x head dimension must be multiples of " + std::to_string(blk) +
                 " for --weight-type"};
  const int64_t eblk = type_traits(s.expert_type).block_elems;
  if (s.n_embd % eblk != 0 || s.n_ff_exp % eblk != 0)
    return Error{"--dim and --expert-ffn must be multiples of " + std::to_string(eblk) +
                 " for --expert-type"};
  if (s.rope_scaling != RopeScaling::kNone && s.rope_scale <= 0)
    return Error{"--rope-scale must be > 0"};
  return {};
}

}  // namespace kvw::maker
