// model/logit_bias.h: a request's OpenAI logit_bias, (token id, bias) pairs, immutable once
// built. Copies share one list: a request's n choices each carry it (GenSampling, then
// SamplingParams), and a copy per choice was n x up to 1,024 entries (issue 30).
// Thread safety: immutable; copies may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace kvw {

class LogitBias {
 public:
  using Entry = std::pair<int32_t, float>;
  LogitBias() = default;
  LogitBias(std::initializer_list<Entry> entries) : LogitBias(std::vector<Entry>(entries)) {}
  explicit LogitBias(std::vector<Entry> entries)
      : entries_(entries.empty() ? nullptr
                                 : std::make_shared<const std::vector<Entry>>(std::move(entries))) {
  }

  std::span<const Entry> entries() const {
    return entries_ ? std::span<const Entry>(*entries_) : std::span<const Entry>();
  }
  const Entry* begin() const { return entries().data(); }
  const Entry* end() const { return entries().data() + entries().size(); }
  size_t size() const { return entries_ ? entries_->size() : 0; }
  bool empty() const { return size() == 0; }
  // Whether two copies share one list (tests; the holdings charge it once).
  bool shares_with(const LogitBias& o) const { return entries_ == o.entries_; }

 private:
  // shared_ptr: the one list is owned jointly by the request and every choice's sampler, which
  // end in any order (the client may go first, or the engine).
  std::shared_ptr<const std::vector<Entry>> entries_;
};

}  // namespace kvw
