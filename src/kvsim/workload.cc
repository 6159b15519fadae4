// kvsim/workload.cc: built-in request patterns and the JSONL trace reader.
#include "kvsim/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/check.h"

namespace kvw::kvsim {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Own generator instead of <random> distributions: their output differs between standard
// libraries, and the simulation must give the same numbers everywhere for a seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(splitmix64(seed ^ 0x6b7673696dull)) {}
  uint64_t next() { return state_ = splitmix64(state_); }
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  uint32_t uniform(uint32_t lo, uint32_t hi) {  // inclusive; hi < lo is treated as lo
    if (hi <= lo) return lo;
    return lo + static_cast<uint32_t>(next() % (uint64_t{hi} - lo + 1));
  }
  double exponential(double mean) { return -mean * std::log1p(-uniform01()); }

 private:
  uint64_t state_;
};

void sort_by_arrival(std::vector<SimRequest>& reqs) {
  std::stable_sort(reqs.begin(), reqs.end(), [](const SimRequest& a, const SimRequest& b) {
    if (a.follow_previous != b.follow_previous) return !a.follow_previous;
    return std::tie(a.arrival_s, a.conversation_id, a.round) <
           std::tie(b.arrival_s, b.conversation_id, b.round);
  });
}

SimRequest single(Rng& rng, const WorkloadSpec& spec, uint64_t id, double arrival_s) {
  SimRequest r;
  r.arrival_s = arrival_s;
  r.conversation_id = id;
  r.output_tokens = rng.uniform(std::max(1u, spec.min_output_tokens), spec.max_output_tokens);
  r.prompt_tokens = rng.uniform(std::max(1u, spec.min_prompt_tokens), spec.max_prompt_tokens);
  if (r.prompt_tokens + r.output_tokens > spec.max_model_len) {
    r.output_tokens = std::max(1u, r.output_tokens / 2);
    r.prompt_tokens = std::min(r.prompt_tokens, spec.max_model_len - r.output_tokens);
  }
  return r;
}

void gen_multiturn(const WorkloadSpec& spec, Rng& rng, std::vector<SimRequest>& out) {
  for (uint32_t c = 0; c < spec.num_requests; ++c) {
    const uint32_t rounds = rng.uniform(spec.min_rounds, spec.max_rounds);
    uint32_t context = spec.system_prompt_tokens;  // tokens every later round re-sends
    for (uint32_t k = 0; k < rounds; ++k) {
      SimRequest r;
      r.conversation_id = c + 1;
      r.round = k;
      r.prompt_tokens = context + rng.uniform(spec.min_turn_tokens, spec.max_turn_tokens);
      r.output_tokens = rng.uniform(std::max(1u, spec.min_reply_tokens), spec.max_reply_tokens);
      if (r.prompt_tokens + r.output_tokens > spec.max_model_len) break;  // conversation full
      r.follow_previous = k > 0;
      r.arrival_s =
          k == 0 ? c * spec.conversation_stagger_s : spec.think_s * (0.5 + rng.uniform01());
      context = r.prompt_tokens + r.output_tokens;
      out.push_back(r);
    }
  }
}

}  // namespace

int32_t token_at(const SimRequest& r, uint32_t pos) {
  const bool shared = pos < r.shared_prefix_tokens;
  const uint64_t key = shared ? (r.prefix_group << 1) | 1 : r.conversation_id << 1;
  return static_cast<int32_t>(1 + splitmix64(key * 0x100000001b3ull + pos) % 31999);
}

std::string_view pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kMultiturn:
      return "multiturn";
    case Pattern::kBurst:
      return "burst";
    case Pattern::kRandom:
      return "random";
    case Pattern::kSharedPrefix:
      return "shared-prefix";
    case Pattern::kPoisson:
      return "poisson";
  }
  return "?";
}

