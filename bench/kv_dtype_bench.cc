// bench/kv_dtype_bench.cc: what each KV cache dtype costs in accuracy and saves in memory.
// For generated models (and stories260K when --stories is given), runs the same prompts
// with the KV cache in f32, f16, bf16 and int8 and reports the logit deviation against f16 (the
// default) and f32, argmax agreement, and KV bytes per token.
//
//   build/bench/kv_dtype_bench [--dir /tmp/kvdtype] [--stories tests/models/stories260K.gguf]
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/kv_dtype.h"
#include "kv/kv_arena.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

std::vector<float> run(Model& m, KvDtype dtype, const std::vector<std::vector<int32_t>>& seqs) {
  uint32_t blocks = 0;
  for (const auto& s : seqs) blocks += (uint32_t)(s.size() + 15) / 16;
  KvArena kv(m.kv_config(blocks, 16, dtype));
  std::vector<std::vector<uint32_t>> tables(seqs.size());
  std::vector<SeqInput> in;
  uint32_t next = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t b = 0; b < (seqs[i].size() + 15) / 16; ++b) tables[i].push_back(next++);
    in.push_back({.tokens = seqs[i], .start_pos = 0, .block_table = tables[i], .all_logits = true});
  }
  std::vector<float> logits(Model::num_logit_rows(in) * m.hparams().n_vocab);
  if (!m.forward(in, kv, logits.data()).ok()) std::abort();
  return logits;
}

struct Dev {
  double max_abs = 0, mean_abs = 0, argmax_agree = 0;
};

Dev deviation(const std::vector<float>& a, const std::vector<float>& b, int32_t V) {
  Dev d;
  const size_t rows = a.size() / V;
  size_t agree = 0;
  for (size_t r = 0; r < rows; ++r) {
    size_t ia = 0, ib = 0;
    for (int32_t j = 0; j < V; ++j) {
      const double diff = std::fabs((double)a[r * V + j] - b[r * V + j]);
      d.max_abs = std::max(d.max_abs, diff);
      d.mean_abs += diff;
      if (a[r * V + j] > a[r * V + ia]) ia = j;
      if (b[r * V + j] > b[r * V + ib]) ib = j;
    }
    agree += ia == ib;
  }
  d.mean_abs /= (double)a.size();
  d.argmax_agree = (double)agree / rows;
  return d;
}

void report(const std::string& name, const std::string& path) {
  ModelOptions opt;
  opt.max_batch_tokens = 1024;
  auto m = Model::load(path, opt);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    return;
  }
  Model& model = **m;
  const int32_t V = model.hparams().n_vocab;
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs;
  for (int len : {37, 200, 500}) {
    std::vector<int32_t> s(len);
    for (auto& t : s) t = (int32_t)(rng() % V);
    seqs.push_back(s);
  }
  const auto f32 = run(model, KvDtype::kF32, seqs);
  const auto f16 = run(model, KvDtype::kF16, seqs);
  const auto cfg = model.kv_config(1, 16, KvDtype::kF16);
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
    const auto got = run(model, d, seqs);
    const Dev vs16 = deviation(got, f16, V), vs32 = deviation(got, f32, V);
    KvArenaConfig c = cfg;
    c.dtype = d;
    const double bytes_tok = (double)KvArena::block_bytes(c) / c.block_size;
    c.dtype = KvDtype::kF16;
    const double f16_tok = (double)KvArena::block_bytes(c) / c.block_size;
    std::printf("| %s | %s | %.0f | %+.1f%% | %.2e | %.2e | %.2e | %.1f%% |\n", name.c_str(),
                std::string(kv_dtype_name(d)).c_str(), bytes_tok, 100.0 * (bytes_tok / f16_tok - 1),
                vs16.max_abs, vs16.mean_abs, vs32.max_abs, 100.0 * vs16.argmax_agree);
  }
}

}  // namespace
}  // namespace kvw

int main(int argc, char** argv) {
  std::string dir = "/tmp/kvw-kv-dtype-bench", stories;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--stories")
      stories = argv[i + 1];
  }
  std::filesystem::create_directories(dir);
  std::printf(
      "| model | KV dtype | bytes/token | vs f16 memory | max abs vs f16 | mean abs vs f16 | "
      "max abs vs f32 | argmax = f16 |\n|---|---|---|---|---|---|---|---|\n");
  struct Gen {
    const char* name;
    kvw::MakeModelSpec spec;
  };
  kvw::MakeModelSpec llama;
  llama.n_embd = 256, llama.n_head = 8, llama.n_head_kv = 2, llama.n_ff = 512, llama.n_layer = 4;
  llama.n_vocab = 2048, llama.n_ctx = 1024;
  kvw::MakeModelSpec qwen = llama;
  qwen.arch = "qwen2", qwen.vocab_type = "bpe", qwen.n_head_kv = 4;
  for (const Gen& g : {Gen{"llama-gqa4", llama}, Gen{"qwen2-gqa2", qwen}}) {
    const std::string path = dir + "/" + g.name + ".gguf";
    if (!kvw::make_model(g.spec, path).ok()) return 1;
    kvw::report(g.name, path);
  }
  if (!stories.empty()) kvw::report("stories260K", stories);
  return 0;
}
