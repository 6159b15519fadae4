// kvwarden serve: the OpenAI-compatible HTTP server (src/server) over one Engine.
// Start-up: flags -> EngineConfig + ServerConfig (the model file is opened here, once),
// Engine::create over that file (logs the budget table), bind, then one line "kvwarden serving
// MODEL on http://HOST:PORT" on stdout (tests wait for it).
// Observability (src/obs, wired by server/observability.h): /metrics, /dashboard, /debug/*, and
// diagnostics dumps under --diagnostics-dir.
// SIGTERM/SIGINT: drain (503 for new work, in-flight requests finish up to --drain-timeout,
// then are cancelled), stop the listener, shut the engine down, exit 0.
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/kvwarden/commands.h"
#include "apps/kvwarden/default_model.h"
#include "apps/kvwarden/rope_flags.h"
#include "core/log.h"
#include "engine/engine.h"
#include "gguf/gguf_file.h"
#include "kv_events/zmq_publisher.h"
#include "planner/engine_budget.h"
#include "server/http_server.h"
#include "server/observability.h"

namespace kvw::app {
namespace {

// The default --max-model-len's cap: long prompts pass, and the default KV pool does not grow
// with it (it holds max_num_seqs x planner::kDefaultPoolTokensPerSeq tokens, shared).
constexpr int64_t kMaxDefaultModelLen = 16384;

struct ServeFlags {
  server::ServerConfig server;
  EngineConfig engine;
  std::string memory_budget, request_memory = "64MiB", grammar_cache = "16MiB", swap_space,
                             kv_dtype = "f16", preemption_mode = "swap", overflow = "error",
                             kv_reserve = "none", chat_template_file, diagnostics_dir,
                             kv_events_json, diagnostics_max_bytes = "64MiB", speculative_config,
                             attention_dot = "f32";
  double diagnostics_min_interval_s = 60;
  uint32_t diagnostics_max_files = 64;
  uint64_t diagnostics_max_bytes_value = 0;  // parsed from diagnostics_max_bytes
  kv_events::KvEventsConfig kv_events;
  size_t trace_capacity = 65536;
  bool no_prefix_caching = false;
  int64_t max_model_len = 0;  // 0: min(kMaxDefaultModelLen, the model's context)
  RopeFlags rope;
};

Result<uint64_t> parse_size_flag(const std::string& flag, const std::string& text) {
  auto v = parse_memory_budget(text, machine_memory_limit_bytes());
  if (!v.ok()) {
    std::string msg = v.message();
    if (msg.starts_with("--memory-budget")) msg = flag + msg.substr(15);
    return Error{msg};
  }
  return *v;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// The model file and its hyper-parameters, opened and read once for all of start-up.
struct ServeModel {
  std::unique_ptr<GgufFile> file;
  ModelHParams hparams;
};

// Flags that CLI11 leaves as text become config fields here; messages name the flag. Returns
// the model file, opened and parsed once for all of start-up: its context sets the default
// --max-model-len, then the engine plans with it and keeps it.
Result<ServeModel> resolve(ServeFlags& f) {
  EngineConfig& e = f.engine;
  if (e.model_path.empty()) {
    e.model_path = find_default_model();
    if (e.model_path.empty()) {
      return Error{missing_default_model_message()};
    }
  }
  if (!f.memory_budget.empty()) {
    auto b = parse_size_flag("--memory-budget", f.memory_budget);
    if (!b.ok()) return b.error();
    e.memory_budget_bytes = *b;
  }
  {
    auto b = parse_size_flag("--request-memory", f.request_memory);
    if (!b.ok()) return b.error();
    f.server.http.request_memory_bytes = *b;
  }
  {
    auto b = parse_size_or_off("--grammar-cache", f.grammar_cache, machine_memory_limit_bytes());
    if (!b.ok()) return b.error();
    f.server.grammar_cache_bytes = *b;
  }
  {
    auto d = parse_size_flag("--diagnostics-max-bytes", f.diagnostics_max_bytes);
    if (!d.ok()) return d.error();
    f.diagnostics_max_bytes_value = *d;
  }
  if (!f.swap_space.empty()) {
    auto b = parse_size_flag("--swap-space", f.swap_space);
    if (!b.ok()) return b.error();
    e.swap_bytes = *b;
  }
  auto dtype = parse_kv_dtype(f.kv_dtype);
  if (!dtype) return Error{"--kv-cache-dtype: " + dtype.message()};
  if (!kv_dtype_on_cpu(*dtype)) {
    return Error{"--kv-cache-dtype " + f.kv_dtype +
                 ": the CPU engine has no fp8 KV cache (fp8 is for `kvwarden plan`); use f16, "
                 "bf16, f32 or int8"};
  }
  e.kv_dtype = *dtype;
  e.attention_bf16_dot = f.attention_dot == "bf16";
  auto pm = parse_preemption_mode(f.preemption_mode);
  if (!pm.ok()) return pm.error();
  e.sched.preemption_mode = *pm;
  auto ov = parse_overflow_policy(f.overflow);
  if (!ov.ok()) return ov.error();
  e.sched.overflow = *ov;
  auto kr = parse_kv_reserve_policy(f.kv_reserve);
  if (!kr.ok()) return kr.error();
  e.sched.kv_reserve = *kr;
  e.enable_prefix_caching = !f.no_prefix_caching;
  if (!f.kv_events_json.empty()) {
    auto kc = kv_events::parse_kv_events_config(f.kv_events_json);
    if (!kc.ok()) return kc.error();
    f.kv_events = *kc;
    if (f.kv_events.publishes() && !e.enable_prefix_caching) {
      return Error{
          "--kv-events-config: KV events report the prefix cache; drop --no-prefix-caching"};
    }
  }
  auto rope = rope_override(f.rope);
  if (!rope.ok()) return rope.error();
  e.rope = *rope;
  if (!f.speculative_config.empty()) {
    auto sc = parse_speculative_config(f.speculative_config, e.sched.spec);
    if (!sc.ok()) return sc.error();
    e.sched.spec = *sc;
  }
  // --draft-model turns speculation on with the draft model (its vocabulary is checked at load).
  if (!e.sched.spec.draft_model.empty()) e.sched.spec.enabled = true;
  auto file = GgufFile::open(e.model_path);
  if (!file.ok()) return file.error();
  auto hp = hparams_from_gguf(**file);
  if (!hp.ok()) return hp.error();
  if (f.max_model_len > 0) {
    e.sched.max_model_len = f.max_model_len;
  } else {
    const int64_t positions = scaled_context(hp->n_ctx_train, e.rope);
    e.sched.max_model_len = positions > 0 ? std::min(kMaxDefaultModelLen, positions) : 4096;
  }
  if (!f.chat_template_file.empty()) {
    f.server.chat_template = read_file(f.chat_template_file);
    if (f.server.chat_template.empty()) {
      return Error{"--chat-template " + f.chat_template_file + ": cannot read (or empty)"};
    }
  }
  if (f.server.http.api_key.empty()) {
    if (const char* k = std::getenv("KVW_API_KEY"); k != nullptr) f.server.http.api_key = k;
  }
  http::HttpServerConfig& h = f.server.http;
  const bool default_connections = h.max_connections == 0;
  if (default_connections) {
    h.max_connections = (size_t)planner::default_max_connections(e.sched.max_num_seqs,
                                                                 f.server.admission.max_queue);
  }
  // Every connection is a file descriptor: raise the soft limit to the hard one, and refuse a
  // --max-connections the process could not hold.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    if (nofile.rlim_cur < nofile.rlim_max) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
    // Model file, swap file, epoll, logs, and the probe connections beyond the limit.
    const uint64_t spare = 64 + h.max_probe_connections;
    if (nofile.rlim_cur != RLIM_INFINITY && h.max_connections + spare > nofile.rlim_cur) {
      if (!default_connections || nofile.rlim_cur < 2 * spare) {
        return Error{"--max-connections " + std::to_string(h.max_connections) +
                     " needs more file descriptors than this process may open (" +
                     std::to_string(nofile.rlim_cur) + "; raise `ulimit -n`)"};
      }
      LOG(WARN, server) << "default --max-connections " << h.max_connections << " capped to "
                        << nofile.rlim_cur - spare << " by the open-file limit (ulimit -n)";
      h.max_connections = nofile.rlim_cur - spare;
    }
  }
  e.request_bytes =
      planner::request_row_bytes({.request_memory_bytes = h.request_memory_bytes,
                                  .max_connections = (int64_t)h.max_connections,
                                  .max_num_seqs = e.sched.max_num_seqs,
                                  .max_queue = f.server.admission.max_queue,
                                  .stream_buffer_bytes = h.stream_buffer_bytes,
                                  .max_model_len = e.sched.max_model_len,
                                  .grammar_cache_bytes = f.server.grammar_cache_bytes});
  KVW_RETURN_IF_ERROR(e.validate());
  KVW_RETURN_IF_ERROR(f.server.validate());
  return ServeModel{std::move(*file), std::move(*hp)};
}

// The serve configuration, for diagnostics dumps.
nlohmann::json config_json(const ServeFlags& f) {
  const EngineConfig& e = f.engine;
  const server::ServerConfig& s = f.server;
  return {{"model", e.model_path},
          {"served_model_name", s.served_model_name},
          {"host", s.http.host},
          {"port", s.http.port},
          {"io_threads", s.http.io_threads},
          {"http_threads", s.http.handler_threads},
          {"max_connections", s.http.max_connections},
          {"max_probe_connections", s.http.max_probe_connections},
          {"request_memory_bytes", s.http.request_memory_bytes},
          {"stream_buffer_bytes", s.http.stream_buffer_bytes},
          {"max_body_bytes", s.http.max_body_bytes},
          {"header_timeout_s", s.http.header_timeout_s},
          {"max_queue", s.admission.max_queue},
          {"max_queue_wait_s", s.admission.max_queue_wait_s},
          {"refusal_hold_s", s.pacing.hold_s},
          {"refusal_hold_max", s.http.max_held_refusals},
          {"breaker_kv_threshold", s.breaker.kv_high},
          {"latency_sla_s", s.breaker.latency_sla_s},
          {"threads", e.n_threads},
          {"memory_budget_bytes", e.memory_budget_bytes},
          {"block_size", e.block_size},
          {"kv_dtype", f.kv_dtype},
          {"max_num_seqs", e.sched.max_num_seqs},
          {"max_num_batched_tokens", e.sched.max_num_batched_tokens},
          {"max_model_len", e.sched.max_model_len},
          {"swap_bytes", e.swap_bytes},
          {"mlock", e.mlock},
          {"preemption_mode", f.preemption_mode},
          {"overflow", f.overflow},
          {"kv_reserve", f.kv_reserve},
          {"enable_prefix_caching", e.enable_prefix_caching},
          {"kv_events_config", f.kv_events_json},
          {"speculative_config",
           e.sched.spec.enabled && !e.sched.spec.draft_model.empty()
               ? nlohmann::json{{"method", "draft_model"},
                                {"model", e.sched.spec.draft_model},
                                {"num_speculative_tokens", e.sched.spec.num_speculative_tokens}}
           : e.sched.spec.enabled
               ? nlohmann::json{{"method", "ngram"},
                                {"num_speculative_tokens", e.sched.spec.num_speculative_tokens},
                                {"prompt_lookup_max", e.sched.spec.prompt_lookup_max},
                                {"prompt_lookup_min", e.sched.spec.prompt_lookup_min}}
               : nlohmann::json(nullptr)}};
}

int run(ServeFlags f) {
  auto fail = [](const std::string& msg, int code) {
    std::cerr << "kvwarden serve: " << msg << "\n";
    return code;
  };
  auto file = resolve(f);
  if (!file.ok()) return fail(file.message(), 2);
  // Request bodies and parsed prompts (up to --max-body-bytes each) are mmapped and unmapped
  // when freed: a fixed threshold stops glibc from raising it after the first large free and
  // keeping later bursts in the heap. The server trims the heap after bursts as well.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
  // Block the stop signals in every thread (the engine's and the server's inherit this mask);
  // the main thread takes them with sigwait, so no handler runs in an arbitrary thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  // Declared before the engine and the server so that they outlive both.
  std::unique_ptr<obs::ObservabilityContext> metrics;
  std::unique_ptr<server::ObsBridge> bridge;
  // Outlives the engine, whose thread calls publish() through kv_event_sink.
  std::unique_ptr<kv_events::KvEventPublisher> publisher;
  if (f.kv_events.publishes()) {
    auto p = kv_events::KvEventPublisher::start(f.kv_events, f.engine.block_size);
    if (!p.ok()) return fail(p.message(), 2);
    publisher = std::move(*p);
    f.engine.kv_event_sink = [pub = publisher.get()](std::vector<KvCacheEvent>&& events) {
      pub->publish(std::move(events));
    };
    std::cerr << "kvwarden serve: KV events on " << publisher->endpoint() << " topic '"
              << f.kv_events.topic << "'"
              << (publisher->replay_endpoint().empty()
                      ? std::string(", no replay")
                      : ", replay on " + publisher->replay_endpoint())
              << "\n";
  }
  server::StepRelay relay;
  f.engine.step_observer = relay.observer();
  // The engine's threads (its loop and the forward workers, all created by Engine::create)
  // inherit SCHED_BATCH from this thread: the kernel then lets a waking I/O thread preempt
  // them, so probes, scrapes and token pushes are not queued behind a busy forward pass. The
  // HTTP threads, created later, run as ordinary threads.
  sched_param batch{};
  const bool batched = sched_setscheduler(0, SCHED_BATCH, &batch) == 0;
  auto engine = Engine::create(f.engine, std::move(file->file), std::move(file->hparams));
  if (batched) sched_setscheduler(0, SCHED_OTHER, &batch);
  if (!engine.ok()) return fail(engine.message(), 1);
  auto srv = server::Server::create(f.server, **engine);
  if (!srv.ok()) return fail(srv.message(), 2);
  metrics = std::make_unique<obs::ObservabilityContext>(
      server::make_obs_config(f.engine, (*engine)->budget(),
                              {.model_name = (*srv)->model_name(),
                               .diagnostics_dir = f.diagnostics_dir,
                               .diagnostics_min_interval_s = f.diagnostics_min_interval_s,
                               .diagnostics_max_files = f.diagnostics_max_files,
                               .diagnostics_max_bytes = f.diagnostics_max_bytes_value,
                               .trace_capacity = f.trace_capacity}));
  relay.connect(metrics->step_observer());
  bridge = std::make_unique<server::ObsBridge>(*metrics);
  server::wire_observability(
      **srv, **engine, *metrics, *bridge, config_json(f),
      publisher ? std::function<KvEventsStats()>([pub = publisher.get()] { return pub->stats(); })
                : nullptr);
  if (Status st = (*srv)->start(); !st.ok()) {
    metrics->stop_watcher();  // it reads the engine
    return fail(st.message(), 1);
  }
  std::printf("kvwarden serving %s on %s\n", (*srv)->model_name().c_str(), (*srv)->url().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cerr << "kvwarden serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": draining (up to "
            << f.server.drain_timeout_s << " s)\n";
  const size_t cancelled = (*srv)->drain_and_stop();
  metrics->stop_watcher();
  (*engine)->shutdown();
  std::cerr << "kvwarden serve: stopped (" << cancelled
            << " requests cancelled at the drain timeout)\n";
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("serve",
                                 "OpenAI-compatible HTTP server (/v1/completions, "
                                 "/v1/chat/completions, /v1/models, /tokenize, /detokenize, "
                                 "/health, /ready, /metrics, /dashboard, /debug/*)");
  auto f = std::make_shared<ServeFlags>();
  server::ServerConfig& s = f->server;
  EngineConfig& e = f->engine;
  // Server.
  cmd->add_option("--model,-m", e.model_path, kModelFlagHelp);
  http::HttpServerConfig& h = s.http;
  cmd->add_option("--host", h.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", h.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", h.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize and "
                  "/debug/* (compared in constant time, before any request memory is reserved; "
                  "requests without it may send no body) (default: $KVW_API_KEY; none: no auth)");
  cmd->add_option("--served-model-name", s.served_model_name,
                  "Model name in the API (default: the model file name without .gguf)");
  cmd->add_option("--chat-template", f->chat_template_file,
                  "Jinja chat template file (overrides the GGUF's tokenizer.chat_template; "
                  "without either, chat uses a built-in ChatML template)");
  cmd->add_option("--tool-call-parser", s.tool_call_parser,
                  "How the model writes tool calls: hermes (Hermes, Qwen2.5/3), llama3_json "
                  "(Llama 3.x), mistral, deepseek_v3, openai (GPT-OSS harmony). Default: detected "
                  "from the chat template and vocabulary; a template without tool support gets a "
                  "generic tool prompt in the hermes format");
  // Transport (src/http): event-driven; no connection or stream holds a thread.
  cmd->add_option("--io-threads", h.io_threads,
                  "I/O threads: every connection, stream, probe and /metrics scrape runs on these")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--http-threads", h.handler_threads,
                  "Handler threads for request preparation (JSON parsing, chat templates, "
                  "tokenising) and /debug/*; streams hold none")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-connections", h.max_connections,
                  "Open connections at most; beyond it 503 + Retry-After at once (default: "
                  "max(1024, 2 x (max-num-seqs + max-queue) + 512))");
  cmd->add_option("--max-probe-connections", h.max_probe_connections,
                  "Connections beyond --max-connections for /health, /ready and /metrics only "
                  "(one request each), so a connection flood cannot fail the liveness probe")
      ->capture_default_str();
  cmd->add_option("--request-memory", f->request_memory,
                  "Memory for request bodies, their parsed JSON and prompts before they reach "
                  "the engine (4 x body + 256 KiB each); when spent, bodies wait unread, then "
                  "get 503 (part of the budget table's request row)")
      ->capture_default_str();
  cmd->add_option("--grammar-cache", f->grammar_cache,
                  "Memory for compiled structured-output grammars (response_format, tools) and "
                  "their token masks, kept across requests so a schema seen before costs no "
                  "mask walks; least recently used dropped first; 0: each request its own "
                  "(part of the budget table's request row)")
      ->capture_default_str();
  cmd->add_option("--stream-buffer-bytes", h.stream_buffer_bytes,
                  "Unsent bytes one stream may queue behind a write its client has not finished "
                  "taking; a client that falls further behind is dropped (a whole non-streamed "
                  "answer is always written to a client that reads it)")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", h.max_body_bytes, "Larger request bodies get 413")
      ->capture_default_str();
  cmd->add_option("--header-timeout", h.header_timeout_s,
                  "Seconds a request's headers may take from its first byte (slow clients get "
                  "408 and are closed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--body-timeout", h.body_timeout_s,
                  "Seconds from a request's headers to its complete body, waiting for request "
                  "memory included (408, or 503 when memory stayed spent)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", h.keep_alive_timeout_s,
                  "Seconds an idle keep-alive connection stays open")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--write-timeout", h.write_timeout_s,
                  "Seconds a client may accept no bytes before it is dropped")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--listen-backlog", h.listen_backlog,
                  "Pending-connection queue (capped by net.core.somaxconn)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--drain-timeout", s.drain_timeout_s,
                  "On SIGTERM/SIGINT, seconds in-flight requests may take before they are "
                  "cancelled")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Observability.
  cmd->add_option("--diagnostics-dir", f->diagnostics_dir,
                  "Write diagnostics dumps (JSON) here on preemption storms, server faults and "
                  "shedding (429/5xx; never client mistakes such as 400/401/404), numerics "
                  "errors and KV usage over 98% (default: none)");
  cmd->add_option("--diagnostics-min-interval", f->diagnostics_min_interval_s,
                  "Seconds between two dumps of the same trigger")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--diagnostics-max-files", f->diagnostics_max_files,
                  "Dumps this process writes at most; later ones are skipped (logged once)")
      ->capture_default_str();
  cmd->add_option("--diagnostics-max-bytes", f->diagnostics_max_bytes,
                  "Bytes of dumps this process writes at most, all files together")
      ->capture_default_str();
  cmd->add_option("--trace-capacity", f->trace_capacity,
                  "Engine steps kept for /debug/trace (ring buffer)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // Admission and breaker.
  cmd->add_option("--max-queue", s.admission.max_queue,
                  "Requests that may wait for a running slot; more get 429 (0: unbounded). "
                  "The further choices (n > 1) of a prompt admitted may take as many places again")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-queue-wait", s.admission.max_queue_wait_s,
                  "Seconds a request may wait for its first token (0: off). Arriving: 429 + "
                  "Retry-After when the queued work (prompt + max_tokens tokens of every waiting "
                  "request) over the measured token rate predicts a longer wait. Admitted: a "
                  "request (each of its n choices) still queued this long after admission (its "
                  "prefill not begun) is dropped from the engine and gets 503 + Retry-After, "
                  "streamed or not (nothing was sent); one whose prefill has begun runs on")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--refusal-hold", s.pacing.hold_s,
                  "The longest a 429 (admission full) is held before it is written, for a "
                  "request on a connection that comes back before the Retry-After of its last "
                  "429 ran out: held until it runs out, so a client that ignores Retry-After "
                  "retries once per Retry-After instead of once per round trip (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--refusal-hold-max", s.http.max_held_refusals,
                  "429s held at once (--refusal-hold); past it a refusal is written at once")
      ->capture_default_str();
  cmd->add_option("--breaker-kv-threshold", s.breaker.kv_high,
                  "KV usage fraction above which the breaker warns, then sheds")
      ->capture_default_str();
  cmd->add_option("--breaker-kv-recover", s.breaker.kv_low,
                  "KV usage fraction below which the breaker recovers")
      ->capture_default_str();
  cmd->add_option("--breaker-kv-seconds", s.breaker.kv_shed_after_s,
                  "Seconds above the KV threshold before shedding new work (503)")
      ->capture_default_str();
  cmd->add_option("--latency-sla", s.breaker.latency_sla_s,
                  "p95 end-to-end latency SLA in seconds; above it the breaker warns, then "
                  "sheds (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--breaker-latency-seconds", s.breaker.latency_shed_after_s,
                  "Seconds above the latency SLA before shedding")
      ->capture_default_str();
  cmd->add_option("--breaker-latency-recover", s.breaker.latency_recover_ratio,
                  "Recovery needs p95 below this fraction of the SLA")
      ->capture_default_str();
  cmd->add_option("--breaker-recover-seconds", s.breaker.recover_hold_s,
                  "Seconds below both recovery thresholds before the breaker returns to ok")
      ->capture_default_str();
  cmd->add_option("--breaker-tick-ms", s.breaker_tick_ms, "How often the breaker samples")
      ->capture_default_str();
  // Engine.
  cmd->add_option("--threads,-t", e.n_threads, "Forward worker threads (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--memory-budget", f->memory_budget,
                  "Total memory for weights + workspace + KV pool + reserve: bytes, 8G, 512MiB "
                  "or 75% of the machine (default: none; the KV pool then fits max-num-seqs x "
                  "min(max-model-len, 4096) tokens, and one max-model-len sequence at least)");
  cmd->add_option("--block-size", e.block_size, "KV block size in tokens")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--kv-dtype,--kv-cache-dtype", f->kv_dtype, "KV cache type: f16, bf16, f32, int8")
      ->capture_default_str();
  cmd->add_option("--attention-dot", f->attention_dot, kAttentionDotHelp)
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", e.sched.max_num_seqs, "Requests running at once")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", e.sched.max_num_batched_tokens,
                  "Tokens per engine step (also sizes the forward workspace)")
      ->capture_default_str();
  cmd->add_option("--long-prefill-token-threshold", e.sched.long_prefill_chunk_tokens,
                  "Prompt tokens one request prefills per step (vLLM's flag): a longer prompt is "
                  "split into chunks of this size and running requests decode in between; 0 "
                  "leaves only --max-num-batched-tokens as the limit")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-prompt-logprob-rows", e.sched.max_prompt_logit_rows,
                  "Logit rows a step gives to prompt positions of requests that want prompt "
                  "logprobs (echo + logprobs, prompt_logprobs): their prefill chunks are capped to "
                  "it; each row is n_vocab f32 of the budget's reserve")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-model-len", f->max_model_len,
                  "Prompt + output tokens per request (default: min(16384, the model's "
                  "context); phi3: above rope.scaling.original_context_length LongRoPE's long "
                  "factors apply, as llama.cpp's -c)");
  cmd->add_option("--swap-space", f->swap_space,
                  "Swap tier for preempted KV (bytes or 4G; default: none)");
  cmd->add_flag("--swa-full", e.swa_full,
                "Hybrid sliding-window models (gemma2/3, gpt-oss): keep every position's KV in "
                "the windowed layers too (llama.cpp's name), so prefixes stay reusable over long "
                "contexts; by default they hold only their window's blocks");
  cmd->add_option("--swap-path", e.swap_path, "Swap file location (required with --swap-space)");
  cmd->add_flag("--mlock", e.mlock,
                "Lock the weights, KV pool and buffers in RAM after start-up (the OS never pages "
                "them out); refuses to start when RLIMIT_MEMLOCK is too small");
  cmd->add_option("--preemption-mode", f->preemption_mode,
                  "swap (to the swap tier when it has room) or recompute")
      ->capture_default_str();
  cmd->add_option("--overflow", f->overflow,
                  "Prompt over max-model-len: error (400 context_length_exceeded), truncate-left, "
                  "or sliding-window (keep the system turn and the newest whole turns)")
      ->capture_default_str();
  cmd->add_option("--kv-reserve", f->kv_reserve, "KV admission reserve: none or p95")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-caching", f->no_prefix_caching, "Disable prefix caching");
  cmd->add_flag("--spec-ngram", e.sched.spec.enabled,
                "Speculative decoding with prompt-lookup drafts: the last n tokens are looked up "
                "earlier in the prompt and output, the tokens that followed are verified in one "
                "forward pass. Greedy and seeded output is identical to decoding without it; "
                "faster when answers quote their input");
  cmd->add_option("--spec-max-draft", e.sched.spec.num_speculative_tokens,
                  "--spec-ngram: draft tokens per step at most (adapts per sequence in "
                  "[1, this]); sizes max_seqs x this extra logit rows in the budget's reserve")
      ->capture_default_str();
  cmd->add_option("--spec-ngram-max", e.sched.spec.prompt_lookup_max,
                  "--spec-ngram: longest n-gram looked up")
      ->capture_default_str();
  cmd->add_option("--spec-ngram-min", e.sched.spec.prompt_lookup_min,
                  "--spec-ngram: shortest n-gram looked up")
      ->capture_default_str();
  cmd->add_option("--spec-max-seqs", e.sched.spec.max_seqs,
                  "--spec-ngram: sequences that carry drafts in one step at most")
      ->capture_default_str();
  cmd->add_option("--draft-model", e.sched.spec.draft_model,
                  "Speculative decoding with a draft model: a smaller GGUF file with the same "
                  "vocabulary (refused at start-up otherwise) drafts --spec-max-draft tokens "
                  "greedily per step, the target verifies them in one pass (same exactness as "
                  "--spec-ngram). Its weights, workspace and KV are rows of the budget table");
  cmd->add_option("--speculative-config", f->speculative_config,
                  "vLLM's form of --spec-ngram / --draft-model: JSON with method \"ngram\" "
                  "(num_speculative_tokens, prompt_lookup_max, prompt_lookup_min) or \"model\": "
                  "a draft GGUF file. Examples: "
                  "'{\"method\":\"ngram\",\"num_speculative_tokens\":4,"
                  "\"prompt_lookup_max\":4,\"prompt_lookup_min\":2}', "
                  "'{\"model\":\"draft.gguf\",\"num_speculative_tokens\":5}'");
  cmd->add_option("--kv-events-config", f->kv_events_json,
                  "Publish the prefix cache's KV events (BlockStored, BlockRemoved, "
                  "AllBlocksCleared) over ZeroMQ in vLLM's format, for prefix-aware routers "
                  "(llm-d). JSON with vLLM's keys: enable_kv_cache_events, publisher (zmq|null), "
                  "endpoint (PUB, default tcp://*:5557), replay_endpoint (ROUTER), buffer_steps, "
                  "hwm, max_queue_size (events; a full queue drops, counted in "
                  "kvwarden_kv_events_dropped_total), topic. Example: "
                  "'{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\","
                  "\"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":\"tcp://*:5558\"}'");
  add_rope_flags(cmd, &f->rope);
  cmd->add_option("--activation-clamp", e.activation_clamp,
                  "Clamp residual activations to [-c, c] (0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--defrag-threshold", e.defrag_threshold,
                  "Defragment the KV pool between steps when free blocks outside the largest "
                  "free run exceed this fraction of free blocks (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--defrag-max-moves", e.defrag_max_moves,
                  "KV blocks the defragmenter moves at most per pass (bounds the pause)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--max-engine-queue", e.request_queue_capacity,
                  "Submissions waiting for the engine thread at most")
      ->capture_default_str();
  cmd->callback([f, &exit_code] { exit_code = run(*f); });
}

}  // namespace kvw::app
