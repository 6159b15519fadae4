// kvwarden: one binary, one subcommand per job.
#include <CLI/CLI.hpp>

#include "apps/kvwarden/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvwarden: an LLM inference server that plans, enforces and explains its memory.\n"
      "Run `kvwarden <command> --help` for the flags of each command."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every command");
  int exit_code = 0;
  kvw::app::add_inspect_command(app, exit_code);
  kvw::app::add_make_model_command(app, exit_code);
  kvw::app::add_generate_command(app, exit_code);
  kvw::app::add_logits_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
