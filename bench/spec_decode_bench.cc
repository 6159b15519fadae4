// bench/spec_decode_bench.cc: decode tokens/s at batch 1 with and without speculative decoding
// (prompt-lookup drafts, or a draft model), and the acceptance rate, on two workloads:
//   grounded: a passage, then an instruction to repeat it and its first words (the answer
//             quotes the prompt, where prompt lookup shines)
//   free:     a short prompt, free greedy generation
// Each workload runs plain, then speculative, on fresh engines; outputs must be identical.
//
//   build/bench/spec_decode_bench [--model models/kvwarden-default.gguf] [--decode 256]
//                                 [--threads 0] [--k 4] [--ngram-min 2] [--ngram-max 4]
//                                 [--runs 3] [--preset tinyllama-1.1b --weight-type q4_0]
//                                 [--draft-model FILE | --draft-layers N [--quiet-tail 1]]
// --draft-model drafts with that file instead of prompt lookup; --draft-layers N writes (to /tmp)
// a copy of the target that keeps its first N layers (same vocabulary and embeddings: on random
// weights its acceptance is near 0). --quiet-tail 1 first rewrites the target so that layers N
// and up add nothing (quiet_tail_copy): every draft is then accepted by construction, which
// measures the cost of drafting and verifying, not a real draft's predictions (see the README).
// Without --model the embedded default model (models/kvwarden-default.gguf, from the source
// tree) is used. Greedy decoding; the best of --runs is reported (the machine is shared).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_types.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

// Genesis 1:1-8 (KJV, public domain): the default model was trained on such text.
constexpr const char* kPassage =
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
    "of the waters. And God said, Let there be light: and there was light. And God saw the "
    "light, that it was good: and God divided the light from the darkness. And God called the "
    "light Day, and the darkness he called Night. And the evening and the morning were the first "
    "day. And God said, Let there be a firmament in the midst of the waters, and let it divide "
    "the waters from the waters. And God made the firmament, and divided the waters which were "
    "under the firmament from the waters which were above the firmament: and it was so. And God "
    "called the firmament Heaven. And the evening and the morning were the second day.";

struct Result1 {
  double tps = 0;      // decode tokens/s (after the first token), wall clock
  double step_ms = 0;  // engine time (schedule + forward + sample) per decode step
  double cpu_tps = 0;  // decode tokens per second of process CPU time (less load-sensitive)
  std::vector<int32_t> tokens;
  SpecCounters spec;
  uint64_t steps = 0;
};

double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<Result1> run_once(const EngineConfig& cfg, const std::string& text, int n_decode) {
  auto e = Engine::create(cfg);
  if (!e.ok()) return e.error();
  Engine& eng = **e;
  GenerationRequest r;
  r.prompt = eng.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
  r.max_tokens = n_decode;
  r.ignore_eos = true;  // fixed lengths: plain and speculative runs compare token for token
  auto ch = eng.submit(r);
  if (!ch.ok()) return ch.error();
  Result1 out;
  out.tokens.push_back((*ch)->next().token_id);  // prefill done
  const EngineStats s0 = eng.stats();
  const double t0 = now_s();
  const double c0 = cpu_s();
  auto rest = (*ch)->collect();
  const double dt = now_s() - t0;
  const double dc = cpu_s() - c0;
  const EngineStats s1 = eng.stats();
  out.tokens.insert(out.tokens.end(), rest.tokens.begin(), rest.tokens.end());
  out.tps = double(rest.tokens.size()) / dt;
  out.spec = s1.spec;
  out.steps = s1.num_steps - s0.num_steps;
  const double engine_ns = double(s1.schedule_ns + s1.forward_ns + s1.sample_ns - s0.schedule_ns -
                                  s0.forward_ns - s0.sample_ns);
  out.step_ms = out.steps > 0 ? engine_ns / double(out.steps) / 1e6 : 0;
  out.cpu_tps = dc > 0 ? double(rest.tokens.size()) / dc : 0;
  return out;
}

// Layer index of a "blk.N." tensor name, else -1.
int layer_of(const std::string& name) {
  return name.rfind("blk.", 0) == 0 ? std::atoi(name.c_str() + 4) : -1;
}

