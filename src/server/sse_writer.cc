#include "server/sse_writer.h"

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

SseJob::SseJob(ServerState& st, bool chat, const GenParams& params, std::string id, int64_t created,
               int64_t prompt_tokens, std::vector<std::unique_ptr<ChoiceRunner>> runners)
    : st_(st),
      chat_(chat),
      params_(params),
      id_(std::move(id)),
      created_(created),
      prompt_tokens_(prompt_tokens),
      runners_(std::move(runners)),
      ended_(runners_.size(), false),
      text_offset_(runners_.size(), 0),
      logprobs_(st.tokenizer(), chat) {
  st_.counters.num_active_streams.fetch_add(1);
}

SseJob::~SseJob() {
  runners_.clear();  // cancels what is unfinished (client gone) before the stream count drops
  st_.counters.num_active_streams.fetch_sub(1);
}

json SseJob::envelope() const {
  json j = {{"id", id_},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", st_.model_name}};
  return j;
}

bool SseJob::write_event(httplib::DataSink& sink, const std::string& payload) {
  const std::string ev = "data: " + payload + "\n\n";
  return sink.write(ev.data(), ev.size());
}

bool SseJob::write_chunk(httplib::DataSink& sink, json choice) {
  json j = envelope();
  j["choices"] = json::array({std::move(choice)});
  if (params_.include_usage) j["usage"] = nullptr;
  return write_event(sink, dump_json(j));
}

bool SseJob::emit(httplib::DataSink& sink, size_t i, ChoiceDelta& d, bool& wrote) {
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
    wrote = true;
    if (!write_chunk(sink, std::move(c))) return false;
  }
  if (!d.finished) return true;
  ended_[i] = true;
  wrote = true;
  if (!r.error().empty()) {
    return write_event(
        sink,
        ApiError(500, RefusalReason::kEngine, "", r.error()).with_type("server_error").to_json());
  }
  json c = {{"index", i}};
  if (chat_) {
    c["delta"] = json::object();
  } else {
    c["text"] = "";
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = r.finish_reason();
  return write_chunk(sink, std::move(c));
}

bool SseJob::step(httplib::DataSink& sink) {
  if (done_) return false;
  if (!started_) {
    started_ = true;
    if (!chat_) return true;
    for (size_t i = 0; i < runners_.size(); ++i) {
      json c = {{"index", i},
                {"delta", {{"role", "assistant"}, {"content", ""}}},
                {"logprobs", nullptr},
                {"finish_reason", nullptr}};
      if (!write_chunk(sink, std::move(c))) return false;
    }
    return true;
  }
  bool wrote = false;
  size_t first_open = runners_.size();
  for (size_t i = 0; i < runners_.size(); ++i) {
    if (ended_[i]) continue;
    if (first_open == runners_.size()) first_open = i;
    ChoiceDelta d;
    runners_[i]->poll(std::chrono::milliseconds(0), d);
    if (!emit(sink, i, d, wrote)) return false;
  }
  // Nothing ready: wait a little on one open choice rather than spin. 50 ms bounds how late
  // drain and disconnects are noticed on an idle stream.
  if (!wrote && first_open < runners_.size()) {
    ChoiceDelta d;
    runners_[first_open]->poll(std::chrono::milliseconds(50), d);
    if (!emit(sink, first_open, d, wrote)) return false;
  }
  for (bool e : ended_) {
    if (!e) return true;
  }
  if (params_.include_usage) {
    int64_t completion = 0;
    for (const auto& r : runners_) completion += r->num_tokens();
    json j = envelope();
    j["choices"] = json::array();
    j["usage"] = {{"prompt_tokens", prompt_tokens_},
                  {"completion_tokens", completion},
                  {"total_tokens", prompt_tokens_ + completion}};
    if (!write_event(sink, dump_json(j))) return false;
  }
  if (!write_event(sink, "[DONE]")) return false;
  done_ = true;
  sink.done();
  return true;
}

}  // namespace kvw::server
