// kvsim/contiguous_backend.cc: the baseline as a simulation backend. Admission reserves
// max_model_len tokens (or prompt + output) of bytes first-fit; tokens then grow inside the
// reservation, so reserve() never fails and nothing is ever preempted.
#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "kvsim/contiguous_allocator.h"
#include "kvsim/sim_backend.h"

namespace kvw::kvsim {
namespace {

class ContiguousBackend final : public SimBackend {
 public:
  explicit ContiguousBackend(const SimConfig& c)
      : config_(c),
        bytes_per_token_(c.shape.kv_bytes_per_token()),
        arena_(c.capacity_tokens() * bytes_per_token_) {}

  bool can_ever_fit(const SimRequest& r) const override {
    return reservation_tokens(r) <= config_.capacity_tokens();
  }

  // No prefix cache: a naive engine recomputes every prompt.
  uint32_t cached_prefix_tokens(const SeqState&) const override { return 0; }

  bool admit(SeqState& seq, uint32_t num_tokens) override {
    const uint32_t tokens = reservation_tokens(*seq.req);
    CHECK(num_tokens <= tokens) << "admission of " << num_tokens << " tokens past reservation";
    auto offset = arena_.allocate(uint64_t{tokens} * bytes_per_token_);
    if (!offset) return false;
    seq.arena_offset = *offset;
    seq.reserved_tokens = tokens;
    seq.num_computed = 0;
    return true;
  }

  bool reserve(SeqState& seq, uint32_t num_tokens) override {
    CHECK(num_tokens <= seq.reserved_tokens)
        << "sequence grew to " << num_tokens << " tokens past its reservation of "
        << seq.reserved_tokens;
    return true;
  }

  void commit(SeqState& seq) override {
    held_tokens_ += seq.num_computed;
    held_tokens_ -= std::exchange(committed_[index_of(seq.seq_id)], seq.num_computed);
  }

  void release(SeqState& seq) override {
    arena_.free(seq.arena_offset);
    auto it = committed_.find(index_of(seq.seq_id));
    if (it != committed_.end()) {
      held_tokens_ -= it->second;
      committed_.erase(it);
    }
    seq.reserved_tokens = 0;
  }

  void measure(Sample& s) const override {
    const ContiguousStats st = arena_.stats();
    const double capacity = static_cast<double>(config_.capacity_tokens());
    s.utilisation = capacity > 0 ? static_cast<double>(held_tokens_) / capacity : 0;
    s.reserved = st.capacity_bytes > 0
                     ? static_cast<double>(st.used_bytes) / static_cast<double>(st.capacity_bytes)
                     : 0;
    s.fragmentation = st.fragmentation;
  }

 private:
  uint32_t reservation_tokens(const SimRequest& r) const {
    return config_.reserve_request_max ? r.prompt_tokens + r.output_tokens : config_.max_model_len;
  }

  SimConfig config_;
  uint64_t bytes_per_token_;
  ContiguousAllocator arena_;  // capacity rounded down to whole tokens, as the paged pool is
  uint64_t held_tokens_ = 0;   // sum of committed tokens over live sequences
  std::unordered_map<uint64_t, uint32_t> committed_;  // seq id -> committed tokens
};

}  // namespace

std::unique_ptr<SimBackend> make_contiguous_backend(const SimConfig& config) {
  return std::make_unique<ContiguousBackend>(config);
}

}  // namespace kvw::kvsim
