#include "model/hparams.h"

#include <atomic>

#include "gguf/gguf_file.h"
#include "model/families/family.h"

namespace kvw {

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::kNone:
      return "none";
    case RopeScaling::kLinear:
      return "linear";
    case RopeScaling::kNtk:
      return "ntk";
    case RopeScaling::kYarn:
      return "yarn";
  }
  return "?";
}

Result<RopeScaling> parse_rope_scaling(const std::string& name) {
  if (name.empty() || name == "none") return RopeScaling::kNone;
  if (name == "linear") return RopeScaling::kLinear;
  if (name == "ntk") return RopeScaling::kNtk;
  if (name == "yarn") return RopeScaling::kYarn;
  return Error{"unknown rope scaling '" + name + "' (expected none, linear, ntk or yarn)"};
}

namespace {

using families::read_float;
using families::read_int;

Status validate(const GgufFile& f, const ModelHParams& hp) {
  auto bad = [&](const std::string& what) { return Error{f.path() + ": " + what}; };
  if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_ff <= 0)
    return bad("embedding_length, block_count, head_count and feed_forward_length must be > 0");
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    return bad("head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " +
               std::to_string(hp.n_head_kv));
  if (hp.head_dim <= 0 || hp.head_dim % 2 != 0) return bad("head dimension must be even and > 0");
  if (hp.rope.n_rot <= 0 || hp.rope.n_rot > hp.head_dim || hp.rope.n_rot % 2 != 0)
    return bad("rope.dimension_count " + std::to_string(hp.rope.n_rot) +
               " must be even and at most the head dimension " + std::to_string(hp.head_dim));
  if (hp.rope.scale_factor <= 0.0f) return bad("rope.scaling.factor must be > 0");
  if (!(hp.norm_eps > 0.0f)) return bad("attention.layer_norm_rms_epsilon must be > 0");
  return {};
}

// Expert counts and routing knobs, checked against each other; messages name the key and give
// the expected and found values.
Status validate_moe(const GgufFile& f, const std::string& a, const MoeParams& m) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error{f.path() + ": key '" + a + key + "': " + what};
  };
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (!m.is_moe()) {
    if (m.n_expert_used > 0)
      return bad("expert_used_count", n(m.n_expert_used) + " but expert_count is 0");
    return {};
  }
  if (m.n_expert_used < 1 || m.n_expert_used > m.n_expert) {
    return bad("expert_used_count",
               "expected 1.." + n(m.n_expert) + " (expert_count), found " + n(m.n_expert_used));
  }
  if (m.n_ff_exp <= 0) return bad("expert_feed_forward_length", "expected > 0, found 0");
  if (m.n_group > 1) {
    if (m.n_expert % m.n_group != 0) {
      return bad("expert_group_count",
                 "expected a divisor of expert_count " + n(m.n_expert) + ", found " + n(m.n_group));
    }
    if (m.n_group_used < 1 || m.n_group_used > m.n_group) {
      return bad(
          "expert_group_used_count",
          "expected 1.." + n(m.n_group) + " (expert_group_count), found " + n(m.n_group_used));
    }
    const int64_t reachable = (int64_t)m.n_group_used * (m.n_expert / m.n_group);
    if (m.n_expert_used > reachable) {
      return bad("expert_used_count", "expected at most " + n(reachable) +
                                          " (experts in the used groups), found " +
                                          n(m.n_expert_used));
    }
  }
  if (!(m.weights_scale > 0.0f)) return bad("expert_weights_scale", "expected > 0");
  return {};
}

std::atomic<uint64_t> g_hparams_reads{0};

}  // namespace

uint64_t hparams_reads() {
  return g_hparams_reads.load(std::memory_order_relaxed);
}

int32_t ModelHParams::kv_window() const {
  for (int32_t l = 0; l < n_layer; ++l) {
    if (!is_swa_layer(l)) return 0;
  }
  return sliding_window;
}

