// loadgen/runner.cc: the run loop, per-request timing and the /metrics scraper.
#include "loadgen/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "loadgen/retry.h"
#include "loadgen/rng.h"
#include "loadgen/sse.h"

namespace kvw::loadgen {

namespace {
bool is_chat(const RunConfig& c) {
  return c.endpoint.find("chat") != std::string::npos;
}

// Text of a streamed chunk or a whole response: choices[0].text (completions) or
// choices[0].delta.content / message.content (chat).
std::string choice_text(const nlohmann::json& j) {
  auto it = j.find("choices");
  if (it == j.end() || !it->is_array() || it->empty()) return {};
  const auto& c = (*it)[0];
  if (!c.is_object()) return {};
  if (auto t = c.find("text"); t != c.end() && t->is_string()) return t->get<std::string>();
  for (const char* key : {"delta", "message"}) {
    auto d = c.find(key);
    if (d == c.end() || !d->is_object()) continue;
    auto t = d->find("content");
    if (t != d->end() && t->is_string()) return t->get<std::string>();
  }
  return {};
}
}  // namespace

std::string build_request_body(const RunConfig& config, const RequestSpec& spec,
                               const std::vector<std::string>& history) {
  nlohmann::json body;
  body["model"] = config.model;
  if (is_chat(config)) {
    auto messages = nlohmann::json::array();
    for (size_t i = 0; i < history.size(); ++i)
      messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", history[i]}});
    messages.push_back({{"role", "user"}, {"content", spec.prompt}});
    body["messages"] = std::move(messages);
  } else {
    std::string prompt;
    for (const auto& h : history) prompt += h + "\n";
    body["prompt"] = prompt + spec.prompt;
  }
  body["max_tokens"] = spec.max_tokens;
  body["temperature"] = config.temperature;
  const bool stream = spec.stream >= 0 ? spec.stream == 1 : config.stream;
  body["stream"] = stream;
  if (stream) body["stream_options"] = {{"include_usage", true}};
  if (spec.n > 0) body["n"] = spec.n;
  if (config.ignore_eos) body["ignore_eos"] = true;
  if (config.min_tokens) body["min_tokens"] = spec.max_tokens;
  for (auto& [k, v] : config.extra_body.items()) body[k] = v;
  for (auto& [k, v] : spec.extra.items()) body[k] = v;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

class Run;

double unix_now_s() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One request in flight, across its attempts; deleted by the Run when its final attempt
// reports (or kept, reset, for a retry).
class Pending : public HttpHandler {
 public:
  Pending(Run* run, size_t spec_index, HttpRequest request, double t0, bool keep_text)
      : spec_index_(spec_index),
        request_(std::move(request)),
        run_(run),
        t0_(t0),
        attempt_t0_(t0),
        keep_text_(keep_text) {}
  double t0() const { return t0_; }
  void on_headers(int status, const HttpHeaders& headers) override;
  void on_body(std::string_view bytes) override;
  void on_complete(const std::string& error) override;
  // The last attempt's HTTP status for the retry decision: 0 when no response head arrived.
  int attempt_status() const { return attempt_status_; }
  // Forgets the last attempt (counted as retried) so the next starts clean.
  void prepare_retry();
  void start_attempt(double now) { attempt_t0_ = now; }
  // Folds the attempt's wait for its answer into the overload figures (at its end).
  void note_attempt_end(double now);
  // Ends a request waiting for its retry (the drain timed out, the client left or gave up);
  // "aborted" marks a client that left on purpose.
  void abandon(const std::string& reason);
  bool abandoned() const { return abandoned_; }

  RequestResult result_;
  std::string text_;  // generated text, kept for multi-turn history
  size_t spec_index_;
  HttpRequest request_;          // resent as is by a retry (with the timeout left)
  RetryHints hints_;             // from the last attempt's headers
  double abort_at_ = INFINITY;   // monotonic time the client leaves (RequestSpec::abort_after_s)
  bool leave_when_due_ = false;  // in retry_at_ to leave, not to retry

 private:
  void on_event(const std::string& data);

  Run* run_;
  double t0_;          // monotonic first send time: latencies count from here
  double attempt_t0_;  // monotonic send time of this attempt
  double last_token_s_ = 0;
  bool keep_text_;
  bool abandoned_ = false;
  int attempt_status_ = 0;  // as received (result_.status becomes 0 for a cut-off stream)
  bool usage_seen_ = false;
  bool answered_ = false;  // this attempt got its status line (a 200 stream: its first token)
  double answer_s_ = 0;
  int chunks_ = 0;
  std::string body_;  // non-streamed body, or the head of an error body
  SseParser sse_;
  std::vector<std::string> events_;
};

class ScrapeHandler : public HttpHandler {
 public:
  void on_headers(int status, const HttpHeaders&) override { status_ = status; }
  void on_body(std::string_view bytes) override { body_.append(bytes); }
  void on_complete(const std::string& error) override {
    error_ = error;
    done_ = true;
  }
  int status_ = 0;
  bool done_ = false;
  std::string body_, error_;
};

class Run {
 public:
  Run(HttpClient& client, const RunConfig& config, const std::vector<RequestSpec>& specs)
      : client_(client), config_(config), specs_(specs), retry_rng_(config.retry_seed) {
    for (size_t i = 0; i < specs.size(); ++i) pending_.push_back(i);
    for (const auto& s : specs)
      if (s.conversation_id >= 0) {
        const size_t c = static_cast<size_t>(s.conversation_id);
        if (histories_.size() <= c) histories_.resize(c + 1), next_round_.resize(c + 1, 0);
      }
    busy_.assign(histories_.size(), false);
  }

  RunOutput run();
  void count_token(double now) {
    const auto sec = static_cast<size_t>(std::max(0.0, now - start_));
    if (out_.tokens_per_second.size() <= sec) out_.tokens_per_second.resize(sec + 1, 0);
    ++out_.tokens_per_second[sec];
  }
  void complete(Pending* p);
  double start_s() const { return start_; }

 private:
  // Schedules another attempt when the SDK would retry; false when this attempt is final.
  bool maybe_retry(Pending* p);
  void start_due_retries(double now);
  void abandon_waiting_retries(const std::string& reason);
  bool budget_left() const { return config_.num_requests == 0 || issued_ < config_.num_requests; }
  // Next spec that may go now: in order, except a conversation's round waits for the previous.
  bool take_ready(size_t* index);
  void issue(double now);
  void scrape(double now);
  void print_progress(double now, bool final);

  HttpClient& client_;
  const RunConfig& config_;
  const std::vector<RequestSpec>& specs_;
  std::deque<size_t> pending_;
  std::vector<std::vector<std::string>> histories_;
  std::vector<int> next_round_;
  std::vector<bool> busy_;
  std::unordered_map<Pending*, std::unique_ptr<Pending>> in_flight_;
  RunOutput out_;
  double start_ = 0;
  size_t issued_ = 0, next_arrival_ = 0, cycle_ = 0;
  size_t done_ = 0, errors_ = 0;
  std::unique_ptr<ScrapeHandler> scrape_;
  double next_scrape_ = 0, last_progress_ = 0;
  size_t done_at_last_progress_ = 0;
  bool metrics_failed_ = false;
  std::multimap<double, Pending*> retry_at_;  // monotonic time -> request waiting to retry
  Rng retry_rng_;                             // backoff jitter
  size_t num_retries_ = 0;
  bool aborting_ = false;      // the drain timed out: nothing is retried any more
  bool sending_over_ = false;  // draining: impatient clients retry no more
};

void Pending::on_headers(int status, const HttpHeaders& headers) {
  attempt_status_ = result_.status = status;
  if (status == 200) result_.admitted = true;
  if (status != 200 || !result_.streamed) {  // a 200 stream is answered by its first token
    answered_ = true;
    answer_s_ = monotonic_s();
  }
  if (status != 200) hints_ = parse_retry_hints(headers, unix_now_s());
  if (status == 429 || status == 503) {
    ++result_.refusals;
    bool says_when = false;
    for (const auto& [name, value] : headers)
      says_when |= name == "retry-after" || name == "retry-after-ms";
    if (!says_when) ++result_.refusals_without_retry_after;
  }
}

void Pending::note_attempt_end(double now) {
  const double waited_ms = ((answered_ ? answer_s_ : now) - attempt_t0_) * 1e3;
  result_.longest_unanswered_ms = std::max(result_.longest_unanswered_ms, waited_ms);
  if (attempt_status_ == 200) result_.admitted_wait_ms = waited_ms;
}

void Pending::prepare_retry() {
  result_.retried_statuses.push_back(attempt_status());
  ++result_.num_retries;
  result_.status = 0;
  result_.error.clear();
  result_.error_body.clear();
  result_.ttft_ms = -1;
  result_.itl_ms.clear();
  result_.output_tokens = 0;
  text_.clear();
  hints_ = {};
  attempt_status_ = 0;
  answered_ = false;
  usage_seen_ = false;
  chunks_ = 0;
  body_.clear();
  sse_ = SseParser();
  events_.clear();
}

void Pending::abandon(const std::string& reason) {
  abandoned_ = true;
  result_.status = 0;  // the last attempt's refusal was not the end: the client left
  result_.error = reason;
  result_.aborted = reason == "aborted";
  result_.e2el_ms = (monotonic_s() - t0_) * 1e3;
  run_->complete(this);  // deletes this
}

void Pending::on_body(std::string_view bytes) {
  if (result_.status != 200) {
    if (body_.size() < 2048) body_.append(bytes.substr(0, 2048 - body_.size()));
    return;
  }
  if (!result_.streamed) {
    body_.append(bytes);
    return;
  }
  sse_.feed(bytes, events_);
  for (const auto& e : events_) on_event(e);
  events_.clear();
}

void Pending::on_event(const std::string& data) {
  if (data == "[DONE]") return;
  auto j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    result_.error = "stream error";
    result_.error_body = data.substr(0, 512);
    return;
  }
  const std::string text = choice_text(j);
  if (!text.empty()) {
    const double now = monotonic_s();
    if (chunks_ == 0) {
      result_.ttft_ms = (now - t0_) * 1e3;
      if (!answered_) answered_ = true, answer_s_ = now;
    } else {
      result_.itl_ms.push_back((now - last_token_s_) * 1e3);
    }
    last_token_s_ = now;
    ++chunks_;
    run_->count_token(now);
    if (keep_text_) text_ += text;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    usage_seen_ = true;
    result_.output_tokens = u->value("completion_tokens", 0);
    if (u->contains("prompt_tokens")) result_.input_tokens = u->value("prompt_tokens", 0);
  }
}

void Pending::on_complete(const std::string& error) {
  const double now = monotonic_s();
  result_.e2el_ms = (now - t0_) * 1e3;
  result_.retry_wait_ms = (attempt_t0_ - t0_) * 1e3;
  note_attempt_end(now);
  if (!error.empty()) {
    result_.aborted = error == "timeout" && now >= abort_at_;  // our deadline, not the server
    result_.error = result_.aborted ? "aborted" : error;
    if (result_.status == 200) result_.status = 0;  // a cut-off stream is not a success
  } else if (result_.status != 200) {
    result_.error = "http " + std::to_string(result_.status);
    result_.error_body = body_;
  } else if (result_.streamed) {
    if (!usage_seen_) result_.output_tokens = chunks_;
  } else {
    auto j = nlohmann::json::parse(body_, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      result_.error = "bad json";
      result_.error_body = body_.substr(0, 512);
    } else {
      const std::string text = choice_text(j);
      if (keep_text_) text_ = text;
      run_->count_token(now);
      result_.output_tokens = static_cast<int>((text.size() + 3) / 4);
      if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
        result_.output_tokens = u->value("completion_tokens", result_.output_tokens);
        if (u->contains("prompt_tokens")) result_.input_tokens = u->value("prompt_tokens", 0);
      }
    }
  }
  run_->complete(this);  // deletes this (unless retried): must stay the last statement
}

