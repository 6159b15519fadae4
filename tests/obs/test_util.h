// tests/obs/test_util.h: small helpers shared by the obs tests (hand-made engine data, running
// external tools).
#pragma once

#include <cstdint>
#include <string>

#include "engine/queues.h"
#include "obs/obs_context.h"
#include "planner/engine_budget.h"

namespace httplib {
class Server;
}

namespace kvw::obs::test {

// A test that needs an optional tool fails when it is missing, unless the KVW_ALLOW_SKIP
// environment variable (comma-separated names) allows skipping it by name.
bool skip_allowed(const std::string& name);
#define KVW_REQUIRE_TOOL(present, name)                                                       \
  do {                                                                                      \
    if (!(present)) {                                                                       \
      if (::kvw::obs::test::skip_allowed(name)) GTEST_SKIP() << name << " missing (allowed)"; \
      FAIL() << name << " missing: install it, or set KVW_ALLOW_SKIP=" << name;              \
    }                                                                                       \
  } while (0)

// Registers the observability routes (http::Handler) on a bare cpp-httplib server.
void serve_routes(httplib::Server& server, ObservabilityContext& ctx);

// A pool of `num_blocks` blocks: every 3rd free, every 5th (not free) cached, the rest used by
// request (i / 7) + 1; steps increase with the id.
KvSnapshot make_snapshot(uint32_t num_blocks, int32_t block_size = 16);
EngineStats make_stats();
planner::BudgetTable make_budget(uint64_t num_blocks);

// Runs `cmd` through /bin/sh, returns its exit status and appends stdout+stderr to `out`.
int run_command(const std::string& cmd, std::string* out);
bool have_program(const std::string& path);
std::string temp_dir(const std::string& tag);  // fresh directory under /tmp
void write_file(const std::string& path, const std::string& body);
std::string read_file(const std::string& path);

}  // namespace kvw::obs::test
