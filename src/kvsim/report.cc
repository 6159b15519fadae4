// kvsim/report.cc: table, JSON and hand-written SVG for a paged-vs-contiguous run.
#include "kvsim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kvw::kvsim {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pct(double v) {
  return fmt("%.1f%%", 100.0 * v);
}

std::string xml_escape(std::string_view s) {
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
        out += c;
    }
  }
  return out;
}

std::string config_line(const SimConfig& c) {
  std::ostringstream os;
  os << "budget " << fmt("%.2f", c.kv_budget_bytes / double(1 << 30))
     << " GiB = " << c.capacity_tokens() << " tokens (" << c.shape.kv_bytes_per_token() / 1024.0
     << " KiB/token, " << c.shape.name << " " << kv_dtype_name(c.shape.dtype) << "), block "
     << c.block_size << ", max_model_len " << c.max_model_len << ", batch "
     << c.max_num_batched_tokens << " tokens, step " << c.step_s * 1000 << " ms";
  return os.str();
}

nlohmann::json summary_json(const SimResult& r) {
  nlohmann::json j = {
      {"capacity_tokens", r.capacity_tokens},
      {"num_requests", r.num_requests},
      {"num_finished", r.num_finished},
      {"num_rejected", r.num_rejected},
      {"num_unfinished", r.num_unfinished},
      {"num_preemptions", r.num_preemptions},
      {"num_steps", r.num_steps},
      {"num_saturated_steps", r.num_saturated_steps},
      {"computed_tokens", r.computed_tokens},
      {"peak_running", r.peak_running},
      {"peak_waiting", r.peak_waiting},
      {"mean_running", r.mean_running},
      {"sustained_running", r.sustained_running},
      {"mean_utilisation", r.mean_utilisation},
      {"saturated_utilisation", r.saturated_utilisation},
      {"min_saturated_utilisation", r.min_saturated_utilisation},
      {"mean_fragmentation", r.mean_fragmentation},
      {"mean_queue_wait_s", r.mean_queue_wait_s},
      {"end_time_s", r.end_time_s},
      {"prefix_queried_tokens", r.prefix_queried_tokens},
      {"prefix_hit_tokens", r.prefix_hit_tokens},
      {"prefix_hit_rate", r.prefix_hit_rate},
  };
  nlohmann::json series = {
      {"time_s", nlohmann::json::array()},       {"running", nlohmann::json::array()},
      {"waiting", nlohmann::json::array()},      {"saturated", nlohmann::json::array()},
      {"utilisation", nlohmann::json::array()},  {"reserved", nlohmann::json::array()},
      {"fragmentation", nlohmann::json::array()}};
  for (const Sample& s : r.samples) {
    series["time_s"].push_back(s.time_s);
    series["running"].push_back(s.num_running);
    series["waiting"].push_back(s.num_waiting);
    series["saturated"].push_back(s.saturated);
    series["utilisation"].push_back(s.utilisation);
    series["reserved"].push_back(s.reserved);
    series["fragmentation"].push_back(s.fragmentation);
  }
  j["series"] = std::move(series);
  return j;
}

// Tick spacing from {1, 2, 5} x 10^k giving at most `max_ticks` intervals over [0, hi].
double tick_step(double hi, int max_ticks) {
  if (hi <= 0) return 1;
  const double raw = hi / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

// One plot panel: frame, ticks, grid and labels; maps data to pixels.
struct Panel {
  double x0, y0, w, h;  // pixel box
  double x_max, y_max;  // data range (from 0)
  double px(double x) const { return x0 + w * (x_max > 0 ? x / x_max : 0); }
  double py(double y) const { return y0 + h - h * (y_max > 0 ? std::min(y, y_max) / y_max : 0); }
};

void draw_axes(std::ostringstream& os, const Panel& p, double y_step, const std::string& y_label,
               bool y_percent) {
  os << "<rect x=\"" << p.x0 << "\" y=\"" << p.y0 << "\" width=\"" << p.w << "\" height=\"" << p.h
     << "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (double y = 0; y <= p.y_max + 1e-9; y += y_step) {
    os << "<line x1=\"" << p.x0 << "\" y1=\"" << p.py(y) << "\" x2=\"" << p.x0 + p.w << "\" y2=\""
       << p.py(y) << "\" stroke=\"#ddd\"/>\n";
    os << "<text x=\"" << p.x0 - 6 << "\" y=\"" << p.py(y) + 4
       << "\" text-anchor=\"end\" font-size=\"11\">"
       << (y_percent ? fmt("%.0f", 100 * y) : fmt("%g", y)) << "</text>\n";
  }
  const double x_step = tick_step(p.x_max, 10);
  for (double x = 0; x <= p.x_max + 1e-9; x += x_step) {
    os << "<line x1=\"" << p.px(x) << "\" y1=\"" << p.y0 + p.h << "\" x2=\"" << p.px(x)
       << "\" y2=\"" << p.y0 + p.h + 4 << "\" stroke=\"#333\"/>\n";
    os << "<text x=\"" << p.px(x) << "\" y=\"" << p.y0 + p.h + 16
       << "\" text-anchor=\"middle\" font-size=\"11\">" << fmt("%g", x) << "</text>\n";
  }
  os << "<text x=\"" << p.x0 - 44 << "\" y=\"" << p.y0 + p.h / 2 << "\" font-size=\"12\" "
     << "text-anchor=\"middle\" transform=\"rotate(-90 " << p.x0 - 44 << " " << p.y0 + p.h / 2
     << ")\">" << y_label << "</text>\n";
}

