#include "server/slot_ends.h"

#include <algorithm>

namespace kvw::server {

SlotEnds::Key SlotEnds::add(int64_t end_step) {
  std::lock_guard lock(mu_);
  const Key key{end_step, next_id_++};
  ends_.insert(key);
  return key;
}

void SlotEnds::remove(const Key& key) {
  std::lock_guard lock(mu_);
  ends_.erase(key);
}

std::optional<int64_t> SlotEnds::steps_to_soonest(int64_t now_step) const {
  std::lock_guard lock(mu_);
  if (ends_.empty()) return std::nullopt;
  return std::max<int64_t>(0, ends_.begin()->first - now_step);
}

size_t SlotEnds::size() const {
  std::lock_guard lock(mu_);
  return ends_.size();
}

}  // namespace kvw::server
