// loadgen/report.h: turns a finished run into the JSON report (vLLM's field names plus the
// server's own figures and per-second series), the terminal summary and a self-contained HTML
// page (inline SVG, no scripts from anywhere). Pure functions of their inputs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loadgen/runner.h"
#include "loadgen/stats.h"

namespace kvw::loadgen {

// Facts about the run that the report repeats (target, pattern, seed, ...): copied as-is.
nlohmann::json build_report(const RunOutput& run, const SummaryOptions& options,
                            const nlohmann::json& context, double warmup_s);

// Least-squares slope of resident memory over the samples at or after from_s, in MB (1e6 B) per
// minute; NaN with fewer than 2 samples.
double rss_growth_mb_per_min(const std::vector<ServerSnapshot>& samples, double from_s);

std::string format_summary(const nlohmann::json& report, const SummaryOptions& options);
std::string render_html(const nlohmann::json& report);

}  // namespace kvw::loadgen