template <typename F>
void draw_line(std::ostringstream& os, const Panel& p, const SimResult& r, F value,
               const char* color, const char* dash) {
  os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\"";
  if (*dash) os << " stroke-dasharray=\"" << dash << "\"";
  os << " points=\"";
  for (const Sample& s : r.samples) {
    os << fmt("%.1f", p.px(s.time_s)) << "," << fmt("%.1f", p.py(value(s))) << " ";
  }
  os << "\"/>\n";
}

constexpr const char* kPagedColor = "#1f77b4";
constexpr const char* kContigColor = "#d62728";

void draw_legend(std::ostringstream& os, double x, double y) {
  const struct {
    const char* label;
    const char* color;
    const char* dash;
  } items[] = {{"paged (KvManager)", kPagedColor, ""},
               {"contiguous (first-fit, max_model_len)", kContigColor, ""},
               {"contiguous reserved", kContigColor, "5,3"}};
  for (const auto& it : items) {
    os << "<line x1=\"" << x << "\" y1=\"" << y << "\" x2=\"" << x + 24 << "\" y2=\"" << y
       << "\" stroke=\"" << it.color << "\" stroke-width=\"2\"";
    if (*it.dash) os << " stroke-dasharray=\"" << it.dash << "\"";
    os << "/>\n<text x=\"" << x + 30 << "\" y=\"" << y + 4 << "\" font-size=\"12\">" << it.label
       << "</text>\n";
    x += 80 + 7.0 * std::string_view(it.label).size();
  }
}

}  // namespace

double sustained_ratio(const SimResult& paged, const SimResult& contiguous) {
  return contiguous.sustained_running > 0 ? paged.sustained_running / contiguous.sustained_running
                                          : 0.0;
}

void print_table(std::ostream& os, const SimConfig& config, const RunInfo& info,
                 const SimResult& paged, const SimResult& contiguous) {
  os << "kvsim: " << info.workload << ", " << info.num_requests << " requests\n"
     << config_line(config) << "\n\n";
  auto row = [&](const char* name, const std::string& a, const std::string& b) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-38s %14s %14s\n", name, a.c_str(), b.c_str());
    os << buf;
  };
  auto num = [](double v) { return fmt("%.2f", v); };
  auto cnt = [](uint64_t v) { return std::to_string(v); };
  const SimResult& p = paged;
  const SimResult& c = contiguous;
  row("", "paged", "contiguous");
  row("peak concurrent sequences", cnt(p.peak_running), cnt(c.peak_running));
  row("mean concurrent sequences", num(p.mean_running), num(c.mean_running));
  row("sustained concurrent (saturated steps)", num(p.sustained_running), num(c.sustained_running));
  row("KV utilisation, mean", pct(p.mean_utilisation), pct(c.mean_utilisation));
  row("KV utilisation at saturation, mean", pct(p.saturated_utilisation),
      pct(c.saturated_utilisation));
  row("KV utilisation at saturation, min", pct(p.min_saturated_utilisation),
      pct(c.min_saturated_utilisation));
  row("fragmentation, mean", pct(p.mean_fragmentation), pct(c.mean_fragmentation));
  row("preemptions", cnt(p.num_preemptions), cnt(c.num_preemptions));
  row("rejected", cnt(p.num_rejected), cnt(c.num_rejected));
  row("peak queued", cnt(p.peak_waiting), cnt(c.peak_waiting));
  row("mean queue wait (s)", num(p.mean_queue_wait_s), num(c.mean_queue_wait_s));
  row("prefix hit rate (tokens)", pct(p.prefix_hit_rate), "-");
  row("tokens computed (incl. recompute)", cnt(p.computed_tokens), cnt(c.computed_tokens));
  row("finished / unfinished", cnt(p.num_finished) + " / " + cnt(p.num_unfinished),
      cnt(c.num_finished) + " / " + cnt(c.num_unfinished));
  row("steps (saturated)", cnt(p.num_steps) + " (" + cnt(p.num_saturated_steps) + ")",
      cnt(c.num_steps) + " (" + cnt(c.num_saturated_steps) + ")");
  row("simulated time (s)", num(p.end_time_s), num(c.end_time_s));
  os << "\nsustained concurrent sequences, paged / contiguous: "
     << fmt("%.2f", sustained_ratio(paged, contiguous)) << "x\n";
}