bool Run::take_ready(size_t* index) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    const RequestSpec& s = specs_[*it];
    if (s.conversation_id >= 0) {
      const auto c = static_cast<size_t>(s.conversation_id);
      if (busy_[c] || next_round_[c] != s.round) continue;
    }
    *index = *it;
    pending_.erase(it);
    return true;
  }
  // Bounded by time only: cycle through independent specs again.
  if (pending_.empty() && config_.num_requests == 0 && !specs_.empty() &&
      specs_[0].conversation_id < 0) {
    ++cycle_;
    for (size_t i = 1; i < specs_.size(); ++i) pending_.push_back(i);
    *index = 0;
    return true;
  }
  return false;
}

void Run::issue(double now) {
  size_t index = 0;
  if (!take_ready(&index)) return;
  const RequestSpec& spec = specs_[index];
  static const std::vector<std::string> kNoHistory;
  const bool multiturn = spec.conversation_id >= 0;
  const auto conv = static_cast<size_t>(std::max(0, spec.conversation_id));
  if (multiturn) busy_[conv] = true;
  HttpRequest req;
  req.method = "POST";
  req.path = config_.path_prefix + config_.endpoint;
  req.body = build_request_body(config_, spec, multiturn ? histories_[conv] : kNoHistory);
  req.timeout_s = config_.request_timeout_s;
  if (spec.abort_after_s >= 0) req.timeout_s = std::min(req.timeout_s, spec.abort_after_s);
  auto p = std::make_unique<Pending>(this, index, req, monotonic_s(), multiturn);
  if (spec.abort_after_s >= 0) p->abort_at_ = p->t0() + spec.abort_after_s;
  p->result_.index = issued_;
  p->result_.start_s = now - start_;
  p->result_.streamed = spec.stream >= 0 ? spec.stream == 1 : config_.stream;
  p->result_.impatient = spec.impatient;
  p->result_.warmup = now - start_ < config_.warmup_s;
  p->result_.input_tokens = spec.input_tokens;
  ++issued_;
  Pending* raw = p.get();
  in_flight_.emplace(raw, std::move(p));
  out_.peak_in_flight = std::max(out_.peak_in_flight, in_flight_.size());
  client_.start(std::move(req), raw);
}

