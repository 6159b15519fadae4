// /v1/completions and /v1/chat/completions: refuse at the door from the headers when there is
// no room (generation_door), else validate, admit the exact count against the door's
// reservation, submit one engine request per choice, then answer in one JSON body or as SSE
// chunks (`data: {json}\n\n` ... `data: [DONE]`).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>

#include "core/token_list.h"
#include "core/turn_starts.h"
#include "server/admission_ticket.h"
#include "server/choice_runner.h"
#include "server/completion_options.h"
#include "server/generation_stream.h"
#include "server/openai_request.h"
#include "server/request_holdings.h"
#include "server/routes.h"
#include "server/structured_output.h"
#include "server/tool_calling.h"
#include "tokenizer/utf8.h"

namespace kvw::server {
namespace {

using nlohmann::json;

struct PreparedPrompt {
  TokenList tokens;        // one copy, shared by the prompt's choices in the engine (issue 30)
  TurnStarts turn_starts;  // likewise
  int32_t max_tokens = 0;  // 0: echo only (one token is sampled and dropped, as vLLM)
  std::string echo_text;   // completions with echo: the prompt as the answer starts
};

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rng());
  return std::string(prefix) + buf;
}

ApiError context_exceeded(const ServerState& st, int64_t n_prompt, const GenParams& p, bool chat) {
  const int64_t len = st.limits().max_model_len;
  const int64_t room = len - n_prompt;
  const int64_t want = p.max_tokens ? *p.max_tokens : 1;
  return ApiError(RefusalReason::kContextLength,
                  "This model's maximum context length is " + std::to_string(len) +
                      " tokens. However, you requested " + std::to_string(n_prompt + want) +
                      " tokens (" + std::to_string(n_prompt) + " in the " +
                      (chat ? "messages" : "prompt") + ", " + std::to_string(want) +
                      " for the completion). Please reduce the length.")
      .with_param(p.max_tokens && room >= 1 ? "max_tokens" : (chat ? "messages" : "prompt"));
}

// Under truncate-left and sliding-window only the newest (max_model_len + 1) x max_token_bytes
// bytes of the conversation can reach the context: older messages are dropped and the oldest
// kept one is cut to its tail before rendering, so tokenising stays O(max_model_len). System
// messages are kept (sliding-window keeps the system turn). The engine then applies the exact
// policy on tokens.
void trim_to_context(const ServerState& st, std::vector<ChatMessage>& msgs) {
  const uint64_t keep = (uint64_t)(st.limits().max_model_len + 1) *
                        (uint64_t)std::max<int64_t>(1, st.max_token_bytes);
  uint64_t total = 0;
  for (const ChatMessage& m : msgs) total += m.content.size();
  if (total <= keep) return;
  uint64_t used = 0;
  for (const ChatMessage& m : msgs) used += m.role == "system" ? m.content.size() : 0;
  std::vector<bool> drop(msgs.size(), false);
  for (size_t k = msgs.size(); k-- > 0;) {
    ChatMessage& m = msgs[k];
    if (m.role == "system") continue;
    if (used >= keep) {
      drop[k] = true;
      continue;
    }
    if (used + m.content.size() > keep) {
      m.content = std::string(tokenizable_tail_bytes(m.content, keep - used));
    }
    used += m.content.size();
  }
  std::vector<ChatMessage> kept;
  for (size_t k = 0; k < msgs.size(); ++k) {
    if (!drop[k]) kept.push_back(std::move(msgs[k]));
  }
  msgs = std::move(kept);
}

// Bounds that need the model, checked before any tokenising: logit_bias and stop_token_ids
// ids inside the vocabulary (so logit_bias holds at most n_vocab entries: keys are canonical,
// see openai_request.cc).
std::optional<ApiError> check_generation_bounds(const ServerState& st, const GenParams& p,
                                                size_t num_prompts) {
  if (auto e = check_field_bounds(p, num_prompts)) return e;
  const int32_t n_vocab = st.limits().n_vocab;
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= n_vocab) {
      return invalid_param("logit_bias", "logit_bias key '" + std::to_string(id) +
                                             "' is outside the vocabulary [0, " +
                                             std::to_string(n_vocab) + ")");
    }
  }
  if (p.stop_token_ids && !p.stop_token_ids->empty() && p.stop_token_ids->back() >= n_vocab) {
    return invalid_param("stop_token_ids",
                         "stop_token_ids holds " + std::to_string(p.stop_token_ids->back()) +
                             ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  }
  return std::nullopt;
}

