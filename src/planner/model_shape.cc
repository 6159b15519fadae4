#include "planner/model_shape.h"

#include <algorithm>
#include <cctype>

#include "gguf/tensor_types.h"

namespace kvw::planner {

int64_t ModelShape::window_of_layer(int64_t l) const {
  if (!layer_window.empty()) return layer_window[(size_t)l];
  switch (window_pattern) {
    case WindowPattern::kNone:
      return 0;
    case WindowPattern::kAll:
      return sliding_window;
    case WindowPattern::kEveryOther:
      return l % 2 == 0 ? sliding_window : 0;
    case WindowPattern::kPeriodic:
      return window_period > 0 && l % window_period < window_period - 1 ? sliding_window : 0;
  }
  return 0;
}

const char* ModelShape::attention_kind() const {
  if (is_mla()) return "MLA";
  if (n_kv_head == n_head) return "MHA";
  if (n_kv_head == 1) return "MQA";
  return "GQA";
}

Status ModelShape::validate() const {
  auto bad = [&](const std::string& what) { return Error{"model '" + name + "': " + what}; };
  if (n_layer <= 0 || n_embd <= 0 || n_head <= 0 || n_vocab <= 0) {
    return bad("num_hidden_layers, hidden_size, num_attention_heads and vocab_size must be > 0");
  }
  if (!is_mla()) {
    if (n_kv_head <= 0 || n_head % n_kv_head != 0) {
      return bad("num_attention_heads " + std::to_string(n_head) +
                 " is not a multiple of num_key_value_heads " + std::to_string(n_kv_head));
    }
    if (head_dim <= 0) return bad("head_dim must be > 0");
  } else if (qk_rope_head_dim <= 0 || qk_nope_head_dim <= 0 || v_head_dim <= 0) {
    return bad("MLA needs qk_rope_head_dim, qk_nope_head_dim and v_head_dim > 0");
  }
  if (n_ff <= 0 && (!is_moe() || first_k_dense > 0)) return bad("intermediate_size must be > 0");
  if (is_moe() && (moe_ff <= 0 || n_experts_per_tok <= 0 || first_k_dense > n_layer)) {
    return bad("MoE needs moe_intermediate_size and num_experts_per_tok > 0");
  }
  if (window_pattern != WindowPattern::kNone && sliding_window <= 0) {
    return bad("a sliding-window pattern needs sliding_window > 0");
  }
  if (!layer_window.empty()) {
    if ((int64_t)layer_window.size() != n_layer) {
      return bad("layer_types has " + std::to_string(layer_window.size()) + " entries for " +
                 std::to_string(n_layer) + " layers");
    }
    for (int64_t w : layer_window) {
      if (w < -1) return bad("per-layer window " + std::to_string(w) + " is invalid");
    }
  }
  return {};
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Result<Dtype> parse_weight_dtype(const std::string& name) {
  const std::string n = lower(name);
  if (n == "f32" || n == "fp32" || n == "float32") return Dtype{"f32", 1, 4};
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return Dtype{"f16", 1, 2};
  if (n == "bf16" || n == "bfloat16") return Dtype{"bf16", 1, 2};
  if (n == "fp8" || n == "f8" || n == "fp8_e4m3" || n == "float8") return Dtype{"fp8", 1, 1};
  if (n == "int8" || n == "w8a8") return Dtype{"int8", 1, 1};
  // AWQ / GPTQ, group size 128: 64 B of nibbles + an f16 scale (2 B) + a 4-bit zero point
  // (0.5 B, packed eight to an int32) per group = 66.5 B per 128 weights = 133 B per 256.
  if (n == "int4" || n == "awq" || n == "gptq" || n == "w4a16") return Dtype{"int4", 256, 133};
  if (auto t = ggml_type_from_name(name); t && *t != GgmlType::kQ8_K) {
    const TypeTraits& tr = type_traits(*t);
    return Dtype{std::string(tr.name), tr.block_elems, tr.block_bytes};
  }
  return Error{"unknown weight dtype '" + name +
               "' (expected f32, f16, bf16, fp8, int8, int4 or a GGUF type: q8_0, q4_0, q4_1, "
               "q5_0, q5_1, iq4_nl, mxfp4, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs)"};
}

}  // namespace kvw::planner
