// apps/kvwarden/cmd_serve.cc: placeholder; the `serve` command is being built.
#include "apps/kvwarden/commands.h"

namespace kvw::app {

void add_serve_command(CLI::App&, int&) {}

}  // namespace kvw::app