bool Run::maybe_retry(Pending* p) {
  const int status = p->attempt_status();
  if (aborting_ || p->abandoned() || p->result_.aborted) return false;
  // A 200 whose stream then broke is final, as in the SDK (the call had already returned).
  if (status == 200) return false;
  const double now = monotonic_s();
  double delay = 0;
  if (p->result_.impatient) {  // headers ignored; bounded by the client's patience only
    // ... and by the run: once sending stops they stop too, so the drain waits only for what
    // the server admitted (and the SDK clients' few retries).
    if (sending_over_ || !is_retryable(status, RetryHints{})) return false;
    delay = config_.impatient_retry_delay_s;
    if (now + delay - p->t0() >= config_.request_timeout_s) return false;
  } else {
    if (p->result_.num_retries >= config_.max_retries || !is_retryable(status, p->hints_))
      return false;
    delay = retry_delay_s(p->hints_, p->result_.num_retries, retry_rng_.uniform01());
  }
  if (now + delay >= p->abort_at_) {  // the client leaves while it would wait: at abort_at_
    p->leave_when_due_ = true;
    retry_at_.emplace(p->abort_at_, p);
    return true;
  }
  p->prepare_retry();
  retry_at_.emplace(now + delay, p);
  ++num_retries_;
  return true;
}

