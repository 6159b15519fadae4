#include "engine/queues.h"

#include <utility>

#include "core/check.h"

namespace kvw {

TokenChannel::TokenChannel(uint64_t request_id, int32_t max_tokens)
    : request_id_(request_id), max_tokens_(max_tokens) {}

void TokenChannel::push_token(int32_t token_id) {
  ChannelEvent ev;
  ev.token_id = token_id;
  push_token(std::move(ev));
}

void TokenChannel::push_token(ChannelEvent ev) {
  CHECK(ev.kind == ChannelEvent::Kind::kToken);
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(!finished_) << "request " << request_id_ << ": token after finish";
    CHECK(num_pushed_ < max_tokens_)
        << "request " << request_id_ << ": more than " << max_tokens_ << " tokens";
    tokens_.push_back(std::move(ev));
    ++num_pushed_;
  }
  cv_.notify_all();
  notify();
}

void TokenChannel::push_prompt_logprobs(ChannelEvent ev) {
  CHECK(ev.kind == ChannelEvent::Kind::kPromptLogprobs);
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(!finished_ && num_pushed_ == 0)
        << "request " << request_id_ << ": prompt logprobs after a token or the end";
    tokens_.push_back(std::move(ev));
  }
  cv_.notify_all();
  notify();
}

void TokenChannel::finish(FinishReason reason, std::string error, ErrorKind kind) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    final_.kind = ChannelEvent::Kind::kFinished;
    final_.reason = reason;
    final_.error = std::move(error);
    final_.error_kind = kind;
  }
  cv_.notify_all();
  notify();
}

void TokenChannel::notify() {
  std::lock_guard<std::mutex> lock(notify_mu_);
  if (notify_) notify_();
}

void TokenChannel::set_notify(std::function<void()> fn) {
  bool ready = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready = !tokens_.empty() || finished_;
  }
  std::lock_guard<std::mutex> lock(notify_mu_);
  notify_ = std::move(fn);
  if (ready && notify_) notify_();
}

std::optional<ChannelEvent> TokenChannel::pop_locked() {
  if (!tokens_.empty()) {
    ChannelEvent ev = std::move(tokens_.front());
    tokens_.pop_front();
    return ev;
  }
  if (finished_) return final_;
  return std::nullopt;
}

ChannelEvent TokenChannel::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !tokens_.empty() || finished_; });
  return *pop_locked();
}

std::optional<ChannelEvent> TokenChannel::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !tokens_.empty() || finished_; });
  return pop_locked();
}

bool TokenChannel::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

TokenChannel::Collected TokenChannel::collect() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
  Collected c;
  for (const ChannelEvent& ev : tokens_) {
    if (ev.kind == ChannelEvent::Kind::kToken) c.tokens.push_back(ev.token_id);
  }
  tokens_.clear();
  c.reason = final_.reason;
  c.error = final_.error;
  c.error_kind = final_.error_kind;
  return c;
}

RequestQueue::RequestQueue(size_t capacity) : capacity_(capacity) {
  CHECK(capacity > 0) << "request queue capacity must be >= 1";
}

bool RequestQueue::try_push(PendingRequest&& p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || requests_.size() >= capacity_) return false;
    requests_.push_back(std::move(p));
  }
  cv_.notify_one();
  return true;
}

bool RequestQueue::push_cancel(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    cancels_.push_back(request_id);
  }
  cv_.notify_one();
  return true;
}

void RequestQueue::drain(std::vector<PendingRequest>& requests, std::vector<uint64_t>& cancels) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : requests_) requests.push_back(std::move(p));
  requests_.clear();
  cancels.insert(cancels.end(), cancels_.begin(), cancels_.end());
  cancels_.clear();
}

void RequestQueue::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout,
               [&] { return closed_ || woken_ || !requests_.empty() || !cancels_.empty(); });
  woken_ = false;
}

void RequestQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

void RequestQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool RequestQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

uint64_t SnapshotBox::request() {
  std::lock_guard<std::mutex> lock(mu_);
  wanted_ = true;
  return generation_;
}

bool SnapshotBox::wanted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wanted_;
}

void SnapshotBox::publish(std::shared_ptr<const KvSnapshot> s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = std::move(s);
    ++generation_;
    wanted_ = false;
  }
  cv_.notify_all();
}

std::shared_ptr<const KvSnapshot> SnapshotBox::wait_newer(uint64_t generation,
                                                          std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return generation_ > generation; });
  return latest_;
}

void StatsBox::publish(const EngineStats& s) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = s;
}

EngineStats StatsBox::read() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace kvw
