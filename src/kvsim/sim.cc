// kvsim/sim.cc: the simulation driver: arrivals, a vLLM-like step (running sequences first,
// then admissions), preemption of the newest sequence, and the per-step samples.
#include "kvsim/sim.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <queue>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "kvsim/sim_backend.h"

namespace kvw::kvsim {
namespace {

class Simulation {
 public:
  Simulation(const std::vector<SimRequest>& reqs, const SimConfig& c, AllocatorKind kind)
      : reqs_(reqs), config_(c), seqs_(reqs.size()) {
    backend_ = kind == AllocatorKind::kPaged ? make_paged_backend(c) : make_contiguous_backend(c);
    result_.kind = kind;
    result_.capacity_tokens = c.capacity_tokens();
    result_.num_requests = reqs.size();
    std::unordered_map<uint64_t, std::unordered_map<uint32_t, size_t>> by_round;
    for (size_t i = 0; i < reqs.size(); ++i) {
      seqs_[i].req = &reqs[i];
      seqs_[i].seq_id = SeqId{i + 1};
      by_round[reqs[i].conversation_id][reqs[i].round] = i;
    }
    next_round_.assign(reqs.size(), kNone);
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!reqs[i].follow_previous) {
        arrivals_.emplace(reqs[i].arrival_s, i);
        continue;
      }
      // A round that follows a missing one (round 0 absent) arrives at its think time.
      const auto& rounds = by_round[reqs[i].conversation_id];
      auto prev = reqs[i].round > 0 ? rounds.find(reqs[i].round - 1) : rounds.end();
      if (prev == rounds.end()) {
        arrivals_.emplace(reqs[i].arrival_s, i);
      } else {
        next_round_[prev->second] = i;
      }
    }
  }

  SimResult run();

 private:
  static constexpr size_t kNone = ~size_t{0};
  using Arrival = std::pair<double, size_t>;  // (time, request index), earliest first

  void enqueue_arrivals();
  bool preempt_newest(size_t current);
  void schedule_running(uint32_t& budget);
  void schedule_waiting(uint32_t& budget);
  void execute();
  void retire(size_t i, bool finished);
  void record_step();
  void finalize();

  const std::vector<SimRequest>& reqs_;
  SimConfig config_;
  std::unique_ptr<SimBackend> backend_;
  std::vector<SeqState> seqs_;      // [requests], index == request index
  std::vector<size_t> next_round_;  // [requests] the round that follows, or kNone
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals_;
  std::deque<size_t> waiting_;
  std::vector<size_t> running_;  // admission order: front oldest, back newest
  std::vector<std::pair<size_t, uint32_t>> scheduled_;  // (sequence, tokens) this step
  bool preempted_this_step_ = false;
  bool memory_bound_ = false;  // this step, memory refused an admission
  double now_ = 0;
  uint64_t num_admitted_ = 0;
  double queue_wait_sum_ = 0;
  std::vector<Sample> all_samples_;  // one per step
  SimResult result_;
};

void Simulation::enqueue_arrivals() {
  while (!arrivals_.empty() && arrivals_.top().first <= now_ + 1e-9) {
    const size_t i = arrivals_.top().second;
    arrivals_.pop();
    seqs_[i].arrival_s = std::max(now_, seqs_[i].arrival_s);
    waiting_.push_back(i);
  }
}

// Frees the newest running sequence for recompute later; it goes to the queue front.
// Returns true when that sequence was `current`.
bool Simulation::preempt_newest(size_t current) {
  CHECK(!running_.empty()) << "preemption with nothing running";
  const size_t victim = running_.back();
  running_.pop_back();
  backend_->release(seqs_[victim]);
  seqs_[victim].num_computed = 0;
  waiting_.push_front(victim);
  ++result_.num_preemptions;
  preempted_this_step_ = true;
  return victim == current;
}

