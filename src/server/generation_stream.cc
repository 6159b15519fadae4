#include "server/generation_stream.h"

#include <algorithm>

#include "server/completion_options.h"
#include "server/routes.h"
#include "server/tool_calling.h"
#include "tokenizer/utf8.h"
#include "tools/tool_parser.h"

namespace kvw::server {

using nlohmann::json;

namespace {

// Why 256: a token with top_logprobs 20 is ~0.6-1 KiB of JSON, so one part stays in the tens
// to hundreds of KiB however long the answer.
constexpr size_t kTokensPerPart = 256;

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

// A JSON array's text without its brackets ("" for an empty array).
std::string array_items(const json& a) {
  std::string s = dump_json(a);
  return s.size() <= 2 ? std::string() : s.substr(1, s.size() - 2);
}

}  // namespace

const char* LogprobBuilder::column_name(int col) const {
  static constexpr const char* kCompletion[] = {"tokens", "token_logprobs", "top_logprobs",
                                                "text_offset"};
  return chat_ ? "content" : kCompletion[col];
}

json LogprobBuilder::column(std::span<const TokenInfo> tokens, int col, size_t& text_offset) const {
  auto piece = [&](int32_t id) { return tok_.token_bytes(id); };
  json out = json::array();
  for (const TokenInfo& t : tokens) {
    if (chat_) {
      const std::string p = piece(t.token_id);
      json top = json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string ap = piece(alt.token_id);
        top.push_back(
            {{"token", to_valid_utf8(ap)}, {"logprob", alt.logprob}, {"bytes", bytes_of(ap)}});
      }
      out.push_back({{"token", to_valid_utf8(p)},
                     {"logprob", t.logprob},
                     {"bytes", bytes_of(p)},
                     {"top_logprobs", std::move(top)}});
      continue;
    }
    switch (col) {
      case 0:
        out.push_back(to_valid_utf8(piece(t.token_id)));
        break;
      case 1:
        out.push_back(t.has_logprob ? json(t.logprob) : json(nullptr));
        break;
      case 2: {
        if (!t.has_logprob) {  // the first echoed prompt token: nothing before it
          out.push_back(nullptr);
          break;
        }
        json top = json::object();
        for (const TokenLogprob& alt : t.top) top[to_valid_utf8(piece(alt.token_id))] = alt.logprob;
        out.push_back(std::move(top));
        break;
      }
      default:
        out.push_back(text_offset);
        text_offset += to_valid_utf8(piece(t.token_id)).size();
        break;
    }
  }
  return out;
}

json LogprobBuilder::build(std::span<const TokenInfo> tokens, size_t& text_offset) const {
  json j = json::object();
  for (int col = 0; col < num_columns(); ++col) {
    size_t unused = 0;
    const bool offsets = !chat_ && col == 3;
    j[column_name(col)] = column(tokens, col, offsets ? text_offset : unused);
  }
  return j;
}

GenerationStream::GenerationStream(ServerState& st, bool chat, const GenParams& params,
                                   std::string id, int64_t created, int64_t prompt_tokens,
                                   std::vector<std::unique_ptr<ChoiceRunner>> runners,
                                   std::vector<EchoPrompt> prompts)
    : st_(st),
      chat_(chat),
      params_(params),
      id_(std::move(id)),
      created_(created),
      prompt_tokens_(prompt_tokens),
      runners_(std::move(runners)),
      prompts_(std::move(prompts)),
      echo_pending_(runners_.size(), !prompts_.empty()),
      whole_(runners_.size()),
      ended_(runners_.size(), false),
      text_offset_(runners_.size(), 0),
      logprobs_(st.tokenizer(), chat) {
  if (params_.stream) st_.counters.num_active_streams.fetch_add(1);
  if (chat_ && params_.stream && params_.harmony_channels) {
    harmony_filters_.assign(runners_.size(), tools::HarmonyStreamFilter(params_.parallel_tool_calls,
                                                                        /*stream_arguments=*/true));
  } else if (chat_ && params_.stream && params_.tool_format) {
    tool_filters_.assign(runners_.size(), tools::ToolStreamFilter(*params_.tool_format,
                                                                  params_.parallel_tool_calls));
  }
}

GenerationStream::~GenerationStream() {
  runners_.clear();  // cancels what is unfinished (client gone) before the stream count drops
  if (params_.stream) st_.counters.num_active_streams.fetch_sub(1);
}

void GenerationStream::start(std::function<void()> wake) {
  for (auto& r : runners_) r->set_notify(wake);
}

