// The engine's fault boundaries around the model and the channels (issue 30, "faults are per
// request"): a forward pass that throws is retried one sequence at a time so that only the
// sequences whose own pass fails end (with a typed error, their KV of the step dropped), and a
// token event that cannot be queued ends its request alone. The engine thread never dies of it.
#include <exception>
#include <new>
#include <span>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "engine/engine.h"

namespace kvw {
namespace {

// What a caught exception tells the client: out of memory (503) or an internal error (500).
ErrorKind kind_of(const std::exception& e) {
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr ? ErrorKind::kOutOfMemory
                                                            : ErrorKind::kInternal;
}

}  // namespace

void Engine::forward_seqs(const SchedulerOutput& out, size_t first, size_t count, float* logits) {
  if (cfg_.forward_fault_hook) {
    for (size_t i = first; i < first + count; ++i) {
      const SeqId id = out.scheduled[i].seq_id;
      cfg_.forward_fault_hook(index_of(id), sched_->find(id)->max_tokens);
    }
  }
  struct ClearPass {  // a pass that throws leaves no sequence for later phases (sampling)
    std::vector<std::pair<uint64_t, int32_t>>& pass;
    ~ClearPass() { pass.clear(); }
  } clear_pass{kernel_fault_pass_};
  if (cfg_.kernel_fault_hook) {
    for (size_t i = first; i < first + count; ++i) {
      const SeqId id = out.scheduled[i].seq_id;
      kernel_fault_pass_.emplace_back(index_of(id), sched_->find(id)->max_tokens);
    }
  }
  // Inputs are validated at submit and block tables come from the KvManager, so a refusal here
  // is a broken invariant, not bad input. A kernel task's exception arrives here from the
  // thread pool (ThreadPool::run rethrows it on this thread).
  const Status st =
      model_->forward(std::span<const SeqInput>(inputs_).subspan(first, count), *arena_, logits);
  CHECK(st.ok()) << "forward of step " << out.step << ": " << st.message();
}

void Engine::run_forward(const SchedulerOutput& out) {
  forward_faults_.clear();
  try {
    forward_seqs(out, 0, inputs_.size(), logits_.data());
    return;
  } catch (const std::exception& e) {
    LOG(WARN, engine) << "step " << out.step << ": forward of " << inputs_.size()
                      << " sequences failed (" << e.what() << "); running them one at a time";
  }
  // Alone, a sequence writes the same KV slots with the same values and its logit rows land
  // where the batched pass puts them (rows in sequence order). Costs one pass per sequence, only
  // on a failed step.
  const int32_t n_vocab = model_->hparams().n_vocab;
  int64_t row = 0;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const SeqId id = out.scheduled[i].seq_id;
    try {
      forward_seqs(out, i, 1, logits_.data() + row * n_vocab);
    } catch (const std::exception& e) {
      forward_faults_.push_back(ForwardFault{
          .seq_id = id, .error = std::string("forward pass: ") + e.what(), .kind = kind_of(e)});
      LOG(ERROR, engine) << "request " << index_of(id) << ": forward pass failed: " << e.what();
    }
    row += Model::num_logit_rows(std::span<const SeqInput>(inputs_).subspan(i, 1));
  }
}

void Engine::queue_token_events() {
  // One event per kept token, in order (a speculative decode emits several, one by one).
  size_t nth = 0;  // index of the token among its sequence's this step
  for (size_t i = 0; i < sampled_.size(); ++i) {
    const SampledToken& t = sampled_[i];
    nth = i > 0 && sampled_[i - 1].seq_id == t.seq_id ? nth + 1 : 0;
    if (t.error) continue;
    const uint64_t id = index_of(t.seq_id);
    Live& live = live_.at(id);
    if (live.emit_failed) continue;
    try {
      if (cfg_.emit_fault_hook) cfg_.emit_fault_hook(id, live.max_tokens);
      ChannelEvent ev;
      if (nth < live.next_events.size()) ev = std::move(live.next_events[nth]);
      live.first_token_deadline = std::chrono::steady_clock::time_point::max();  // produced
      ev.token_id = t.token_id;
      emit_tokens_.emplace_back(id, std::move(ev));
    } catch (const std::exception& e) {
      fail_emission(id, live, e);
    }
  }
}

void Engine::fail_emission(uint64_t id, Live& live, const std::exception& e) {
  // Its blocks are freed at the next schedule(); finish_live then sends this error. Events
  // already queued for it are dropped (a gap in its tokens would be a wrong answer).
  live.emit_failed = true;
  live.error = std::string("internal error: token emission: ") + e.what();
  live.error_kind = kind_of(e);
  ++stats_.num_request_faults;
  sched_->cancel(SeqId{id});
  LOG(ERROR, engine) << "request " << id << ": " << live.error;
}

}  // namespace kvw
