// kvwarden make-model: writes a GGUF model with seeded random weights in a real architecture.
#include <iostream>

#include "apps/kvwarden/commands.h"
#include "model/model_maker.h"

namespace kvw::app {

namespace {
struct MakeModelFlags {
  std::string out, preset = "tiny", weight_type, rope_scaling;
  MakeModelSpec spec;
};
}  // namespace

void add_make_model_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "make-model",
      "Write a GGUF model with seeded random weights (llama or qwen2) and a tokenizer");
  auto f = std::make_shared<MakeModelFlags>();
  MakeModelSpec& s = f->spec;
  cmd->add_option("--out,-o", f->out, "Output GGUF path")->required();
  cmd->add_option("--preset", f->preset,
                  "Start from a named shape: tiny, tinyllama-1.1b, mixtral-tiny, mixtral-1b")
      ->capture_default_str();
  cmd->add_option("--arch", s.arch, "Architecture: llama or qwen2 (default llama)");
  cmd->add_option("--name", s.name, "general.name");
  cmd->add_option("--dim", s.n_embd, "Embedding width");
  cmd->add_option("--layers", s.n_layer, "Number of decoder layers");
  cmd->add_option("--heads", s.n_head, "Attention heads");
  cmd->add_option("--kv-heads", s.n_head_kv, "K/V heads (GQA when fewer than --heads)");
  cmd->add_option("--ffn", s.n_ff, "Feed-forward width (of each expert with --experts)");
  cmd->add_option("--experts", s.n_expert,
                  "llama: Mixtral-style experts per layer (ffn_*_exps; 0: dense FFN)");
  cmd->add_option("--experts-used", s.n_expert_used, "Experts each token is routed to (top-k)");
  cmd->add_option("--n-vocab", s.n_vocab, "Pad the vocabulary to this many tokens (0: as built)");
  cmd->add_option("--context", s.n_ctx, "Trained context length (context_length)");
  cmd->add_option("--sliding-window", s.sliding_window, "Sliding-window attention size (0: off)");
  cmd->add_option("--norm-eps", s.norm_eps, "RMSNorm epsilon");
  cmd->add_option("--rope-theta", s.rope_theta, "RoPE frequency base");
  cmd->add_option("--rope-scaling", f->rope_scaling, "none, linear, ntk or yarn");
  cmd->add_option("--rope-scale", s.rope_scale, "Context extension factor for --rope-scaling");
  cmd->add_option("--rope-orig-ctx", s.rope_orig_ctx,
                  "Original context for yarn (default --context)");
  cmd->add_option(
      "--weight-type", f->weight_type,
      "Type of every matrix: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K (default f32)");
  cmd->add_flag("--tied", s.tied, "Tie output and embedding weights (no output.weight)");
  cmd->add_option("--vocab-type", s.vocab_type, "spm (SentencePiece-style) or bpe (byte-level)");
  cmd->add_option("--seed", s.seed, "Random seed");
  cmd->add_option("--gguf-version", s.gguf_version, "GGUF version to write: 2 or 3");
  // Presets apply first; explicit flags then override (CLI11 parses before the callback, so
  // re-read only the flags that were given).
  cmd->callback([f, cmd, &exit_code] {
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
    if (given("--ffn")) spec.n_ff = g.n_ff;
    if (given("--experts")) spec.n_expert = g.n_expert;
    if (given("--experts-used")) spec.n_expert_used = g.n_expert_used;
    if (given("--n-vocab")) spec.n_vocab = g.n_vocab;
    if (given("--context")) spec.n_ctx = g.n_ctx;
    if (given("--sliding-window")) spec.sliding_window = g.sliding_window;
    if (given("--norm-eps")) spec.norm_eps = g.norm_eps;
    if (given("--rope-theta")) spec.rope_theta = g.rope_theta;
    if (given("--rope-scale")) spec.rope_scale = g.rope_scale;
    if (given("--rope-orig-ctx")) spec.rope_orig_ctx = g.rope_orig_ctx;
    if (given("--tied")) spec.tied = g.tied;
    if (given("--vocab-type")) spec.vocab_type = g.vocab_type;
    if (given("--seed")) spec.seed = g.seed;
    if (given("--gguf-version")) spec.gguf_version = g.gguf_version;
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
