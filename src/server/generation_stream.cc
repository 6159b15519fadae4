#include "server/generation_stream.h"

#include "server/routes.h"
#include "tokenizer/utf8.h"

namespace kvw::server {

using nlohmann::json;

json LogprobBuilder::build(const std::vector<TokenInfo>& tokens, size_t& text_offset) const {
  auto piece = [&](int32_t id) { return tok_.token_bytes(id); };
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back((int)c);
    return b;
  };
  if (chat_) {
    json content = json::array();
    for (const TokenInfo& t : tokens) {
      const std::string p = piece(t.token_id);
      json top = json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string ap = piece(alt.token_id);
        top.push_back(
            {{"token", to_valid_utf8(ap)}, {"logprob", alt.logprob}, {"bytes", bytes(ap)}});
      }
      content.push_back({{"token", to_valid_utf8(p)},
                         {"logprob", t.logprob},
                         {"bytes", bytes(p)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const TokenInfo& t : tokens) {
    const std::string p = to_valid_utf8(piece(t.token_id));
    toks.push_back(p);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[to_valid_utf8(piece(alt.token_id))] = alt.logprob;
    tops.push_back(std::move(top));
    offs.push_back(text_offset);
    text_offset += p.size();
  }
  return {{"tokens", std::move(toks)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offs)}};
}

GenerationStream::GenerationStream(ServerState& st, bool chat, const GenParams& params,
                                   std::string id, int64_t created, int64_t prompt_tokens,
                                   std::vector<std::unique_ptr<ChoiceRunner>> runners)
    : st_(st),
      chat_(chat),
      params_(params),
      id_(std::move(id)),
      created_(created),
      prompt_tokens_(prompt_tokens),
      runners_(std::move(runners)),
      whole_(runners_.size()),
      ended_(runners_.size(), false),
      text_offset_(runners_.size(), 0),
      logprobs_(st.tokenizer(), chat) {
  if (params_.stream) st_.counters.num_active_streams.fetch_add(1);
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

void GenerationStream::emit(size_t i, ChoiceDelta& d, std::string& out) {
  ChoiceRunner& r = *runners_[i];
  if (!d.text.empty() || !d.tokens.empty()) {
    json c = {{"index", i}};
    if (chat_) {
      c["delta"] = {{"content", d.text}};
    } else {
      c["text"] = d.text;
    }
    c["logprobs"] = params_.logprobs >= 0 ? logprobs_.build(d.tokens, text_offset_[i]) : json();
    c["finish_reason"] = nullptr;
    write_chunk(out, std::move(c));
  }
  if (!d.finished) return;
  ended_[i] = true;
  if (!r.error().empty()) {
    write_event(out, choice_error(st_, r).to_json());
    return;
  }
  json c = {{"index", i}};
  if (chat_) {
    c["delta"] = json::object();
  } else {
    c["text"] = "";
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = r.finish_reason();
  write_chunk(out, std::move(c));
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
    emit(i, d, out.data);
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
  // The choices' bookkeeping (metrics, latency window, admission) happens before the last bytes
  // go out, so a client that reads the answer and then scrapes /metrics sees this request.
  runners_.clear();
}

void GenerationStream::poll_whole(http::StreamOutput& out) {
  bool open = false;
  for (size_t i = 0; i < runners_.size(); ++i) {
    runners_[i]->poll(whole_[i]);
    open = open || !runners_[i]->finished();
  }
  if (open) return;
  out.head = true;
  out.chunked = false;
  out.end = true;
  out.content_type = kJsonType;
  json choices = json::array();
  int64_t completion = 0;
  for (size_t i = 0; i < runners_.size(); ++i) {
    ChoiceRunner& r = *runners_[i];
    ChoiceDelta& d = whole_[i];
    if (!r.error().empty()) {
      const ApiError e = choice_error(st_, r);
      st_.refused(e.reason);
      out.status = e.status;
      if (e.retry_after_s > 0)
        out.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
      out.data = e.to_json();
      finish();
      return;
    }
    completion += r.num_tokens();
    json c = {{"index", i}};
    if (chat_) {
      c["message"] = {{"role", "assistant"}, {"content", d.text}};
    } else {
      c["text"] = d.text;
    }
    size_t text_offset = 0;
    c["logprobs"] = params_.logprobs >= 0 ? logprobs_.build(d.tokens, text_offset) : json();
    c["finish_reason"] = r.finish_reason();
    choices.push_back(std::move(c));
  }
  out.status = 200;
  out.data = dump_json({{"id", id_},
                        {"object", chat_ ? "chat.completion" : "text_completion"},
                        {"created", created_},
                        {"model", st_.model_name},
                        {"choices", std::move(choices)},
                        {"usage",
                         {{"prompt_tokens", prompt_tokens_},
                          {"completion_tokens", completion},
                          {"total_tokens", prompt_tokens_ + completion}}}});
  finish();
}

}  // namespace kvw::server
