// apps/kvwarden/cmd_bench.cc: placeholder; the `bench` command is being built.
#include "apps/kvwarden/commands.h"

namespace kvw::app {

void add_bench_command(CLI::App&, int&) {}

}  // namespace kvw::app
