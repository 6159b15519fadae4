#include "kv_events/event_queue.h"

namespace kvw::kv_events {

bool KvEventQueue::try_push(KvEventBatch&& b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (num_events_ + b.events.size() > max_events_) return false;
  num_events_ += b.events.size();
  batches_.push_back(std::move(b));
  return true;
}

void KvEventQueue::pop_all(std::vector<KvEventBatch>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (KvEventBatch& b : batches_) out.push_back(std::move(b));
  batches_.clear();
  num_events_ = 0;
}

size_t KvEventQueue::num_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_events_;
}

}  // namespace kvw::kv_events
