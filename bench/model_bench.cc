// bench/model_bench.cc: end-to-end CPU baseline for a TinyLlama-1.1B-shaped model (or another
// make-model preset, e.g. the Mixtral-shaped MoE "mixtral-1b").
// For each weight type: prefill tokens/s (one 512-token prompt), decode tokens/s (one sequence),
// and decode as a fraction of the memory-bandwidth bound = read bandwidth / weight bytes per
// token, with the bandwidth measured in the same run. Models are written once into --dir.
//
//   build/bench/model_bench --dir build/bench-models [--types f16,q8_0,q4_0] [--decode 32]
//                           [--preset tinyllama-1.1b] [--pack 1|0]
// --pack 0 keeps Q8_0/Q4_0 weights in the GGUF layout (the row-tiled matmul) for A/B runs.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "kernels/kernels.h"
#include "kernels/membw.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

struct Row {
  std::string type;
  double weight_gb, prefill_tps, decode_tps, bound_tps, read_bound_tps;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bytes one decode step streams: every layer matrix and the output matrix, and of MoE layers the
// router and the experts one token uses (the embedding row and the norms are negligible).
double decode_bytes(const ModelWeights& w, const ModelHParams& hp) {
  auto bytes = [](const WeightMatrix& m) { return (double)m.n_rows * m.row_bytes; };
  double b = bytes(w.output);
  for (const auto& l : w.layers) {
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router}) {
      if (m->data != nullptr) b += bytes(*m);
    }
    if (l.gate_exps.n_expert > 0) {
      b += (double)hp.moe.n_expert_used *
           (l.gate_exps.expert_bytes + l.up_exps.expert_bytes + l.down_exps.expert_bytes);
    }
  }
  return b;
}

int run(const std::string& dir, const std::string& preset, const std::vector<std::string>& types,
        int n_prompt, int n_decode, bool pack, double triad_gbs, double read_gbs) {
  std::vector<Row> rows;
  for (const auto& type : types) {
    const std::string path = dir + "/" + preset + "-" + type + ".gguf";
    if (!std::filesystem::exists(path)) {
      auto spec = make_model_preset(preset);
      if (!spec) {
        std::fprintf(stderr, "%s\n", spec.message().c_str());
        return 1;
      }
      spec->weight_type = *ggml_type_from_name(type);
      std::fprintf(stderr, "writing %s ...\n", path.c_str());
      if (Status st = make_model(*spec, path); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
    }
    ModelOptions opt;
    opt.max_batch_tokens = n_prompt;
    opt.pack_weights = pack;
    auto m = Model::load(path, opt);
    if (!m) {
      std::fprintf(stderr, "%s\n", m.message().c_str());
      return 1;
    }
    Model& model = **m;
    const int32_t n_ctx = n_prompt + n_decode;
    const uint32_t blocks = (n_ctx + 15) / 16;
    KvArena kv(model.kv_config(blocks, 16, KvDtype::kF16));
    std::vector<uint32_t> table(blocks);
    for (uint32_t i = 0; i < blocks; ++i) table[i] = i;
    std::mt19937 rng(1);
    std::vector<int32_t> tokens(n_ctx);
    for (auto& t : tokens) t = (int32_t)(rng() % model.hparams().n_vocab);
    std::vector<float> logits(model.hparams().n_vocab);

    SeqInput pre{.tokens = std::span(tokens).first(n_prompt), .start_pos = 0, .block_table = table};
    double t0 = now_s();
    if (!model.forward({&pre, 1}, kv, logits.data()).ok()) return 1;
    const double prefill_s = now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < n_decode; ++i) {
      SeqInput dec{.tokens = std::span(tokens).subspan(n_prompt + i, 1),
                   .start_pos = n_prompt + i,
                   .block_table = table};
      if (!model.forward({&dec, 1}, kv, logits.data()).ok()) return 1;
    }
    const double decode_s = now_s() - t0;
    const double bytes = decode_bytes(model.weights(), model.hparams());
    rows.push_back({type, bytes / 1e9, n_prompt / prefill_s, n_decode / decode_s,
                    triad_gbs * 1e9 / bytes, read_gbs * 1e9 / bytes});
  }
  std::printf(
      "\n| weights | GB read/token | prefill tok/s (%d) | decode tok/s | triad bound tok/s | "
      "decode / triad bound | decode / read-bw bound |\n",
      n_prompt);
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    std::printf("| %s | %.2f | %.1f | %.2f | %.2f | %.0f%% | %.0f%% |\n", r.type.c_str(),
                r.weight_gb, r.prefill_tps, r.decode_tps, r.bound_tps,
                100.0 * r.decode_tps / r.bound_tps, 100.0 * r.decode_tps / r.read_bound_tps);
  }
  return 0;
}

}  // namespace
}  // namespace kvw

int main(int argc, char** argv) {
  std::string dir = "bench-models", types_arg = "f16,q8_0,q4_0", preset = "tinyllama-1.1b";
  int n_prompt = 512, n_decode = 32;
  bool pack = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--types")
      types_arg = argv[i + 1];
    else if (a == "--prompt")
      n_prompt = std::atoi(argv[i + 1]);
    else if (a == "--decode")
      n_decode = std::atoi(argv[i + 1]);
    else if (a == "--preset")
      preset = argv[i + 1];
    else if (a == "--pack")
      pack = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(
          stderr,
          "usage: model_bench [--dir D] [--types f16,q8_0,q4_0] [--prompt 512] [--decode 32] "
          "[--preset tinyllama-1.1b] [--pack 1|0]\n");
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  std::vector<std::string> types;
  std::stringstream ss(types_arg);
  for (std::string t; std::getline(ss, t, ',');) types.push_back(t);
  kvw::ThreadPool pool(0);
  const double bw = kvw::kernels::measure_read_bandwidth_gbs(pool, size_t{1} << 30);
  const double triad = kvw::kernels::measure_memory_bandwidth_gbs(pool, size_t{3} << 28);
  std::printf("machine: %u threads, kernels %s, read bandwidth %.1f GB/s, triad %.1f GB/s\n",
              std::thread::hardware_concurrency(), kvw::kernels::kernels().isa, bw, triad);
  return kvw::run(dir, preset, types, n_prompt, n_decode, pack, triad, bw);
}
