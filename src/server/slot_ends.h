// server/slot_ends.h: when the engine's next running slot frees, for admission's predicted wait
// (admission.h). A request that finds every slot taken waits for the soonest running choice to
// end, however little work is queued: without this the door predicted 0 s beside slots held
// by long choices, admitted, and the request waited the whole --max-queue-wait for a 503
// (issue 30, the worst request mix). Each choice is entered at its first token with the engine
// step by which it ends: one token a step, so first step + max_tokens - 1 for a choice that
// runs to max_tokens (ignore_eos); a choice that may end sooner (EOS) is entered as ending now,
// since nothing says it will not. Stop strings are not foreseen (a match ends a choice sooner).
// Thread safety: every method locks one mutex (connection strands enter and remove choices,
// the door reads).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

namespace kvw::server {

class SlotEnds {
 public:
  using Key = std::pair<int64_t, uint64_t>;  // (end step, entry id)

  // Enters a running choice that ends by engine step `end_step`; remove() it when it ends.
  Key add(int64_t end_step);
  void remove(const Key& key);
  // Steps from `now_step` until the soonest entered choice ends (0 when it may end now);
  // nullopt when none is entered.
  std::optional<int64_t> steps_to_soonest(int64_t now_step) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::set<Key> ends_;
  uint64_t next_id_ = 0;
};

}  // namespace kvw::server
