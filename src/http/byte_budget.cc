#include "http/byte_budget.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kvw::http {

struct ByteLease::Core {
  struct Waiter {
    uint64_t ticket = 0;
    uint64_t bytes = 0;
    ByteBudget::Granted granted;
  };
  mutable std::mutex mu;
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t peak = 0;
  uint64_t next_ticket = 1;
  uint64_t num_granted = 0;
  uint64_t num_timed_out = 0;
  std::deque<Waiter> waiting;

  // Under mu: takes the bytes of every waiter at the head that now fits.
  void grant_locked(std::vector<std::pair<ByteBudget::Granted, uint64_t>>& out) {
    while (!waiting.empty() && used + waiting.front().bytes <= capacity) {
      Waiter w = std::move(waiting.front());
      waiting.pop_front();
      take_locked(w.bytes);
      out.emplace_back(std::move(w.granted), w.bytes);
    }
  }
  void take_locked(uint64_t bytes) {
    used += bytes;
    peak = std::max(peak, used);
    ++num_granted;
  }
};

ByteLease& ByteLease::operator=(ByteLease&& o) noexcept {
  if (this != &o) {
    release();
    core_ = std::move(o.core_);
    bytes_ = o.bytes_;
    o.bytes_ = 0;
  }
  return *this;
}

void ByteLease::release() {
  if (!core_) return;
  std::vector<std::pair<ByteBudget::Granted, uint64_t>> grants;
  std::shared_ptr<Core> core = std::move(core_);
  {
    std::lock_guard lock(core->mu);
    core->used -= bytes_;
    core->grant_locked(grants);
  }
  bytes_ = 0;
  for (auto& [fn, bytes] : grants) fn(ByteLease(core, bytes));
}

bool ByteLease::resize(uint64_t bytes) {
  if (bytes == bytes_) return true;
  if (!core_) return bytes == 0;
  std::vector<std::pair<ByteBudget::Granted, uint64_t>> grants;
  {
    std::lock_guard lock(core_->mu);
    if (bytes > bytes_) {
      const uint64_t more = bytes - bytes_;
      if (core_->used + more > core_->capacity) return false;
      core_->used += more;
      core_->peak = std::max(core_->peak, core_->used);
    } else {
      core_->used -= bytes_ - bytes;
      core_->grant_locked(grants);
    }
    bytes_ = bytes;
  }
  for (auto& [fn, n] : grants) fn(ByteLease(core_, n));
  return true;
}

ByteBudget::ByteBudget(uint64_t capacity)
    : core_(std::make_shared<ByteLease::Core>()), capacity_(capacity) {
  core_->capacity = capacity;
}

uint64_t ByteBudget::acquire(uint64_t bytes, Granted granted) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(core_->mu);
    ticket = core_->next_ticket++;
    if (!core_->waiting.empty() || core_->used + bytes > core_->capacity) {
      core_->waiting.push_back({ticket, bytes, std::move(granted)});
      return ticket;
    }
    core_->take_locked(bytes);
  }
  granted(ByteLease(core_, bytes));
  return ticket;
}

std::optional<ByteLease> ByteBudget::try_acquire(uint64_t bytes) {
  std::lock_guard lock(core_->mu);
  if (!core_->waiting.empty() || core_->used + bytes > core_->capacity) return std::nullopt;
  core_->take_locked(bytes);
  return ByteLease(core_, bytes);
}

bool ByteBudget::cancel(uint64_t ticket) {
  std::vector<std::pair<Granted, uint64_t>> grants;
  bool found = false;
  {
    std::lock_guard lock(core_->mu);
    auto& w = core_->waiting;
    auto it = std::find_if(w.begin(), w.end(), [&](const auto& x) { return x.ticket == ticket; });
    if (it != w.end()) {
      found = true;
      ++core_->num_timed_out;
      w.erase(it);
      core_->grant_locked(grants);  // a large head leaving may let smaller ones in
    }
  }
  for (auto& [fn, bytes] : grants) fn(ByteLease(core_, bytes));
  return found;
}

ByteBudgetStats ByteBudget::stats() const {
  std::lock_guard lock(core_->mu);
  return {.capacity = core_->capacity,
          .used = core_->used,
          .peak = core_->peak,
          .num_waiting = core_->waiting.size(),
          .num_granted = core_->num_granted,
          .num_timed_out = core_->num_timed_out};
}

}  // namespace kvw::http
