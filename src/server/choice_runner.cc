#include "server/choice_runner.h"

#include <algorithm>
#include <exception>
#include <new>

namespace kvw::server {

ChoiceRunner::ChoiceRunner(ServerState& st, std::shared_ptr<TokenChannel> channel,
                           std::shared_ptr<const std::vector<std::string>> stops, int32_t logprobs,
                           bool ignore_eos, int32_t max_tokens, uint64_t arrival_ns,
                           uint32_t num_prompt_tokens, ChoiceOutput output)
    : st_(st),
      channel_(std::move(channel)),
      decoder_(st.tokenizer(), output.render_special, StreamDecoder::Start::kContinuation),
      stop_(std::move(stops)),
      logprobs_(logprobs),
      ignore_eos_(ignore_eos),
      max_tokens_(max_tokens),
      discard_output_(output.discard),
      min_tokens_(output.min_tokens),
      stop_token_ids_(std::move(output.stop_token_ids)) {
  timing_.arrival_ns = arrival_ns;
  timing_.num_prompt_tokens = num_prompt_tokens;
  st_.register_request(channel_->request_id());
}

ChoiceRunner::~ChoiceRunner() {
  channel_->set_notify({});  // after this no engine-thread call reaches what the wake captured
  leave_slot();
  if (timing_.finish_ns == 0) timing_.finish_ns = steady_now_ns();
  timing_.num_generation_tokens = (uint32_t)num_tokens_;
  if (!finished_) {
    timing_.reason = FinishReason::kCancelled;
    st_.engine->cancel(channel_->request_id());
    if (st_.drain_cancelled.load()) {
      st_.counters.num_cancelled_drain.fetch_add(1);
    } else {
      st_.counters.num_cancelled_disconnect.fetch_add(1);
    }
  } else if (error_.empty()) {
    st_.counters.num_choices_finished.fetch_add(1);
    st_.latency.add(now_s(), (double)(timing_.finish_ns - timing_.arrival_ns) * 1e-9);
  }
  if (st_.observer != nullptr) st_.observer->on_choice_finished(timing_);
  st_.counters.num_completion_tokens.fetch_add((uint64_t)num_tokens_);
  st_.unregister_request(channel_->request_id());
  st_.admission.on_complete(now_s());
}

void ChoiceRunner::poll(ChoiceDelta& d) {
  if (finished_) return;
  // A fault while detokenising or matching stops (an allocation failure, say) ends this choice
  // with a typed error; the connection's other choices and every other request go on.
  try {
    poll_events(d);
  } catch (const std::exception& e) {
    const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    st_.engine->cancel(channel_->request_id());
    timing_.reason = FinishReason::kError;
    error_ = std::string("internal error: ") + e.what();
    error_kind_ = oom ? ErrorKind::kOutOfMemory : ErrorKind::kInternal;
    d.text.clear();  // a part of a token's text would be a wrong answer
    end(d);
  }
}

void ChoiceRunner::poll_events(ChoiceDelta& d) {
  std::optional<ChannelEvent> ev = channel_->next_for(std::chrono::milliseconds(0));
  while (ev && !finished_) {
    if (ev->kind == ChannelEvent::Kind::kPromptLogprobs) {
      on_prompt_logprobs(*ev);
    } else if (ev->kind == ChannelEvent::Kind::kToken) {
      on_token(*ev, d);
    } else {
      on_finished(*ev, d);
    }
    if (finished_) break;
    ev = channel_->next_for(std::chrono::milliseconds(0));
  }
}

void ChoiceRunner::on_prompt_logprobs(const ChannelEvent& ev) {
  const auto k = (size_t)ev.prompt_top_k;
  for (size_t i = 0; i < ev.prompt.size(); ++i) {
    const auto top = ev.top_logprobs.begin() + (ptrdiff_t)(i * k);
    prompt_.push_back(TokenInfo{.token_id = ev.prompt[i].token_id,
                                .logprob = ev.prompt[i].logprob,
                                .top = std::vector<TokenLogprob>(top, top + (ptrdiff_t)k),
                                .rank = i < ev.prompt_ranks.size() ? ev.prompt_ranks[i] : 0});
  }
}

void ChoiceRunner::on_token(const ChannelEvent& ev, ChoiceDelta& d) {
  prompt_done_ = true;
  if (!slot_ && !finished_ && timing_.first_token_ns == 0) enter_slot();
  if (discard_output_) return;  // echo with max_tokens 0: the prompt alone is the answer
  if (st_.cfg.token_fault_hook) st_.cfg.token_fault_hook(timing_.num_prompt_tokens, num_tokens_);
  cumulative_logprob_ += ev.logprob;
  ++num_tokens_;
  timing_.token_ns.push_back(steady_now_ns());
  if (timing_.first_token_ns == 0) timing_.first_token_ns = timing_.token_ns.back();
  if (logprobs_ >= 0) d.tokens.push_back({ev.token_id, ev.logprob, ev.top_logprobs});
  // The end-of-generation token ends the choice (the engine finishes it next); it has no text.
  // Nor has a stop_token_ids token (vLLM leaves it out of the text too).
  if (!ignore_eos_ && st_.tokenizer().is_end_of_generation(ev.token_id)) return;
  if (stop_token_ids_ &&
      std::binary_search(stop_token_ids_->begin(), stop_token_ids_->end(), ev.token_id)) {
    return;
  }
  if (stop_.push(decoder_.push(ev.token_id), d.text, num_tokens_ > min_tokens_)) {
    st_.engine->cancel(channel_->request_id());
    st_.counters.num_cancelled_stop.fetch_add(1);
    finish_reason_ = "stop";
    timing_.reason = FinishReason::kStop;
    end(d);
  }
}

void ChoiceRunner::on_finished(const ChannelEvent& ev, ChoiceDelta& d) {
  prompt_done_ = true;
  timing_.reason = ev.reason;
  switch (ev.reason) {
    case FinishReason::kStop:
    case FinishReason::kLength:
      if (!stop_.push(decoder_.flush(), d.text, num_tokens_ > min_tokens_)) d.text += stop_.flush();
      finish_reason_ = stop_.matched() || ev.reason == FinishReason::kStop ? "stop" : "length";
      if (discard_output_) finish_reason_ = "length";  // max_tokens 0: nothing was asked for
      if (stop_.matched()) timing_.reason = FinishReason::kStop;
      break;
    case FinishReason::kCancelled:
      if (st_.drain_cancelled.load()) {
        st_.counters.num_cancelled_drain.fetch_add(1);
        error_ = "request cancelled: the server is shutting down";
        error_kind_ = ErrorKind::kUnavailable;
      } else {
        error_ = "request cancelled";
        error_kind_ = ErrorKind::kInternal;
      }
      break;
    default:
      timing_.reason = FinishReason::kError;
      error_ = ev.error.empty() ? "request failed" : ev.error;
      error_kind_ = ev.error_kind;
      break;
  }
  end(d);
}

void ChoiceRunner::enter_slot() {
  // One token a step: run to max_tokens (ignore_eos), it ends max_tokens - 1 steps from its
  // first; else EOS may end it at any step from token min_tokens on.
  const auto step = (int64_t)st_.engine->stats().num_steps;
  slot_ = st_.slot_ends.add(ignore_eos_ ? step + max_tokens_ - 1
                                        : step + std::min(min_tokens_, max_tokens_ - 1));
}

void ChoiceRunner::leave_slot() {
  if (slot_) st_.slot_ends.remove(*slot_);
  slot_.reset();
}

void ChoiceRunner::end(ChoiceDelta& d) {
  leave_slot();
  finished_ = true;
  d.finished = true;
  timing_.finish_ns = steady_now_ns();
}

}  // namespace kvw::server
