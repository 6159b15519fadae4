// obs/routes.h: adds the observability endpoints to a running cpp-httplib server:
//   GET /metrics                 Prometheus text 0.0.4 (kvwarden_* and vllm:* names)
//   GET /dashboard               the self-contained HTML dashboard (embedded in the binary)
//   GET /debug/kv                block map + layout stats + budget (obs/debug_json.h)
//   GET /debug/stats             compact JSON stats, polled by the dashboard
//   GET /debug/memory_snapshot   PyTorch memory_viz pickle (obs/memory_snapshot.h)
//   GET /debug/trace             Chrome/Perfetto trace-event JSON (obs/trace_ring.h)
// Thread safety: handlers run on httplib's worker threads; the context is thread-safe and must
// outlive the server.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvw::obs {

class ObservabilityContext;

using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;
// Registers each GET route through `add_get(path, handler)`; for kvwarden serve:
//   register_observability_routes([&](const std::string& path, obs::RouteHandler h) {
//     server->add_route("GET", path, std::move(h)); }, obs);
void register_observability_routes(
    const std::function<void(const std::string& path, RouteHandler)>& add_get,
    ObservabilityContext& ctx);
// The same on a bare httplib server (tests, tools).
void register_observability_routes(httplib::Server& server, ObservabilityContext& ctx);

// The embedded dashboard page (generated from obs/dashboard.html at build time).
std::string_view dashboard_html();

}  // namespace kvw::obs