// max_tokens per prompt, and the context check under --overflow error.
std::optional<ApiError> fit_max_tokens(const ServerState& st, const GenParams& p, bool chat,
                                       PreparedPrompt& pp) {
  const auto n_prompt = (int64_t)pp.tokens.size();
  const int64_t room = st.limits().max_model_len - n_prompt;
  if (st.limits().overflow == OverflowPolicy::kError &&
      (room < 1 || (p.max_tokens && *p.max_tokens > room))) {
    return context_exceeded(st, n_prompt, p, chat);
  }
  // Defaults: completions 16 (OpenAI), chat up to the context limit. An overflowing prompt
  // is cut by the engine under the other policies, leaving at least one token of room.
  const int64_t cap = std::max<int64_t>(1, room);
  pp.max_tokens = p.max_tokens ? *p.max_tokens : (int32_t)std::min<int64_t>(chat ? cap : 16, cap);
  if (p.min_tokens > pp.max_tokens) {  // as vLLM, against the default max_tokens too
    return invalid_param("min_tokens", "'min_tokens' (" + std::to_string(p.min_tokens) +
                                           ") must be <= max_tokens (" +
                                           std::to_string(pp.max_tokens) + ")");
  }
  return std::nullopt;
}

// A compiled grammar may take this share of request memory (its rules and per-position tables;
// the per-sequence masks are the engine's, see GrammarConstraint::memory_bytes). The request's
// context-mask cache (grammar/context_mask_cache.h) takes as much again.
size_t grammar_bytes(const ServerState& st) {
  return (size_t)std::max<uint64_t>(64u << 10, st.cfg.http.request_memory_bytes / 16);
}

// Attaches the request's grammar; ignore_eos cannot go with one (the grammar ends at EOS).
std::optional<ApiError> constrain(ServerState& st, std::shared_ptr<const grammar::Grammar> g,
                                  GenParams& p) {
  if (!g) return std::nullopt;
  if (p.ignore_eos) {
    return invalid_param("ignore_eos",
                         "'ignore_eos' cannot be used with a structured output: the grammar ends "
                         "the output with EOS");
  }
  std::vector<grammar::GrammarTrigger> triggers = std::move(p.constraint.triggers);  // lazy
  p.constraint = st.constraint_for(std::move(g), grammar_bytes(st));
  p.constraint.triggers = std::move(triggers);
  return std::nullopt;
}

// first_candidate: the prompt's first choice, the only one that asks for prompt logprobs (the
// same for every candidate of one prompt: computed once, shared by GenerationStream).
GenerationRequest make_request(const GenParams& p, const PreparedPrompt& pp, int32_t choice,
                               bool first_candidate) {
  GenerationRequest r;
  r.prompt = pp.tokens;            // shared, not copied
  r.turn_starts = pp.turn_starts;  // shared, not copied
  r.max_tokens = std::max(1, pp.max_tokens);
  r.prompt_logprobs = first_candidate ? engine_prompt_logprobs(p) : -1;
  r.ignore_eos = p.ignore_eos;
  r.speculate = p.speculative;
  GenSampling& s = r.sampling;
  s.temperature = p.temperature;
  s.top_p = p.top_p;
  s.top_k = p.top_k;
  s.min_p = p.min_p;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.repetition_penalty = p.repetition_penalty;
  s.min_tokens = p.min_tokens;
  s.stop_token_ids = p.stop_token_ids;  // shared by the choices
  // best_of ranks candidates by their tokens' logprobs, asked for or not.
  s.logprobs = p.best_of > 0 ? std::max(p.logprobs, 0) : p.logprobs;
  s.logit_bias = p.logit_bias;
  s.constraint = p.constraint;  // the grammar is shared by the choices; each keeps its matcher
  // Choices of one request differ yet stay reproducible under a seed.
  s.seed = p.seed ? *p.seed + (uint64_t)choice : std::random_device{}() * 0x9E3779B97F4A7C15ull;
  return r;
}

}  // namespace

