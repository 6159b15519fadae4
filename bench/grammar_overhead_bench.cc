// bench/grammar_overhead_bench.cc: per-token overhead of constrained decoding (issue 31's
// benchmark) next to the decode step it hides behind, at 32k and 152k vocabularies, batch 1
// and 16, for json_object, the test suite's largest JSON schema and a regex; plus JSON-schema
// compile times. Decode: TinyLlama-1.1B-shaped random models from make-model (q4_0 by default,
// the 152k one with a byte-level BPE vocabulary), one forward of B decode tokens per step.
// Masks: synthetic Qwen-shaped vocabularies of the same sizes (make-model's padded vocabularies
// are mostly <|unused|> tokens a grammar never allows, which would flatter the mask). Each
// sequence draws argmax(noise) from its masked row, every third step or so with short tokens
// boosted so that outputs leave strings as real JSON does; a finished output starts over as a
// new request. The batch's masks run on the model's threads, as Engine::sample_rows does.
// Modes: "walk" = every mask walks the trie; "exact" = the per-sequence exact-state cache
// (the engine before the context cache); "context" = exact + a context-mask cache per
// sequence (a request per sequence, as now); "shared" = one context-mask cache for the batch
// (one request with n = batch); "server" = each output a request whose grammar and mask cache
// come from one GrammarCache (grammar_cache.h, as the server shares them across requests).
// --output-tokens N ends an output after N tokens (as max_tokens would), so a run holds many
// requests; "first 8" is the mean cost of an output's first 8 tokens (first visits of states).
// The regex compiles with its DFA (byte_dfa.h), so its masks walk the trie through that table;
// in "context" and "shared" it gets a DfaMaskCache (masks by DFA state class) per request or
// per batch instead of the context-mask cache. The regex's compile time, DFA size and state
// classes (and the time to refine them, paid once per grammar with the server's cache) are
// printed first, with a first visit's walk through the byte trie and the class trie.
//   build/bench/grammar_overhead_bench --dir build/bench-models [--type q4_0] [--steps 64]
//                                      [--decode-steps 4] [--no-decode 1] [--mode context]
//                                      [--output-tokens 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/class_trie.h"
#include "grammar/context_mask_cache.h"
#include "grammar/dfa_mask_cache.h"
#include "grammar/grammar_cache.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_walk.h"
#include "model/model.h"
#include "model/model_maker.h"
#include "schema_suite.h"

namespace kvw {
namespace {

using grammar::ContextMaskCache;
using grammar::DfaMaskCache;
using grammar::GrammarCache;
using grammar::GrammarConstraint;
using grammar::TokenTrie;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
  }
  s += char(0x80 | (cp & 0x3F));
  return s;
}

// As bench/grammar_bench.cc: byte tokens, then English-like pieces (often with a leading
// space), code punctuation, digits, CJK and Cyrillic; id 0 = EOS.
std::shared_ptr<const TokenTrie> synthetic_trie(int32_t n_vocab) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return (int)(rng() % n); };
  std::vector<std::string> tokens = {""};
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  std::set<std::string> seen(tokens.begin(), tokens.end());
  const std::string punct = "{}[]()\":,.;=+-*/_<>!?'#&|\\\n\t ";
  while ((int32_t)tokens.size() < n_vocab) {
    std::string t;
    const int kind = pick(100);
    if (kind < 60) {
      if (pick(2)) t += ' ';
      const int len = 1 + pick(4) + pick(5);
      for (int i = 0; i < len; ++i)
        t += char(i == 0 && pick(5) == 0 ? 'A' + pick(26) : 'a' + pick(26));
    } else if (kind < 72) {
      const int len = 1 + pick(4);
      for (int i = 0; i < len; ++i) t += punct[pick((int)punct.size())];
    } else if (kind < 76) {
      const int len = 1 + pick(3);
      for (int i = 0; i < len; ++i) t += char('0' + pick(10));
    } else if (kind < 94) {
      const int len = 1 + pick(3);
      for (int i = 0; i < len; ++i) t += utf8(0x4E00 + pick(0x5000));
    } else {
      if (pick(2)) t += ' ';
      const int len = 1 + pick(6);
      for (int i = 0; i < len; ++i) t += utf8(0x430 + pick(32));
    }
    if (seen.insert(t).second) tokens.push_back(t);
  }
  return std::make_shared<const TokenTrie>(std::move(tokens), std::vector<int32_t>{0});
}

