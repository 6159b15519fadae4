// bench/obs_overhead_bench.cc: what observability costs the decode loop. Runs the same decode
// workload with observability off (no step observer) and on (ObservabilityContext's observer:
// step histograms + trace ring + preemption window, plus a thread that renders /metrics,
// /debug/stats and /debug/kv every --scrape-ms, as a dashboard tab would), alternating
// off/on --repeats times, and prints the median decode throughput of each and the ratio.
//
//   build/bench/obs_overhead_bench [--model m.gguf] [--seqs 8] [--decode 64] [--prompt 16]
//                                  [--threads 0] [--repeats 3] [--scrape-ms 1000]
// Without --model a small random llama (n_embd 256, 4 layers) is written to /tmp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "model/model_maker.h"
#include "obs/obs_context.h"

namespace kvw {
namespace {

struct Options {
  std::string model;
  int num_seqs = 8, n_decode = 64, n_prompt = 16, threads = 0, repeats = 3, scrape_ms = 1000;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Decode tokens per second of one run; observability on when `obs` is set.
Result<double> run_once(const Options& o, obs::ObservabilityContext* obs) {
  EngineConfig cfg;
  cfg.model_path = o.model;
  cfg.n_threads = o.threads;
  cfg.sched.max_num_seqs = o.num_seqs;
  cfg.sched.max_model_len = o.n_prompt + o.n_decode + 16;
  cfg.sched.max_num_batched_tokens = std::max(64, o.num_seqs * o.n_prompt);
  if (obs) cfg.step_observer = obs->step_observer();
  auto e = Engine::create(cfg);
  if (!e.ok()) return e.error();
  Engine& eng = **e;
  std::atomic<bool> stop{false};
  std::thread scraper;
  if (obs) {
    obs->attach({.stats = [&] { return eng.stats(); },
                 .kv_snapshot = [&] { return eng.kv_snapshot(std::chrono::milliseconds(200)); },
                 .budget = [&] { return eng.budget(); }});
    scraper = std::thread([&] {
      size_t bytes = 0;
      while (!stop.load()) {
        bytes += obs->metrics_text().size() + obs->stats_body().size() + obs->kv_body().size();
        std::this_thread::sleep_for(std::chrono::milliseconds(o.scrape_ms));
      }
      (void)bytes;
    });
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(3, eng.model().hparams().n_vocab - 1);
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (int i = 0; i < o.num_seqs; ++i) {
    GenerationRequest r;
    std::vector<int32_t> p;
    for (int j = 0; j < o.n_prompt; ++j) p.push_back(tok(rng));
    r.prompt = std::move(p);
    r.max_tokens = o.n_decode;
    r.ignore_eos = true;
    auto ch = eng.submit(r);
    if (!ch.ok()) return ch.error();
    chs.push_back(*ch);
  }
  for (auto& ch : chs) (void)ch->next();  // prefill done: measure decode only
  const double t0 = now_s();
  for (auto& ch : chs) (void)ch->collect();
  const double dt = now_s() - t0;
  stop = true;
  if (scraper.joinable()) scraper.join();
  if (obs) obs->attach({});  // the engine is about to go away
  return double(o.num_seqs) * (o.n_decode - 1) / dt;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main_impl(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      o.model = v;
    else if (k == "--seqs")
      o.num_seqs = std::atoi(v.c_str());
    else if (k == "--decode")
      o.n_decode = std::atoi(v.c_str());
    else if (k == "--prompt")
      o.n_prompt = std::atoi(v.c_str());
    else if (k == "--threads")
      o.threads = std::atoi(v.c_str());
    else if (k == "--repeats")
      o.repeats = std::max(1, std::atoi(v.c_str()));
    else if (k == "--scrape-ms")
      o.scrape_ms = std::max(1, std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (o.model.empty()) {
    o.model = "/tmp/obs_overhead_bench.gguf";
    MakeModelSpec spec;
    spec.n_embd = 256;
    spec.n_layer = 4;
    spec.n_head = 8;
    spec.n_head_kv = 4;
    spec.n_ff = 768;
    if (Status st = make_model(spec, o.model); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  set_log_level(LogLevel::kWarn);
  std::vector<double> off, on;
  obs::ObservabilityContext ctx{obs::ObsConfig{}};
  for (int r = 0; r < o.repeats; ++r) {
    for (bool with_obs : {false, true}) {
      auto tps = run_once(o, with_obs ? &ctx : nullptr);
      if (!tps.ok()) {
        std::fprintf(stderr, "%s\n", tps.message().c_str());
        return 1;
      }
      (with_obs ? on : off).push_back(*tps);
    }
  }
  std::printf("model %s, %d seqs, prompt %d, decode %d, %d repeats, scrape every %d ms\n",
              o.model.c_str(), o.num_seqs, o.n_prompt, o.n_decode, o.repeats, o.scrape_ms);
  std::printf("%-22s %14s\n", "observability", "decode tok/s");
  std::printf("%-22s %14.1f\n", "off", median(off));
  std::printf("%-22s %14.1f\n", "on (observer+scrape)", median(on));
  std::printf("on/off ratio %.3f; trace ring kept %zu events (%llu dropped)\n",
              median(on) / median(off), ctx.trace().events().size(),
              (unsigned long long)ctx.trace().num_dropped());
  return 0;
}

}  // namespace
}  // namespace kvw

int main(int argc, char** argv) {
  return kvw::main_impl(argc, argv);
}
