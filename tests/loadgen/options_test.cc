// Option table, scenario files (including every file shipped in bench/scenarios) and criteria.
#include "loadgen/options.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loadgen/workload.h"

namespace kvw::loadgen {
namespace {

TEST(Options, JsonArgsAndFlagsSetTheSameFields) {
  BenchOptions o;
  ASSERT_TRUE(apply_json_args(o, {{"pattern", "spike"},
                                  {"spike-rate", 100},
                                  {"no-stream", true},
                                  {"goodput", {"ttft:500", "tpot:50"}},
                                  {"percentiles", "50,90"}})
                  .ok());
  EXPECT_EQ(o.pattern, "spike");
  EXPECT_EQ(o.spike_rate, 100);
  EXPECT_FALSE(o.stream);
  EXPECT_EQ(o.goodput, (std::vector<std::string>{"ttft:500", "tpot:50"}));
  EXPECT_EQ(o.percentiles, (std::vector<double>{50, 90}));
  ASSERT_TRUE(apply_option(o, "no-stream", "false").ok());
  EXPECT_TRUE(o.stream);
  EXPECT_FALSE(apply_option(o, "request-rate", "fast").ok());
  EXPECT_FALSE(apply_option(o, "concurrency", "-1").ok());
  EXPECT_FALSE(apply_option(o, "percentiles", "101").ok());
  auto bad = apply_json_args(o, {{"sprite-rate", 1}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("sprite-rate"), std::string::npos);
}

TEST(Options, VllmBenchServeFlagsSetTheSameFields) {
  BenchOptions o;
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"num-prompts", "200"},
                                                        {"max-concurrency", "16"},
                                                        {"dataset-name", "sharegpt"},
                                                        {"dataset-path", "sg.json"},
                                                        {"random-input-len", "1024"},
                                                        {"random-output-len", "128"},
                                                        {"metric-percentiles", "25,50,99"},
                                                        {"percentile-metrics", "ttft,e2el"},
                                                        {"save-result", "true"},
                                                        {"result-dir", "out"},
                                                        {"result-filename", "r.json"}}) {
    ASSERT_TRUE(apply_option(o, k, v).ok()) << k;
  }
  EXPECT_EQ(o.num_requests, 200);
  EXPECT_EQ(o.concurrency, 16);
  EXPECT_EQ(o.workload, "sharegpt");
  EXPECT_EQ(o.percentiles, (std::vector<double>{25, 50, 99}));
  EXPECT_EQ(o.percentile_metrics, (std::vector<std::string>{"ttft", "e2el"}));
  ASSERT_TRUE(resolve_vllm_options(o).ok());
  EXPECT_EQ(o.input_len, "fixed:1024");
  EXPECT_EQ(o.output_len, "fixed:128");
  EXPECT_EQ(vllm_result_path(o, "org/m", 0), "out/r.json");
  ASSERT_TRUE(apply_option(o, "random-range-ratio", "0.5").ok());
  ASSERT_TRUE(resolve_vllm_options(o).ok());
  EXPECT_EQ(o.input_len, "uniform:512:1536");  // vLLM: [N (1 - r), N (1 + r)]
  ASSERT_TRUE(apply_option(o, "random-range-ratio", "1").ok());
  EXPECT_FALSE(resolve_vllm_options(o).ok());
  ASSERT_TRUE(apply_option(o, "port", "9000").ok());
  ASSERT_TRUE(apply_option(o, "ignore-eos", "true").ok());
  ASSERT_TRUE(apply_option(o, "label", "vllm").ok());
  ASSERT_TRUE(apply_option(o, "random-range-ratio", "0").ok());
  ASSERT_TRUE(resolve_vllm_options(o).ok());
  EXPECT_EQ(o.base_url, "http://127.0.0.1:9000");  // vLLM's default host
  EXPECT_TRUE(o.ignore_eos);
  EXPECT_EQ(o.name, "vllm");
  EXPECT_FALSE(apply_option(o, "dataset-name", "sonnet").ok());
  EXPECT_FALSE(apply_option(o, "percentile-metrics", "ttft,latency").ok());
  EXPECT_FALSE(apply_option(o, "max-concurrency", "0").ok());
}

