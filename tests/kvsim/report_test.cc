// Tests for the report formats: JSON shape and a well-formed SVG.
#include "kvsim/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace kvw::kvsim {
namespace {

struct Fixture {
  SimConfig config;
  RunInfo info{"burst <test> & \"quotes\"", 0};
  SimResult paged, contiguous;
  Fixture() {
    config.shape = ModelShape{.name = "tiny", .num_layers = 1, .num_kv_heads = 1, .head_dim = 8};
    config.max_model_len = 512;
    config.kv_budget_bytes = 2048 * config.shape.kv_bytes_per_token();
    config.max_num_batched_tokens = 256;
    WorkloadSpec spec{.pattern = Pattern::kBurst,
                      .num_requests = 24,
                      .max_prompt_tokens = 300,
                      .max_output_tokens = 150,
                      .burst_size = 12,
                      .burst_interval_s = 5,
                      .max_model_len = 512};
    const auto reqs = generate_workload(spec);
    info.num_requests = reqs.size();
    paged = simulate(reqs, config, AllocatorKind::kPaged);
    contiguous = simulate(reqs, config, AllocatorKind::kContiguous);
  }
};

TEST(Report, JsonHasConfigSummaryAndEqualLengthSeries) {
  Fixture f;
  const nlohmann::json j = report_json(f.config, f.info, f.paged, f.contiguous);
  EXPECT_EQ(j["config"]["kv_budget_bytes"], f.config.kv_budget_bytes);
  EXPECT_EQ(j["config"]["kv_bytes_per_token"], 32u);
  EXPECT_EQ(j["config"]["capacity_tokens"], 2048u);
  EXPECT_EQ(j["workload"]["num_requests"], 24u);
  EXPECT_DOUBLE_EQ(j["ratio_sustained_concurrency"].get<double>(),
                   sustained_ratio(f.paged, f.contiguous));
  for (const char* name : {"paged", "contiguous"}) {
    const auto& a = j["allocators"][name];
    for (const char* key : {"peak_running", "mean_running", "sustained_running", "mean_utilisation",
                            "saturated_utilisation", "mean_fragmentation", "num_preemptions",
                            "num_rejected", "peak_waiting", "prefix_hit_rate", "num_finished"}) {
      EXPECT_TRUE(a.contains(key)) << name << "." << key;
    }
    EXPECT_EQ(a["num_finished"], 24u) << name;
    const auto& s = a["series"];
    const size_t n = s["time_s"].size();
    ASSERT_GT(n, 10u) << name;
    for (const char* key : {"running", "waiting", "utilisation", "reserved", "fragmentation"}) {
      EXPECT_EQ(s[key].size(), n) << name << "." << key;
    }
    for (const auto& u : s["utilisation"]) {
      EXPECT_GE(u.get<double>(), 0.0);
      EXPECT_LE(u.get<double>(), 1.0);
    }
  }
  EXPECT_EQ(j["allocators"]["paged"]["peak_running"], f.paged.peak_running);
}

TEST(Report, TablePrintsBothAllocatorsAndTheRatio) {
  Fixture f;
  std::ostringstream os;
  print_table(os, f.config, f.info, f.paged, f.contiguous);
  const std::string t = os.str();
  EXPECT_NE(t.find("paged"), std::string::npos);
  EXPECT_NE(t.find("contiguous"), std::string::npos);
  EXPECT_NE(t.find("peak concurrent sequences"), std::string::npos);
  EXPECT_NE(t.find("sustained concurrent sequences, paged / contiguous: "), std::string::npos);
}

// Minimal well-formedness check: balanced tags, quoted attributes, escaped text.
bool well_formed(const std::string& x, std::string& why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < x.size()) {
    if (x[i] == '&') {
      const size_t semi = x.find(';', i);
      const std::string ent = x.substr(i, semi == std::string::npos ? 1 : semi - i + 1);
      if (ent != "&lt;" && ent != "&gt;" && ent != "&amp;" && ent != "&quot;") {
        why = "bad entity at " + std::to_string(i);
        return false;
      }
      i = semi + 1;
      continue;
    }
    if (x[i] == '>') return why = "stray '>' at " + std::to_string(i), false;
    if (x[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = x.find('>', i);
    if (end == std::string::npos) return why = "unclosed tag", false;
    std::string tag = x.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.front() == '?') continue;  // XML declaration
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return why = "odd quotes: " + tag, false;
    if (tag.find('<') != std::string::npos) return why = "'<' inside tag: " + tag, false;
    if (tag.front() == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return why = "mismatched </" + name + ">", false;
      stack.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;  // self-closing
    stack.push_back(tag.substr(0, tag.find_first_of(" \n")));
  }
  if (!stack.empty()) return why = "unclosed <" + stack.back() + ">", false;
  return true;
}

TEST(Report, SvgIsWellFormedWithAxesAndLegend) {
  Fixture f;
  const std::string svg = report_svg(f.config, f.info, f.paged, f.contiguous);
  std::string why;
  EXPECT_TRUE(well_formed(svg, why)) << why;
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("burst &lt;test&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  EXPECT_NE(svg.find("KV utilisation (%)"), std::string::npos);
  EXPECT_NE(svg.find("concurrent sequences"), std::string::npos);
  EXPECT_NE(svg.find("simulated time (s)"), std::string::npos);
  EXPECT_NE(svg.find("paged (KvManager)"), std::string::npos);
  size_t lines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 5u);  // utilisation x2, contiguous reserved, concurrency x2
  // The checker itself must reject broken documents.
  EXPECT_FALSE(well_formed("<svg><g></svg>", why));
  EXPECT_FALSE(well_formed("<svg>a & b</svg>", why));
  // When xmllint is installed, a real parser must accept it too.
  if (std::system("command -v xmllint >/dev/null 2>&1") == 0) {
    const std::string path = ::testing::TempDir() + "kvsim_report_test.svg";
    std::ofstream(path) << svg;
    EXPECT_EQ(std::system(("xmllint --noout " + path).c_str()), 0);
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace kvw::kvsim
