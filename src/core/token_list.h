// core/token_list.h: an immutable list of token ids shared by whoever holds a copy: the n
// choices (and best_of candidates) of one prompt each hold the same list, from the server's
// request through the engine's queue to the scheduler's Request, so a request holds one copy
// of each prompt, not one per choice (issue 30). Built from a vector (moved in) or a braced
// list; copying shares. Thread safety: immutable; copies may live on any threads.
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

class TokenList {
 public:
  TokenList() = default;
  TokenList(std::vector<int32_t> ids)  // NOLINT: implicit, so `r.prompt = tokens` reads as before
      : ids_(ids.empty() ? nullptr : std::make_shared<const std::vector<int32_t>>(std::move(ids))) {
  }
  TokenList(std::initializer_list<int32_t> ids) : TokenList(std::vector<int32_t>(ids)) {}
  explicit TokenList(std::shared_ptr<const std::vector<int32_t>> ids) : ids_(std::move(ids)) {}

  std::span<const int32_t> span() const {
    return ids_ ? std::span<const int32_t>(*ids_) : std::span<const int32_t>();
  }
  operator std::span<const int32_t>() const { return span(); }  // NOLINT
  size_t size() const { return ids_ ? ids_->size() : 0; }
  bool empty() const { return size() == 0; }
  const int32_t* data() const { return span().data(); }
  const int32_t* begin() const { return span().data(); }
  const int32_t* end() const { return span().data() + size(); }
  int32_t operator[](size_t i) const { return (*ids_)[i]; }
  int32_t back() const { return ids_->back(); }
  // Whether two lists are one copy (tests; the holdings charge a shared prompt once).
  bool shares_with(const TokenList& o) const { return ids_ != nullptr && ids_ == o.ids_; }
  long use_count() const { return ids_.use_count(); }  // holders of this copy (tests)
  // For caches keyed by a copy: names it without keeping it alive (expired once all let go).
  std::weak_ptr<const std::vector<int32_t>> weak() const { return ids_; }
  bool is(const std::shared_ptr<const std::vector<int32_t>>& p) const {
    return p != nullptr && p == ids_;
  }
  std::vector<int32_t> to_vector() const { return {begin(), end()}; }
  friend bool operator==(const TokenList& a, const TokenList& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  // shared_ptr: the one copy is owned jointly by the request and every choice's engine request
  // and scheduler Request, which end in any order (the client may go first, or the engine).
  std::shared_ptr<const std::vector<int32_t>> ids_;
};

}  // namespace kvw