void Run::start_due_retries(double now) {
  while (!retry_at_.empty() && retry_at_.begin()->first <= now) {
    Pending* p = retry_at_.begin()->second;
    retry_at_.erase(retry_at_.begin());
    if (p->leave_when_due_) {
      p->abandon("aborted");
      continue;
    }
    // The attempt gets the timeout, cut to when the client leaves or its patience ends.
    double limit = std::min(config_.request_timeout_s, p->abort_at_ - now);
    if (p->result_.impatient) limit = std::min(limit, p->t0() + config_.request_timeout_s - now);
    if (limit <= 0) {
      p->abandon(now >= p->abort_at_ ? "aborted" : "timeout");
      continue;
    }
    p->request_.timeout_s = limit;
    p->start_attempt(now);
    client_.start(p->request_, p);
  }
}

void Run::abandon_waiting_retries(const std::string& reason) {
  auto waiting = std::move(retry_at_);
  retry_at_.clear();
  for (auto& [t, p] : waiting) p->abandon(reason);
}

void Run::complete(Pending* p) {
  if (maybe_retry(p)) return;
  auto owned = std::move(in_flight_.at(p));
  in_flight_.erase(p);
  const RequestSpec& spec = specs_[p->spec_index_];
  if (spec.conversation_id >= 0) {
    const auto c = static_cast<size_t>(spec.conversation_id);
    busy_[c] = false;
    next_round_[c] = spec.round + 1;
    histories_[c].push_back(spec.prompt);
    histories_[c].push_back(p->result_.ok() ? p->text_ : std::string());
  }
  ++done_;
  if (!p->result_.ok()) ++errors_;
  out_.results.push_back(std::move(p->result_));
}

void Run::scrape(double now) {
  if (!config_.scrape_metrics || metrics_failed_) return;
  if (scrape_ && scrape_->done_) {
    if (scrape_->status_ == 200 && scrape_->error_.empty()) {
      out_.metrics_available = true;
      out_.server.push_back(
          snapshot_from_samples(parse_prometheus_text(scrape_->body_), now - start_));
    } else if (!out_.metrics_available) {
      metrics_failed_ = true;  // no /metrics on this target: skip quietly from now on
    }
    scrape_.reset();
  }
  if (scrape_ || now < next_scrape_) return;
  next_scrape_ = now + config_.scrape_interval_s;
  scrape_ = std::make_unique<ScrapeHandler>();
  HttpRequest req;
  req.path = config_.path_prefix + "/metrics";
  req.timeout_s = 5;
  client_.start(std::move(req), scrape_.get());
}