nlohmann::json report_json(const SimConfig& config, const RunInfo& info, const SimResult& paged,
                           const SimResult& contiguous) {
  return {
      {"config",
       {{"kv_budget_bytes", config.kv_budget_bytes},
        {"kv_bytes_per_token", config.shape.kv_bytes_per_token()},
        {"model_shape",
         {{"name", config.shape.name},
          {"num_layers", config.shape.num_layers},
          {"num_kv_heads", config.shape.num_kv_heads},
          {"head_dim", config.shape.head_dim},
          {"dtype", kv_dtype_name(config.shape.dtype)}}},
        {"capacity_tokens", config.capacity_tokens()},
        {"block_size", config.block_size},
        {"max_model_len", config.max_model_len},
        {"max_num_batched_tokens", config.max_num_batched_tokens},
        {"max_num_seqs", config.max_num_seqs},
        {"watermark", config.watermark},
        {"step_s", config.step_s},
        {"prefix_caching", config.prefix_caching},
        {"reserve_request_max", config.reserve_request_max}}},
      {"workload", {{"description", info.workload}, {"num_requests", info.num_requests}}},
      {"ratio_sustained_concurrency", sustained_ratio(paged, contiguous)},
      {"allocators", {{"paged", summary_json(paged)}, {"contiguous", summary_json(contiguous)}}},
  };
}

std::string report_svg(const SimConfig& config, const RunInfo& info, const SimResult& paged,
                       const SimResult& contiguous) {
  const double t_max = std::max({paged.end_time_s, contiguous.end_time_s, 1e-3});
  const double run_max =
      std::max<double>({1.0, double(paged.peak_running), double(contiguous.peak_running)});
  const double run_step = tick_step(run_max, 6);
  const Panel util{80, 70, 840, 230, t_max, 1.0};
  const Panel conc{80, 350, 840, 230, t_max, std::ceil(run_max / run_step) * run_step};
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"960\" height=\"640\" "
     << "viewBox=\"0 0 960 640\" font-family=\"sans-serif\">\n"
     << "<rect width=\"960\" height=\"640\" fill=\"white\"/>\n"
     << "<text x=\"480\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">kvsim: "
     << xml_escape(info.workload) << " - sustained concurrency paged/contiguous "
     << fmt("%.2f", sustained_ratio(paged, contiguous)) << "x</text>\n"
     << "<text x=\"480\" y=\"40\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">"
     << xml_escape(config_line(config)) << "</text>\n";
  draw_legend(os, 90, 56);
  draw_axes(os, util, 0.2, "KV utilisation (%)", true);
  draw_axes(os, conc, run_step, "concurrent sequences", false);
  os << "<text x=\"500\" y=\"612\" text-anchor=\"middle\" font-size=\"12\">simulated time (s)"
     << "</text>\n";
  auto util_of = [](const Sample& s) { return s.utilisation; };
  auto reserved_of = [](const Sample& s) { return s.reserved; };
  auto running_of = [](const Sample& s) { return double(s.num_running); };
  draw_line(os, util, contiguous, reserved_of, kContigColor, "5,3");
  draw_line(os, util, contiguous, util_of, kContigColor, "");
  draw_line(os, util, paged, util_of, kPagedColor, "");
  draw_line(os, conc, contiguous, running_of, kContigColor, "");
  draw_line(os, conc, paged, running_of, kPagedColor, "");
  os << "</svg>\n";
  return os.str();
}

}  // namespace kvw::kvsim
