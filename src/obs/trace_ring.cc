#include "obs/trace_ring.h"

#include <algorithm>

#include "core/check.h"

namespace kvw::obs {

TraceRing::TraceRing(size_t capacity) : ring_(capacity) {
  CHECK(capacity >= 1) << "trace ring needs room for one event";
}

void TraceRing::push(const TraceEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  push_locked(e);
}

void TraceRing::push_locked(const TraceEvent& e) {
  ring_[next_ % ring_.size()] = e;
  ++next_;
}

void TraceRing::record(const StepObservation& s) {
  const uint64_t ts = s.start_ns / 1000;
  const uint64_t end = (s.start_ns + s.duration_ns) / 1000;
  std::lock_guard<std::mutex> lock(mu_);
  TraceEvent step{.name = "step",
                  .cat = "engine",
                  .ph = 'X',
                  .ts_us = ts,
                  .dur_us = end - ts,
                  .tid = 0,
                  .arg_names = {"seqs", "tokens"},
                  .arg_values = {s.num_seqs, s.num_tokens}};
  push_locked(step);
  auto instant = [&](const char* name, const char* cat, uint32_t tid, const char* arg, uint64_t v) {
    push_locked(TraceEvent{.name = name,
                           .cat = cat,
                           .ph = 'i',
                           .ts_us = end,
                           .dur_us = 0,
                           .tid = tid,
                           .arg_names = {arg, nullptr},
                           .arg_values = {v, 0}});
  };
  if (s.blocks_allocated) instant("kv_alloc", "kv", 1, "blocks", s.blocks_allocated);
  if (s.blocks_freed) instant("kv_free", "kv", 1, "blocks", s.blocks_freed);
  for (uint64_t id : s.preempted_swap) instant("preempt_swap", "sched", 2, "request_id", id);
  for (uint64_t id : s.preempted_recompute)
    instant("preempt_recompute", "sched", 2, "request_id", id);
  for (uint64_t id : s.swapped_in) instant("swap_in", "sched", 2, "request_id", id);
  for (uint64_t id : s.finished) instant("finished", "sched", 2, "request_id", id);
}

std::vector<TraceEvent> TraceRing::events() const {
  std::vector<TraceEvent> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t n = std::min<uint64_t>(next_, ring_.size());
    out.reserve(n);
    for (uint64_t i = next_ - n; i < next_; ++i) out.push_back(ring_[i % ring_.size()]);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.ts_us < b.ts_us; });
  return out;
}

uint64_t TraceRing::num_dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ > ring_.size() ? next_ - ring_.size() : 0;
}

std::string TraceRing::to_json() const {
  const std::vector<TraceEvent> evs = events();
  std::string out = "{\"traceEvents\":[";
  out.reserve(evs.size() * 128 + 64);
  bool first = true;
  for (const TraceEvent& e : evs) {
    if (!first) out += ',';
    first = false;
    // Names and categories are our own static identifiers: no JSON escaping needed.
    out += "{\"name\":\"";
    out += e.name;
    out += "\",\"cat\":\"";
    out += e.cat;
    out += "\",\"ph\":\"";
    out += e.ph;
    out += "\",\"ts\":" + std::to_string(e.ts_us);
    if (e.ph == 'X') out += ",\"dur\":" + std::to_string(e.dur_us);
    if (e.ph == 'i') out += ",\"s\":\"t\"";
    out += ",\"pid\":1,\"tid\":" + std::to_string(e.tid) + ",\"args\":{";
    for (int i = 0; i < 2 && e.arg_names[i]; ++i) {
      if (i) out += ',';
      out += "\"";
      out += e.arg_names[i];
      out += "\":" + std::to_string(e.arg_values[i]);
    }
    out += "}}";
  }
  out += "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":" +
         std::to_string(num_dropped()) + "}}";
  return out;
}

}  // namespace kvw::obs
