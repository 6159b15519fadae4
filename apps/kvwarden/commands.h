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

}  // namespace kvw::app
