#include "obs/routes.h"

#include "obs/obs_context.h"

namespace kvw::obs {

namespace {
constexpr const char* kJson = "application/json; charset=utf-8";
using http::HttpRequest;
using http::HttpResponse;
}  // namespace

void register_observability_routes(
    const std::function<void(const std::string& path, http::Handler, bool inline_io)>& add_get,
    ObservabilityContext& ctx) {
  add_get(
      "/metrics",
      [&ctx](HttpRequest&, HttpResponse& res) {
        res.set_content(ctx.metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
      },
      true);
  add_get(
      "/dashboard",
      [](HttpRequest&, HttpResponse& res) {
        const std::string_view html = dashboard_html();
        res.set_content(std::string(html), "text/html; charset=utf-8");
      },
      true);
  add_get(
      "/debug/kv",
      [&ctx](HttpRequest&, HttpResponse& res) { res.set_content(ctx.kv_body(), kJson); }, false);
  add_get(
      "/debug/stats",
      [&ctx](HttpRequest&, HttpResponse& res) { res.set_content(ctx.stats_body(), kJson); }, true);
  add_get(
      "/debug/memory_snapshot",
      [&ctx](HttpRequest&, HttpResponse& res) {
        res.set_header("Content-Disposition", "attachment; filename=\"kvwarden_snapshot.pickle\"");
        res.set_content(ctx.memory_snapshot_body(), "application/octet-stream");
      },
      false);
  add_get(
      "/debug/trace",
      [&ctx](HttpRequest&, HttpResponse& res) { res.set_content(ctx.trace_body(), kJson); }, false);
}

}  // namespace kvw::obs