const char* largest_schema() {
  const char* best = "";
  for (const char* s : grammar::schema_suite()) {
    if (std::string_view(s).size() > std::string_view(best).size()) best = s;
  }
  return best;
}

// Decode step time: one forward of `batch` single-token sequences after a 16-token prompt.
double decode_step_ms(Model& model, int batch, int steps) {
  const int32_t n_prompt = 16, n_ctx = n_prompt + steps + 1;
  const uint32_t blocks_per_seq = (uint32_t)(n_ctx + 15) / 16;
  KvArena kv(model.kv_config(blocks_per_seq * batch, 16, KvDtype::kF16));
  std::vector<std::vector<uint32_t>> tables(batch);
  std::vector<int32_t> tokens(n_ctx, 7);
  for (int b = 0; b < batch; ++b) {
    for (uint32_t i = 0; i < blocks_per_seq; ++i) tables[b].push_back(b * blocks_per_seq + i);
  }
  std::vector<float> logits((size_t)batch * model.hparams().n_vocab);
  std::vector<SeqInput> in(batch);
  for (int b = 0; b < batch; ++b) {
    in[b] = SeqInput{
        .tokens = std::span(tokens).first(n_prompt), .start_pos = 0, .block_table = tables[b]};
    if (!model.forward({&in[b], 1}, kv, logits.data()).ok()) std::exit(1);
  }
  double total = 0;
  for (int s = 0; s < steps; ++s) {
    for (int b = 0; b < batch; ++b) {
      in[b] = SeqInput{.tokens = std::span(tokens).subspan(n_prompt + s, 1),
                       .start_pos = n_prompt + s,
                       .block_table = tables[b]};
    }
    const double t0 = now_s();
    if (!model.forward(in, kv, logits.data()).ok()) std::exit(1);
    total += now_s() - t0;
  }
  return 1e3 * total / steps;
}

// A first visit's mask through the DFA: the byte trie's walk against the class trie's
// (class_trie.h), medians over 64 states spread over the DFA.
void first_visit_walks(const grammar::ByteDfa& dfa, const TokenTrie& trie) {
  const double t0 = now_s();
  auto folded = grammar::ClassTrie::build(dfa, trie, SIZE_MAX);
  const double build_ms = 1e3 * (now_s() - t0);
  if (!folded) {
    std::printf("    the trie does not fold under this DFA's byte classes\n");
    return;
  }
  std::vector<double> byte_us, class_us;
  std::vector<uint64_t> bits(((size_t)trie.n_vocab() + 63) / 64);
  std::vector<uint32_t> scratch;
  for (uint32_t i = 0; i < 64; ++i) {
    const uint32_t s = 1 + (uint32_t)((uint64_t)i * (dfa.num_states() - 1) / 64);
    std::fill(bits.begin(), bits.end(), 0);
    double t = now_s();
    grammar::walk_trie_dfa(dfa, trie, s, false, &scratch, bits.data());
    byte_us.push_back(1e6 * (now_s() - t));
    std::fill(bits.begin(), bits.end(), 0);
    t = now_s();
    folded->walk(dfa, s, &scratch, bits.data());
    class_us.push_back(1e6 * (now_s() - t));
  }
  std::sort(byte_us.begin(), byte_us.end());
  std::sort(class_us.begin(), class_us.end());
  std::printf(
      "    first-visit mask (median of 64 states): byte trie %.0f us (%zu nodes), class trie %.0f "
      "us (%u nodes, built in %.1f ms)\n",
      byte_us[32], trie.nodes().size(), class_us[32], folded->num_nodes(), build_ms);
}