Result<Pattern> parse_pattern(std::string_view s) {
  for (Pattern p : {Pattern::kMultiturn, Pattern::kBurst, Pattern::kRandom, Pattern::kSharedPrefix,
                    Pattern::kPoisson}) {
    if (s == pattern_name(p)) return p;
  }
  return Error{"unknown pattern '" + std::string(s) +
               "' (multiturn, burst, random, shared-prefix, poisson)"};
}

std::vector<SimRequest> generate_workload(const WorkloadSpec& spec) {
  Rng rng(spec.seed);
  std::vector<SimRequest> out;
  const double rate = spec.rate_per_s > 0 ? spec.rate_per_s : 1.0;
  double t = 0;
  switch (spec.pattern) {
    case Pattern::kMultiturn:
      gen_multiturn(spec, rng, out);
      break;
    case Pattern::kBurst:
      for (uint32_t i = 0; i < spec.num_requests; ++i) {
        const uint32_t burst = i / std::max(1u, spec.burst_size);
        out.push_back(single(rng, spec, i + 1, burst * spec.burst_interval_s));
      }
      break;
    case Pattern::kRandom:
      for (uint32_t i = 0; i < spec.num_requests; ++i) {
        out.push_back(single(rng, spec, i + 1, rng.uniform01() * spec.num_requests / rate));
      }
      break;
    case Pattern::kPoisson:
    case Pattern::kSharedPrefix:
      for (uint32_t i = 0; i < spec.num_requests; ++i) {
        t += rng.exponential(1.0 / rate);
        SimRequest r = single(rng, spec, i + 1, t);
        if (spec.pattern == Pattern::kSharedPrefix) {
          r.prefix_group = 1 + i % std::max(1u, spec.num_groups);
          r.shared_prefix_tokens = std::min(spec.group_prefix_tokens, spec.max_model_len / 2);
          r.prompt_tokens = std::min(r.shared_prefix_tokens + r.prompt_tokens,
                                     spec.max_model_len - r.output_tokens);
        }
        out.push_back(r);
      }
      break;
  }
  sort_by_arrival(out);
  return out;
}

Result<std::vector<SimRequest>> parse_trace(std::string_view text, std::string_view file_name) {
  std::vector<SimRequest> out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto fail = [&](const std::string& what) {
      return Error{std::string(file_name) + ":" + std::to_string(line_no) + ": " + what};
    };
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("not valid JSON");
    if (!j.is_object()) return fail("expected a JSON object");
    for (const char* key : {"arrival", "conversation", "prompt_tokens", "output_tokens"}) {
      if (!j.contains(key)) return fail(std::string("missing \"") + key + "\"");
      if (!j[key].is_number()) return fail(std::string("\"") + key + "\" is not a number");
    }
    const double arrival = j["arrival"].get<double>();
    if (!(arrival >= 0) || !std::isfinite(arrival)) return fail("\"arrival\" must be >= 0");
    for (const char* key : {"conversation", "prompt_tokens", "output_tokens"}) {
      if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0) {
        return fail(std::string("\"") + key + "\" must be a non-negative integer");
      }
    }
    const int64_t prompt = j["prompt_tokens"].get<int64_t>();
    const int64_t output = j["output_tokens"].get<int64_t>();
    if (prompt < 1 || prompt > (1 << 24)) return fail("\"prompt_tokens\" must be in [1, 16M]");
    if (output < 1 || output > (1 << 24)) return fail("\"output_tokens\" must be in [1, 16M]");
    SimRequest r;
    r.arrival_s = arrival;
    r.conversation_id = j["conversation"].get<uint64_t>();
    r.prompt_tokens = static_cast<uint32_t>(prompt);
    r.output_tokens = static_cast<uint32_t>(output);
    out.push_back(r);
  }
  sort_by_arrival(out);
  // Rounds are numbered in arrival order within each conversation.
  std::unordered_map<uint64_t, uint32_t> next_round;
  for (auto& r : out) r.round = next_round[r.conversation_id]++;
  return out;
}

Result<std::vector<SimRequest>> read_trace_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error{path + ": cannot open trace file"};
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_trace(ss.str(), path);
}

}  // namespace kvw::kvsim
