// kvwarden: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

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
  kvw::app::add_plan_command(app, exit_code);
  kvw::app::add_kvsim_command(app, exit_code);
  kvw::app::add_serve_command(app, exit_code);
  kvw::app::add_bench_command(app, exit_code);
  kvw::app::add_bench_model_command(app, exit_code);
  // CLI11 reads an unknown first word as a missing subcommand; name it instead.
  const CLI::App& commands = app;
  std::string names;
  bool known = false;
  for (const CLI::App* sub : commands.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known |= argc > 1 && sub->get_name() == argv[1];
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "kvwarden: unknown command '" << argv[1] << "' (commands: " << names
              << "; see --help)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, as for every other bad input.
    std::string cmd = "kvwarden";
    for (const auto* sub : app.get_subcommands()) cmd += " " + sub->get_name();
    std::cerr << cmd << ": " << e.what() << " (see --help)\n";
    return 2;
  }
  return exit_code;
}