enum class Mode { kWalk, kExact, kContext, kShared, kServer };
const char* mode_name(Mode m) {
  return m == Mode::kWalk      ? "walk"
         : m == Mode::kExact   ? "exact"
         : m == Mode::kContext ? "context"
         : m == Mode::kShared  ? "shared"
                               : "server";
}

struct Seq {
  std::unique_ptr<GrammarConstraint> c;
  std::shared_ptr<ContextMaskCache> cache;  // per request: a new output gets a new one
  std::shared_ptr<DfaMaskCache> dfa_cache;  // the same for a regular grammar
  std::mt19937 rng;
  double mask_s = 0;            // time in mask + accept
  double copy_s = 0;            // copying the row first (SeqSampler does only with logprobs)
  double apply_s = 0;           // mask() alone: the bitset and applying it to the row
  std::vector<float> token_us;  // [tokens] mask + accept of each token
  std::vector<float> first_us;  // the same for each output's first 8 tokens
  int output_tokens = 0;        // of the output in progress
  double old_s = 0;             // copy + mask + draw + accept (this benchmark's earlier measure)
  int num_tokens = 0;
  uint64_t walks = 0, misses = 0, uncertain = 0;  // of the finished outputs
};

struct MaskResult {
  double mask_us_per_token = 0;    // per sequence: mask + accept, thread time (mean)
  double median_us_per_token = 0;  // the same, median over the tokens
  double first_us_per_token = 0;   // mean over each output's first 8 tokens
  int num_outputs = 0;             // outputs started (requests)
  double copy_us_per_token = 0;    // a row copy (the engine copies only with logprobs)
  double apply_us_per_token = 0;   // mask() alone (mean)
  double old_us_per_token = 0;     // copy + mask + draw + accept (the earlier measure, mean)
  double step_ms = 0;              // wall time of the batch's constrained sampling per step
  double plain_step_ms = 0;        // the same rows sampled without a grammar
  double walks_per_token = 0;
  double context_misses_per_token = 0;  // context-mask entries computed (a trie walk each)
  double uncertain_per_token = 0;       // uncertain tokens checked against the full stack
};

