// core/turn_starts.h: a chat prompt's turn offsets (token index where each message starts, for
// --overflow sliding-window) as one immutable list shared by whoever holds a copy: the n
// choices of a prompt hold the same list from the server's request through the engine's queue
// to the scheduler's Request, so a request holds one copy, charged once, not one per choice
// (issue 30; the same scheme as TokenList for the prompt's ids). Built from a vector (moved in)
// or a braced list; copying shares. Thread safety: immutable; copies may live on any threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace kvw {

class TurnStarts {
 public:
  TurnStarts() = default;
  TurnStarts(std::vector<int64_t> offsets)  // NOLINT: implicit, as TokenList
      : offsets_(offsets.empty()
                     ? nullptr
                     : std::make_shared<const std::vector<int64_t>>(std::move(offsets))) {}
  TurnStarts(std::initializer_list<int64_t> offsets) : TurnStarts(std::vector<int64_t>(offsets)) {}
  explicit TurnStarts(std::shared_ptr<const std::vector<int64_t>> offsets)
      : offsets_(std::move(offsets)) {}

  std::span<const int64_t> span() const {
    return offsets_ ? std::span<const int64_t>(*offsets_) : std::span<const int64_t>();
  }
  operator std::span<const int64_t>() const { return span(); }  // NOLINT
  size_t size() const { return offsets_ ? offsets_->size() : 0; }
  bool empty() const { return size() == 0; }
  const int64_t* begin() const { return span().data(); }
  const int64_t* end() const { return span().data() + size(); }
  int64_t operator[](size_t i) const { return (*offsets_)[i]; }
  // Whether two lists are one copy, and how many hold it (tests).
  bool shares_with(const TurnStarts& o) const {
    return offsets_ != nullptr && offsets_ == o.offsets_;
  }
  long use_count() const { return offsets_.use_count(); }
  // For a cache keyed by a copy: names it without keeping it alive.
  std::weak_ptr<const std::vector<int64_t>> weak() const { return offsets_; }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }
  friend bool operator==(const TurnStarts& a, const TurnStarts& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const TurnStarts& a, const std::vector<int64_t>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  // shared_ptr: owned jointly by the request and every choice's engine and scheduler request,
  // which end in any order.
  std::shared_ptr<const std::vector<int64_t>> offsets_;
};

}  // namespace kvw
