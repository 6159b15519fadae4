// kvwarden make-model: writes a GGUF model with seeded random weights in a real architecture.
#include <iostream>

#include "apps/kvwarden/commands.h"
#include "model/families/family.h"
#include "model/model_maker.h"
#include "model/relayout.h"

namespace kvw::app {

namespace {
struct MakeModelFlags {
  std::string out, preset = "tiny", weight_type, expert_type, rope_scaling, mla_layout, gating;
  std::string from;  // --from: rewrite this llama file instead of drawing weights
  MakeModelSpec spec;
};

// A help line ending in the families whose make-model rules take the flag (model/families).
std::string taken_by(uint32_t maker_flag, const std::string& help) {
  return families_taking(maker_flag) + ": " + help;
}

// MLA's and DeepSeekMoE's flags.
void add_mla_options(CLI::App* cmd, MakeModelFlags& f) {
  MakeModelSpec& s = f.spec;
  const auto mla = [](const std::string& help) { return taken_by(kMakeMla, help); };
  cmd->add_option("--q-lora-rank", s.q_lora_rank,
                  mla("query compression rank (0: plain attn_q, as V2-Lite)"));
  cmd->add_option("--kv-lora-rank", s.kv_lora_rank, mla("K/V latent rank (kv_lora_rank)"));
  cmd->add_option("--qk-rope-dim", s.qk_rope_dim, mla("rotated dims of each q/k head"));
  cmd->add_option("--qk-nope-dim", s.qk_nope_dim, mla("unrotated dims of each q/k head"));
  cmd->add_option("--v-head-dim", s.v_head_dim, mla("value head length"));
  cmd->add_option("--mla-layout", f.mla_layout,
                  mla("kv_b (attn_kv_b, older converters) or split (attn_k_b + attn_v_b)"));
  cmd->add_option("--experts-shared", s.n_expert_shared, mla("always-on shared experts"));
  cmd->add_option("--expert-ffn", s.n_ff_exp,
                  taken_by(kMakeExpertFfn, "each routed expert's width (--ffn: dense)"));
  cmd->add_option("--dense-lead", s.n_layer_dense_lead,
                  mla("leading layers with a dense FFN instead of experts"));
  cmd->add_option("--gating", f.gating, mla("router scores, softmax or sigmoid"));
  cmd->add_option("--expert-groups", s.n_group,
                  mla("expert groups (> 1 limits top-k to the best groups)"));
  cmd->add_option("--expert-groups-used", s.n_group_used, mla("groups kept per token"));
  cmd->add_option("--expert-weights-scale", s.expert_weights_scale,
                  mla("multiplier of the routed experts' weights"));
  cmd->add_option("--expert-weights-norm", s.expert_weights_norm,
                  mla("renormalise the chosen experts' weights (true|false)"));
  cmd->add_option("--probs-bias", s.probs_bias,
                  mla("write exp_probs_b.bias, a selection-only router bias (true|false)"));
  cmd->add_option("--yarn-log-multiplier", s.yarn_log_multiplier,
                  mla("with yarn, rope.scaling.yarn_log_multiplier (attention mscale)"));
}

// make-model --from: the llama file rewritten as --arch, taking only --sliding-window besides.
void relayout_command(const CLI::App* cmd, const MakeModelFlags& f, int& exit_code) {
  for (const CLI::Option* o : cmd->get_options()) {
    const std::string name = o->get_name();
    if (o->count() == 0 || name == "--from" || name == "--out" || name == "--arch" ||
        name == "--sliding-window" || name == "--help") {
      continue;
    }
    std::cerr << "kvwarden make-model: " << name
              << " draws a new model; --from rewrites a file (it takes --arch, --sliding-window)\n";
    exit_code = 2;
    return;
  }
  if (cmd->count("--arch") == 0) {
    std::cerr << "kvwarden make-model: --from needs --arch phi3, qwen2 or llama\n";
    exit_code = 2;
    return;
  }
  Status st =
      relayout_llama(f.from, {.arch = f.spec.arch, .sliding_window = f.spec.sliding_window}, f.out);
  if (!st.ok()) {
    std::cerr << "kvwarden make-model: " << st.message() << "\n";
    exit_code = 1;
    return;
  }
  std::cerr << "wrote " << f.out << "\n";
}

// Copies the MLA flags that were given onto the preset's spec.
void override_mla(const CLI::App* cmd, const MakeModelSpec& g, MakeModelSpec& spec) {
  auto given = [&](const char* flag) { return cmd->count(flag) > 0; };
  if (given("--q-lora-rank")) spec.q_lora_rank = g.q_lora_rank;
  if (given("--kv-lora-rank")) spec.kv_lora_rank = g.kv_lora_rank;
  if (given("--qk-rope-dim")) spec.qk_rope_dim = g.qk_rope_dim;
  if (given("--qk-nope-dim")) spec.qk_nope_dim = g.qk_nope_dim;
  if (given("--v-head-dim")) spec.v_head_dim = g.v_head_dim;
  if (given("--experts-shared")) spec.n_expert_shared = g.n_expert_shared;
  if (given("--expert-ffn")) spec.n_ff_exp = g.n_ff_exp;
  if (given("--dense-lead")) spec.n_layer_dense_lead = g.n_layer_dense_lead;
  if (given("--expert-groups")) spec.n_group = g.n_group;
  if (given("--expert-groups-used")) spec.n_group_used = g.n_group_used;
  if (given("--expert-weights-scale")) spec.expert_weights_scale = g.expert_weights_scale;
  if (given("--expert-weights-norm")) spec.expert_weights_norm = g.expert_weights_norm;
  if (given("--probs-bias")) spec.probs_bias = g.probs_bias;
  if (given("--yarn-log-multiplier")) spec.yarn_log_multiplier = g.yarn_log_multiplier;
}
}  // namespace

void add_make_model_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("make-model", "Write a GGUF model with seeded random weights (" +
                                                   supported_families() + ") and a tokenizer");
  auto f = std::make_shared<MakeModelFlags>();
  MakeModelSpec& s = f->spec;
  cmd->add_option("--out,-o", f->out, "Output GGUF path")->required();
  cmd->add_option("--from", f->from,
                  "Rewrite this llama GGUF as --arch phi3 (fused QKV and gate/up, NEOX rope), "
                  "qwen2 (zero Q/K/V biases, NEOX rope) or llama (with --sliding-window: "
                  "Mistral's layout): the same model in that family's layout");
  cmd->add_option("--preset", f->preset, "Start from a named shape: " + make_model_preset_names())
      ->capture_default_str();
  cmd->add_option(
      "--arch", s.arch,
      "Architecture: " + supported_families() + " (default " + MakeModelSpec{}.arch + ")");
  cmd->add_option("--name", s.name, "general.name");
  cmd->add_option("--dim", s.n_embd, "Embedding width");
  cmd->add_option("--layers", s.n_layer, "Number of decoder layers");
  cmd->add_option("--heads", s.n_head, "Attention heads");
  cmd->add_option("--kv-heads", s.n_head_kv,
                  "K/V heads (GQA when fewer than --heads; MLA files write their own)");
  cmd->add_option(
      "--head-dim", s.head_dim,
      taken_by(kMakeHeadDim, "q/k/v head length, key_length = value_length (0: --dim / --heads)"));
  cmd->add_option("--ffn", s.n_ff,
                  "Feed-forward width (dense layers; with --experts and no --expert-ffn, each "
                  "expert's)");
  cmd->add_option("--experts", s.n_expert,
                  taken_by(kMakeExperts, "routed experts per layer (0: dense FFN)"));
  cmd->add_option("--experts-used", s.n_expert_used, "Experts each token is routed to (top-k)");
  cmd->add_option("--shared-expert-ffn", s.n_ff_shexp,
                  taken_by(kMakeSharedExpert, "the gated shared expert's width (required > 0)"));
  cmd->add_option("--n-vocab", s.n_vocab, "Pad the vocabulary to this many tokens (0: as built)");
  cmd->add_option("--context", s.n_ctx, "Trained context length (context_length)");
  cmd->add_option("--sliding-window", s.sliding_window,
                  taken_by(kMakeWindow,
                           "sliding-window attention size (0: off; with a window "
                           "pattern, of the local layers)"));
  cmd->add_option("--swa-period", s.swa_period,
                  taken_by(kMakeGemma,
                           "attention.sliding_window_pattern, one global layer every "
                           "N (0: not written; readers take the family's)"));
  cmd->add_option("--rope-theta-swa", s.rope_theta_swa,
                  taken_by(kMakeLocalRopeBase,
                           "RoPE base of the local layers, rope.freq_base_swa (0: not "
                           "written; readers take the family's)"));
  cmd->add_option("--attn-softcap", s.attn_softcap,
                  taken_by(kMakeAttnSoftcap, "attention logit soft-capping (> 0)"));
  cmd->add_option("--final-softcap", s.final_softcap,
                  taken_by(kMakeGemma, "final logit soft-capping (0: not written)"));
  cmd->add_option("--norm-eps", s.norm_eps, "RMSNorm epsilon");
  cmd->add_option("--rope-theta", s.rope_theta, "RoPE frequency base");
  cmd->add_option("--rope-scaling", f->rope_scaling, "none, linear, ntk or yarn");
  cmd->add_option("--rope-scale", s.rope_scale, "Context extension factor for --rope-scaling");
  cmd->add_option("--rope-orig-ctx", s.rope_orig_ctx,
                  "Original context of yarn and LongRoPE, rope.scaling.original_context_length "
                  "(default --context)");
  cmd->add_option(
      "--rope-dim", s.n_rot,
      taken_by(kMakeLongRope, "rotated dims per head, rope.dimension_count (0: the whole head)"));
  cmd->add_flag("--longrope", s.longrope,
                taken_by(kMakeLongRope,
                         "write LongRoPE's rope_factors_long / _short and rope.scaling.attn_factor "
                         "(--longrope=false: neither)"));
  cmd->add_option("--weight-type", f->weight_type,
                  "Type of every matrix: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, "
                  "mxfp4, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs (K-quants and iq4_xs need rows "
                  "of a multiple of 256) (default f32)");
  cmd->add_option("--expert-type", f->expert_type,
                  taken_by(kMakeExpertType,
                           "type of the expert matrices (default mxfp4, as the released files)"));
  cmd->add_flag("--tied", s.tied, "Tie output and embedding weights (no output.weight)");
  cmd->add_option("--vocab-type", s.vocab_type, "spm (SentencePiece-style) or bpe (byte-level)");
  cmd->add_option("--control-tokens", s.extra_control_tokens,
                  "Extra control tokens appended to the vocabulary, comma-separated (e.g. "
                  "'<tool_call>,</tool_call>': a file whose tool-call markers are special tokens)")
      ->delimiter(',');
  cmd->add_option("--seed", s.seed, "Random seed");
  cmd->add_option("--gguf-version", s.gguf_version, "GGUF version to write: 2 or 3");
  add_mla_options(cmd, *f);
  // Presets apply first; explicit flags then override (CLI11 parses before the callback, so
  // re-read only the flags that were given).
  cmd->callback([f, cmd, &exit_code] {
    if (!f->from.empty()) return relayout_command(cmd, *f, exit_code);
    auto preset = make_model_preset(f->preset);
    if (!preset) {
      std::cerr << "kvwarden make-model: " << preset.message() << "\n";
      exit_code = 2;
      return;
    }
    MakeModelSpec spec = *preset;
    const MakeModelSpec& g = f->spec;
    auto given = [&](const char* flag) { return cmd->count(flag) > 0; };
    if (given("--arch")) spec.arch = g.arch;
    if (given("--name")) spec.name = g.name;
    if (given("--dim")) spec.n_embd = g.n_embd;
    if (given("--layers")) spec.n_layer = g.n_layer;
    if (given("--heads")) spec.n_head = g.n_head;
    if (given("--kv-heads")) spec.n_head_kv = g.n_head_kv;
    if (given("--head-dim")) spec.head_dim = g.head_dim;
    if (given("--ffn")) spec.n_ff = g.n_ff;
    if (given("--experts")) spec.n_expert = g.n_expert;
    if (given("--experts-used")) spec.n_expert_used = g.n_expert_used;
    if (given("--shared-expert-ffn")) spec.n_ff_shexp = g.n_ff_shexp;
    if (given("--n-vocab")) spec.n_vocab = g.n_vocab;
    if (given("--context")) spec.n_ctx = g.n_ctx;
    if (given("--sliding-window")) spec.sliding_window = g.sliding_window;
    if (given("--swa-period")) spec.swa_period = g.swa_period;
    if (given("--rope-theta-swa")) spec.rope_theta_swa = g.rope_theta_swa;
    if (given("--attn-softcap")) spec.attn_softcap = g.attn_softcap;
    if (given("--final-softcap")) spec.final_softcap = g.final_softcap;
    if (given("--norm-eps")) spec.norm_eps = g.norm_eps;
    if (given("--rope-theta")) spec.rope_theta = g.rope_theta;
    if (given("--rope-scale")) spec.rope_scale = g.rope_scale;
    if (given("--rope-orig-ctx")) spec.rope_orig_ctx = g.rope_orig_ctx;
    if (given("--rope-dim")) spec.n_rot = g.n_rot;
    if (given("--longrope")) spec.longrope = g.longrope;
    if (given("--tied")) spec.tied = g.tied;
    if (given("--vocab-type")) spec.vocab_type = g.vocab_type;
    if (given("--control-tokens")) spec.extra_control_tokens = g.extra_control_tokens;
    if (given("--seed")) spec.seed = g.seed;
    if (given("--gguf-version")) spec.gguf_version = g.gguf_version;
    override_mla(cmd, g, spec);
    auto flag_error = [&](const std::string& message) {
      std::cerr << "kvwarden make-model: " << message << "\n";
      exit_code = 2;
    };
    if (!f->mla_layout.empty()) {
      auto layout = parse_mla_layout(f->mla_layout);
      if (!layout) return flag_error(layout.message());
      spec.mla_layout = *layout;
    }
    if (!f->gating.empty()) {
      auto gating = parse_expert_gating(f->gating);
      if (!gating) return flag_error(gating.message());
      spec.gating = *gating;
    }
    if (!f->rope_scaling.empty()) {
      auto rs = parse_rope_scaling(f->rope_scaling);
      if (!rs) {
        std::cerr << "kvwarden make-model: --rope-scaling: " << rs.message() << "\n";
        exit_code = 2;
        return;
      }
      spec.rope_scaling = *rs;
    }
    if (!f->weight_type.empty()) {
      auto t = ggml_type_from_name(f->weight_type);
      if (!t) {
        std::cerr << "kvwarden make-model: --weight-type: unknown type '" << f->weight_type
                  << "'\n";
        exit_code = 2;
        return;
      }
      spec.weight_type = *t;
    }
    if (!f->expert_type.empty()) {
      auto t = ggml_type_from_name(f->expert_type);
      if (!t) return flag_error("--expert-type: unknown type '" + f->expert_type + "'");
      spec.expert_type = *t;
    }
    // Flag values that do not make a model are usage errors (2); failing to write is 1.
    if (Status v = spec.validate(); !v.ok()) return flag_error(v.message());
    Status st = make_model(spec, f->out);
    if (!st.ok()) {
      std::cerr << "kvwarden make-model: " << st.message() << "\n";
      exit_code = 1;
      return;
    }
    std::cerr << "wrote " << f->out << "\n";
  });
}

}  // namespace kvw::app