ApiError engine_refusal(ServerState& st, const Error& e) {
  return engine_error(e, st.admission.retry_after_s());
}

ApiError choice_error(ServerState& st, const ChoiceRunner& r) {
  if (st.drain_cancelled.load()) {
    return engine_refusal(
        st, Error{"request cancelled: the server is shutting down", ErrorKind::kUnavailable});
  }
  return engine_refusal(st, Error{r.error(), r.error_kind()});
}

namespace {

// 503 while draining or shedding; nullopt when neither.
std::optional<ApiError> closed_refusal(ServerState& st) {
  if (st.draining.load()) {
    return ApiError(RefusalReason::kDraining, "server is shutting down; retry on another replica")
        .with_retry_after(st.admission.retry_after_s());
  }
  if (st.breaker.state() == BreakerState::kShedding) {
    return ApiError(RefusalReason::kShedding, "server overloaded (shedding load); retry later")
        .with_retry_after(st.admission.retry_after_s());
  }
  return std::nullopt;
}

// Every running slot taken: the steps until the soonest running choice ends (slot_ends.h), a
// decode step being one token per running sequence at the measured rate (a step with prefill
// is longer: this errs short). 0 while a slot is free.
double slot_wait_s(const ServerState& st, const EngineStats& s) {
  if (s.num_running < (size_t)st.limits().max_num_seqs || !(s.token_rate > 0)) return 0;
  const std::optional<int64_t> steps = st.slot_ends.steps_to_soonest((int64_t)s.num_steps);
  if (!steps) return 0;
  return (double)*steps * (double)s.num_running / s.token_rate;
}

// The engine's queue for the predicted-wait check (admission.h): count, work, token rate, and
// the wait for a running slot.
QueueLoad engine_load(const ServerState& st) {
  const EngineStats s = st.engine->stats();
  return QueueLoad{.num_waiting = (int64_t)s.num_waiting,
                   .waiting_work_tokens = s.num_waiting_work_tokens,
                   .token_rate = s.token_rate,
                   .slot_wait_s = slot_wait_s(st, s)};
}

// 429 for an admission refusal.
ApiError admission_refusal(const AdmissionDecision& d) {
  const bool full = d.verdict == AdmissionVerdict::kQueueFull;
  char wait[64];
  std::snprintf(wait, sizeof wait, "%.1f", d.predicted_wait_s);
  return ApiError(full ? RefusalReason::kQueueFull : RefusalReason::kQueueWait,
                  full ? "server busy: request queue full (" + std::to_string(d.queued_ahead) +
                             " waiting); retry later"
                       : std::string("server busy: predicted queue wait ") + wait +
                             " s exceeds --max-queue-wait; retry later")
      .with_retry_after(d.retry_after_s);
}

// The exact check once the request is parsed: `num_choices` slots against what the door
// reserved (admission_ticket.h). 503 while draining or shedding, 429 when admission refuses;
// nullopt = admitted (the ticket holds the slots).
std::optional<ApiError> gate(ServerState& st, AdmissionTicket& ticket, int64_t num_choices,
                             int64_t num_prompts) {
  if (auto e = closed_refusal(st)) return e;
  const AdmissionDecision d =
      ticket.admit_exact(now_s(), num_choices, engine_load(st), num_choices - num_prompts);
  if (d.verdict == AdmissionVerdict::kAdmit) return std::nullopt;
  return admission_refusal(d);
}

// The admission slots the door reserved for this request (none when the route has no door).
std::unique_ptr<AdmissionTicket> take_ticket(ServerState& st, HttpRequest& req) {
  if (auto* t = dynamic_cast<AdmissionTicket*>(req.door_pass.get())) {
    req.door_pass.release();
    return std::unique_ptr<AdmissionTicket>(t);
  }
  return std::make_unique<AdmissionTicket>(st.admission);
}

// Admits and submits every choice (prompt-major: index = prompt * n + i).
std::variant<std::vector<std::unique_ptr<ChoiceRunner>>, ApiError> submit_all(
    ServerState& st, AdmissionTicket& ticket, const GenParams& p,
    const std::vector<PreparedPrompt>& prompts, uint64_t arrival_ns,
    const std::shared_ptr<const std::vector<std::string>>& stops) {
  const int64_t total = (int64_t)prompts.size() * num_candidates(p);
  if (auto e = gate(st, ticket, total, (int64_t)prompts.size())) return *e;
  std::vector<std::unique_ptr<ChoiceRunner>> runners;
  for (size_t k = 0; k < prompts.size(); ++k) {
    for (int32_t i = 0; i < num_candidates(p); ++i) {
      GenerationRequest req = make_request(p, prompts[k], (int32_t)runners.size(), i == 0);
      // Admitted, it still ends (503) if it produces nothing within --max-queue-wait.
      req.max_queue_wait_s = st.cfg.admission.max_queue_wait_s;
      auto ch = st.engine->submit(std::move(req));
      if (!ch.ok()) {
        // Runners made so far cancel and complete themselves; the ticket gives back the rest.
        return engine_refusal(st, ch.error());
      }
      ticket.hand_over(1);
      // Tool calls and harmony channels are written with special tokens ([TOOL_CALLS],
      // <|channel|>...): keep them.
      runners.push_back(std::make_unique<ChoiceRunner>(
          st, std::move(*ch), stops, p.logprobs, p.ignore_eos, std::max(1, prompts[k].max_tokens),
          arrival_ns, (uint32_t)prompts[k].tokens.size(),
          ChoiceOutput{.discard = prompts[k].max_tokens == 0,
                       .render_special = p.tool_format.has_value() || p.harmony_channels,
                       .min_tokens = p.min_tokens,
                       .stop_token_ids = p.stop_token_ids}));
    }
  }
  return runners;
}

struct Job {
  bool chat = false;
  GenParams params;
  std::vector<PreparedPrompt> prompts;
  std::string id;
  int64_t created = 0;
  int64_t prompt_tokens = 0;
  uint64_t arrival_ns = 0;
  std::unique_ptr<AdmissionTicket> ticket;  // from the door; slots go back when it is destroyed
  http::ByteLease lease;  // the body's request memory, resized to the holdings (echo included)
};

// Resizes the request's lease to what it will hold until its last answer byte
// (request_holdings.h): 400 naming the field when it could never fit, 503 request_memory +
// Retry-After when the memory is not free now.
std::optional<ApiError> charge_holdings(ServerState& st, const GenParams& p,
                                        const std::vector<PreparedPrompt>& prompts,
                                        uint64_t echo_bytes, http::ByteLease& lease) {
  std::vector<PromptShape> shapes;
  for (const PreparedPrompt& pp : prompts) {
    shapes.push_back({.num_tokens = (int64_t)pp.tokens.size(),
                      .num_turn_starts = (int64_t)pp.turn_starts.size(),
                      .max_tokens = pp.max_tokens});
  }
  if (auto e = check_logprob_records(p, shapes)) return e;
  const Holdings h = request_holdings(p, shapes, holding_limits(st));
  const uint64_t total = h.total() + echo_bytes;
  const uint64_t capacity = st.cfg.http.request_memory_bytes;
  if (total > capacity) {
    const char* param = echo_bytes == 0          ? (p.n > 1 ? "n" : "max_tokens")
                        : p.prompt_logprobs >= 0 ? "prompt_logprobs"
                                                 : "echo";
    return invalid_param(param, "the request would hold " + std::to_string(total) +
                                    " bytes of request memory until answered, more than "
                                    "--request-memory (" +
                                    std::to_string(capacity) +
                                    "); lower n, max_tokens, logprobs or the prompt count");
  }
  if (lease.resize(total)) return std::nullopt;
  return ApiError(RefusalReason::kRequestMemory,
                  "request memory (--request-memory " + std::to_string(capacity) +
                      " bytes) cannot hold this request's answer state (" + std::to_string(total) +
                      " bytes) now; retry later")
      .with_retry_after(st.admission.retry_after_s());
}

void run(ServerState& st, Job job, HttpResponse& res) {
  if (!job.params.model.empty() && job.params.model != st.model_name) {
    return send_error(st, res,
                      ApiError(RefusalReason::kModelNotFound, "The model '" + job.params.model +
                                                                  "' does not exist (serving '" +
                                                                  st.model_name + "')")
                          .with_param("model"));
  }
  for (PreparedPrompt& pp : job.prompts) {
    if (auto e = fit_max_tokens(st, job.params, job.chat, pp)) return send_error(st, res, *e);
    job.prompt_tokens += (int64_t)pp.tokens.size();
  }
  std::vector<EchoPrompt> echoes;
  uint64_t echo_bytes = 0;  // echo / prompt_logprobs: what the answer keeps of the prompt
  if (job.params.echo || job.params.prompt_logprobs >= 0) {
    for (PreparedPrompt& pp : job.prompts) {
      echo_bytes +=
          prompt_logprob_bytes((int64_t)pp.tokens.size(), engine_prompt_logprobs(job.params),
                               pp.echo_text.size(), num_candidates(job.params));
      echoes.push_back(EchoPrompt{.text = std::move(pp.echo_text), .first_token = pp.tokens[0]});
    }
  }
  if (auto e = charge_holdings(st, job.params, job.prompts, echo_bytes, job.lease)) {
    return send_error(st, res, *e);
  }
  st.counters.num_prompt_tokens.fetch_add((uint64_t)job.prompt_tokens);
  // One copy of the stop strings for every choice (and none left in the stream's params).
  auto stops = std::make_shared<const std::vector<std::string>>(std::move(job.params.stop));
  job.params.stop = {};
  auto submitted = submit_all(st, *job.ticket, job.params, job.prompts, job.arrival_ns, stops);
  if (auto* e = std::get_if<ApiError>(&submitted)) return send_error(st, res, *e);
  auto runners = std::move(std::get<0>(submitted));
  job.id = random_id(job.chat ? "chatcmpl-" : "cmpl-");
  job.created = (int64_t)std::time(nullptr);
  auto stream =
      std::make_shared<GenerationStream>(st, job.chat, job.params, job.id, job.created,
                                         job.prompt_tokens, std::move(runners), std::move(echoes));
  stream->hold(std::move(job.lease));
  res.stream = std::move(stream);
}

template <typename Fn>
void guarded(ServerState& st, HttpResponse& res, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {  // user input must never escape as a crash
    send_error(st, res,
               ApiError(RefusalReason::kInternal, std::string("internal error: ") + e.what()));
  }
}

}  // namespace

