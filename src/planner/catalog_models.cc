// Model catalogue: architecture values from each model's published config.json. Sources:
// "facts" = /work/shared/reference/model-facts.md (which cites the public copies it checked);
// "litgpt" = Lightning-AI/litgpt litgpt/config.py, which transcribes each Hugging Face
// config.json and links it. Values a source marks unconfirmed are marked so here.
#include <algorithm>
#include <cctype>
#include <tuple>
#include <vector>

#include "planner/catalog.h"

namespace kvw::planner {
namespace {

const char* kLitgpt = "Lightning-AI/litgpt litgpt/config.py (transcribed HF config.json)";

ModelShape dense(std::string name, std::string hf_id, std::string arch, std::string source,
                 int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t n_kv_head,
                 int64_t head_dim, int64_t n_ff, int64_t n_vocab, int64_t max_position) {
  ModelShape m;
  m.name = std::move(name);
  m.hf_id = std::move(hf_id);
  m.arch = std::move(arch);
  m.source = std::move(source);
  m.n_layer = n_layer;
  m.n_embd = n_embd;
  m.n_head = n_head;
  m.n_kv_head = n_kv_head;
  m.head_dim = head_dim;
  m.n_ff = n_ff;
  m.n_vocab = n_vocab;
  m.max_position = max_position;
  return m;
}

// DeepSeek MLA + MoE. n_kv_head / head_dim are not used for the cache (one latent per token).
ModelShape deepseek(std::string name, std::string hf_id, std::string arch, std::string source,
                    int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t n_ff, int64_t n_vocab,
                    int64_t q_lora, int64_t n_routed, int64_t n_shared, int64_t top_k,
                    int64_t moe_ff, int64_t first_k_dense) {
  ModelShape m = dense(std::move(name), std::move(hf_id), std::move(arch), std::move(source),
                       n_layer, n_embd, n_head, n_head, 128, n_ff, n_vocab, 163840);
  m.kv_lora_rank = 512;
  m.q_lora_rank = q_lora;
  m.qk_rope_head_dim = 64;
  m.qk_nope_head_dim = 128;
  m.v_head_dim = 128;
  m.n_routed_experts = n_routed;
  m.n_shared_experts = n_shared;
  m.n_experts_per_tok = top_k;
  m.moe_ff = moe_ff;
  m.first_k_dense = first_k_dense;
  return m;
}

std::vector<ModelShape> build() {
  std::vector<ModelShape> v;
  // --- DeepSeek (MLA + MoE) ---
  v.push_back(deepseek("deepseek-v2", "deepseek-ai/DeepSeek-V2", "deepseek_v2",
                       "facts: DeepSeek-V2 236B config (Megatron-Bridge V2 test fixture)", 60, 5120,
                       128, 12288, 102400, 1536, 160, 2, 6, 1536, 1));
  v.push_back(deepseek("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", "deepseek_v2",
                       "facts: mlc-llm model_preset.py deepseek_v2_lite + tt-metal config_16B.json",
                       27, 2048, 16, 10944, 102400, 0, 64, 2, 6, 1408, 1));
  {
    ModelShape m = deepseek("deepseek-v2.5", "deepseek-ai/DeepSeek-V2.5", "deepseek_v2",
                            "facts: assumed equal to the DeepSeek-V2 236B config", 60, 5120, 128,
                            12288, 102400, 1536, 160, 2, 6, 1536, 1);
    m.unconfirmed = true;
    m.note =
        "every architecture value is DeepSeek-V2's; only the class (DeepseekV2ForCausalLM) "
        "and ~236B size are confirmed for V2.5";
    v.push_back(m);
  }
  for (const char* name : {"deepseek-v3", "deepseek-r1"}) {
    const bool r1 = std::string(name) == "deepseek-r1";
    ModelShape m =
        deepseek(name, r1 ? "deepseek-ai/DeepSeek-R1" : "deepseek-ai/DeepSeek-V3", "deepseek_v3",
                 r1 ? "facts: DeepSeek-V3 config (R1 shares V3's architecture)"
                    : "facts: tt-metal reference/config.json + Megatron-Bridge fixture",
                 61, 7168, 128, 18432, 129280, 1536, 256, 1, 8, 2048, 3);
    m.default_weight_dtype = "fp8";
    m.note = "61 decoder layers; the multi-token-prediction layer is not loaded for serving";
    if (r1) {
      m.unconfirmed = true;
      m.note = "R1 values are V3's, not checked against R1's own config.json; " + m.note;
    }
    v.push_back(m);
  }
  // --- Llama ---
  v.push_back(dense("llama-2-7b", "meta-llama/Llama-2-7b-hf", "llama", kLitgpt, 32, 4096, 32, 32,
                    128, 11008, 32000, 4096));
  v.push_back(dense("llama-2-13b", "meta-llama/Llama-2-13b-hf", "llama", kLitgpt, 40, 5120, 40, 40,
                    128, 13824, 32000, 4096));
  v.push_back(dense("llama-2-70b", "meta-llama/Llama-2-70b-hf", "llama", kLitgpt, 80, 8192, 64, 8,
                    128, 28672, 32000, 4096));
  v.push_back(dense("llama-3-8b", "meta-llama/Meta-Llama-3-8B", "llama",
                    "facts: litgpt config.py + two fixtures", 32, 4096, 32, 8, 128, 14336, 128256,
                    8192));
  v.push_back(dense("llama-3-70b", "meta-llama/Meta-Llama-3-70B", "llama", kLitgpt, 80, 8192, 64, 8,
                    128, 28672, 128256, 8192));
  v.push_back(dense("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "llama", kLitgpt, 32, 4096, 32, 8,
                    128, 14336, 128256, 131072));
  v.push_back(dense("llama-3.1-70b", "meta-llama/Llama-3.1-70B", "llama",
                    "facts: mlc-llm preset + tt-metal model_params config.json", 80, 8192, 64, 8,
                    128, 28672, 128256, 131072));
  v.push_back(dense("llama-3.1-405b", "meta-llama/Llama-3.1-405B", "llama", kLitgpt, 126, 16384,
                    128, 8, 128, 53248, 128256, 131072));
  // --- Qwen ---
  for (bool big : {false, true}) {
    ModelShape m = big ? dense("qwen2.5-72b", "Qwen/Qwen2.5-72B", "qwen2",
                               "facts: litgpt (base) + Instruct raw config dump", 80, 8192, 64, 8,
                               128, 29568, 152064, 131072)
                       : dense("qwen2.5-7b", "Qwen/Qwen2.5-7B", "qwen2",
                               "facts: LLM-Prof Model_Config.md + litgpt + tt-metal", 28, 3584, 28,
                               4, 128, 18944, 152064, 131072);
    m.qkv_bias = true;
    m.note = "max_position is the base model's 131072; the Instruct config says 32768";
    v.push_back(m);
  }
  for (bool big : {false, true}) {
    ModelShape m = big ? dense("qwen3-32b", "Qwen/Qwen3-32B", "qwen3", kLitgpt, 64, 5120, 64, 8,
                               128, 25600, 151936, 40960)
                       : dense("qwen3-8b", "Qwen/Qwen3-8B", "qwen3", kLitgpt, 36, 4096, 32, 8, 128,
                               12288, 151936, 40960);
    m.qk_norm = true;
    v.push_back(m);
  }
  {
    ModelShape m = dense("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "qwen3_moe", kLitgpt, 48, 2048, 32,
                         4, 128, 6144, 151936, 40960);
    m.qk_norm = true;
    m.n_routed_experts = 128;
    m.n_experts_per_tok = 8;
    m.moe_ff = 768;
    v.push_back(m);
  }
  {
    // Qwen1.5-MoE (GGUF arch qwen2moe): MHA with q/k/v biases, every layer 60 routed experts
    // (top-4) plus one sigmoid-gated shared expert of 5632.
    ModelShape m = dense("qwen1.5-moe-a2.7b", "Qwen/Qwen1.5-MoE-A2.7B", "qwen2_moe",
                         "public dump of Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4 config.json + "
                         "transformers' Qwen2MoeConfig defaults",
                         24, 2048, 16, 16, 128, 5632, 151936, 8192);
    m.qkv_bias = true;
    m.n_routed_experts = 60;
    m.n_experts_per_tok = 4;
    m.moe_ff = 1408;
    m.shared_expert_ff = 5632;
    m.unconfirmed = true;
    m.note =
        "shared_expert_intermediate_size 5632 and max_position 8192 (the Chat config says 32768) "
        "not seen in a primary copy of the base config.json";
    v.push_back(m);
  }
  // --- Phi-3 family (GGUF arch phi3; HF Phi3ForCausalLM: fused qkv_proj and gate_up_proj, the
  // same KV as separate projections; LongRoPE changes no buffer size) ---
  {
    ModelShape m = dense("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", "phi3",
                         "litgpt config.py (transcribed HF config.json) + keras-hub preset "
                         "(3821079552 parameters)",
                         32, 3072, 32, 32, 96, 8192, 32064, 4096);
    m.sliding_window = 2047;
    m.window_pattern = WindowPattern::kAll;
    m.unconfirmed = true;
    m.note =
        "sliding_window 2047 is config.json's as recalled (litgpt transcribes a 2048 window); "
        "llama.cpp switches Phi windows off, kvwarden and HF apply them";
    v.push_back(m);
  }
  {
    ModelShape m =
        dense("phi-3.5-mini", "microsoft/Phi-3.5-mini-instruct", "phi3",
              "litgpt config.py (transcribed HF config.json; max_position from the model card's "
              "128K context)",
              32, 3072, 32, 32, 96, 8192, 32064, 131072);
    m.note = "LongRoPE from 4096; config.json's sliding_window 262144 exceeds the context: none";
    v.push_back(m);
  }
  {
    ModelShape m = dense("phi-4-mini", "microsoft/Phi-4-mini-instruct", "phi3",
                         "public transcriptions of config.json (three independent repositories)",
                         32, 3072, 24, 8, 128, 8192, 200064, 131072);
    m.tied_embeddings = true;
    m.note = "partial_rotary_factor 0.75 (96 of 128 dims rotated), LongRoPE from 4096";
    v.push_back(m);
  }
  // --- Mistral ---
  {
    ModelShape m =
        dense("mistral-7b", "mistralai/Mistral-7B-v0.1", "mistral",
              "facts: litgpt + mlc-llm preset", 32, 4096, 32, 8, 128, 14336, 32000, 32768);
    m.sliding_window = 4096;
    m.window_pattern = WindowPattern::kAll;
    v.push_back(m);
  }
  {
    ModelShape m =
        dense("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "mixtral",
              "facts: mlc-llm preset + litgpt", 32, 4096, 32, 8, 128, 14336, 32000, 32768);
    m.n_routed_experts = 8;
    m.n_experts_per_tok = 2;
    m.moe_ff = 14336;
    v.push_back(m);
  }
  // --- Gemma-2: even layers local (4096-token window), odd layers global; tied embeddings ---
  for (int size : {2, 9, 27}) {
    ModelShape m = size == 27  ? dense("gemma-2-27b", "google/gemma-2-27b", "gemma2", kLitgpt, 46,
                                       4608, 32, 16, 128, 36864, 256000, 8192)
                   : size == 9 ? dense("gemma-2-9b", "google/gemma-2-9b", "gemma2",
                                       "facts: mlc-llm preset + litgpt", 42, 3584, 16, 8, 256,
                                       14336, 256000, 8192)
                               : dense("gemma-2-2b", "google/gemma-2-2b", "gemma2", kLitgpt, 26,
                                       2304, 8, 4, 256, 9216, 256000, 8192);
    m.tied_embeddings = true;
    m.sliding_window = 4096;
    m.window_pattern = WindowPattern::kEveryOther;
    m.local_rope = true;
    v.push_back(m);
  }
  // --- Gemma-3 (text): five local layers then one global, per-head Q/K norms; tied ---
  {
    struct G3 {
      const char* name;
      const char* hf_id;
      int64_t n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, window;
    };
    for (const G3& g :
         {G3{"gemma-3-1b", "google/gemma-3-1b-it", 26, 1152, 4, 1, 256, 6912, 512},
          G3{"gemma-3-4b", "google/gemma-3-4b-it", 34, 2560, 8, 4, 256, 10240, 1024},
          G3{"gemma-3-12b", "google/gemma-3-12b-it", 48, 3840, 16, 8, 256, 15360, 1024},
          G3{"gemma-3-27b", "google/gemma-3-27b-it", 62, 5376, 32, 16, 128, 21504, 1024}}) {
      ModelShape m = dense(g.name, g.hf_id, "gemma3", kLitgpt, g.n_layer, g.n_embd, g.n_head,
                           g.n_kv_head, g.head_dim, g.n_ff, 262144, 131072);
      m.tied_embeddings = true;
      m.qk_norm = true;
      m.sliding_window = g.window;
      m.window_pattern = WindowPattern::kPeriodic;
      m.window_period = 6;
      m.local_rope = true;
      v.push_back(m);
    }
  }
  // --- gpt-oss (GGUF arch gpt-oss; HF GptOssForCausalLM): even layers windowed to 128, heads of
  // 64 (q 4096 wide over a 2880 embedding), q/k/v/o biases, sinks (n_head floats per layer, no
  // KV), every layer routed top-4 over experts of 2880; YaRN x32 from 4096 ---
  for (const auto& [name, n_layer, n_experts] :
       {std::tuple{"gpt-oss-20b", 24, 32}, std::tuple{"gpt-oss-120b", 36, 128}}) {
    ModelShape m = dense(name, std::string("openai/") + name, "gpt_oss",
                         "HF config.json as transcribed by public model-inspector reports", n_layer,
                         2880, 64, 8, 64, 2880, 201088, 131072);
    m.qkv_bias = true;
    m.sliding_window = 128;
    m.window_pattern = WindowPattern::kEveryOther;
    m.n_routed_experts = n_experts;
    m.n_experts_per_tok = 4;
    m.moe_ff = 2880;
    m.unconfirmed = true;
    m.note = "not checked against a primary copy of config.json";
    v.push_back(m);
  }
  v.push_back(dense("tinyllama-1.1b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "llama",
                    "facts: mlc-llm preset + litgpt", 22, 2048, 32, 4, 64, 5632, 32000, 2048));
  return v;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::span<const ModelShape> model_catalog() {
  static const std::vector<ModelShape> models = build();
  return models;
}

const ModelShape* find_model(const std::string& name) {
  const std::string n = lower(name);
  for (const ModelShape& m : model_catalog()) {
    if (m.name == n || lower(m.hf_id) == n) return &m;
  }
  return nullptr;
}

}  // namespace kvw::planner
