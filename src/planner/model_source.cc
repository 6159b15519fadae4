#include "planner/model_source.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf_file.h"
#include "model/families/family.h"
#include "model/hparams.h"
#include "model/workspace_layout.h"
#include "planner/catalog.h"

namespace kvw::planner {
namespace {

using nlohmann::json;

// Integer key, or `fallback` when absent or null. Errors for wrong types name the key.
Result<int64_t> get_int(const json& j, const char* key, int64_t fallback, const std::string& who) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return Error{who + ": key '" + key + "' is not an integer"};
  const int64_t v = it->get<int64_t>();
  if (v < 0) return Error{who + ": key '" + key + "' is negative"};
  return v;
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string get_str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

#define KVW_ASSIGN_INT(field, key, fallback)   \
  do {                                         \
    auto _v = get_int(j, key, fallback, name); \
    if (!_v.ok()) return _v.error();           \
    m.field = *_v;                             \
  } while (0)

// Which layers sliding_window applies to: layer_types when the config lists them, else the
// family's rule (model/families; a model_type no family claims windows every layer).
Status read_windows(const json& j, const std::string& name, const ModelFamily* family,
                    ModelShape& m) {
  // Explicit per-layer types (recent transformers configs, hybrid stacks) win over patterns.
  if (auto lt = j.find("layer_types"); lt != j.end() && lt->is_array()) {
    for (const auto& t : *lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s == "full_attention") {
        m.layer_window.push_back(0);
      } else if (s == "sliding_attention") {
        if (m.sliding_window <= 0) return Error{name + ": sliding layers but no sliding_window"};
        m.layer_window.push_back(m.sliding_window);
      } else {
        m.layer_window.push_back(-1);  // linear attention, mamba, ...: no growing KV cache
      }
    }
    return {};
  }
  if (m.sliding_window <= 0) return {};
  switch (family != nullptr ? family->hf.windows : HfWindows::kAll) {
    case HfWindows::kAll:
      m.window_pattern = WindowPattern::kAll;
      break;
    case HfWindows::kEveryOther:
      m.window_pattern = WindowPattern::kEveryOther;
      break;
    case HfWindows::kPeriodic: {
      m.window_pattern = WindowPattern::kPeriodic;
      auto period = get_int(j, "sliding_window_pattern", 6, name);
      if (!period.ok()) return period.error();
      m.window_period = *period;
      break;
    }
    case HfWindows::kWhenEnabled:
      // Qwen configs carry sliding_window but disable it unless use_sliding_window is true.
      if (get_bool(j, "use_sliding_window", false)) m.window_pattern = WindowPattern::kAll;
      break;
  }
  if (m.window_pattern == WindowPattern::kNone) m.sliding_window = 0;
  return {};
}

}  // namespace

Result<ModelShape> shape_from_config_json(const std::string& json_text, const std::string& name) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Error{name + ": not a JSON object"};
  // Multimodal wrappers (e.g. Gemma-3) nest the language model's config.
  if (auto tc = j.find("text_config"); tc != j.end() && tc->is_object()) j = *tc;
  ModelShape m;
  m.name = name;
  m.source = name;
  m.arch = get_str(j, "model_type");
  // The family's defaults and switches (model/families); nullptr: a model_type kvwarden does
  // not serve, planned with Llama's rules.
  const ModelFamily* family = find_family_by_model_type(m.arch);
  if (auto t = get_str(j, "torch_dtype"); !t.empty()) m.default_weight_dtype = t;
  KVW_ASSIGN_INT(n_layer, "num_hidden_layers", 0);
  KVW_ASSIGN_INT(n_embd, "hidden_size", 0);
  KVW_ASSIGN_INT(n_head, "num_attention_heads", 0);
  KVW_ASSIGN_INT(n_kv_head, "num_key_value_heads", m.n_head);
  KVW_ASSIGN_INT(head_dim, "head_dim", m.n_head > 0 ? m.n_embd / m.n_head : 0);
  KVW_ASSIGN_INT(n_ff, "intermediate_size", 0);
  KVW_ASSIGN_INT(n_vocab, "vocab_size", 0);
  KVW_ASSIGN_INT(max_position, "max_position_embeddings", 0);
  KVW_ASSIGN_INT(sliding_window, "sliding_window", 0);
  m.tied_embeddings = get_bool(j, "tie_word_embeddings", family && family->hf.tied_default);
  m.qkv_bias = get_bool(j, "attention_bias", family && family->hf.qkv_bias_default);
  m.qk_norm = family && family->qk_norm;
  KVW_ASSIGN_INT(kv_lora_rank, "kv_lora_rank", 0);
  KVW_ASSIGN_INT(q_lora_rank, "q_lora_rank", 0);
  KVW_ASSIGN_INT(qk_rope_head_dim, "qk_rope_head_dim", 0);
  KVW_ASSIGN_INT(qk_nope_head_dim, "qk_nope_head_dim", 0);
  KVW_ASSIGN_INT(v_head_dim, "v_head_dim", 0);
  // Experts: DeepSeek n_routed_experts, Mixtral num_local_experts, Qwen-MoE num_experts.
  KVW_ASSIGN_INT(n_routed_experts, "n_routed_experts", 0);
  if (m.n_routed_experts == 0) KVW_ASSIGN_INT(n_routed_experts, "num_local_experts", 0);
  if (m.n_routed_experts == 0) KVW_ASSIGN_INT(n_routed_experts, "num_experts", 0);
  KVW_ASSIGN_INT(n_shared_experts, "n_shared_experts", 0);
  KVW_ASSIGN_INT(n_experts_per_tok, "num_experts_per_tok", 0);
  // Mixtral's experts are intermediate_size wide; DeepSeek/Qwen-MoE give moe_intermediate_size.
  KVW_ASSIGN_INT(moe_ff, "moe_intermediate_size", m.n_routed_experts > 0 ? m.n_ff : 0);
  KVW_ASSIGN_INT(first_k_dense, "first_k_dense_replace", 0);
  KVW_ASSIGN_INT(shared_expert_ff, "shared_expert_intermediate_size", 0);
  if (m.is_mla() && m.v_head_dim > 0) m.head_dim = m.v_head_dim;
  KVW_RETURN_IF_ERROR(read_windows(j, name, family, m));
  // kvwarden's gemma2/gemma3 engine keeps a second rope table for the windowed layers.
  m.local_rope = m.sliding_window > 0 && family && family->local_rope;
  KVW_RETURN_IF_ERROR(m.validate());
  return m;
}

