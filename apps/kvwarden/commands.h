// apps/kvwarden/commands.h: each subcommand registers its flags on the CLI11 app and, when
// chosen, runs and stores its exit code. main() only dispatches.
#pragma once

#include <CLI/CLI.hpp>

namespace kvw::app {

void add_inspect_command(CLI::App& app, int& exit_code);
void add_make_model_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_logits_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_kvsim_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_bench_model_command(CLI::App& app, int& exit_code);

// --attention-dot's help, the same for every command that loads a model.
inline constexpr const char* kAttentionDotHelp =
    "Attention q.k and P.V products: f32 (default) or bf16 (vdpbf16ps on bf16-rounded q and K, "
    "and on bf16-rounded softmax weights and V; faster prefill and decode at depth; still "
    "bit-identical across batching, threads and chunking; refused at start-up without "
    "AVX512_BF16)";

}  // namespace kvw::app
