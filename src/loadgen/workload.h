// loadgen/workload.h: what each benchmark request asks for: prompt text, max_tokens and extra
// body fields. Kinds: random lengths from a distribution (optionally sharing per-group prefixes),
// ShareGPT conversations, long multi-turn conversations and an "extreme values" set that pushes
// the server's numerics. Everything comes from the seeded Rng, so a seed fixes every prompt.
// Not thread-safe; built once before a run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "loadgen/rng.h"

namespace kvw::loadgen {

// "fixed:N", "uniform:LO:HI", "normal:MEAN:STD", "lognormal:MEAN:SIGMA" (SIGMA in log space,
// mu chosen so the mean is MEAN). Samples are rounded and clamped to >= 1.
struct LengthDist {
  enum class Kind { kFixed, kUniform, kNormal, kLognormal };
  Kind kind = Kind::kFixed;
  double a = 128, b = 0;
  static Result<LengthDist> parse(const std::string& spec);
  int sample(Rng& rng) const;
  double mean() const;
};

// Counts the tokens of a text the way the target does (/tokenize), or estimates them.
class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  virtual int count(std::string_view text) = 0;
  virtual bool exact() const = 0;
};

// ~4 characters per token, the usual English average.
class EstimatingCounter : public TokenCounter {
 public:
  int count(std::string_view text) override;
  bool exact() const override { return false; }
};

struct RequestSpec {
  std::string prompt;    // the prompt, or for multi-turn the new user message of this round
  int input_tokens = 0;  // of `prompt`; exact when the counter is
  int max_tokens = 16;
  int conversation_id = -1;  // multi-turn: which conversation; -1 = independent request
  int round = 0;
  nlohmann::json extra = nlohmann::json::object();  // merged into the request body
  // Client behaviour (assign_client_mix); the defaults are the run's settings.
  int n = 0;                  // choices ("n"); 0: not sent
  int stream = -1;            // 1 streamed, 0 not, -1 the run's --no-stream setting
  double abort_after_s = -1;  // the client leaves this long after its first send; < 0: never
  bool impatient = false;     // ignores Retry-After, retries after a fixed short delay
};

struct WorkloadSpec {
  std::string kind = "random";  // random | sharegpt | multiturn | extreme
  LengthDist input_len{LengthDist::Kind::kFixed, 256, 0};
  LengthDist output_len{LengthDist::Kind::kFixed, 64, 0};
  int prefix_len = 0;             // random: tokens of shared prefix per group
  int num_prefix_groups = 1;      // random: request i uses prefix i % groups
  std::string dataset_path;       // sharegpt: JSON file
  int num_conversations = 4;      // multiturn
  int rounds = 16;                // multiturn: rounds per conversation
  int max_context_tokens = 8192;  // multiturn: history reaches about this by the last round
  bool input_in_words = false;    // random: input_len (and prefix_len) count words, not tokens
};

// num_requests specs (multiturn: num_conversations * rounds, round-major, ignoring num_requests).
Result<std::vector<RequestSpec>> build_workload(const WorkloadSpec& spec, size_t num_requests,
                                                Rng& rng, TokenCounter& counter);

// A mix of client behaviours, drawn per request from the seeded Rng.
struct ClientMix {
  double stream_fraction = -1;  // share of requests streamed; < 0: leave to the run's setting
  bool has_num_choices = false;
  LengthDist num_choices{LengthDist::Kind::kFixed, 1, 0};  // "n" of each request
  double abort_fraction = 0;                               // share whose client leaves early ...
  LengthDist abort_after_ms{LengthDist::Kind::kFixed, 1000, 0};  // ... this long after sending
  double impatient_fraction = 0;  // share that ignore Retry-After (see RunConfig)
};
// Sets n, stream, abort_after_s and impatient of every spec. Fractions must be in [0, 1]
// (stream_fraction may be < 0: unset); an error names the flag.
Status assign_client_mix(std::vector<RequestSpec>& specs, const ClientMix& mix, Rng& rng);

// num_words random English-like words separated by spaces.
std::string make_words(Rng& rng, int num_words);

// Random English-like text of about num_tokens tokens (exactly, when the counter is exact and a
// few corrections suffice). tokens_out receives the counted length.
std::string make_text(Rng& rng, int num_tokens, TokenCounter& counter, int* tokens_out);

}  // namespace kvw::loadgen