TEST(Options, SaveResultUsesVllmsDefaultFileName) {
  BenchOptions o;
  EXPECT_EQ(vllm_result_path(o, "m", 0), "");  // not asked to save
  o.save_result = true;
  o.concurrency = 4;
  const std::time_t t = 1767225600;  // a fixed instant; the name uses local time, like vLLM's
  char dt[32];
  std::strftime(dt, sizeof dt, "%Y%m%d-%H%M%S", std::localtime(&t));
  EXPECT_EQ(vllm_result_path(o, "meta-llama/Llama-3-8B", t),
            "bench-infqps-concurrency4-Llama-3-8B-" + std::string(dt) + ".json");
  o.request_rate = 4;
  o.concurrency = 0;
  o.name = "openai";
  o.result_dir = "res";
  EXPECT_EQ(vllm_result_path(o, "m", t), "res/openai-4.0qps-m-" + std::string(dt) + ".json");
}

TEST(Options, CriteriaPassFailAndUnmeasured) {
  nlohmann::json report = {
      {"errors_5xx", 0}, {"completed_or_refused_ratio", 0.998}, {"alive", true}};
  auto r = evaluate_criteria({{"errors_5xx", "==", 0},
                              {"completed_or_refused_ratio", ">=", 0.999},
                              {"server_rss_growth_mb_per_min", "<", 1},
                              {"alive", "==", 1}},
                             report);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(r[0].pass);
  EXPECT_FALSE(r[1].pass);
  EXPECT_FALSE(r[2].pass);  // not measured counts as a failure
  EXPECT_TRUE(std::isnan(r[2].observed));
  EXPECT_TRUE(r[3].pass);
}

TEST(Options, ScenarioRunsInheritArgsAndCriteria) {
  const auto path = std::filesystem::temp_directory_path() / "kvw_scenario_test.json";
  std::ofstream(path) << R"({"name": "b", "args": {"input-len": "fixed:8"},
    "criteria": [{"metric": "errors_5xx", "op": "==", "value": 0}],
    "runs": [{"name": "spike", "args": {"pattern": "spike"}},
             {"name": "ramp", "args": {"pattern": "ramp", "input-len": "fixed:9"},
              "criteria": [{"metric": "completed", "op": ">", "value": 0}]}]})";
  auto s = load_scenario(path.string());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(s->runs.size(), 2u);
  EXPECT_EQ(s->runs[0].name, "b-spike");
  EXPECT_EQ(s->runs[0].args["input-len"], "fixed:8");
  EXPECT_EQ(s->runs[1].args["input-len"], "fixed:9");
  EXPECT_EQ(s->runs[0].criteria.size(), 1u);
  EXPECT_EQ(s->runs[1].criteria.size(), 2u);
  std::ofstream(path) << R"({"args": {"pattern": "spike", "spike-rate": "lots"}})";
  EXPECT_FALSE(load_scenario(path.string()).ok());
  std::ofstream(path) << R"({"criteria": [{"metric": "x", "op": "~", "value": 1}]})";
  EXPECT_FALSE(load_scenario(path.string()).ok());
  std::filesystem::remove(path);
}