// A copy of `src` whose layers from n_layer on add nothing to the residual stream: their
// attn_output and ffn_down bytes are zero (a zero scale in every quantised block), so its output
// is that of its first n_layer layers while a decode step still reads every weight. With the
// truncated copy below as the draft, every draft is accepted by construction: it measures what
// drafting and verification cost, not what a real draft model would predict.
Result<std::string> quiet_tail_copy(const std::string& src, int n_layer) {
  auto file = GgufFile::open(src);
  if (!file.ok()) return file.error();
  GgufWriter w((*file)->version(), (*file)->alignment());
  for (const auto& kv : (*file)->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : (*file)->tensors()) {
    const uint8_t* d = (*file)->tensor_data(t);
    std::vector<uint8_t> bytes(d, d + t.num_bytes);
    const bool out_proj = t.name.find("attn_output") != std::string::npos ||
                          t.name.find("ffn_down") != std::string::npos;
    if (layer_of(t.name) >= n_layer && out_proj) std::fill(bytes.begin(), bytes.end(), 0);
    w.add_tensor(t.name, t.type, t.shape, std::move(bytes));
  }
  const std::string base = src.substr(src.find_last_of('/') + 1);
  const std::string out = "/tmp/" + base + ".quiet" + std::to_string(n_layer) + ".gguf";
  if (Status st = w.write(out); !st.ok()) return st.error();
  return out;
}

// A copy of `src` keeping its first n_layer layers (llama-style names and keys).
Result<std::string> truncated_copy(const std::string& src, int n_layer) {
  auto file = GgufFile::open(src);
  if (!file.ok()) return file.error();
  auto arch = (*file)->get_string("general.architecture");
  if (!arch.ok()) return arch.error();
  GgufWriter w((*file)->version(), (*file)->alignment());
  for (const auto& kv : (*file)->metadata()) w.set(kv.key, kv.value);
  w.set_u32(*arch + ".block_count", (uint32_t)n_layer);
  for (const auto& t : (*file)->tensors()) {
    if (layer_of(t.name) >= n_layer) continue;
    const uint8_t* d = (*file)->tensor_data(t);
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(d, d + t.num_bytes));
  }
  const std::string base = src.substr(src.find_last_of('/') + 1);
  const std::string out = "/tmp/" + base + ".draft" + std::to_string(n_layer) + ".gguf";
  if (Status st = w.write(out); !st.ok()) return st.error();
  return out;
}