void handle_completions(ServerState& st, HttpRequest& req, HttpResponse& res) {
  const uint64_t arrival_ns = req.arrival_ns;
  std::unique_ptr<AdmissionTicket> ticket = take_ticket(st, req);
  guarded(st, res, [&] {
    st.counters.num_requests.fetch_add(1);
    auto body = parse_body(req.body, dom_budget(req));
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(st, res, *e);
    auto grammar = requested_grammar(std::get<json>(body), req.body, grammar_bytes(st));
    std::string().swap(req.body);  // the parsed copy is all that is needed now
    if (auto* e = std::get_if<ApiError>(&grammar)) return send_error(st, res, *e);
    auto parsed = parse_completion_request(std::get<json>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(st, res, *e);
    CompletionRequest& cr = std::get<CompletionRequest>(parsed);
    if (auto e = constrain(st, std::get<0>(grammar), cr.params)) return send_error(st, res, *e);
    if (auto e = check_generation_bounds(st, cr.params, cr.prompts.size())) {
      return send_error(st, res, *e);
    }
    Job job;
    job.params = cr.params;
    job.lease = std::move(req.lease);
    job.arrival_ns = arrival_ns;
    job.ticket = std::move(ticket);
    const EngineLimits& lim = st.limits();
    for (PromptInput& in : cr.prompts) {
      PreparedPrompt pp;
      if (in.is_tokens) {
        for (int32_t t : in.tokens) {
          if (t >= lim.n_vocab) {
            return send_error(st, res,
                              invalid_param("prompt", "token id " + std::to_string(t) +
                                                          " is outside the vocabulary [0, " +
                                                          std::to_string(lim.n_vocab) + ")"));
          }
        }
        if ((int64_t)in.tokens.size() > lim.max_model_len &&
            lim.overflow == OverflowPolicy::kError) {
          return send_error(st, res,
                            context_exceeded(st, (int64_t)in.tokens.size(), cr.params, false));
        }
        pp.tokens = std::move(in.tokens);
        if (cr.params.echo) pp.echo_text = to_valid_utf8(st.tokenizer().decode(pp.tokens));
      } else {
        if (auto e = prompt_bytes_over_context(st, in.text.size(), false)) {
          return send_error(st, res, *e);
        }
        pp.tokens = st.tokenizer().encode(tokenizable_tail(st, in.text), /*add_special=*/true,
                                          /*parse_special=*/true);
        if (cr.params.echo) pp.echo_text = std::move(in.text);
        std::string().swap(in.text);
      }
      if (pp.tokens.empty())
        return send_error(st, res, invalid_param("prompt", "the prompt is empty"));
      job.prompts.push_back(std::move(pp));
    }
    run(st, std::move(job), res);
  });
}

void handle_chat_completions(ServerState& st, HttpRequest& req, HttpResponse& res) {
  const uint64_t arrival_ns = req.arrival_ns;
  std::unique_ptr<AdmissionTicket> ticket = take_ticket(st, req);
  guarded(st, res, [&] {
    st.counters.num_requests.fetch_add(1);
    auto body = parse_body(req.body, dom_budget(req));
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(st, res, *e);
    auto grammar = requested_grammar(std::get<json>(body), req.body, grammar_bytes(st));
    auto tools = parse_tool_request(std::get<json>(body), req.body);
    std::string().swap(req.body);
    if (auto* e = std::get_if<ApiError>(&grammar)) return send_error(st, res, *e);
    if (auto* e = std::get_if<ApiError>(&tools)) return send_error(st, res, *e);
    auto parsed = parse_chat_request(std::get<json>(body));
    body = json();  // the messages were copied out
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(st, res, *e);
    ChatRequest& cr = std::get<ChatRequest>(parsed);
    const ToolRequest& tr = std::get<ToolRequest>(tools);
    if (auto e = apply_tools(st, tr, std::get<0>(grammar), cr.params, grammar_bytes(st))) {
      return send_error(st, res, *e);
    }
    cr.params.harmony_channels = st.harmony_output;
    if (auto e = constrain(st, std::get<0>(grammar), cr.params)) return send_error(st, res, *e);
    if (auto e = check_generation_bounds(st, cr.params, 1)) return send_error(st, res, *e);
    if (auto e = bound_message_count(st, cr.messages)) return send_error(st, res, *e);
    size_t bytes = 0;
    for (const ChatMessage& m : cr.messages) bytes += m.content.size();
    if (auto e = prompt_bytes_over_context(st, bytes, true)) return send_error(st, res, *e);
    trim_to_context(st, cr.messages);
    auto prompt = build_tool_prompt(
        st, cr.messages, tr,
        /*with_turn_starts=*/st.limits().overflow == OverflowPolicy::kSlidingWindow);
    if (!prompt.ok()) return send_error(st, res, invalid_param("messages", prompt.message()));
    if (prompt->tokens.empty())
      return send_error(st, res, invalid_param("messages", "empty prompt"));
    Job job;
    job.chat = true;
    job.params = cr.params;
    job.lease = std::move(req.lease);
    job.arrival_ns = arrival_ns;
    job.ticket = std::move(ticket);
    job.prompts.push_back(PreparedPrompt{.tokens = std::move(prompt->tokens),
                                         .turn_starts = std::move(prompt->turn_starts)});
    run(st, std::move(job), res);
  });
}

std::optional<HttpResponse> generation_door(ServerState& st, HttpRequest& req) {
  std::optional<ApiError> e = closed_refusal(st);
  if (!e) {
    auto ticket = std::make_unique<AdmissionTicket>(st.admission);
    const AdmissionDecision d = ticket->reserve(now_s(), 1, engine_load(st));
    if (d.verdict == AdmissionVerdict::kAdmit) {
      req.door_pass = std::move(ticket);
      return std::nullopt;
    }
    e = admission_refusal(d);
  }
  st.counters.num_requests.fetch_add(1);  // refused requests count as received, as before
  HttpResponse res;
  send_error(st, res, *e);
  // Only "full" is paced: a drain or a shedding breaker should move clients on at once.
  if (e->status == 429) res.hold_s = refusal_hold_s(st.cfg.pacing, req.early_s);
  return res;
}

}  // namespace kvw::server