MaskResult run_masks(std::shared_ptr<const grammar::Grammar> g,
                     std::shared_ptr<const TokenTrie> trie, Mode mode, int batch, int steps,
                     int output_tokens, ThreadPool& pool) {
  const int32_t n_vocab = trie->n_vocab();
  // Noise rows ("the model"), and the same rows with tokens of <= 2 bytes boosted.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kRows = 8;
  std::vector<std::vector<float>> rows(2 * kRows, std::vector<float>(n_vocab));
  for (int r = 0; r < kRows; ++r) {
    for (int32_t i = 0; i < n_vocab; ++i) {
      rows[r][i] = normal(rng);
      rows[kRows + r][i] = rows[r][i] + (trie->token_bytes(i).size() <= 2 ? 8.0f : 0.0f);
    }
  }
  // kShared: one cache for the whole batch, as for one request with n = batch choices. A
  // regular grammar gets a DfaMaskCache instead (as ServerState::constraint_for gives it).
  const bool regular = g->dfa != nullptr;
  auto shared = std::make_shared<ContextMaskCache>(g, trie, 4u << 20);
  auto shared_dfa = regular ? std::make_shared<DfaMaskCache>(g->dfa, trie, 4u << 20) : nullptr;
  GrammarCache server(trie, 64u << 20);  // as ServerConfig::grammar_cache_bytes
  int num_outputs = 0;
  auto fresh = [&](Seq& s) {
    ++num_outputs;
    s.output_tokens = 0;
    if (mode == Mode::kServer) {
      const GrammarCache::Entry e = server.get(g, 4u << 20);
      s.cache = e.context_masks, s.dfa_cache = e.dfa_masks;
      s.c = std::make_unique<GrammarConstraint>(e.grammar, trie, false, 16, s.cache, s.dfa_cache);
      return;
    }
    s.cache = regular                  ? nullptr
              : mode == Mode::kContext ? std::make_shared<ContextMaskCache>(g, trie, 4u << 20)
              : mode == Mode::kShared  ? shared
                                       : nullptr;
    s.dfa_cache = !regular                 ? nullptr
                  : mode == Mode::kContext ? std::make_shared<DfaMaskCache>(g->dfa, trie, 4u << 20)
                  : mode == Mode::kShared  ? shared_dfa
                                           : nullptr;
    s.c = std::make_unique<GrammarConstraint>(g, trie, false, mode == Mode::kWalk ? 0 : 16, s.cache,
                                              s.dfa_cache);
  };
  std::vector<Seq> seqs(batch);
  for (int b = 0; b < batch; ++b) fresh(seqs[b]), seqs[b].rng.seed(100 + b);
  uint64_t walks = 0, misses = 0, uncertain = 0;
  MaskResult r;
  for (int step = 0; step < steps; ++step) {
    double t0 = now_s();
    pool.run([&](int ith, int nth) {
      thread_local std::vector<float> masked;
      for (int b = ith; b < batch; b += nth) {
        Seq& s = seqs[b];
        const bool boost = s.rng() % 3 == 0;
        const std::vector<float>& row = rows[(boost ? kRows : 0) + (b + step) % kRows];
        const double t_copy = now_s();
        masked.assign(row.begin(), row.end());
        const double t = now_s();
        s.c->mask(masked.data());
        const double t_masked = now_s();
        s.copy_s += t - t_copy;
        s.apply_s += t_masked - t;
        // The draw (argmax over the row) is the sampler's work with or without a grammar.
        const int32_t tok =
            (int32_t)(std::max_element(masked.begin(), masked.end()) - masked.begin());
        const double t_accept = now_s();
        const bool ok = s.c->accept(tok).ok();
        const double grammar_s = (t_masked - t) + (now_s() - t_accept);
        s.mask_s += grammar_s;
        s.old_s += now_s() - t_copy;  // as this benchmark counted before: copy, mask, draw, accept
        s.token_us.push_back(float(1e6 * grammar_s));
        if (s.output_tokens++ < 8) s.first_us.push_back(float(1e6 * grammar_s));
        ++s.num_tokens;
        if (!ok || s.c->done() || s.output_tokens == output_tokens) {
          s.walks += s.c->num_trie_walks();
          s.uncertain += s.c->num_uncertain_checked();
          s.misses += s.cache && mode == Mode::kContext ? s.cache->num_misses() : 0;
          s.misses += s.dfa_cache && mode == Mode::kContext ? s.dfa_cache->num_misses() : 0;
          fresh(s);
        }
      }
    });
    r.step_ms += 1e3 * (now_s() - t0);
    t0 = now_s();
    // The same rows unconstrained, copied as the masked pass copies them (the engine masks its
    // fresh row in place unless logprobs are asked for), so the difference is mask + accept.
    pool.run([&](int ith, int nth) {
      thread_local std::vector<float> copy;
      for (int b = ith; b < batch; b += nth) {
        const std::vector<float>& row = rows[(b + step) % kRows];
        copy.assign(row.begin(), row.end());
        volatile auto tok = std::max_element(copy.begin(), copy.end()) - copy.begin();
        (void)tok;
      }
    });
    r.plain_step_ms += 1e3 * (now_s() - t0);
  }
  double mask_s = 0, copy_s = 0, apply_s = 0, old_s = 0;
  int tokens = 0;
  std::vector<float> token_us;
  double first_us = 0;
  size_t num_first = 0;
  for (Seq& s : seqs) {
    token_us.insert(token_us.end(), s.token_us.begin(), s.token_us.end());
    for (float us : s.first_us) first_us += us;
    num_first += s.first_us.size();
    mask_s += s.mask_s, tokens += s.num_tokens;
    copy_s += s.copy_s, apply_s += s.apply_s, old_s += s.old_s;
    walks += s.walks + s.c->num_trie_walks();
    uncertain += s.uncertain + s.c->num_uncertain_checked();
    misses += s.misses + (s.cache && mode == Mode::kContext ? s.cache->num_misses() : 0);
    misses += s.dfa_cache && mode == Mode::kContext ? s.dfa_cache->num_misses() : 0;
  }
  if (mode == Mode::kShared) misses = regular ? shared_dfa->num_misses() : shared->num_misses();
  if (mode == Mode::kServer) {
    const GrammarCache::Entry e = server.get(g, 4u << 20);
    misses = regular ? e.dfa_masks->num_misses() : e.context_masks->num_misses();
  }
  r.mask_us_per_token = 1e6 * mask_s / tokens;
  r.first_us_per_token = num_first ? first_us / num_first : 0.0;
  r.num_outputs = num_outputs;
  std::sort(token_us.begin(), token_us.end());
  r.median_us_per_token = token_us.empty() ? 0.0 : token_us[token_us.size() / 2];
  r.copy_us_per_token = 1e6 * copy_s / tokens;
  r.old_us_per_token = 1e6 * old_s / tokens;
  r.apply_us_per_token = 1e6 * apply_s / tokens;
  r.step_ms /= steps;
  r.plain_step_ms /= steps;
  r.walks_per_token = (double)walks / tokens;
  r.context_misses_per_token = (double)misses / tokens;
  r.uncertain_per_token = (double)uncertain / tokens;
  return r;
}

