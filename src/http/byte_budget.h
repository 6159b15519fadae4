// http/byte_budget.h: the request-memory budget. Every request reserves the bytes it may cost
// before it reaches the engine (body, parsed JSON, rendered prompt) when its headers arrive;
// the reservation is a ByteLease, returned when the request is done with them. When the budget
// is spent, requests wait in FIFO order (read back-pressure) until a lease comes back or their
// deadline passes (the transport then answers 503 + Retry-After).
// Thread safety: all methods are thread-safe. Grant callbacks run on the thread that released
// the bytes (or the caller's, when granted at once) with no lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace kvw::http {

class ByteBudget;

// Bytes held from a ByteBudget; move-only, returned on destruction (or release()).
class ByteLease {
 public:
  ByteLease() = default;
  ~ByteLease() { release(); }
  ByteLease(ByteLease&& o) noexcept : core_(std::move(o.core_)), bytes_(o.bytes_) { o.bytes_ = 0; }
  ByteLease& operator=(ByteLease&& o) noexcept;
  ByteLease(const ByteLease&) = delete;
  ByteLease& operator=(const ByteLease&) = delete;

  uint64_t bytes() const { return bytes_; }
  void release();
  // Changes the lease to `bytes`, for a request whose holdings become known after it was
  // admitted (parsed, then generating). Shrinking always succeeds and may let waiters in.
  // Growing never waits: it succeeds only when the extra bytes fit now (waiters are not
  // jumped, they hold nothing yet); false leaves the lease unchanged. An empty lease (no
  // budget) cannot grow.
  bool resize(uint64_t bytes);

 private:
  friend class ByteBudget;
  struct Core;
  ByteLease(std::shared_ptr<Core> core, uint64_t bytes) : core_(std::move(core)), bytes_(bytes) {}
  std::shared_ptr<Core> core_;
  uint64_t bytes_ = 0;
};

struct ByteBudgetStats {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t peak = 0;
  uint64_t num_waiting = 0;
  uint64_t num_granted = 0;    // cumulative
  uint64_t num_timed_out = 0;  // cumulative: waiters cancelled (deadline passed)
};

class ByteBudget {
 public:
  explicit ByteBudget(uint64_t capacity);
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  using Granted = std::function<void(ByteLease)>;
  // Grants `bytes` now when they fit and nobody waits (granted runs before this returns), else
  // queues. Returns a ticket for cancel(). Requests larger than the capacity are never granted:
  // the caller checks fits() first.
  uint64_t acquire(uint64_t bytes, Granted granted);
  // Grants `bytes` now when they fit and nobody waits, else nothing (never queues): for answers
  // built on the spot, which are refused rather than made to wait.
  std::optional<ByteLease> try_acquire(uint64_t bytes);
  // Removes a queued waiter (its callback is dropped). False when it was already granted.
  bool cancel(uint64_t ticket);
  bool fits(uint64_t bytes) const { return bytes <= capacity_; }
  ByteBudgetStats stats() const;

 private:
  std::shared_ptr<ByteLease::Core> core_;
  const uint64_t capacity_;
};

}  // namespace kvw::http