Result<ModelShape> shape_from_gguf(const GgufFile& f) {
  auto hp = hparams_from_gguf(f);
  if (!hp.ok()) return hp.error();
  return shape_from_gguf(f, *hp);
}

Result<ModelShape> shape_from_gguf(const GgufFile& f, const ModelHParams& hp) {
  ModelShape m;
  const std::string path = f.path();
  m.name = path.substr(path.find_last_of('/') + 1);
  m.source = path + " (GGUF metadata and tensor table)";
  m.arch = hp.arch;
  m.n_layer = hp.n_layer;
  m.n_embd = hp.n_embd;
  m.n_head = hp.n_head;
  m.n_kv_head = hp.n_head_kv;
  m.head_dim = hp.head_dim;
  m.n_ff = hp.n_ff;
  m.n_vocab = hp.n_vocab;
  m.max_position = hp.n_ctx_train;
  m.tied_embeddings = hp.tied_embeddings;
  m.qkv_bias = hp.qkv_bias;
  m.n_routed_experts = hp.moe.n_expert;
  m.n_experts_per_tok = hp.moe.n_expert_used;
  m.n_shared_experts = hp.moe.n_expert_shared;
  m.shared_expert_ff = hp.moe.n_ff_shared;
  m.moe_ff = hp.moe.is_moe() ? hp.moe.n_ff_exp : 0;
  m.first_k_dense = hp.moe.n_layer_dense_lead;
  if (hp.mla.is_mla()) {
    m.kv_lora_rank = hp.mla.kv_lora_rank;
    m.q_lora_rank = hp.mla.q_lora_rank;
    m.qk_rope_head_dim = hp.mla.qk_rope_dim;
    m.qk_nope_head_dim = hp.mla.qk_nope_dim;
    m.v_head_dim = hp.mla.v_head_dim;
    m.head_dim = hp.mla.v_head_dim;  // as shape_from_config_json: MLA's head_dim is v_head_dim
  }
  if (hp.sliding_window > 0) {
    m.sliding_window = hp.sliding_window;
    m.window_pattern = WindowPattern::kAll;
    if (hp.kv_window() == 0) {  // some layers global (gemma2, gemma3): the engine's per-layer map
      m.window_pattern = WindowPattern::kNone;
      for (int32_t l = 0; l < hp.n_layer; ++l) m.layer_window.push_back(hp.layer_window(l));
    }
  }
  m.local_rope = hp.has_rope_swa;
  m.qk_norm = hp.qk_norm;
  m.rope_dims = hp.rope.n_rot;
  GgufFacts g;
  g.path = path;
  std::map<std::string, int> type_counts;
  for (const GgufTensorInfo& t : f.tensors()) {
    g.weight_bytes += t.num_bytes;
    g.num_params += t.num_elements;
    if (t.name.ends_with("_exps.weight")) g.routed_expert_bytes += t.num_bytes;
    type_counts[std::string(type_traits(t.type).name)] += 1;
  }
  // The engine's own dimensions and matmul needs: what Model::Model sizes its workspace from.
  g.dims = model_dims(hp);
  g.dims.matmul = matmul_needs(f, hp);
  // One decode token reads every matrix but the embedding (one row of it), and of the routed
  // experts only the used ones.
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  g.decode_bytes_per_token = g.weight_bytes - g.routed_expert_bytes -
                             (hp.tied_embeddings || emb == nullptr ? 0 : emb->num_bytes);
  if (hp.moe.is_moe()) {
    g.decode_bytes_per_token +=
        g.routed_expert_bytes / (uint64_t)hp.moe.n_expert * (uint64_t)hp.moe.n_expert_used;
  }
  for (const auto& [type, count] : type_counts) {
    if (!g.weight_type_summary.empty()) g.weight_type_summary += ", ";
    g.weight_type_summary += type + " x " + std::to_string(count);
  }
  m.default_weight_dtype = type_counts.size() == 1 ? type_counts.begin()->first : "gguf";
  m.gguf = g;
  KVW_RETURN_IF_ERROR(m.validate());
  return m;
}

Result<ModelShape> load_model_shape(const std::string& spec) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return spec.size() >= s.size() && spec.compare(spec.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".gguf")) {
    auto f = GgufFile::open(spec);
    if (!f.ok()) return f.error();
    return shape_from_gguf(**f);
  }
  if (ends_with(".json")) {
    std::ifstream in(spec, std::ios::binary);
    if (!in) return Error{spec + ": cannot open"};
    std::stringstream ss;
    ss << in.rdbuf();
    return shape_from_config_json(ss.str(), spec);
  }
  if (const ModelShape* m = find_model(spec)) return *m;
  return Error{"unknown model '" + spec +
               "' (not a .gguf or .json file, nor a catalogue name; see --list-models)"};
}

}  // namespace kvw::planner
