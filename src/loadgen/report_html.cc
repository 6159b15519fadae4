// loadgen/report_html.cc: the self-contained HTML report: a summary table and line charts drawn
// as inline SVG from the JSON report's series (no scripts, no external resources).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "loadgen/report.h"

namespace kvw::loadgen {

namespace {
struct Series {
  std::string name;
  std::string color;
  const nlohmann::json* values;  // array of numbers or nulls, same length as x
  double scale = 1.0;            // multiplies every value (bytes -> MB)
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string fmt(double v) {
  char b[32];
  if (std::abs(v) >= 1000 || v == std::floor(v))
    std::snprintf(b, sizeof b, "%.0f", v);
  else
    std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// One line chart, 720x240; nulls break the line.
std::string svg_chart(const std::string& title, const nlohmann::json& x,
                      const std::vector<Series>& series, const std::string& unit) {
  constexpr double kW = 720, kH = 240, kL = 64, kR = 16, kT = 28, kB = 32;
  double x0 = 0, x1 = 1, y1 = 0;
  if (x.is_array() && !x.empty())
    x0 = x.front().get<double>(), x1 = std::max(x0 + 1e-9, x.back().get<double>());
  bool any = false;
  for (const auto& s : series)
    for (const auto& v : *s.values)
      if (v.is_number()) y1 = std::max(y1, v.get<double>() * s.scale), any = true;
  if (y1 <= 0) y1 = 1;
  y1 *= 1.05;
  auto px = [&](double v) { return kL + (v - x0) / (x1 - x0) * (kW - kL - kR); };
  auto py = [&](double v) { return kH - kB - v / y1 * (kH - kT - kB); };
  std::ostringstream os;
  os << "<figure><svg viewBox=\"0 0 " << kW << " " << kH << "\" width=\"" << kW << "\" height=\""
     << kH << "\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
     << "<text x=\"" << kL << "\" y=\"16\" font-size=\"13\" font-weight=\"bold\">" << escape(title)
     << " (" << escape(unit) << ")</text>";
  for (int i = 0; i <= 4; ++i) {
    const double yv = y1 * i / 4, xv = x0 + (x1 - x0) * i / 4;
    os << "<line x1=\"" << kL << "\" x2=\"" << kW - kR << "\" y1=\"" << py(yv) << "\" y2=\""
       << py(yv) << "\" stroke=\"#ddd\"/><text x=\"" << kL - 4 << "\" y=\"" << py(yv) + 4
       << "\" text-anchor=\"end\">" << fmt(yv) << "</text><text x=\"" << px(xv) << "\" y=\""
       << kH - 12 << "\" text-anchor=\"middle\">" << fmt(xv) << "s</text>";
  }
  double legend_x = kL + 260;
  for (const auto& s : series) {
    os << "<rect x=\"" << legend_x << "\" y=\"8\" width=\"10\" height=\"10\" fill=\"" << s.color
       << "\"/><text x=\"" << legend_x + 14 << "\" y=\"17\">" << escape(s.name) << "</text>";
    legend_x += 24 + 7 * static_cast<double>(s.name.size());
    std::string points;
    auto flush = [&] {
      if (!points.empty())
        os << "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" << s.color << "\" points=\""
           << points << "\"/>";
      points.clear();
    };
    for (size_t i = 0; i < s.values->size() && i < x.size(); ++i) {
      const auto& v = (*s.values)[i];
      if (!v.is_number()) {
        flush();
        continue;
      }
      char b[48];
      std::snprintf(b, sizeof b, "%.1f,%.1f ", px(x[i].get<double>()),
                    py(v.get<double>() * s.scale));
      points += b;
    }
    flush();
  }
  if (!any)
    os << "<text x=\"" << kW / 2 << "\" y=\"" << kH / 2
       << "\" text-anchor=\"middle\">no data</text>";
  os << "</svg></figure>\n";
  return os.str();
}

std::string summary_table(const nlohmann::json& r) {
  std::ostringstream os;
  os << "<table>";
  for (auto& [k, v] : r.items()) {
    if (v.is_object() || v.is_array()) continue;
    std::string val = v.is_number_float() ? fmt(v.get<double>())
                      : v.is_string()     ? v.get<std::string>()
                                          : v.dump();
    os << "<tr><td>" << escape(k) << "</td><td>" << escape(val) << "</td></tr>";
  }
  for (const char* k : {"errors_by_status", "retries_by_status"})
    if (r.contains(k)) os << "<tr><td>" << k << "</td><td>" << escape(r[k].dump()) << "</td></tr>";
  if (r.contains("criteria"))
    for (const auto& c : r["criteria"])
      os << "<tr><td>criterion " << escape(c.value("description", "")) << "</td><td>"
         << (c.value("pass", false) ? "PASS" : "<b style=\"color:#c00\">FAIL</b>") << " ("
         << escape(c.value("observed", "")) << ")</td></tr>";
  os << "</table>\n";
  return os.str();
}
}  // namespace

std::string render_html(const nlohmann::json& r) {
  static const nlohmann::json kEmpty = nlohmann::json::array();
  const auto& ts = r.contains("timeseries") ? r["timeseries"] : nlohmann::json::object();
  const auto& ss =
      r.contains("server_timeseries") ? r["server_timeseries"] : nlohmann::json::object();
  auto col = [&](const nlohmann::json& j, const char* k) -> const nlohmann::json& {
    return j.contains(k) ? j[k] : kEmpty;
  };
  std::ostringstream os;
  os << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>kvwarden bench "
     << escape(r.value("name", std::string("report"))) << "</title><style>"
     << "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-"
        "size:12px}"
     << "td{border:1px solid #ccc;padding:2px 8px}figure{margin:12px 0}</style></head><body>"
     << "<h1>kvwarden bench: " << escape(r.value("name", std::string("run"))) << "</h1><p>target "
     << escape(r.value("base_url", std::string("?")))
     << escape(r.value("endpoint", std::string(""))) << "</p>";
  os << "<h2>Client latency over time</h2>"
     << svg_chart("TTFT", col(ts, "t"),
                  {{"p50", "#1f77b4", &col(ts, "ttft_p50_ms")},
                   {"p99", "#d62728", &col(ts, "ttft_p99_ms")}},
                  "ms")
     << svg_chart("Inter-token latency", col(ts, "t"),
                  {{"p50", "#1f77b4", &col(ts, "itl_p50_ms")},
                   {"p99", "#d62728", &col(ts, "itl_p99_ms")}},
                  "ms")
     << svg_chart("End-to-end latency", col(ts, "t"),
                  {{"p50", "#1f77b4", &col(ts, "e2el_p50_ms")},
                   {"p99", "#d62728", &col(ts, "e2el_p99_ms")}},
                  "ms");
  os << "<h2>Throughput over time</h2>"
     << svg_chart("Output tokens", col(ts, "t"),
                  {{"tokens/s", "#2ca02c", &col(ts, "output_tokens_per_s")}}, "tokens/s")
     << svg_chart("Requests", col(ts, "t"),
                  {{"completed/s", "#1f77b4", &col(ts, "completed_per_s")},
                   {"errors/s", "#d62728", &col(ts, "errors_per_s")}},
                  "req/s");
  os << "<h2>Server (scraped from /metrics)</h2>";
  if (r.value("server_metrics_available", false)) {
    os << svg_chart("KV cache", col(ss, "t"),
                    {{"usage", "#9467bd", &col(ss, "kv_usage_ratio")},
                     {"fragmentation", "#ff7f0e", &col(ss, "kv_fragmentation_ratio")}},
                    "ratio")
       << svg_chart("Queue", col(ss, "t"),
                    {{"waiting", "#d62728", &col(ss, "num_waiting")},
                     {"running", "#1f77b4", &col(ss, "num_running")}},
                    "requests")
       << svg_chart("Preemptions", col(ss, "t"),
                    {{"total", "#8c564b", &col(ss, "preemptions_total")}}, "count")
       << svg_chart("Resident memory", col(ss, "t"),
                    {{"RSS", "#17becf", &col(ss, "resident_memory_bytes"), 1e-6}}, "MB");
  } else {
    os << "<p>The target has no /metrics endpoint; server-side charts are skipped.</p>";
  }
  os << "<h2>Summary</h2>" << summary_table(r) << "</body></html>\n";
  return os.str();
}

}  // namespace kvw::loadgen