std::unique_ptr<Model> load_model(const std::string& dir, int32_t n_vocab, const std::string& type,
                                  int threads) {
  const std::string path =
      dir + "/tinyllama-1.1b-v" + std::to_string(n_vocab) + "-" + type + ".gguf";
  if (!std::filesystem::exists(path)) {
    auto spec = make_model_preset("tinyllama-1.1b");
    spec->n_vocab = n_vocab;
    if (n_vocab > 32000) spec->vocab_type = "bpe";
    spec->weight_type = *ggml_type_from_name(type);
    std::fprintf(stderr, "writing %s ...\n", path.c_str());
    if (Status st = make_model(*spec, path); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  }
  ModelOptions opt;
  opt.max_batch_tokens = 32;
  opt.n_threads = threads;
  auto m = Model::load(path, opt);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    std::exit(1);
  }
  return std::move(*m);
}

}  // namespace
}  // namespace kvw

int main(int argc, char** argv) {
  using namespace kvw;
  std::string dir = "bench-models", type = "q4_0";
  std::string only_mode;
  int steps = 64, decode_steps = 4, threads = 0, only_vocab = 0, only_batch = 0;
  int output_tokens = 0;
  bool decode = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--dir")
      dir = v;
    else if (a == "--type")
      type = v;
    else if (a == "--steps")
      steps = std::atoi(v.c_str());
    else if (a == "--decode-steps")
      decode_steps = std::atoi(v.c_str());
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--vocab")
      only_vocab = std::atoi(v.c_str());
    else if (a == "--batch")
      only_batch = std::atoi(v.c_str());
    else if (a == "--mode")
      only_mode = v;
    else if (a == "--output-tokens")
      output_tokens = std::atoi(v.c_str());
    else if (a == "--no-decode")
      decode = std::atoi(v.c_str()) == 0;
    else {
      std::fprintf(stderr,
                   "usage: grammar_overhead_bench [--dir D] [--type q4_0] [--steps 64] "
                   "[--decode-steps 4] [--threads 0] [--no-decode 1] [--vocab N] [--batch N] "
                   "[--mode walk|exact|context|shared|server] [--output-tokens N]\n");
      return 2;
    }
  }
  std::filesystem::create_directories(dir);
  const char* schema = largest_schema();
  {
    const int reps = 50;
    double t0 = now_s();
    for (int i = 0; i < reps; ++i) (void)grammar::compile_json_schema(std::string_view(schema));
    const double largest_us = 1e6 * (now_s() - t0) / reps;
    t0 = now_s();
    for (const char* s : grammar::schema_suite())
      (void)grammar::compile_json_schema(std::string_view(s));
    std::printf(
        "JSON-schema compile: largest suite schema (%zu bytes) %.0f us; all %zu schemas %.2f ms\n",
        std::string_view(schema).size(), largest_us, grammar::schema_suite().size(),
        1e3 * (now_s() - t0));
  }
  const char* regex = R"((\d{4}-\d{2}-\d{2} [A-Z][a-z]{2,12}( [a-z]{2,12}){0,6}\.\n){1,50})";
  {
    // The regex's DFA is built at compile time, within the server's default grammar budget
    // (request memory 64 MiB / 16).
    const int reps = 5;
    const double t0 = now_s();
    std::shared_ptr<const grammar::Grammar> g;
    for (int i = 0; i < reps; ++i) g = grammar::compile_regex(regex, 4u << 20).value();
    std::printf("regex compile: %.0f us; DFA %u states x %u byte classes, %zu bytes in all\n",
                1e6 * (now_s() - t0) / reps, g->dfa ? g->dfa->num_states() : 0,
                g->dfa ? g->dfa->num_classes() : 0, g->size_bytes());
    for (int32_t n_vocab : {32000, 151936}) {
      auto trie = synthetic_trie(n_vocab);
      const double t1 = now_s();
      DfaMaskCache cache(g->dfa, trie, 4u << 20);
      std::printf(
          "  mask classes at %d tokens (max token %u bytes): %u, refined (and the trie folded by "
          "byte classes: %s) in %.1f ms\n",
          n_vocab, trie->max_depth(), cache.num_classes(), cache.folded() ? "yes" : "no",
          1e3 * (now_s() - t1));
      first_visit_walks(*g->dfa, *trie);
    }
  }
  struct G {
    const char* name;
    std::shared_ptr<const grammar::Grammar> g;
  };
  const std::vector<G> grammars = {
      {"json_object", grammar::compile_json_object().value()},
      {"largest schema", grammar::compile_json_schema(std::string_view(schema)).value()},
      {"regex", grammar::compile_regex(regex, 4u << 20).value()}};
  std::printf(
      "\n| vocab | batch | decode step ms | grammar | mode | outputs | mask us/token mean | median "
      "| first 8 mean | mask() mean | row copy | copy+mask+draw+accept | trie walks/token "
      "| cache misses/token | uncertain/token | masks ms/step (wall) | overhead %% of decode "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int32_t n_vocab : {32000, 151936}) {
    if (only_vocab && n_vocab != only_vocab) continue;
    auto model = decode ? load_model(dir, n_vocab, type, threads) : nullptr;
    const int num_threads = model ? model->num_threads() : threads;
    auto trie = synthetic_trie(n_vocab);
    for (int batch : {1, 16}) {
      if (only_batch && batch != only_batch) continue;
      const double dec_ms = decode ? decode_step_ms(*model, batch, decode_steps) : 0.0;
      for (const G& g : grammars) {
        for (Mode mode :
             {Mode::kWalk, Mode::kExact, Mode::kContext, Mode::kShared, Mode::kServer}) {
          if (!only_mode.empty() && only_mode != mode_name(mode)) continue;
          // As many threads as the model's (idle meanwhile): the engine samples on those.
          ThreadPool pool(num_threads);
          const MaskResult r = run_masks(g.g, trie, mode, batch, steps, output_tokens, pool);
          const double extra = std::max(0.0, r.step_ms - r.plain_step_ms);
          std::printf(
              "| %d | %d | %.1f | %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f "
              "| %.3f | %.0f | %.3f | %.2f |\n",
              n_vocab, batch, dec_ms, g.name, mode_name(mode), r.num_outputs, r.mask_us_per_token,
              r.median_us_per_token, r.first_us_per_token, r.apply_us_per_token,
              r.copy_us_per_token, r.old_us_per_token, r.walks_per_token,
              r.context_misses_per_token, r.uncertain_per_token, extra,
              dec_ms > 0 ? 100.0 * extra / (dec_ms + r.plain_step_ms) : 0.0);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
