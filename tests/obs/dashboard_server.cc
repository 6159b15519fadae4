// obs_dashboard_server: serves the observability routes over a synthetic engine (a block map of
// --blocks blocks that changes on every poll), for tests/e2e/dashboard_test.mjs and for looking
// at the dashboard by hand. Prints "PORT <n>" once listening; stops on SIGTERM/SIGINT.
//   obs_dashboard_server [--blocks 100000] [--port 0]
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>

#include "obs/obs_context.h"
#include "obs/routes.h"
#include "test_util.h"

namespace {

httplib::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server) g_server->stop();
}

// A pool that drifts: each call advances the step and re-labels a few hundred blocks.
class FakeEngine {
 public:
  explicit FakeEngine(uint32_t n) : snap_(kvw::obs::test::make_snapshot(n)) {}
  std::shared_ptr<const kvw::KvSnapshot> snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    snap_.step += 10;
    std::uniform_int_distribution<uint32_t> pick(0, uint32_t(snap_.blocks.size()) - 1);
    for (int i = 0; i < 500; ++i) {
      kvw::BlockRecord& r = snap_.blocks[pick(rng_)];
      r.last_access_step = snap_.step;
      r.state =
          r.state == kvw::BlockState::kUsed ? kvw::BlockState::kCached : kvw::BlockState::kUsed;
      r.owner = r.state == kvw::BlockState::kUsed
                    ? std::optional<kvw::SeqId>(kvw::SeqId{snap_.step % 97})
                    : std::nullopt;
    }
    return std::make_shared<kvw::KvSnapshot>(snap_);
  }
  kvw::EngineStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    kvw::EngineStats s = kvw::obs::test::make_stats();
    s.kv = snap_.stats;
    s.num_steps = snap_.step;
    s.num_preemptions = snap_.step / 50;
    s.num_waiting = snap_.step % 13;
    return s;
  }

 private:
  std::mutex mu_;
  std::mt19937 rng_{1};
  kvw::KvSnapshot snap_;
};

}  // namespace

int main(int argc, char** argv) {
  uint32_t blocks = 100000;
  int port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) blocks = uint32_t(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--port")) port = std::atoi(argv[i + 1]);
  }
  FakeEngine engine(blocks);
  kvw::obs::ObservabilityContext ctx{kvw::obs::ObsConfig{}};
  ctx.attach({.stats = [&] { return engine.stats(); },
              .kv_snapshot = [&] { return engine.snapshot(); },
              .budget = [&] { return kvw::obs::test::make_budget(blocks); }});
  kvw::obs::RequestTiming t;
  t.arrival_ns = 1'000'000'000;
  t.first_token_ns = 1'200'000'000;
  t.finish_ns = 2'000'000'000;
  t.num_generation_tokens = 9;
  ctx.observe_request(t);
  httplib::Server server;
  kvw::obs::test::serve_routes(server, ctx);
  g_server = &server;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  if (port == 0)
    port = server.bind_to_any_port("127.0.0.1");
  else if (!server.bind_to_port("127.0.0.1", port))
    port = -1;
  if (port <= 0) {
    std::fprintf(stderr, "cannot bind\n");
    return 1;
  }
  std::printf("PORT %d\n", port);
  std::fflush(stdout);
  server.listen_after_bind();
  return 0;
}