void Run::print_progress(double now, bool final) {
  if (!config_.progress || (!final && now - last_progress_ < 1.0)) return;
  const double dt = std::max(1e-3, now - last_progress_);
  const double rate = static_cast<double>(done_ - done_at_last_progress_) / dt;
  last_progress_ = now;
  done_at_last_progress_ = done_;
  const char* end = final ? "\n" : (isatty(2) ? "\r" : "\n");
  std::fprintf(stderr, "[bench] %6.1fs  done %zu", now - start_, done_);
  if (config_.num_requests) std::fprintf(stderr, "/%zu", config_.num_requests);
  std::fprintf(stderr, "  errors %zu  retries %zu  %.1f req/s  in flight %zu   %s", errors_,
               num_retries_, rate, in_flight_.size(), end);
}

RunOutput Run::run() {
  start_ = monotonic_s();
  last_progress_ = start_;
  double drain_deadline = 0;
  for (;;) {
    double now = monotonic_s();
    const double t = now - start_;
    const bool time_up = config_.duration_s > 0 && t >= config_.duration_s;
    bool sending = !time_up && budget_left();
    if (sending && !config_.closed_loop && next_arrival_ >= config_.arrivals.size())
      sending = false;
    if (sending && pending_.empty() && in_flight_.empty() && specs_.size() &&
        specs_[0].conversation_id >= 0)
      sending = false;  // every conversation finished
    if (sending) {
      const size_t cap =
          config_.concurrency > 0 ? static_cast<size_t>(config_.concurrency) : SIZE_MAX;
      if (config_.closed_loop) {
        while (in_flight_.size() < cap && budget_left()) {
          const size_t before = issued_;
          issue(now);
          if (issued_ == before) break;  // only waiting conversation rounds left
        }
      } else {
        while (next_arrival_ < config_.arrivals.size() && config_.arrivals[next_arrival_] <= t &&
               in_flight_.size() < cap && budget_left()) {
          const size_t before = issued_;
          issue(now);
          if (issued_ == before) break;
          ++next_arrival_;
        }
      }
    } else {
      if (drain_deadline == 0) drain_deadline = now + config_.drain_timeout_s;
      sending_over_ = time_up;  // the run's --duration ended (not a request budget)
      if (in_flight_.empty()) break;
      if (now > drain_deadline) {
        out_.drain_timed_out = true;
        aborting_ = true;
        client_.abort_all("aborted: drain timeout");
        abandon_waiting_retries("aborted: drain timeout");
        break;
      }
    }
    start_due_retries(now);
    scrape(now);
    print_progress(now, false);
    // Sleep until the next arrival, scrape or progress tick, at most 50 ms.
    double wait = 0.05;
    // An overdue arrival blocked by the cap or a busy conversation waits for a completion,
    // which wakes epoll anyway.
    if (sending && !config_.closed_loop && next_arrival_ < config_.arrivals.size()) {
      const double until = config_.arrivals[next_arrival_] - (monotonic_s() - start_);
      if (until > 0) wait = std::min(wait, until);
    }
    if (!retry_at_.empty()) wait = std::min(wait, retry_at_.begin()->first - monotonic_s());
    client_.poll(static_cast<int>(std::ceil(std::max(0.0, wait) * 1e3)));
  }
  // Let the last scrape finish so the chart shows the server after the load.
  if (scrape_) {
    const double until = monotonic_s() + 5;
    while (!scrape_->done_ && monotonic_s() < until) client_.poll(20);
    scrape(monotonic_s());
  }
  if (scrape_ && !scrape_->done_) client_.abort_all("aborted: end of run");
  const double end = monotonic_s();
  print_progress(end, true);
  out_.wall_s = end - start_;
  double last_finish = 0;
  bool any = false;
  for (const auto& r : out_.results)
    if (!r.warmup) {
      any = true;
      last_finish = std::max(last_finish, r.start_s + r.e2el_ms / 1e3);
    }
  out_.measured_duration_s = any ? std::max(1e-6, last_finish - config_.warmup_s) : 0;
  out_.connections_opened = client_.num_connections_opened();
  return std::move(out_);
}

}  // namespace

RunOutput run_benchmark(HttpClient& client, const RunConfig& config,
                        const std::vector<RequestSpec>& specs) {
  Run run(client, config, specs);
  return run.run();
}

}  // namespace kvw::loadgen
