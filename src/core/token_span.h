// core/token_span.h: a read-only run of token ids held in two parts, a prompt shared by the
// choices of one request and a sequence's own outputs (issue 30: n choices hold one prompt
// copy, not n). Two spans, cheap to copy; it owns nothing: the holder keeps both parts alive.
// A span or vector converts to a TokenSpan with everything in the first part.
// Thread safety: a view; as safe as the memory it points at.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvw {

class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(std::span<const int32_t> head, std::span<const int32_t> tail = {})  // NOLINT
      : head_(head), tail_(tail) {}
  TokenSpan(const std::vector<int32_t>& v) : head_(v) {}  // NOLINT: implicit like a span
  TokenSpan(const int32_t* data, size_t count) : head_(data, count) {}  // as span's {ptr, n}
  template <class T, size_t E>
  TokenSpan(std::span<T, E> s) : head_(s) {}  // NOLINT: span<int32_t> too, in one conversion

  size_t size() const { return head_.size() + tail_.size(); }
  bool empty() const { return size() == 0; }
  int32_t operator[](size_t i) const {
    return i < head_.size() ? head_[i] : tail_[i - head_.size()];
  }
  int32_t back() const { return (*this)[size() - 1]; }
  std::span<const int32_t> head() const { return head_; }
  std::span<const int32_t> tail() const { return tail_; }

  // Tokens [offset, offset + count) (both clipped to the end).
  TokenSpan subspan(size_t offset, size_t count = SIZE_MAX) const {
    offset = std::min(offset, size());
    count = std::min(count, size() - offset);
    const size_t h0 = std::min(offset, head_.size());
    const size_t h1 = std::min(offset + count, head_.size());
    const size_t t0 = offset > head_.size() ? offset - head_.size() : 0;
    const size_t t1 = offset + count > head_.size() ? offset + count - head_.size() : 0;
    return TokenSpan(head_.subspan(h0, h1 - h0), tail_.subspan(t0, t1 - t0));
  }
  TokenSpan first(size_t count) const { return subspan(0, count); }

  // The tokens as one contiguous span: a view when they lie in one part, else a copy in
  // `scratch` (which then holds size() tokens).
  std::span<const int32_t> contiguous(std::vector<int32_t>& scratch) const {
    if (tail_.empty()) return head_;
    if (head_.empty()) return tail_;
    scratch.clear();
    append_to(scratch);
    return scratch;
  }
  void copy_to(int32_t* dst) const {
    std::copy(head_.begin(), head_.end(), dst);
    std::copy(tail_.begin(), tail_.end(), dst + head_.size());
  }
  void append_to(std::vector<int32_t>& out) const {
    out.insert(out.end(), head_.begin(), head_.end());
    out.insert(out.end(), tail_.begin(), tail_.end());
  }
  std::vector<int32_t> to_vector() const {
    std::vector<int32_t> v;
    v.reserve(size());
    append_to(v);
    return v;
  }

 private:
  std::span<const int32_t> head_;
  std::span<const int32_t> tail_;
};

}  // namespace kvw
