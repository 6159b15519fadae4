// kvwarden bench-model: the engine's own speed on a GGUF file, named the way llama-bench names
// its tests (pp512 = a 512-token prompt, tg128 = 128 decoded tokens, "@ d4096" = after 4096
// tokens of context, "x16" = 16 sequences decoding together), with the machine's bandwidth and
// compute peaks measured in the same run, so users can compare and see how close to the limit
// each figure is. No server, no sampling: forward passes straight on the model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "apps/kvwarden/commands.h"
#include "apps/kvwarden/rope_flags.h"
#include "kernels/compute_probe.h"
#include "kernels/kernels.h"
#include "kernels/membw.h"
#include "loadgen/stats.h"
#include "model/model.h"

namespace kvw::app {
namespace {

struct BenchModelFlags {
  std::vector<std::string> models;
  std::vector<int32_t> n_prompt = {512}, n_gen = {128}, n_depth = {0}, streams = {1};
  int repetitions = 3, threads = 0;
  int32_t batch_size = 512;
  std::string kv_dtype = "f16", output = "md", json_path, attention_dot = "f32";
  bool probes = true;
  RopeFlags rope;
};

struct Machine {
  std::string cpu, features;
  int threads = 0;
  double read_gbs = 0, triad_gbs = 0;
  kernels::ComputePeak peak_1t, peak_nt;
};

struct TestResult {
  std::string test;
  int32_t n_prompt = 0, n_gen = 0, n_depth = 0, streams = 1;
  std::vector<double> samples_ts;
  double median_ts = 0, avg_ts = 0, stddev_ts = 0;
  double matmul_gops = 0, pct_of_peak = 0;  // prompt tests only
  std::vector<double> depth_fill_ts;        // the context's own prefill, tokens/s per run
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "model name" and the SIMD flags that decide which kernels run, from /proc/cpuinfo.
void read_cpu(Machine& m) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    if (m.cpu.empty() && line.rfind("model name", 0) == 0) m.cpu = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0)
      flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx_vnni", "avx512_bf16", "amx_int8"}) {
    if (flags.find(" " + std::string(f) + " ") != std::string::npos) {
      m.features += (m.features.empty() ? "" : " ") + std::string(f);
    }
  }
}

// Multiply-adds of every weight matrix one token passes through (MoE: the experts it uses),
// excluding the output head, which a prompt computes for its last token only.
double matmul_macs_per_token(const Model& model) {
  const ModelWeights& w = model.weights();
  auto macs = [](const WeightMatrix& x) { return (double)x.n_rows * (double)x.n_in; };
  double total = 0;
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* x : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router}) {
      if (x->data != nullptr) total += macs(*x);
    }
    if (l.gate_exps.n_expert > 0) {
      total += model.hparams().moe.n_expert_used *
               (macs(l.gate_exps.first) + macs(l.up_exps.first) + macs(l.down_exps.first));
    }
  }
  return total;
}

// Elements of every weight matrix (all experts), the embedding, and the output head if untied.
double parameter_count(const ModelWeights& w) {
  auto n = [](const WeightMatrix& x) { return (double)x.n_rows * (double)x.n_in; };
  double total = n(w.token_embd) + (w.output.data != w.token_embd.data ? n(w.output) : 0);
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* x : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router}) {
      if (x->data != nullptr) total += n(*x);
    }
    for (const ExpertMatrices* e : {&l.gate_exps, &l.up_exps, &l.down_exps}) {
      total += e->n_expert * n(e->first);
    }
  }
  return total;
}

