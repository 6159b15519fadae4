#include "obs/routes.h"

#include <httplib.h>

#include "obs/obs_context.h"

namespace kvw::obs {

namespace {
// Debian's cpp-httplib (built with brotli) compresses exactly "application/json" (and text/*)
// with brotli when the client accepts br, as browsers do: the 1.8 MB block map of 100k blocks
// then took over 10 s per poll in Chromium (0.15 s uncompressed). With the charset parameter the
// type no longer matches and the body goes out plain.
constexpr const char* kJsonUncompressed = "application/json; charset=utf-8";
}  // namespace

void register_observability_routes(
    const std::function<void(const std::string& path, RouteHandler)>& add_get,
    ObservabilityContext& ctx) {
  add_get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  add_get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view html = dashboard_html();
    res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
  });
  add_get("/debug/kv", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.kv_body(), kJsonUncompressed);
  });
  add_get("/debug/stats", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.stats_body(), "application/json");
  });
  add_get("/debug/memory_snapshot", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Disposition", "attachment; filename=\"kvwarden_snapshot.pickle\"");
    res.set_content(ctx.memory_snapshot_body(), "application/octet-stream");
  });
  add_get("/debug/trace", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.trace_body(), kJsonUncompressed);
  });
}

void register_observability_routes(httplib::Server& server, ObservabilityContext& ctx) {
  register_observability_routes(
      [&server](const std::string& path, RouteHandler h) { server.Get(path, std::move(h)); }, ctx);
}

}  // namespace kvw::obs
