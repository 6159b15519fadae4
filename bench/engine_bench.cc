// bench/engine_bench.cc: aggregate decode throughput of the engine at several concurrencies, and
// the scheduler's share of step time. One step reads the weights once for the whole batch, so
// 16 streams should decode several times faster in aggregate than one.
//
//   build/bench/engine_bench [--model m.gguf] [--seqs 1,4,16] [--decode 32] [--prompt 16]
//                            [--threads 0]
// Without --model a small random llama (n_embd 256, 4 layers) is written to /tmp.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

struct Row {
  int num_seqs;
  double decode_tps, step_ms, sched_us_per_step, sched_share;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<Row> run_one(const std::string& model, int num_seqs, int n_prompt, int n_decode,
                    int threads) {
  EngineConfig cfg;
  cfg.model_path = model;
  cfg.n_threads = threads;
  cfg.sched.max_num_seqs = num_seqs;
  cfg.sched.max_model_len = n_prompt + n_decode + 16;
  cfg.sched.max_num_batched_tokens = std::max(64, num_seqs * n_prompt);
  cfg.memory_budget_bytes = 0;  // KV sized for max_num_seqs x max_model_len
  auto e = Engine::create(cfg);
  if (!e.ok()) return e.error();
  Engine& eng = **e;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(3, eng.model().hparams().n_vocab - 1);
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (int i = 0; i < num_seqs; ++i) {
    GenerationRequest r;
    std::vector<int32_t> p;
    for (int j = 0; j < n_prompt; ++j) p.push_back(tok(rng));
    r.prompt = std::move(p);
    r.max_tokens = n_decode;
    r.ignore_eos = true;
    auto ch = eng.submit(r);
    if (!ch.ok()) return ch.error();
    chs.push_back(*ch);
  }
  // Decode phase: from the moment every sequence has its first token (prefill done).
  for (auto& ch : chs) (void)ch->next();
  const EngineStats s0 = eng.stats();
  const double t0 = now_s();
  for (auto& ch : chs) (void)ch->collect();
  const double dt = now_s() - t0;
  const EngineStats s1 = eng.stats();
  const double steps = (double)(s1.num_steps - s0.num_steps);
  const double sched_ns = (double)(s1.schedule_ns - s0.schedule_ns);
  const double total_ns =
      sched_ns + (double)(s1.forward_ns - s0.forward_ns) + (double)(s1.sample_ns - s0.sample_ns);
  Row row;
  row.num_seqs = num_seqs;
  row.decode_tps = (double)num_seqs * (n_decode - 1) / dt;
  row.step_ms = steps > 0 ? total_ns / steps / 1e6 : 0;
  row.sched_us_per_step = steps > 0 ? sched_ns / steps / 1e3 : 0;
  row.sched_share = total_ns > 0 ? sched_ns / total_ns : 0;
  return row;
}

int main_impl(int argc, char** argv) {
  std::string model, seqs = "1,4,16";
  int n_decode = 32, n_prompt = 16, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model = v;
    else if (k == "--seqs")
      seqs = v;
    else if (k == "--decode")
      n_decode = std::atoi(v.c_str());
    else if (k == "--prompt")
      n_prompt = std::atoi(v.c_str());
    else if (k == "--threads")
      threads = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (model.empty()) {
    model = "/tmp/engine_bench_small.gguf";
    MakeModelSpec spec;
    spec.n_embd = 256;
    spec.n_layer = 4;
    spec.n_head = 8;
    spec.n_head_kv = 4;
    spec.n_ff = 768;
    if (Status st = make_model(spec, model); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  set_log_level(LogLevel::kWarn);
  std::vector<Row> rows;
  std::stringstream ss(seqs);
  for (std::string item; std::getline(ss, item, ',');) {
    auto row = run_one(model, std::atoi(item.c_str()), n_prompt, n_decode, threads);
    if (!row.ok()) {
      std::fprintf(stderr, "%s\n", row.message().c_str());
      return 1;
    }
    rows.push_back(*row);
  }
  std::printf("model %s, prompt %d, decode %d tokens per sequence\n", model.c_str(), n_prompt,
              n_decode);
  std::printf("%8s %14s %10s %10s %14s %12s\n", "seqs", "decode tok/s", "vs 1 seq", "step ms",
              "sched us/step", "sched share");
  for (const Row& r : rows) {
    std::printf("%8d %14.1f %9.2fx %10.2f %14.1f %11.3f%%\n", r.num_seqs, r.decode_tps,
                r.decode_tps / rows[0].decode_tps, r.step_ms, r.sched_us_per_step,
                100.0 * r.sched_share);
  }
  return 0;
}

}  // namespace
}  // namespace kvw

int main(int argc, char** argv) {
  return kvw::main_impl(argc, argv);
}