TEST(Options, EveryShippedScenarioLoads) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(KVW_SCENARIO_DIR)) {
    if (e.path().extension() != ".json") continue;
    auto s = load_scenario(e.path().string());
    ASSERT_TRUE(s.ok()) << e.path() << ": " << s.message();
    for (const auto& run : s->runs)
      EXPECT_FALSE(run.criteria.empty()) << run.name << " has no pass criteria";
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(Workload, LengthDistributionsParseAndSample) {
  auto fixed = LengthDist::parse("fixed:12");
  ASSERT_TRUE(fixed.ok());
  Rng rng(1);
  EXPECT_EQ(fixed->sample(rng), 12);
  EXPECT_EQ(LengthDist::parse("40").value().sample(rng), 40);
  auto u = LengthDist::parse("uniform:10:20").value();
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    const int v = u.sample(rng);
    ASSERT_TRUE(v >= 10 && v <= 20);
    sum += v;
  }
  EXPECT_NEAR(sum / 20000, 15.0, 0.1);
  auto ln = LengthDist::parse("lognormal:200:0.5").value();
  sum = 0;
  for (int i = 0; i < 50000; ++i) sum += ln.sample(rng);
  EXPECT_NEAR(sum / 50000, 200.0, 4.0);
  for (const char* bad : {"gauss:3", "uniform:5", "uniform:9:2", "fixed:0", "normal:10:x"})
    EXPECT_FALSE(LengthDist::parse(bad).ok()) << bad;
}

// Counts words, like the fake server's /tokenize.
class WordCounter : public TokenCounter {
 public:
  int count(std::string_view t) override {
    int n = 0;
    bool in = false;
    for (char c : t) {
      if (c != ' ' && !in) ++n;
      in = c != ' ';
    }
    return n;
  }
  bool exact() const override { return true; }
};

TEST(Workload, SeededAndExactWithAnExactCounter) {
  WorkloadSpec w;
  w.input_len = LengthDist::parse("uniform:5:50").value();
  w.prefix_len = 4;
  w.num_prefix_groups = 2;
  WordCounter counter;
  Rng a(9), b(9);
  auto x = build_workload(w, 20, a, counter), y = build_workload(w, 20, b, counter);
  ASSERT_TRUE(x.ok() && y.ok());
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(x.value()[i].prompt, y.value()[i].prompt);
    EXPECT_EQ(x.value()[i].input_tokens, counter.count(x.value()[i].prompt));
  }
  // Requests 0 and 2 share group 0's prefix; 0 and 1 do not.
  auto words = [](const std::string& s, int n) {
    size_t pos = 0;
    for (int i = 0; i < n; ++i) pos = s.find(' ', pos + 1);
    return s.substr(0, pos);
  };
  EXPECT_EQ(words(x.value()[0].prompt, 4), words(x.value()[2].prompt, 4));
  EXPECT_NE(words(x.value()[0].prompt, 4), words(x.value()[1].prompt, 4));
  w.prefix_len = 0;
  w.input_len = LengthDist::parse("fixed:33").value();
  Rng c(1);
  auto fixed = build_workload(w, 5, c, counter);
  ASSERT_TRUE(fixed.ok());
  for (const auto& r : fixed.value()) EXPECT_EQ(r.input_tokens, 33);
}

TEST(Workload, MultiTurnGrowsToTheContextAndExtremeHasOddParameters) {
  WorkloadSpec w;
  w.kind = "multiturn";
  w.num_conversations = 3;
  w.rounds = 16;
  w.max_context_tokens = 8192;
  w.output_len = LengthDist::parse("fixed:64").value();
  EstimatingCounter counter;
  Rng rng(2);
  auto s = build_workload(w, 0, rng, counter);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 48u);
  EXPECT_EQ((*s)[0].conversation_id, 0);
  EXPECT_EQ((*s)[3].round, 1);  // round-major
  int64_t total = 0;
  for (const auto& r : s.value())
    if (r.conversation_id == 0) total += r.input_tokens + r.max_tokens;
  EXPECT_NEAR(static_cast<double>(total), 8192.0, 0.15 * 8192);
  w.kind = "extreme";
  auto e = build_workload(w, 18, rng, counter);
  ASSERT_TRUE(e.ok());
  bool has_huge_temp = false;
  for (const auto& r : e.value()) has_huge_temp |= r.extra.value("temperature", 0.0) >= 1e6;
  EXPECT_TRUE(has_huge_temp);
  w.kind = "nope";
  EXPECT_FALSE(build_workload(w, 1, rng, counter).ok());
}

}  // namespace
}  // namespace kvw::loadgen