json GenerationStream::envelope() const {
  json j = {{"id", id_},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", st_.model_name}};
  return j;
}

void GenerationStream::write_event(std::string& out, const std::string& payload) {
  out += "data: ";
  out += payload;
  out += "\n\n";
}

void GenerationStream::write_chunk(std::string& out, json choice) {
  json j = envelope();
  j["choices"] = json::array({std::move(choice)});
  if (params_.include_usage) j["usage"] = nullptr;
  write_event(out, dump_json(j));
}

const EchoPrompt& GenerationStream::prompt_of(size_t runner) const {
  return prompts_[runner / (size_t)num_candidates(params_)];
}

// The first candidate of each prompt alone asks the engine for the prompt's logprobs (they are
// the same for every candidate); its list is taken once and shared.
const std::vector<TokenInfo>& GenerationStream::prompt_logprobs_of(size_t runner) {
  const size_t k = runner / (size_t)num_candidates(params_);
  if (prompt_sent_.empty()) prompt_sent_.resize(prompts_.size());
  if (!prompt_sent_[k]) {
    prompt_sent_[k] = std::make_shared<const std::vector<TokenInfo>>(
        runners_[k * (size_t)num_candidates(params_)]->take_prompt_logprobs());
  }
  return *prompt_sent_[k];
}

bool GenerationStream::echo_first(size_t i, ChoiceDelta& d, json& prompt_logprobs) {
  ChoiceRunner& r = *runners_[i];
  const size_t leader = i - i % (size_t)num_candidates(params_);
  if (!r.prompt_done() || !runners_[leader]->prompt_done()) return false;
  echo_pending_[i] = false;
  if (!r.error().empty()) return true;
  const EchoPrompt& p = prompt_of(i);
  const std::vector<TokenInfo>& sent = prompt_logprobs_of(i);
  if (params_.prompt_logprobs >= 0) {
    prompt_logprobs = vllm_prompt_logprobs(st_.tokenizer(), sent, params_.prompt_logprobs);
  }
  if (!params_.echo) return true;
  d.text = p.text + d.text;
  if (params_.logprobs >= 0) {
    std::vector<TokenInfo> t = echo_tokens(p, sent, params_.logprobs);
    t.insert(t.end(), std::make_move_iterator(d.tokens.begin()),
             std::make_move_iterator(d.tokens.end()));
    d.tokens = std::move(t);
  }
  return true;
}

void GenerationStream::emit(size_t i, ChoiceDelta& d, std::string& out, json prompt_logprobs) {
  ChoiceRunner& r = *runners_[i];
  std::vector<tools::ToolCall> calls;             // whole calls: they follow this chunk's content
  std::vector<tools::ToolCallDelta> call_deltas;  // harmony: pieces of calls, as written
  size_t first_call = 0;
  if (!tool_filters_.empty()) {
    d.text = tool_filters_[i].push(d.text);
    calls = tool_filters_[i].take_calls(&first_call);
  }
  std::string reasoning;
  if (!harmony_filters_.empty()) {
    tools::HarmonyDelta h = harmony_filters_[i].push(d.text);
    d.text = std::move(h.content);
    reasoning = std::move(h.reasoning);
    calls = harmony_filters_[i].take_calls(&first_call);
    call_deltas = harmony_filters_[i].take_call_deltas();
    if (!params_.tool_format) calls.clear(), call_deltas.clear();  // no tools: no calls
  }
  if (!d.text.empty() || !reasoning.empty() || !d.tokens.empty() || !prompt_logprobs.is_null()) {
    json c = {{"index", i}};
    if (!prompt_logprobs.is_null()) c["prompt_logprobs"] = std::move(prompt_logprobs);
    if (chat_) {
      c["delta"] = json::object();
      if (!reasoning.empty()) c["delta"]["reasoning_content"] = std::move(reasoning);
      if (!d.text.empty() || !c["delta"].contains("reasoning_content")) {
        c["delta"]["content"] = d.text;
      }
    } else {
      c["text"] = d.text;
    }
    c["logprobs"] = params_.logprobs >= 0 ? logprobs_.build(d.tokens, text_offset_[i]) : json();
    c["finish_reason"] = nullptr;
    write_chunk(out, std::move(c));
  }
  emit_tool_calls(i, calls, first_call, out);
  emit_call_deltas(i, call_deltas, out);
  if (!d.finished) return;
  ended_[i] = true;
  if (!r.error().empty()) {
    // Mid-stream the status is already 200: the choice's typed error goes out as an event and
    // is counted by reason like any refusal.
    const ApiError e = choice_error(st_, r);
    st_.refused(e.reason);
    write_event(out, e.to_json());
    return;
  }
  std::string reason = r.finish_reason();
  if (!tool_filters_.empty()) reason = emit_tool_end(i, reason, out);
  if (!harmony_filters_.empty()) reason = emit_harmony_end(i, reason, out);
  json c = {{"index", i}};
  if (chat_) {
    c["delta"] = json::object();
  } else {
    c["text"] = "";
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = reason;
  write_chunk(out, std::move(c));
}

void GenerationStream::emit_tool_calls(size_t i, const std::vector<tools::ToolCall>& calls,
                                       size_t first_index, std::string& out) {
  for (json& item : tool_call_deltas(calls, first_index)) {
    write_chunk(out, {{"index", i},
                      {"delta", {{"tool_calls", json::array({std::move(item)})}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }
}

void GenerationStream::emit_call_deltas(size_t i, const std::vector<tools::ToolCallDelta>& deltas,
                                        std::string& out) {
  for (const tools::ToolCallDelta& d : deltas) {
    write_chunk(out, {{"index", i},
                      {"delta", {{"tool_calls", json::array({tool_call_delta_json(d)})}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }
}

std::string GenerationStream::emit_tool_end(size_t i, const std::string& finish_reason,
                                            std::string& out) {
  tools::ToolStreamFilter& f = tool_filters_[i];
  size_t first_index = 0;
  tools::ParsedToolOutput end = f.finish(&first_index);
  if (!end.content.empty()) {
    write_chunk(out, {{"index", i},
                      {"delta", {{"content", end.content}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }
  emit_tool_calls(i, end.calls, first_index, out);
  // An output cut at max_tokens stays "length": its last call may be missing.
  return f.num_calls() == 0 || finish_reason == "length" ? finish_reason : "tool_calls";
}

std::string GenerationStream::emit_harmony_end(size_t i, const std::string& finish_reason,
                                               std::string& out) {
  tools::HarmonyStreamFilter& f = harmony_filters_[i];
  size_t first_index = 0;
  tools::ParsedToolOutput end = f.finish(&first_index);
  json delta = json::object();
  if (!end.reasoning.empty()) delta["reasoning_content"] = end.reasoning;
  if (!end.content.empty()) delta["content"] = end.content;
  if (!delta.empty()) {
    write_chunk(out, {{"index", i},
                      {"delta", std::move(delta)},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }
  if (!params_.tool_format) return finish_reason;  // no tools offered: no calls to return
  // The calls not sent yet: the rest of one cut off at the end (each other went out piece by
  // piece as it was written), or one whose body was not JSON but parsed after all.
  emit_call_deltas(i, f.take_call_deltas(), out);
  emit_tool_calls(i, end.calls, first_index, out);
  // An output cut at max_tokens stays "length": its last call may be missing.
  return f.num_calls() == 0 || finish_reason == "length" ? finish_reason : "tool_calls";
}

// A harmony answer's message: the analysis channel as reasoning_content, the final channel as
// content, and (with tools) the calls.
json GenerationStream::harmony_message(const std::string& text, std::string& finish_reason) const {
  tools::ParsedToolOutput p = tools::parse_harmony(text);
  if (!params_.tool_format) p.calls.clear();
  limit_calls(p.calls, params_.parallel_tool_calls);
  json m = {{"role", "assistant"},
            {"content", p.content.empty() && !p.calls.empty() ? json() : json(p.content)}};
  if (!p.reasoning.empty()) m["reasoning_content"] = p.reasoning;
  if (!p.calls.empty()) {
    m["tool_calls"] = tool_calls_json(p.calls);
    if (finish_reason != "length") finish_reason = "tool_calls";
  }
  return m;
}

// The chat answer's message; with tools, the calls parsed out of `text` (content null when the
// answer is only calls) and finish_reason "tool_calls".
json GenerationStream::chat_message(const std::string& text, std::string& finish_reason) const {
  if (params_.harmony_channels) return harmony_message(text, finish_reason);
  if (!params_.tool_format) return {{"role", "assistant"}, {"content", text}};
  tools::ParsedToolOutput p = tools::parse_tool_calls(*params_.tool_format, text);
  limit_calls(p.calls, params_.parallel_tool_calls);
  if (p.calls.empty()) return {{"role", "assistant"}, {"content", text}};
  if (finish_reason != "length") finish_reason = "tool_calls";  // cut short: maybe a call missing
  json m = {{"role", "assistant"},
            {"content", p.content.empty() ? json() : json(p.content)},
            {"tool_calls", tool_calls_json(p.calls)}};
  return m;
}

void GenerationStream::poll(http::StreamOutput& out) {
  if (done_) return;
  if (params_.stream) return poll_streamed(out);
  poll_whole(out);
}

void GenerationStream::poll_streamed(http::StreamOutput& out) {
  if (!started_) {
    // The status line waits for the first event, so a request that fails before producing
    // anything (context overflow, queue full in the engine, shutdown) gets the same status as
    // a non-streamed one; once 200 is sent, a failure is an SSE error event with that body.
    bool any = false, all_done = true, any_error = false;
    for (size_t i = 0; i < runners_.size(); ++i) {
      runners_[i]->poll(whole_[i]);
      any = any || runners_[i]->num_tokens() > 0;
      all_done = all_done && runners_[i]->finished();
      any_error = any_error || !runners_[i]->error().empty();
    }
    if (!any && !all_done) return;
    if (!any && any_error) return poll_whole(out);
    out.head = true;
    out.status = 200;
    out.content_type = "text/event-stream";
    out.chunked = true;
    started_ = true;  // the status line and the role chunks go out once
    if (chat_) {
      for (size_t i = 0; i < runners_.size(); ++i) {
        json c = {{"index", i},
                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                  {"logprobs", nullptr},
                  {"finish_reason", nullptr}};
        write_chunk(out.data, std::move(c));
      }
    }
  }
  for (size_t i = 0; i < runners_.size(); ++i) {
    if (ended_[i]) continue;
    ChoiceDelta d = std::move(whole_[i]);  // what arrived before the status line, if anything
    whole_[i] = ChoiceDelta{};
    runners_[i]->poll(d);
    json prompt_logprobs;
    if (echo_pending_[i] && !echo_first(i, d, prompt_logprobs)) {
      whole_[i] = std::move(d);  // the prompt goes first (vLLM: in the first chunk)
      continue;
    }
    emit(i, d, out.data, std::move(prompt_logprobs));
  }
  for (bool e : ended_) {
    if (!e) return;
  }
  if (params_.include_usage) {
    int64_t completion = 0;
    for (const auto& r : runners_) completion += r->num_tokens();
    json j = envelope();
    j["choices"] = json::array();
    j["usage"] = {{"prompt_tokens", prompt_tokens_},
                  {"completion_tokens", completion},
                  {"total_tokens", prompt_tokens_ + completion}};
    write_event(out.data, dump_json(j));
  }
  write_event(out.data, "[DONE]");
  out.end = true;
  finish();
}

void GenerationStream::finish() {
  done_ = true;
  release_runners();
}

void GenerationStream::release_runners() {
  // The choices' bookkeeping (metrics, latency window, admission) happens before the last bytes
  // go out, so a client that reads the answer and then scrapes /metrics sees this request.
  runners_.clear();
}

void GenerationStream::poll_whole(http::StreamOutput& out) {
  if (!whole_started_ && !start_whole(out)) return;
  if (done_) return;  // the answer was an error
  write_part(out.data);
  if (part_.choice < order_.size()) {
    out.more = true;
    return;
  }
  out.data += "],\"usage\":";
  out.data += dump_json({{"prompt_tokens", prompt_tokens_},
                         {"completion_tokens", completion_tokens_},
                         {"total_tokens", prompt_tokens_ + completion_tokens_}});
  out.data += "}";
  out.end = true;
  done_ = true;
}

// Once every choice has finished: the error of the first failed one (the whole answer), or the
// status line and the JSON up to "choices":[.
bool GenerationStream::start_whole(http::StreamOutput& out) {
  bool open = false;
  for (size_t i = 0; i < runners_.size(); ++i) {
    runners_[i]->poll(whole_[i]);
    open = open || !runners_[i]->finished();
  }
  if (open) return false;
  whole_started_ = true;
  out.head = true;
  out.content_type = kJsonType;
  for (const auto& r : runners_) {
    if (r->error().empty()) continue;
    const ApiError e = choice_error(st_, *r);
    st_.refused(e.reason);
    out.status = e.status;
    out.chunked = false;
    out.end = true;
    if (e.retry_after_s > 0)
      out.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
    out.data = e.to_json();
    finish();
    return true;
  }
  for (const auto& r : runners_) {
    completion_tokens_ += r->num_tokens();  // every best_of candidate counts
    finish_reasons_.push_back(r->finish_reason());
  }
  prepare_whole();
  release_runners();
  out.status = 200;
  out.chunked = true;  // its length is known only once the last part is made
  std::string head = dump_json({{"id", id_},
                                {"object", chat_ ? "chat.completion" : "text_completion"},
                                {"created", created_},
                                {"model", st_.model_name}});
  head.pop_back();  // the closing brace: "choices" and "usage" follow
  out.data = head + ",\"choices\":[";
  return true;
}

void GenerationStream::prepare_whole() {
  const size_t num_runners = runners_.size();
  prompt_lp_.assign(num_runners, json());
  for (size_t r = 0; r < num_runners && !prompts_.empty(); ++r) {
    const EchoPrompt& p = prompt_of(r);
    const std::vector<TokenInfo>& sent = prompt_logprobs_of(r);
    if (params_.prompt_logprobs >= 0) {
      prompt_lp_[r] = vllm_prompt_logprobs(st_.tokenizer(), sent, params_.prompt_logprobs);
    }
    if (!params_.echo) continue;
    whole_[r].text = p.text + whole_[r].text;
    if (params_.logprobs < 0) continue;
    std::vector<TokenInfo> t = echo_tokens(p, sent, params_.logprobs);
    t.insert(t.end(), std::make_move_iterator(whole_[r].tokens.begin()),
             std::make_move_iterator(whole_[r].tokens.end()));
    whole_[r].tokens = std::move(t);
  }
  // best_of: per prompt, the n candidates with the highest cumulative logprob, best first
  // (ties: the earlier candidate).
  const size_t cand = chat_ ? 1 : (size_t)num_candidates(params_);
  const size_t keep = params_.best_of > 0 ? (size_t)params_.n : cand;
  for (size_t k = 0; k * cand < num_runners; ++k) {
    std::vector<size_t> group;
    for (size_t r = k * cand; r < (k + 1) * cand && r < num_runners; ++r) group.push_back(r);
    if (params_.best_of > 0) {
      std::stable_sort(group.begin(), group.end(), [&](size_t a, size_t b) {
        return runners_[a]->cumulative_logprob() > runners_[b]->cumulative_logprob();
      });
    }
    group.resize(std::min(group.size(), keep));
    order_.insert(order_.end(), group.begin(), group.end());
  }
}

// One part of the choices array: a choice's opening, or up to kTokensPerPart tokens of one of
// its logprobs columns (and that column's or choice's closing).
void GenerationStream::write_part(std::string& out) {
  const size_t i = part_.choice;
  const size_t r = order_[i];
  ChoiceDelta& d = whole_[r];
  auto next_choice = [&] {
    whole_[r] = ChoiceDelta{};  // written: its memory goes now
    prompt_lp_[r] = json();
    part_ = WholePart{.choice = i + 1};
  };
  if (part_.column < 0) {
    if (i > 0) out += ',';
    json c = {{"index", i}, {"finish_reason", finish_reasons_[r]}};
    if (params_.prompt_logprobs >= 0) c["prompt_logprobs"] = std::move(prompt_lp_[r]);
    if (chat_) {
      c["message"] = chat_message(d.text, finish_reasons_[i]);
      c["finish_reason"] = finish_reasons_[i];
    } else {
      c["text"] = d.text;
    }
    std::string opening = dump_json(c);
    opening.pop_back();
    out += opening;
    out += ",\"logprobs\":";
    if (params_.logprobs < 0) {
      out += "null}";
      return next_choice();
    }
    out += std::string("{\"") + logprobs_.column_name(0) + "\":[";
    part_.column = 0;
    return;
  }
  const size_t end = std::min(d.tokens.size(), part_.token + kTokensPerPart);
  const std::span<const TokenInfo> slice(d.tokens.data() + part_.token, end - part_.token);
  const std::string items = array_items(logprobs_.column(slice, part_.column, part_.text_offset));
  if (!items.empty() && part_.token > 0) out += ',';
  out += items;
  part_.token = end;
  if (end < d.tokens.size()) return;
  if (part_.column + 1 < logprobs_.num_columns()) {
    ++part_.column;
    part_.token = 0;
    out += std::string("],\"") + logprobs_.column_name(part_.column) + "\":[";
    return;
  }
  out += "]}}";
  next_choice();
}

}  // namespace kvw::server