int main_impl(int argc, char** argv) {
  std::string model = std::string(KVW_SOURCE_DIR) + "/models/kvwarden-default.gguf";
  int n_decode = 256, threads = 0, k = 4, ngram_min = 2, ngram_max = 4, runs = 3;
  std::string preset, weight_type = "q4_0", draft_model;
  int draft_layers = 0;
  bool quiet_tail = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--model") {
      model = v;
    } else if (f == "--decode") {
      n_decode = std::atoi(v.c_str());
    } else if (f == "--threads") {
      threads = std::atoi(v.c_str());
    } else if (f == "--k") {
      k = std::atoi(v.c_str());
    } else if (f == "--ngram-min") {
      ngram_min = std::atoi(v.c_str());
    } else if (f == "--ngram-max") {
      ngram_max = std::atoi(v.c_str());
    } else if (f == "--runs") {
      runs = std::atoi(v.c_str());
    } else if (f == "--preset") {
      preset = v;
    } else if (f == "--weight-type") {
      weight_type = v;
    } else if (f == "--draft-model") {
      draft_model = v;
    } else if (f == "--draft-layers") {
      draft_layers = std::atoi(v.c_str());
    } else if (f == "--quiet-tail") {
      quiet_tail = v == "1";
    } else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (!preset.empty()) {  // a random-weight model of a real shape, e.g. tinyllama-1.1b
    auto spec = make_model_preset(preset);
    auto type = ggml_type_from_name(weight_type);
    if (!spec.ok() || !type) {
      std::fprintf(stderr, "bad --preset or --weight-type\n");
      return 2;
    }
    spec->weight_type = *type;
    model = "/tmp/spec_decode_bench_" + preset + ".gguf";
    if (Status st = make_model(*spec, model); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  if (draft_layers > 0 && quiet_tail) {
    auto q = quiet_tail_copy(model, draft_layers);
    if (!q.ok()) {
      std::fprintf(stderr, "%s\n", q.message().c_str());
      return 1;
    }
    model = *q;
  }
  if (draft_layers > 0) {
    auto d = truncated_copy(model, draft_layers);
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", d.message().c_str());
      return 1;
    }
    draft_model = *d;
  }
  set_log_level(LogLevel::kWarn);
  EngineConfig plain;
  plain.model_path = model;
  plain.n_threads = threads;
  plain.sched.max_num_seqs = 1;
  plain.sched.max_model_len = 4096;
  plain.sched.max_num_batched_tokens = 1024;
  EngineConfig spec = plain;
  spec.sched.spec = SpecConfig{.enabled = true,
                               .num_speculative_tokens = k,
                               .prompt_lookup_max = ngram_max,
                               .prompt_lookup_min = ngram_min,
                               .max_seqs = 1,
                               .draft_model = draft_model};
  const std::string grounded =
      std::string(kPassage) + "\n\nRepeat the text above word for word.\n\nIn the beginning God";
  const std::pair<const char*, std::string> workloads[] = {{"grounded", grounded},
                                                           {"free", "And it came to pass"}};
  std::printf(
      "model %s, batch 1, %d decode tokens, greedy, k %d, %s, best of %d\n", model.c_str(),
      n_decode, k,
      draft_model.empty()
          ? ("n-gram " + std::to_string(ngram_min) + ".." + std::to_string(ngram_max)).c_str()
          : ("draft model " + draft_model).c_str(),
      runs);
  // tok/s: wall clock; tok/cpu-s: per second of process CPU time (what a shared machine's load
  // distorts least); ms/step: engine time per decode step, plain / speculative.
  std::printf("%-9s %11s %10s %8s %15s %11s %8s %11s %11s %9s %9s\n", "workload", "plain tok/s",
              "spec tok/s", "speedup", "plain tok/cpu-s", "spec", "speedup", "acceptance",
              "tokens/step", "ms/step", "identical");
  for (const auto& [name, text] : workloads) {
    Result1 best_plain, best_spec;
    for (int i = 0; i < runs; ++i) {
      auto p = run_once(plain, text, n_decode);
      auto s = run_once(spec, text, n_decode);
      if (!p.ok() || !s.ok()) {
        std::fprintf(stderr, "%s\n", (!p.ok() ? p.message() : s.message()).c_str());
        return 1;
      }
      if (p->tps > best_plain.tps) best_plain.tps = p->tps;
      if (s->tps > best_spec.tps) best_spec.tps = s->tps;
      if (p->cpu_tps > best_plain.cpu_tps) best_plain.cpu_tps = p->cpu_tps;
      if (s->cpu_tps > best_spec.cpu_tps) best_spec.cpu_tps = s->cpu_tps;
      if (best_plain.step_ms == 0 || p->step_ms < best_plain.step_ms)
        best_plain.step_ms = p->step_ms;
      if (best_spec.step_ms == 0 || s->step_ms < best_spec.step_ms) best_spec.step_ms = s->step_ms;
      best_plain.tokens = p->tokens;
      best_spec.tokens = s->tokens;
      best_spec.spec = s->spec;
      best_spec.steps = s->steps;
    }
    const SpecCounters& c = best_spec.spec;
    const double acceptance =
        c.num_draft_tokens > 0 ? double(c.num_accepted_tokens) / double(c.num_draft_tokens) : 0;
    const double per_step = double(best_spec.tokens.size() - 1) / double(best_spec.steps);
    std::printf("%-9s %11.1f %10.1f %7.2fx %11.1f %11.1f %7.2fx %10.1f%% %11.2f %3.2f/%.2f %9s\n",
                name, best_plain.tps, best_spec.tps, best_spec.tps / best_plain.tps,
                best_plain.cpu_tps, best_spec.cpu_tps, best_spec.cpu_tps / best_plain.cpu_tps,
                100.0 * acceptance, per_step, best_plain.step_ms, best_spec.step_ms,
                best_plain.tokens == best_spec.tokens ? "yes" : "NO");
  }
  return 0;
}

}  // namespace
}  // namespace kvw

int main(int argc, char** argv) {
  return kvw::main_impl(argc, argv);
}