void Simulation::schedule_running(uint32_t& budget) {
  for (size_t k = 0; k < running_.size() && budget > 0; ++k) {
    const size_t i = running_[k];
    SeqState& s = seqs_[i];
    const uint32_t n = std::min(s.num_known() - s.num_computed, budget);
    bool self_preempted = false;
    while (!backend_->reserve(s, s.num_computed + n)) {
      if (preempt_newest(i)) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the newest: nothing after it is running
    scheduled_.emplace_back(i, n);
    budget -= n;
  }
}

void Simulation::schedule_waiting(uint32_t& budget) {
  // As in vLLM: no admissions in a step that had to preempt (memory is already short).
  while (!preempted_this_step_ && budget > 0 && !waiting_.empty() &&
         running_.size() < config_.max_num_seqs) {
    const size_t i = waiting_.front();
    SeqState& s = seqs_[i];
    const bool too_long = s.req->prompt_tokens + s.req->output_tokens > config_.max_model_len;
    if (too_long || !backend_->can_ever_fit(*s.req)) {
      waiting_.pop_front();
      retire(i, /*finished=*/false);
      continue;
    }
    if (s.tokens.empty()) {  // token ids live only while the request is in the system
      const SimRequest& r = *s.req;
      s.tokens.resize(size_t{r.prompt_tokens} + r.output_tokens);
      for (uint32_t p = 0; p < s.tokens.size(); ++p) s.tokens[p] = token_at(r, p);
    }
    const uint32_t cached = backend_->cached_prefix_tokens(s);
    const uint32_t n = std::min(s.num_known() - cached, budget);
    if (!backend_->admit(s, cached + n)) {  // strict FIFO: the head waits for room
      memory_bound_ = true;
      break;
    }
    CHECK(s.num_computed == cached)
        << "admission found " << s.num_computed << " cached, planned " << cached;
    waiting_.pop_front();
    running_.push_back(i);
    if (!s.admitted_once) {
      s.admitted_once = true;
      ++num_admitted_;
      queue_wait_sum_ += now_ - s.arrival_s;
    }
    scheduled_.emplace_back(i, n);
    budget -= n;
  }
}

void Simulation::execute() {
  for (const auto& [i, n] : scheduled_) {
    SeqState& s = seqs_[i];
    s.num_computed += n;
    result_.computed_tokens += n;
    backend_->commit(s);
    if (s.num_computed < s.num_known()) continue;  // prefill continues next step
    if (++s.num_generated == s.req->output_tokens) {
      backend_->release(s);
      running_.erase(std::find(running_.begin(), running_.end(), i));
      retire(i, /*finished=*/true);
    }
  }
}

// A request leaves the system; the next round of its conversation arrives after think time.
void Simulation::retire(size_t i, bool finished) {
  ++(finished ? result_.num_finished : result_.num_rejected);
  std::vector<int32_t>().swap(seqs_[i].tokens);
  const double done_s = now_ + config_.step_s;
  const size_t next = next_round_[i];
  if (next != kNone) arrivals_.emplace(done_s + reqs_[next].arrival_s, next);
}

void Simulation::record_step() {
  Sample s;
  s.time_s = now_;
  s.num_running = static_cast<uint32_t>(running_.size());
  s.num_waiting = static_cast<uint32_t>(waiting_.size());
  s.saturated = memory_bound_ || preempted_this_step_;
  backend_->measure(s);
  all_samples_.push_back(s);
}

SimResult Simulation::run() {
  while (result_.num_steps < config_.max_steps) {
    enqueue_arrivals();
    if (running_.empty() && waiting_.empty()) {
      if (arrivals_.empty()) break;
      now_ = std::max(now_, arrivals_.top().first);  // idle: jump to the next arrival
      continue;
    }
    uint32_t budget = config_.max_num_batched_tokens;
    scheduled_.clear();
    preempted_this_step_ = false;
    memory_bound_ = false;
    schedule_running(budget);
    schedule_waiting(budget);
    execute();
    now_ += config_.step_s;
    ++result_.num_steps;
    record_step();
  }
  result_.num_unfinished = running_.size() + waiting_.size() + arrivals_.size();
  result_.end_time_s = now_;
  result_.mean_queue_wait_s = num_admitted_ > 0 ? queue_wait_sum_ / num_admitted_ : 0;
  result_.prefix_queried_tokens = backend_->prefix_queried_tokens();
  result_.prefix_hit_tokens = backend_->prefix_hit_tokens();
  if (result_.prefix_queried_tokens > 0) {
    result_.prefix_hit_rate = static_cast<double>(result_.prefix_hit_tokens) /
                              static_cast<double>(result_.prefix_queried_tokens);
  }
  finalize();
  return std::move(result_);
}

// Summary figures over all steps, then keeps at most max_samples evenly spaced samples.
void Simulation::finalize() {
  double run_sum = 0, util_sum = 0, frag_sum = 0, sat_run = 0, sat_util = 0, sat_min = 1;
  uint64_t sat = 0;
  for (const Sample& s : all_samples_) {
    result_.peak_running = std::max(result_.peak_running, s.num_running);
    result_.peak_waiting = std::max(result_.peak_waiting, s.num_waiting);
    run_sum += s.num_running;
    util_sum += s.utilisation;
    frag_sum += s.fragmentation;
    if (s.saturated) {
      ++sat;
      sat_run += s.num_running;
      sat_util += s.utilisation;
      sat_min = std::min(sat_min, s.utilisation);
    }
  }
  const double n = std::max<double>(1, static_cast<double>(all_samples_.size()));
  result_.mean_running = run_sum / n;
  result_.mean_utilisation = util_sum / n;
  result_.mean_fragmentation = frag_sum / n;
  result_.num_saturated_steps = sat;
  result_.sustained_running = sat > 0 ? sat_run / static_cast<double>(sat) : result_.mean_running;
  result_.saturated_utilisation = sat > 0 ? sat_util / static_cast<double>(sat) : 0;
  result_.min_saturated_utilisation = sat > 0 ? sat_min : 0;
  const size_t keep = std::max<size_t>(1, config_.max_samples);
  const size_t stride = (all_samples_.size() + keep - 1) / keep;
  for (size_t k = 0; k < all_samples_.size(); k += std::max<size_t>(1, stride)) {
    result_.samples.push_back(all_samples_[k]);
  }
}

}  // namespace

