#include "server/choice_runner.h"

namespace kvw::server {

ChoiceRunner::ChoiceRunner(ServerState& st, std::shared_ptr<TokenChannel> channel,
                           const std::vector<std::string>& stops, int32_t logprobs, bool ignore_eos,
                           double start_s)
    : st_(st),
      channel_(std::move(channel)),
      decoder_(st.tokenizer()),
      stop_(stops),
      logprobs_(logprobs),
      ignore_eos_(ignore_eos),
      start_s_(start_s) {
  st_.register_request(channel_->request_id());
}

ChoiceRunner::~ChoiceRunner() {
  if (!finished_) {
    st_.engine->cancel(channel_->request_id());
    if (st_.drain_cancelled.load()) {
      st_.counters.num_cancelled_drain.fetch_add(1);
    } else {
      st_.counters.num_cancelled_disconnect.fetch_add(1);
    }
  } else if (error_.empty()) {
    st_.counters.num_choices_finished.fetch_add(1);
    st_.latency.add(now_s(), now_s() - start_s_);
  }
  st_.counters.num_completion_tokens.fetch_add((uint64_t)num_tokens_);
  st_.unregister_request(channel_->request_id());
  st_.admission.on_complete(now_s());
}

void ChoiceRunner::poll(std::chrono::milliseconds wait, ChoiceDelta& d) {
  if (finished_) return;
  std::optional<ChannelEvent> ev = channel_->next_for(wait);
  while (ev && !finished_) {
    if (ev->kind == ChannelEvent::Kind::kToken) {
      on_token(*ev, d);
    } else {
      on_finished(*ev, d);
    }
    if (finished_) break;
    ev = channel_->next_for(std::chrono::milliseconds(0));
  }
}

void ChoiceRunner::on_token(const ChannelEvent& ev, ChoiceDelta& d) {
  ++num_tokens_;
  if (logprobs_ >= 0) d.tokens.push_back({ev.token_id, ev.logprob, ev.top_logprobs});
  // The end-of-generation token ends the choice (the engine finishes it next); it has no text.
  if (!ignore_eos_ && st_.tokenizer().is_end_of_generation(ev.token_id)) return;
  if (stop_.push(decoder_.push(ev.token_id), d.text)) {
    st_.engine->cancel(channel_->request_id());
    st_.counters.num_cancelled_stop.fetch_add(1);
    finish_reason_ = "stop";
    end(d);
  }
}

void ChoiceRunner::on_finished(const ChannelEvent& ev, ChoiceDelta& d) {
  switch (ev.reason) {
    case FinishReason::kStop:
    case FinishReason::kLength:
      if (!stop_.push(decoder_.flush(), d.text)) d.text += stop_.flush();
      finish_reason_ = stop_.matched() || ev.reason == FinishReason::kStop ? "stop" : "length";
      break;
    case FinishReason::kCancelled:
      if (st_.drain_cancelled.load()) {
        st_.counters.num_cancelled_drain.fetch_add(1);
        error_ = "request cancelled: the server is shutting down";
      } else {
        error_ = "request cancelled";
      }
      break;
    default:
      error_ = ev.error.empty() ? "request failed" : ev.error;
      break;
  }
  end(d);
}

void ChoiceRunner::end(ChoiceDelta& d) {
  finished_ = true;
  d.finished = true;
}

}  // namespace kvw::server
