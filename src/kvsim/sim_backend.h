// kvsim/sim_backend.h (internal): what the simulation driver asks of an allocator, and the
// per-sequence state they share. Two implementations: contiguous_backend.cc (the baseline) and
// paged_backend.cc (the real KvManager). Owner: one simulate() call, single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/ids.h"
#include "kvsim/sim.h"

namespace kvw::kvsim {

// One request while it is queued or running.
struct SeqState {
  const SimRequest* req = nullptr;
  SeqId seq_id{};
  std::vector<int32_t> tokens;  // [prompt + output] token ids, derived from the request's keys
  uint32_t num_computed = 0;    // leading tokens whose KV is held and valid
  uint32_t num_generated = 0;   // output tokens sampled so far
  double arrival_s = 0;
  bool admitted_once = false;
  uint64_t arena_offset = 0;     // contiguous: start of the reservation
  uint32_t reserved_tokens = 0;  // contiguous: reservation size

  // Tokens the sequence knows now: the prompt plus what it has generated.
  uint32_t num_known() const { return req->prompt_tokens + num_generated; }
};

class SimBackend {
 public:
  virtual ~SimBackend() = default;
  // False when the request could never be admitted, even into an empty cache.
  virtual bool can_ever_fit(const SimRequest& r) const = 0;
  // Leading tokens of the sequence's known tokens that admission would find cached (prefix
  // hit; < num_known()). Planning only, changes nothing.
  virtual uint32_t cached_prefix_tokens(const SeqState& seq) const = 0;
  // Admits a sequence that holds no KV if the allocator can take it now with room for
  // `num_tokens` tokens (the cached prefix plus the first chunk), and sets seq.num_computed to
  // the cached prefix. False (nothing changed) when it must keep waiting.
  virtual bool admit(SeqState& seq, uint32_t num_tokens) = 0;
  // Makes room for the sequence to hold `num_tokens` tokens; false (nothing changed) when the
  // allocator has no room, and the driver preempts.
  virtual bool reserve(SeqState& seq, uint32_t num_tokens) = 0;
  // seq.num_computed leading tokens now hold valid KV.
  virtual void commit(SeqState& seq) = 0;
  // Frees everything the sequence holds (finished or preempted).
  virtual void release(SeqState& seq) = 0;
  // Fills utilisation, reserved and fragmentation of a sample.
  virtual void measure(Sample& s) const = 0;
  virtual uint64_t prefix_queried_tokens() const { return 0; }
  virtual uint64_t prefix_hit_tokens() const { return 0; }
};

std::unique_ptr<SimBackend> make_contiguous_backend(const SimConfig& config);
std::unique_ptr<SimBackend> make_paged_backend(const SimConfig& config);

}  // namespace kvw::kvsim