bool is_float(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

void summarise(TestResult& r) {
  r.median_ts = loadgen::percentile(r.samples_ts, 50);
  r.avg_ts = loadgen::mean_of(r.samples_ts);
  // Sample standard deviation, as llama-bench reports it (stats.h's std_of is the population's).
  double var = 0;
  for (double x : r.samples_ts) var += (x - r.avg_ts) * (x - r.avg_ts);
  const size_t n = r.samples_ts.size();
  r.stddev_ts = n > 1 ? std::sqrt(var / (n - 1)) : 0;
}

// One run of one test: fresh KV, `depth` tokens of context (untimed), then the timed prompt
// (chunked by batch_size) or `streams` sequences decoding n_gen tokens together.
// Tokens/s of the test; *fill_ts gets the rate of the depth's own prefill (a depth-D test times
// a D-token prompt on the way).
Result<double> run_once(Model& model, const BenchModelFlags& f, KvDtype dtype, int32_t depth,
                        int32_t n_prompt, int32_t n_gen, int32_t streams, uint32_t seed,
                        double* fill_ts) {
  const int32_t per_seq = depth + std::max(n_prompt, n_gen) + 1;
  const int32_t block = 16;
  const uint32_t blocks_per_seq = (per_seq + block - 1) / block;
  KvArena kv(model.kv_config(blocks_per_seq * streams, block, dtype));
  std::vector<std::vector<uint32_t>> tables(streams, std::vector<uint32_t>(blocks_per_seq));
  for (int32_t s = 0; s < streams; ++s) {
    for (uint32_t b = 0; b < blocks_per_seq; ++b) tables[s][b] = s * blocks_per_seq + b;
  }
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> tokens(streams, std::vector<int32_t>(per_seq));
  for (auto& seq : tokens) {
    for (auto& t : seq) t = (int32_t)(rng() % model.hparams().n_vocab);
  }
  std::vector<float> logits((size_t)streams * model.hparams().n_vocab);
  // Prefill [from, to) of every stream, in chunks of batch_size tokens in total.
  auto prefill = [&](int32_t from, int32_t to) -> Status {
    for (int32_t s = 0; s < streams; ++s) {
      for (int32_t p = from; p < to; p += f.batch_size) {
        const int32_t n = std::min(f.batch_size, to - p);
        SeqInput in{
            .tokens = std::span(tokens[s]).subspan(p, n), .start_pos = p, .block_table = tables[s]};
        KVW_RETURN_IF_ERROR(model.forward({&in, 1}, kv, logits.data()));
      }
    }
    return {};
  };
  const double fill_t0 = now_s();
  KVW_RETURN_IF_ERROR(prefill(0, depth));
  if (depth > 0) *fill_ts = (double)depth * streams / (now_s() - fill_t0);
  if (n_prompt > 0) {
    const double t0 = now_s();
    KVW_RETURN_IF_ERROR(prefill(depth, depth + n_prompt));
    return (double)n_prompt * streams / (now_s() - t0);
  }
  std::vector<SeqInput> step(streams);
  const double t0 = now_s();
  for (int32_t i = 0; i < n_gen; ++i) {
    for (int32_t s = 0; s < streams; ++s) {
      step[s] = {.tokens = std::span(tokens[s]).subspan(depth + i, 1),
                 .start_pos = depth + i,
                 .block_table = tables[s]};
    }
    KVW_RETURN_IF_ERROR(model.forward(step, kv, logits.data()));
  }
  return (double)n_gen * streams / (now_s() - t0);
}

std::string test_name(int32_t n_prompt, int32_t n_gen, int32_t depth, int32_t streams) {
  std::string name = n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
  if (streams > 1) name += " x" + std::to_string(streams);
  if (depth > 0) name += " @ d" + std::to_string(depth);
  return name;
}

std::string fmt(const char* f, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

int run(const BenchModelFlags& f) {
  auto fail = [](const std::string& msg, int code) {
    std::cerr << "kvwarden bench-model: " << msg << "\n";
    return code;
  };
  auto dtype = parse_kv_dtype(f.kv_dtype);
  if (!dtype) return fail("--kv-cache-dtype: " + dtype.message(), 2);
  if (!kv_dtype_on_cpu(*dtype))
    return fail("--kv-cache-dtype: " + f.kv_dtype + " is not stored on CPU", 2);
  if (f.repetitions < 1) return fail("--repetitions must be >= 1", 2);
  if (f.batch_size < 1) return fail("--batch-size must be >= 1", 2);
  if (f.output != "md" && f.output != "json") return fail("--output must be md or json", 2);
  for (const auto* list : {&f.n_prompt, &f.n_gen, &f.n_depth}) {
    for (int32_t v : *list) {
      if (v < 0) return fail("-p, -n and -d take sizes >= 0", 2);
    }
  }
  for (int32_t s : f.streams) {
    if (s < 1) return fail("--streams takes counts >= 1", 2);
  }
  Machine m;
  read_cpu(m);
  m.threads = f.threads > 0 ? f.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  if (f.probes) {
    ThreadPool pool(m.threads), one(1);
    m.read_gbs = kernels::measure_read_bandwidth_gbs(pool, 512u << 20);
    m.triad_gbs = kernels::measure_memory_bandwidth_gbs(pool, 512u << 20);
    m.peak_1t = kernels::measure_compute_peak(one);
    m.peak_nt = kernels::measure_compute_peak(pool);
  }
  int32_t max_streams = 1;
  for (int32_t s : f.streams) max_streams = std::max(max_streams, s);
  nlohmann::json out_models = nlohmann::json::array();
  std::ostringstream md;
  md << "| model | type | size | params | kernels | threads | test | t/s | % of peak |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& path : f.models) {
    ModelOptions opt;
    opt.n_threads = m.threads;
    opt.max_batch_tokens = std::max(f.batch_size, max_streams);
    opt.attention_bf16_dot = f.attention_dot == "bf16";
    auto rope = rope_override(f.rope);
    if (!rope.ok()) return fail(rope.message(), 2);
    opt.rope = *rope;
    auto loaded = Model::load(path, opt);
    if (!loaded) return fail(loaded.message(), 1);
    Model& model = **loaded;
    // Read at load (Model::load logs it too): issue 29's bimodal decode speed.
    const std::optional<uint64_t> huge_bytes = model.weights_huge_page_bytes();
    const GgmlType wtype = model.weights().layers.at(0).wq.type;
    const double macs = matmul_macs_per_token(model);
    const double params = parameter_count(model.weights());
    const double peak_gops = is_float(wtype) ? m.peak_nt.fma_gflops : m.peak_nt.int8_gops;
    std::vector<TestResult> results;
    for (int32_t depth : f.n_depth) {
      for (int32_t p : f.n_prompt) {
        if (p == 0) continue;
        TestResult r;
        r.test = test_name(p, 0, depth, 1);
        r.n_prompt = p;
        r.n_depth = depth;
        results.push_back(r);
      }
      for (int32_t n : f.n_gen) {
        if (n == 0) continue;
        for (int32_t s : f.streams) {
          TestResult r;
          r.test = test_name(0, n, depth, s);
          r.n_gen = n;
          r.n_depth = depth;
          r.streams = s;
          results.push_back(r);
        }
      }
    }
    for (TestResult& r : results) {
      // One untimed warm-up (page faults, caches), then the timed repetitions. The warm-up is
      // capped at 512 tokens of depth and prompt: at depth 32768 a full-size one doubled the run
      // (two 14-minute prefills) and warmed nothing more.
      for (int rep = -1; rep < f.repetitions; ++rep) {
        const bool warm = rep < 0;
        double fill_ts = 0;
        auto ts = run_once(model, f, *dtype, warm ? std::min(r.n_depth, 512) : r.n_depth,
                           warm ? std::min(r.n_prompt, 512) : r.n_prompt,
                           warm ? std::min(r.n_gen, 16) : r.n_gen, r.streams,
                           1 + (uint32_t)std::max(rep, 0), &fill_ts);
        if (!ts) return fail(path + ": " + r.test + ": " + ts.message(), 1);
        if (warm) continue;
        r.samples_ts.push_back(*ts);
        if (r.n_depth > 0) r.depth_fill_ts.push_back(fill_ts);
      }
      summarise(r);
      if (r.n_prompt > 0) {
        r.matmul_gops = 2.0 * macs * r.median_ts / 1e9;
        r.pct_of_peak = peak_gops > 0 ? 100.0 * r.matmul_gops / peak_gops : 0;
      }
      const std::string name = path.substr(path.find_last_of('/') + 1);
      md << "| " << name << " | " << std::string(type_traits(wtype).name) << " | "
         << fmt("%.2f GiB", (double)model.weights().total_bytes / (1 << 30)) << " | "
         << fmt("%.2f B", params / 1e9) << " | " << kernels::kernels().isa << " | " << m.threads
         << " | " << r.test << " | " << fmt("%.2f ± %.2f", r.median_ts, r.stddev_ts) << " | "
         << (r.n_prompt > 0 && peak_gops > 0 ? fmt("%.0f%%", r.pct_of_peak) : std::string(""))
         << " |\n";
      if (f.output == "md") {
        std::cerr << name << " " << r.test << ": " << fmt("%.2f t/s", r.median_ts);
        if (!r.depth_fill_ts.empty()) {
          std::cerr << fmt(" (its %.0f-token context prefilled at %.2f t/s)", r.n_depth,
                           r.depth_fill_ts.front());
        }
        std::cerr << "\n";
      }
    }
    nlohmann::json jr = nlohmann::json::array();
    for (const TestResult& r : results) {
      jr.push_back({{"test", r.test},
                    {"n_prompt", r.n_prompt},
                    {"n_gen", r.n_gen},
                    {"n_depth", r.n_depth},
                    {"streams", r.streams},
                    {"samples_ts", r.samples_ts},
                    {"median_ts", r.median_ts},
                    {"avg_ts", r.avg_ts},
                    {"stddev_ts", r.stddev_ts},
                    {"matmul_gops", r.matmul_gops},
                    {"pct_of_peak", r.pct_of_peak},
                    {"depth_fill_ts", r.depth_fill_ts}});
    }
    out_models.push_back({{"model_filename", path},
                          {"model_type", std::string(type_traits(wtype).name)},
                          {"model_size", model.weights().total_bytes},
                          {"weights_bytes", model.weights_memory_bytes()},
                          {"weights_huge_page_bytes",
                           huge_bytes ? nlohmann::json(*huge_bytes) : nlohmann::json(nullptr)},
                          {"model_n_params", params},
                          {"kernels", kernels::kernels().isa},
                          {"kv_cache_dtype", f.kv_dtype},
                          {"attention_dot", f.attention_dot},
                          {"batch_size", f.batch_size},
                          {"matmul_macs_per_token", macs},
                          {"results", jr}});
  }
  const nlohmann::json machine = {{"cpu", m.cpu},
                                  {"features", m.features},
                                  {"threads", m.threads},
                                  {"read_gbs", m.read_gbs},
                                  {"triad_gbs", m.triad_gbs},
                                  {"fma_gflops_1t", m.peak_1t.fma_gflops},
                                  {"fma_gflops", m.peak_nt.fma_gflops},
                                  {"fma_kind", m.peak_nt.fma_kind},
                                  {"int8_gops_1t", m.peak_1t.int8_gops},
                                  {"int8_gops", m.peak_nt.int8_gops},
                                  {"int8_kind", m.peak_nt.int8_kind}};
  const nlohmann::json all = {{"machine", machine}, {"models", out_models}};
  if (!f.json_path.empty()) {
    std::ofstream o(f.json_path);
    o << all.dump(2) << "\n";
    if (!o) return fail(f.json_path + ": cannot write", 1);
  }
  if (f.output == "json") {
    std::cout << all.dump(2) << "\n";
    return 0;
  }
  std::cout << "machine: " << m.cpu << " [" << m.features << "], " << m.threads << " threads";
  if (f.probes) {
    std::cout << fmt(", read %.1f GB/s, triad %.1f GB/s", m.read_gbs, m.triad_gbs)
              << fmt(", f32 FMA %.0f GFLOP/s (1 thread %.0f)", m.peak_nt.fma_gflops,
                     m.peak_1t.fma_gflops)
              << fmt(", int8 %.0f GOP/s (1 thread %.0f, ", m.peak_nt.int8_gops, m.peak_1t.int8_gops)
              << m.peak_nt.int8_kind << ")";
  }
  std::cout << "\n\n" << md.str();
  return 0;
}

std::vector<int32_t> parse_list(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

void add_bench_model_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<BenchModelFlags>();
  auto lists = std::make_shared<std::array<std::string, 4>>();
  CLI::App* cmd = app.add_subcommand(
      "bench-model",
      "Measure prefill and decode speed of GGUF files on this machine, with llama-bench's test "
      "names (pp512, tg128, tg128 @ d4096, tg128 x16) and the memory-bandwidth and compute peaks "
      "measured in the same run");
  cmd->add_option("-m,--model", f->models, "GGUF file(s) to measure")->required();
  cmd->add_option("-p,--n-prompt", (*lists)[0], "Prompt sizes, comma-separated (default 512)");
  cmd->add_option("-n,--n-gen", (*lists)[1], "Decoded tokens, comma-separated (default 128)");
  cmd->add_option("-d,--n-depth", (*lists)[2],
                  "Tokens of context before each test, comma-separated (default 0)");
  cmd->add_option("-s,--streams", (*lists)[3],
                  "Sequences decoding together in tg tests, comma-separated (default 1)");
  cmd->add_option("-r,--repetitions", f->repetitions, "Timed runs per test (median reported)")
      ->default_val(3);
  cmd->add_option("-t,--threads", f->threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch-size", f->batch_size,
                  "Prompt tokens per forward pass (llama-bench's -ub)")
      ->default_val(512);
  cmd->add_option("--kv-cache-dtype", f->kv_dtype, "f16, bf16, f32 or int8")->default_val("f16");
  cmd->add_option("--attention-dot", f->attention_dot, kAttentionDotHelp)
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->default_val("f32");
  add_rope_flags(cmd, &f->rope);
  cmd->add_option("-o,--output", f->output, "md (table on stdout) or json")->default_val("md");
  cmd->add_option("--json", f->json_path, "Also write the JSON report to this file");
  cmd->add_flag_callback(
      "--no-probes", [f] { f->probes = false; }, "Skip the bandwidth and compute probes");
  cmd->callback([f, lists, &exit_code] {
    try {
      if (!(*lists)[0].empty()) f->n_prompt = parse_list((*lists)[0]);
      if (!(*lists)[1].empty()) f->n_gen = parse_list((*lists)[1]);
      if (!(*lists)[2].empty()) f->n_depth = parse_list((*lists)[2]);
      if (!(*lists)[3].empty()) f->streams = parse_list((*lists)[3]);
    } catch (const std::exception&) {
      std::cerr << "kvwarden bench-model: -p, -n, -d and -s take comma-separated integers\n";
      exit_code = 2;
      return;
    }
    exit_code = run(*f);
  });
}

}  // namespace kvw::app