Result<ModelShape> model_shape_preset(std::string_view name) {
  ModelShape m;
  m.name = std::string(name);
  if (name == "small") return m;  // 16 KiB per token in f16
  auto make = [&](uint32_t layers, uint32_t kv_heads, uint32_t head_dim) {
    m.num_layers = layers;
    m.num_kv_heads = kv_heads;
    m.head_dim = head_dim;
    return m;
  };
  if (name == "llama-3-8b" || name == "mistral-7b") return make(32, 8, 128);
  if (name == "llama-3-70b") return make(80, 8, 128);
  if (name == "qwen2-7b") return make(28, 4, 128);
  return Error{"unknown model shape '" + std::string(name) +
               "' (small, llama-3-8b, llama-3-70b, mistral-7b, qwen2-7b)"};
}

Status SimConfig::validate() const {
  if (shape.num_layers == 0 || shape.num_kv_heads == 0 || shape.head_dim == 0) {
    return Error{"model shape needs layers, kv heads and head dim > 0"};
  }
  if (block_size < 8 || block_size > 32) {
    return Error{"block size " + std::to_string(block_size) + " is outside 8..32"};
  }
  if (max_model_len == 0 || max_num_batched_tokens == 0 || max_num_seqs == 0) {
    return Error{"max model len, max batched tokens and max seqs must be > 0"};
  }
  if (!(watermark >= 0 && watermark < 1)) return Error{"watermark must be in [0, 1)"};
  if (!(step_s > 0)) return Error{"step time must be > 0"};
  const uint64_t block_bytes = shape.kv_bytes_per_token() * block_size;
  if (kv_budget_bytes < block_bytes) {
    return Error{"KV budget of " + std::to_string(kv_budget_bytes) + " bytes is less than one " +
                 std::to_string(block_size) + "-token block (" + std::to_string(block_bytes) +
                 " bytes)"};
  }
  return Status::ok_status();
}

std::string_view allocator_name(AllocatorKind k) {
  return k == AllocatorKind::kPaged ? "paged" : "contiguous";
}

SimResult simulate(const std::vector<SimRequest>& requests, const SimConfig& config,
                   AllocatorKind kind) {
  CHECK(config.validate().ok()) << config.validate().message();
  return Simulation(requests, config, kind).run();
}

}  // namespace kvw::kvsim
