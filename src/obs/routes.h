// obs/routes.h: the observability endpoints, for any server that takes http::Handler routes:
//   GET /metrics                 Prometheus text 0.0.4 (kvwarden_* and vllm:* names)
//   GET /dashboard               the self-contained HTML dashboard (embedded in the binary)
//   GET /debug/kv                block map + layout stats + budget (obs/debug_json.h)
//   GET /debug/stats             compact JSON stats, polled by the dashboard
//   GET /debug/memory_snapshot   PyTorch memory_viz pickle (obs/memory_snapshot.h)
//   GET /debug/trace             Chrome/Perfetto trace-event JSON (obs/trace_ring.h)
// /metrics, /dashboard and /debug/stats are quick and never block (`inline_io`: a server may run
// them on its I/O threads so scrapes answer under any load); the other three wait for the
// engine or build large bodies.
// Thread safety: handlers run on any thread; the context is thread-safe and must outlive the
// server.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "http/http_message.h"

namespace kvw::obs {

class ObservabilityContext;

// Registers each GET route through `add_get(path, handler, inline_io)`; for kvwarden serve:
//   register_observability_routes([&](const std::string& path, http::Handler h, bool io) {
//     server->add_route("GET", path, std::move(h), {.inline_io = io}); }, obs);
void register_observability_routes(
    const std::function<void(const std::string& path, http::Handler, bool inline_io)>& add_get,
    ObservabilityContext& ctx);

// The embedded dashboard page (generated from obs/dashboard.html at build time).
std::string_view dashboard_html();

}  // namespace kvw::obs
