// kvwarden generate: prompt -> tokens -> streamed text on stdout, with a summary on stderr.
// Prefill runs in chunks of --batch-size tokens; decode runs one token per forward.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "apps/kvwarden/commands.h"
#include "apps/kvwarden/default_model.h"
#include "apps/kvwarden/rope_flags.h"
#include "model/model.h"
#include "model/sampling.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace kvw::app {
namespace {

struct GenerateFlags {
  std::string model, prompt, kv_dtype = "f16";
  std::vector<std::string> stop;
  int32_t max_tokens = 128, ctx_size = 0, block_size = 16, batch_size = 256;
  int threads = 0;
  float activation_clamp = 0;
  RopeFlags rope;
  SamplingParams sampling;
  bool seed_given = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(GenerateFlags f) {
  auto fail = [](const std::string& msg, int code) {
    std::cerr << "kvwarden generate: " << msg << "\n";
    return code;
  };
  if (Status st = f.sampling.validate(); !st.ok()) return fail(st.message(), 2);
  if (f.max_tokens < 0) return fail("--max-tokens must be >= 0", 2);
  ModelOptions opt;
  opt.n_threads = f.threads;
  opt.max_batch_tokens = f.batch_size;
  opt.activation_clamp = f.activation_clamp;
  auto rope = rope_override(f.rope);
  if (!rope.ok()) return fail(rope.message(), 2);
  opt.rope = *rope;
  opt.max_model_len = f.ctx_size;  // 0: the trained context (phi3's LongRoPE factors)
  if (f.model.empty()) {
    f.model = find_default_model();
    if (f.model.empty()) {
      return fail(missing_default_model_message(), 2);
    }
  }
  auto loaded = Model::load(f.model, opt);
  if (!loaded) return fail(loaded.message(), 1);
  Model& model = **loaded;
  auto tok = Tokenizer::from_gguf(model.file());
  if (!tok) return fail(tok.message(), 1);
  const Tokenizer& tokenizer = **tok;

  std::vector<int32_t> tokens =
      tokenizer.encode(f.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (tokens.empty()) return fail("the prompt encodes to no tokens", 2);
  const int32_t n_ctx = f.ctx_size > 0 ? f.ctx_size : model.hparams().n_ctx_train;
  if ((int32_t)tokens.size() >= n_ctx) {
    return fail("prompt of " + std::to_string(tokens.size()) +
                    " tokens does not fit the context of " + std::to_string(n_ctx) +
                    " (--ctx-size)",
                2);
  }
  const int32_t n_total = std::min<int32_t>(n_ctx, (int32_t)tokens.size() + f.max_tokens);
  const uint32_t num_blocks = (uint32_t)((n_total + f.block_size - 1) / f.block_size);
  KvArena kv(model.kv_config(num_blocks, f.block_size, *parse_kv_dtype(f.kv_dtype)));
  std::vector<uint32_t> table(num_blocks);
  for (uint32_t i = 0; i < num_blocks; ++i) table[i] = i;

  const int32_t n_vocab = model.hparams().n_vocab;
  std::vector<float> logits(n_vocab);
  Sampler sampler(f.sampling, n_vocab);
  StreamDecoder stream(tokenizer, /*render_special=*/false, StreamDecoder::Start::kContinuation);
  server::StopMatcher stop(f.stop);  // the server's matcher: one behaviour everywhere
  const size_t n_prompt = tokens.size();

  auto t0 = std::chrono::steady_clock::now();
  for (size_t pos = 0; pos < n_prompt; pos += f.batch_size) {
    const size_t n = std::min<size_t>(f.batch_size, n_prompt - pos);
    SeqInput in{.tokens = std::span(tokens).subspan(pos, n),
                .start_pos = (int64_t)pos,
                .block_table = table};
    if (Status st = model.forward({&in, 1}, kv, logits.data()); !st.ok())
      return fail(st.message(), 1);
  }
  const double prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::string finish = "length";
  int32_t n_gen = 0;
  while (n_gen < f.max_tokens && (int32_t)tokens.size() < n_ctx) {
    const int32_t next = sampler.sample(logits.data(), {.history = tokens});
    if (tokenizer.is_end_of_generation(next)) {
      finish = "stop";
      break;
    }
    tokens.push_back(next);
    ++n_gen;
    std::string out;
    const bool stopped = stop.push(stream.push(next), out);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (stopped) {
      finish = "stop";
      break;
    }
    if (n_gen == f.max_tokens || (int32_t)tokens.size() >= n_ctx) break;
    SeqInput in{.tokens = std::span(tokens).last(1),
                .start_pos = (int64_t)tokens.size() - 1,
                .block_table = table};
    if (Status st = model.forward({&in, 1}, kv, logits.data()); !st.ok())
      return fail(st.message(), 1);
  }
  if (finish != "stop") {
    std::string out;
    if (!stop.push(stream.flush(), out)) out += stop.flush();
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::printf("\n");
  std::fflush(stdout);  // the text ends before the summary on stderr
  const double decode_s = seconds_since(t0);
  std::fprintf(
      stderr,
      "prompt: %zu tokens in %.3f s (%.1f tok/s) | decode: %d tokens in %.3f s (%.1f tok/s) | "
      "finish: %s | seed %llu | threads %d\n",
      n_prompt, prefill_s, n_prompt / std::max(prefill_s, 1e-9), n_gen, decode_s,
      n_gen / std::max(decode_s, 1e-9), finish.c_str(), (unsigned long long)f.sampling.seed,
      model.num_threads());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  auto f = std::make_shared<GenerateFlags>();
  SamplingParams& s = f->sampling;
  cmd->add_option("--model,-m", f->model, kModelFlagHelp);
  cmd->add_option("--prompt,-p", f->prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens,-n", f->max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature", s.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  cmd->add_option("--min-p", s.min_p, "Drop tokens below min-p x the top probability (0: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", s.repeat_penalty,
                  "Penalty for the last --repeat-last-n tokens, as llama.cpp (1: off; serve's "
                  "repetition_penalty covers the whole prompt and output, as vLLM)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", s.repeat_last_n, "Window of the repeat penalty")
      ->capture_default_str();
  cmd->add_option("--seed", s.seed, "Random seed (default: random, printed in the summary)");
  cmd->add_option("--stop", f->stop, "Stop when this text is generated (repeatable)");
  cmd->add_option("--threads,-t", f->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("--ctx-size,-c", f->ctx_size,
                  "Context length (0: the model's; phi3: past rope.scaling."
                  "original_context_length LongRoPE's long factors apply)")
      ->capture_default_str();
  cmd->add_option("--batch-size,-b", f->batch_size, "Prompt tokens per forward pass")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", f->kv_dtype, "KV cache type: f16, bf16, f32 or int8")
      ->check(CLI::IsMember({"f16", "bf16", "f32", "int8"}))
      ->capture_default_str();
  cmd->add_option("--block-size", f->block_size, "KV block size in tokens")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  add_rope_flags(cmd, &f->rope);
  cmd->add_option("--activation-clamp", f->activation_clamp,
                  "Clamp residual activations to [-c, c] (0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([f, cmd, &exit_code] {
    if (cmd->count("--seed") == 0) {
      f->sampling.seed = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    }
    exit_code = run(*f);
  });
}

}  // namespace kvw::app
