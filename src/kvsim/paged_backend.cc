// kvsim/paged_backend.cc: the real KvManager (src/kv) as a simulation backend, with no KV
// storage attached (block ids and token counts only, no bytes copied).
#include <algorithm>
#include <cmath>
#include <span>

#include "core/check.h"
#include "kv/kv_manager.h"
#include "kvsim/sim_backend.h"

namespace kvw::kvsim {
namespace {

KvManagerConfig manager_config(const SimConfig& c) {
  const uint64_t block_bytes = c.shape.kv_bytes_per_token() * c.block_size;
  const auto num_blocks = static_cast<uint32_t>(c.kv_budget_bytes / block_bytes);
  return KvManagerConfig{
      .num_blocks = num_blocks,
      .block_size = static_cast<int32_t>(c.block_size),
      .enable_prefix_caching = c.prefix_caching,
      .watermark_blocks = static_cast<uint32_t>(std::ceil(c.watermark * num_blocks)),
  };
}

class PagedBackend final : public SimBackend {
 public:
  explicit PagedBackend(const SimConfig& c) : config_(c), kv_(manager_config(c), nullptr) {}

  bool can_ever_fit(const SimRequest& r) const override {
    const uint64_t blocks =
        (uint64_t{r.prompt_tokens} + r.output_tokens + config_.block_size - 1) / config_.block_size;
    return blocks + kv_.config().watermark_blocks <= kv_.num_blocks();
  }

  uint32_t cached_prefix_tokens(const SeqState& seq) const override {
    return static_cast<uint32_t>(kv_.num_cached_prefix_tokens(known_tokens(seq)));
  }

  bool admit(SeqState& seq, uint32_t num_tokens) override {
    const auto prompt = known_tokens(seq);
    if (!kv_.can_admit(prompt, num_tokens)) return false;
    const int64_t cached = kv_.add_sequence(seq.seq_id, prompt);
    CHECK(cached <= num_tokens) << "cached " << cached << " > admitted " << num_tokens;
    const AllocStatus st = kv_.allocate_slots(seq.seq_id, num_tokens - cached);
    CHECK(st == AllocStatus::kOk) << "can_admit said yes but allocate_slots failed";
    seq.num_computed = static_cast<uint32_t>(cached);
    return true;
  }

  bool reserve(SeqState& seq, uint32_t num_tokens) override {
    const int64_t more = int64_t{num_tokens} - kv_.num_tokens(seq.seq_id);
    if (more <= 0) return true;
    return kv_.allocate_slots(seq.seq_id, more) == AllocStatus::kOk;
  }

  void commit(SeqState& seq) override {
    kv_.commit_computed(seq.seq_id, seq.tokens, seq.num_computed);
  }

  void release(SeqState& seq) override { kv_.free_sequence(seq.seq_id); }

  void measure(Sample& s) const override {
    const KvLayoutStats st = kv_.stats();
    s.utilisation = st.token_usage();
    s.reserved = st.block_usage();
    s.fragmentation = st.fragmentation();
  }

  uint64_t prefix_queried_tokens() const override { return kv_.prefix_counters().num_query_tokens; }
  uint64_t prefix_hit_tokens() const override { return kv_.prefix_counters().num_hit_tokens; }

 private:
  static std::span<const int32_t> known_tokens(const SeqState& seq) {
    return std::span<const int32_t>(seq.tokens).first(seq.num_known());
  }

  SimConfig config_;
  KvManager kv_;
};

}  // namespace

std::unique_ptr<SimBackend> make_paged_backend(const SimConfig& config) {
  return std::make_unique<PagedBackend>(config);
}

}  // namespace kvw::kvsim
