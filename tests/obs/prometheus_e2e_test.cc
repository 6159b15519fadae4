// A real Prometheus scrapes our /metrics (served by the observability routes on loopback) and
// returns the values through its HTTP query API. Label "e2e": spawns a process, ~5-10 s.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "obs/obs_context.h"
#include "obs/routes.h"
#include "test_util.h"

extern char** environ;

namespace kvw::obs {
namespace {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The instant-vector value of `query`, or nullopt while Prometheus has none.
std::optional<double> query(int prom_port, const std::string& q) {
  httplib::Client c("127.0.0.1", prom_port);
  c.set_connection_timeout(1);
  auto r = c.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
  if (!r || r->status != 200) return std::nullopt;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j["status"] != "success" || j["data"]["result"].empty())
    return std::nullopt;
  return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
}

TEST(PrometheusE2e, ScrapesMetricsAndAnswersQueries) {
  const char* prom = "/usr/bin/prometheus";
  KVW_REQUIRE_TOOL(test::have_program(prom), "prometheus");

  ObservabilityContext ctx{ObsConfig{}};
  ctx.attach({.stats = [] { return test::make_stats(); },
              .budget = [] { return test::make_budget(300); }});
  ctx.observe_shed("queue_full");
  httplib::Server server;
  test::serve_routes(server, ctx);
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread th([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  const std::string dir = test::temp_dir("prom");
  test::write_file(dir + "/prometheus.yml",
                   "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                   "scrape_configs:\n  - job_name: kvwarden\n    static_configs:\n"
                   "      - targets: ['127.0.0.1:" +
                       std::to_string(port) + "']\n");
  const int prom_port = free_port();
  const std::string cfg = "--config.file=" + dir + "/prometheus.yml";
  const std::string storage = "--storage.tsdb.path=" + dir + "/data";
  const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(prom_port);
  const std::string log = "--log.level=warn";
  std::vector<char*> argv = {const_cast<char*>(prom),
                             const_cast<char*>(cfg.c_str()),
                             const_cast<char*>(storage.c_str()),
                             const_cast<char*>(listen.c_str()),
                             const_cast<char*>(log.c_str()),
                             nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, prom, nullptr, nullptr, argv.data(), environ), 0);

  // Wait (bounded) for the first scrape to be queryable; the bound only limits a failure.
  std::optional<double> total, waiting, shed;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(25);
  while (std::chrono::steady_clock::now() < deadline) {
    total = query(prom_port, "kvwarden_kv_blocks{state=\"total\",job=\"kvwarden\"}");
    waiting = query(prom_port, "vllm:num_requests_waiting");
    shed = query(prom_port, "kvwarden_requests_shed_total{reason=\"queue_full\"}");
    if (total && waiting && shed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  const auto up = query(prom_port, "up{job=\"kvwarden\"}");
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  server.stop();
  th.join();

  ASSERT_TRUE(total.has_value()) << "Prometheus never returned kvwarden_kv_blocks";
  EXPECT_EQ(*total, 300);
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(*waiting, 11);
  ASSERT_TRUE(shed.has_value());
  EXPECT_EQ(*shed, 1);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(*up, 1);  // the scrape itself succeeded (the text parsed)
}

}  // namespace
}  // namespace kvw::obs