Result<ModelHParams> hparams_from_gguf(const GgufFile& f) {
  g_hparams_reads.fetch_add(1, std::memory_order_relaxed);
  ModelHParams hp;
  auto arch = f.get_string("general.architecture");
  if (!arch) return Error{arch.message()};
  hp.arch = *arch;
  const ModelFamily* family = find_family(hp.arch);
  if (family == nullptr) {
    return Error{f.path() + ": key 'general.architecture': '" + hp.arch +
                 "' is not supported (supported: " + supported_families() + ")"};
  }
  if (auto name = f.get_string("general.name")) hp.name = *name;
  const std::string a = hp.arch + ".";
  KVW_RETURN_IF_ERROR(read_int(f, a + "embedding_length", hp.n_embd, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "block_count", hp.n_layer, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.head_count", hp.n_head, true));
  hp.n_head_kv = hp.n_head;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.head_count_kv", hp.n_head_kv, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "feed_forward_length", hp.n_ff, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "context_length", hp.n_ctx_train, true));
  // Applied as written (every layer, key positions pos - w < j <= pos, llama.cpp's standard SWA
  // mask). llama.cpp's own llama graph never reads this key and attends to everything, so on
  // Mistral-7B-v0.1 (w 4096) greedy text differs from llama.cpp's only past 4096 tokens.
  // phi3: llama.cpp reads it but switches it off (llama_model_phi3, "Phi SWA is currently
  // disabled"); Hugging Face's Phi3 applies it, and so does kvwarden: Phi-3-mini-4k's 2047 makes
  // text differ from llama.cpp's only once a sequence passes 2047 tokens.
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.sliding_window", hp.sliding_window, false));
  KVW_RETURN_IF_ERROR(read_float(f, a + "attention.layer_norm_rms_epsilon", hp.norm_eps));
  if (hp.n_head > 0) hp.head_dim = hp.n_embd / hp.n_head;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.key_length", hp.head_dim, false));
  if (!family->mla) {
    // Value heads as long as key heads (Qwen3: both 128 where n_embd / n_head is not).
    int32_t value_length = hp.head_dim;
    KVW_RETURN_IF_ERROR(read_int(f, a + "attention.value_length", value_length, false));
    if (value_length != hp.head_dim) {
      return Error{f.path() + ": key '" + a + "attention.value_length': " +
                   std::to_string(value_length) + ", expected key_length " +
                   std::to_string(hp.head_dim) + " (different key and value lengths)"};
    }
  }

  hp.rope.style = family->rope_style;
  hp.rope.n_rot = hp.head_dim;
  KVW_RETURN_IF_ERROR(read_int(f, a + "rope.dimension_count", hp.rope.n_rot, false));
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.freq_base", hp.rope.freq_base));
  if (f.find(a + "rope.scaling.type") != nullptr) {
    auto type = f.get_string(a + "rope.scaling.type");
    if (!type) return Error{type.message()};
    auto s = parse_rope_scaling(*type);
    if (!s) return Error{f.path() + ": key '" + a + "rope.scaling.type': " + s.message()};
    hp.rope.scaling = *s;
  }
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scaling.factor", hp.rope.scale_factor));
  // Older files store only the inverse (rope.scale_linear).
  if (f.find(a + "rope.scale_linear") != nullptr && hp.rope.scaling == RopeScaling::kNone) {
    KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scale_linear", hp.rope.scale_factor));
    if (hp.rope.scale_factor != 1.0f) hp.rope.scaling = RopeScaling::kLinear;
  }
  hp.rope.orig_ctx = hp.n_ctx_train;
  KVW_RETURN_IF_ERROR(
      read_int(f, a + "rope.scaling.original_context_length", hp.rope.orig_ctx, false));
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scaling.attn_factor", hp.rope.attn_factor));
  if (hp.rope.scaling == RopeScaling::kNone) hp.rope.scale_factor = 1.0f;

  // Mixtral-style llama files: softmax over all experts, top-k, weights renormalised (llama.cpp's
  // llama graph); experts are feed_forward_length wide.
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_count", hp.moe.n_expert, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_used_count", hp.moe.n_expert_used, false));
  hp.moe.n_ff_exp = hp.n_ff;
  hp.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  hp.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  hp.qkv_fused = f.find_tensor("blk.0.attn_qkv.weight") != nullptr;
  hp.longrope = f.find_tensor("rope_factors_long.weight") != nullptr;
  hp.qk_norm = family->qk_norm;
  hp.gemma.post_norms = family->post_norms;
  hp.gemma.scale_embd = family->scale_embd;
  hp.gate_up_fused = family->gate_up_fused;
  // The family's own keys and defaults (model/families/<family>.cc).
  if (family->read_keys != nullptr) KVW_RETURN_IF_ERROR(family->read_keys(f, a, hp));
  KVW_RETURN_IF_ERROR(validate_moe(f, a, hp.moe));
  hp.moe.probs_bias =
      hp.moe.is_moe() && f.find_tensor("blk." + std::to_string(hp.moe.n_layer_dense_lead) +
                                       ".exp_probs_b.bias") != nullptr;
  // n_vocab from the embedding matrix: the tokenizer may list fewer entries than rows.
  if (const auto* emb = f.find_tensor("token_embd.weight"); emb && emb->shape.size() == 2) {
    hp.n_vocab = (int32_t)emb->shape[1];
  } else {
    return Error{f.path() + ": tensor 'token_embd.weight': missing or not 2-dimensional"};
  }
  KVW_RETURN_IF_ERROR(validate(f, hp));
  return hp;
}

}  // namespace kvw
