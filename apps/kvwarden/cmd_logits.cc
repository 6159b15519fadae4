// kvwarden logits: runs one batched forward over several token sequences and writes every
// position's logits (float32, [sum of lengths][n_vocab]); the numerics tests compare this
// against the independent reference in tests/reference.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/kvwarden/commands.h"
#include "model/model.h"

namespace kvw::app {
namespace {

struct LogitsFlags {
  std::string model, tokens_file, out, kv_dtype = "f32";
  int threads = 0;
  int32_t block_size = 16;
  int64_t max_model_len = 0;
};

Result<std::vector<std::vector<int32_t>>> read_batch(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{path + ": cannot open"};
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sequences") || !j["sequences"].is_array())
    return Error{path + ": expected {\"sequences\": [[token ids], ...]}"};
  std::vector<std::vector<int32_t>> seqs;
  for (const auto& s : j["sequences"]) {
    if (!s.is_array()) return Error{path + ": field 'sequences': each entry must be an array"};
    std::vector<int32_t> ids;
    for (const auto& t : s) {
      if (!t.is_number_integer())
        return Error{path + ": field 'sequences': token ids must be integers"};
      ids.push_back(t.get<int32_t>());
    }
    seqs.push_back(std::move(ids));
  }
  return seqs;
}

int run(const LogitsFlags& f) {
  auto batch = read_batch(f.tokens_file);
  if (!batch) {
    std::cerr << "kvwarden logits: " << batch.message() << "\n";
    return 2;
  }
  int64_t total = 0;
  uint32_t num_blocks = 0;
  for (const auto& s : *batch) {
    total += (int64_t)s.size();
    num_blocks += (uint32_t)((s.size() + f.block_size - 1) / f.block_size);
  }
  ModelOptions opt;
  opt.n_threads = f.threads;
  opt.max_batch_tokens = (int32_t)std::max<int64_t>(1, total);
  opt.max_model_len = f.max_model_len;
  auto model = Model::load(f.model, opt);
  if (!model) {
    std::cerr << "kvwarden logits: " << model.message() << "\n";
    return 1;
  }
  Model& m = **model;
  const KvDtype dtype = *parse_kv_dtype(f.kv_dtype);
  KvArena kv(m.kv_config(std::max(1u, num_blocks), f.block_size, dtype));
  // Blocks are handed out in reverse order so tables are not trivially contiguous.
  std::vector<std::vector<uint32_t>> tables(batch->size());
  uint32_t next = num_blocks;
  std::vector<SeqInput> inputs;
  for (size_t i = 0; i < batch->size(); ++i) {
    const auto& s = (*batch)[i];
    for (size_t b = 0; b < (s.size() + f.block_size - 1) / f.block_size; ++b)
      tables[i].push_back(--next);
    inputs.push_back({.tokens = s, .start_pos = 0, .block_table = tables[i], .all_logits = true});
  }
  std::vector<float> logits(Model::num_logit_rows(inputs) * m.hparams().n_vocab);
  Status st = m.forward(inputs, kv, logits.data());
  if (!st.ok()) {
    std::cerr << "kvwarden logits: " << st.message() << "\n";
    return 1;
  }
  std::ofstream out(f.out, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits.data()), (std::streamsize)(logits.size() * 4));
  if (!out) {
    std::cerr << "kvwarden logits: " << f.out << ": write failed\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_logits_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "logits", "Run one batched forward over token sequences and write all logits (float32)");
  auto f = std::make_shared<LogitsFlags>();
  cmd->add_option("--model,-m", f->model, "GGUF model")->required();
  cmd->add_option("--tokens-file", f->tokens_file, "JSON: {\"sequences\": [[ids...], ...]}")
      ->required();
  cmd->add_option("--out,-o", f->out, "Output: float32 [sum of lengths][n_vocab]")->required();
  cmd->add_option("--threads,-t", f->threads, "Threads (0: all cores)");
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV cache type: f32, f16, bf16 or int8")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "int8"}))
      ->capture_default_str();
  cmd->add_option("--block-size", f->block_size, "KV block size in tokens")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--max-model-len", f->max_model_len,
                  "Context the model is set up for, as serve's flag (phi3: past the original "
                  "context LongRoPE's long factors apply; 0: the trained context)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->callback([f, &exit_code] { exit_code = run(*f); });
}

}  // namespace kvw::app
