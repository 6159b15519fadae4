// kvwarden inspect FILE: metadata and tensor table of a GGUF file (like gguf-dump).
#include <iostream>

#include "apps/kvwarden/commands.h"
#include "gguf/inspect.h"

namespace kvw::app {

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table");
  auto path = std::make_shared<std::string>();
  cmd->add_option("file", *path, "GGUF file")->required();
  cmd->callback([path, &exit_code] {
    Status st = print_inspect(*path, std::cout);
    if (!st.ok()) {
      std::cerr << "kvwarden inspect: " << st.message() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace kvw::app
