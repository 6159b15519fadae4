// loadgen/workload.cc: prompt text, length distributions and the four workload kinds.
#include "loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace kvw::loadgen {

namespace {
constexpr const char* kWords[] = {
    "the",    "time",  "people", "way",    "day",    "man",   "thing", "woman", "life",
    "child",  "world", "school", "state",  "family", "story", "house", "water", "room",
    "mother", "night", "light",  "river",  "king",   "bird",  "tree",  "small", "little",
    "happy",  "good",  "old",    "new",    "long",   "great", "once",  "upon",  "a",
    "and",    "to",    "of",     "in",     "was",    "said",  "went",  "saw",   "found",
    "made",   "came",  "looked", "played", "wanted", "very",  "big",   "red",   "blue",
    "sun",    "dog",   "cat",    "ball",   "park",   "friend"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string join_words(const std::vector<uint32_t>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) s.push_back(' ');
    s += kWords[words[i]];
  }
  return s;
}

Result<double> number(const std::string& spec, const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (...) {
  }
  return Error{"length distribution '" + spec + "': '" + s + "' is not a number"};
}
}  // namespace

Result<LengthDist> LengthDist::parse(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  // A bare number means fixed.
  if (parts.size() == 1) parts.insert(parts.begin(), "fixed");
  LengthDist d;
  const std::string& kind = parts[0];
  const size_t want = kind == "fixed" ? 2 : 3;
  if (kind == "fixed")
    d.kind = Kind::kFixed;
  else if (kind == "uniform")
    d.kind = Kind::kUniform;
  else if (kind == "normal")
    d.kind = Kind::kNormal;
  else if (kind == "lognormal")
    d.kind = Kind::kLognormal;
  else
    return Error{"length distribution '" + spec +
                 "': use fixed:N, uniform:LO:HI, normal:MEAN:STD or lognormal:MEAN:SIGMA"};
  if (parts.size() != want)
    return Error{"length distribution '" + spec + "': wrong number of fields"};
  auto a = number(spec, parts[1]);
  if (!a.ok()) return a.error();
  d.a = a.value();
  if (want == 3) {
    auto b = number(spec, parts[2]);
    if (!b.ok()) return b.error();
    d.b = b.value();
  }
  if (!(d.a >= 1)) return Error{"length distribution '" + spec + "': lengths must be >= 1"};
  if (d.kind == Kind::kUniform && d.b < d.a)
    return Error{"length distribution '" + spec + "': HI < LO"};
  if (d.kind != Kind::kFixed && d.kind != Kind::kUniform && !(d.b >= 0))
    return Error{"length distribution '" + spec + "': spread must be >= 0"};
  return d;
}

int LengthDist::sample(Rng& rng) const {
  double v = a;
  switch (kind) {
    case Kind::kFixed:
      break;
    case Kind::kUniform:
      v = std::floor(rng.uniform(a, b + 1));
      break;
    case Kind::kNormal:
      v = std::round(rng.normal(a, b));
      break;
    case Kind::kLognormal:
      v = std::round(rng.lognormal(std::log(a) - 0.5 * b * b, b));
      break;
  }
  return static_cast<int>(std::clamp(v, 1.0, 1e7));
}

double LengthDist::mean() const {
  return kind == Kind::kUniform ? 0.5 * (a + b) : a;
}

int EstimatingCounter::count(std::string_view text) {
  return std::max(1, static_cast<int>((text.size() + 3) / 4));
}

std::string make_text(Rng& rng, int num_tokens, TokenCounter& counter, int* tokens_out) {
  std::vector<uint32_t> words;
  // Start from one word per token and correct by the measured ratio a few times.
  words.reserve(static_cast<size_t>(num_tokens) + 16);
  auto add = [&](int n) {
    for (int i = 0; i < n; ++i) words.push_back(static_cast<uint32_t>(rng.uniform_int(kNumWords)));
  };
  add(std::max(1, counter.exact() ? num_tokens : num_tokens * 4 / 5));
  std::string text = join_words(words);
  int tokens = counter.count(text);
  for (int iter = 0; iter < 6 && tokens != num_tokens; ++iter) {
    const double per_word = static_cast<double>(tokens) / static_cast<double>(words.size());
    const int delta =
        static_cast<int>(std::lround((num_tokens - tokens) / std::max(per_word, 0.1)));
    if (delta > 0) {
      add(delta);
    } else {
      const size_t drop = std::min(words.size() - 1, static_cast<size_t>(std::max(1, -delta)));
      words.resize(words.size() - drop);
    }
    text = join_words(words);
    tokens = counter.count(text);
  }
  if (tokens_out) *tokens_out = tokens;
  return text;
}

std::string make_words(Rng& rng, int num_words) {
  std::vector<uint32_t> words(static_cast<size_t>(std::max(1, num_words)));
  for (auto& w : words) w = static_cast<uint32_t>(rng.uniform_int(kNumWords));
  return join_words(words);
}

Status assign_client_mix(std::vector<RequestSpec>& specs, const ClientMix& mix, Rng& rng) {
  auto fraction_ok = [](double f) { return f >= 0 && f <= 1; };
  if (mix.stream_fraction >= 0 && !fraction_ok(mix.stream_fraction))
    return Error{"--stream-fraction must be in [0, 1]"};
  if (!fraction_ok(mix.abort_fraction)) return Error{"--abort-fraction must be in [0, 1]"};
  if (!fraction_ok(mix.impatient_fraction)) return Error{"--impatient-fraction must be in [0, 1]"};
  for (auto& s : specs) {
    // Every draw is made whatever the settings, so changing one fraction keeps the others'.
    const double u_stream = rng.uniform01(), u_abort = rng.uniform01();
    const double u_impatient = rng.uniform01();
    const int n = mix.num_choices.sample(rng);
    const int abort_ms = mix.abort_after_ms.sample(rng);
    if (mix.stream_fraction >= 0) s.stream = u_stream < mix.stream_fraction ? 1 : 0;
    if (mix.has_num_choices) s.n = n;
    s.abort_after_s = u_abort < mix.abort_fraction ? abort_ms / 1e3 : -1;
    s.impatient = u_impatient < mix.impatient_fraction;
  }
  return {};
}

namespace {
Result<std::vector<RequestSpec>> build_random(const WorkloadSpec& w, size_t n, Rng& rng,
                                              TokenCounter& counter) {
  // Text of `len` tokens, or words with input_in_words (then counted once).
  auto text = [&](int len, int* tokens) {
    if (!w.input_in_words) return make_text(rng, len, counter, tokens);
    std::string t = make_words(rng, len);
    if (tokens) *tokens = counter.count(t);
    return t;
  };
  std::vector<std::string> prefixes;
  if (w.prefix_len > 0)
    for (int g = 0; g < std::max(1, w.num_prefix_groups); ++g)
      prefixes.push_back(text(w.prefix_len, nullptr));
  std::vector<RequestSpec> out;
  for (size_t i = 0; i < n; ++i) {
    RequestSpec r;
    const int len = w.input_len.sample(rng);
    r.max_tokens = w.output_len.sample(rng);
    if (prefixes.empty()) {
      r.prompt = text(len, &r.input_tokens);
    } else {
      const int rest = std::max(1, len - w.prefix_len);
      r.prompt = prefixes[i % prefixes.size()] + " " + text(rest, nullptr);
      r.input_tokens = counter.count(r.prompt);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// vLLM's ShareGPT sampling: first human turn is the prompt, the reply's length is max_tokens;
// pairs with fewer than 4 tokens on a side, a prompt over 1024 or a total over 2048 are skipped.
Result<std::vector<RequestSpec>> build_sharegpt(const WorkloadSpec& w, size_t n, Rng& rng,
                                                TokenCounter& counter) {
  std::ifstream in(w.dataset_path);
  if (!in) return Error{"--dataset-path '" + w.dataset_path + "': cannot open"};
  auto doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded() || !doc.is_array())
    return Error{"--dataset-path '" + w.dataset_path + "': not a JSON array of conversations"};
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& entry : doc) {
    if (!entry.is_object() || !entry.contains("conversations")) continue;
    const auto& conv = entry["conversations"];
    if (!conv.is_array() || conv.size() < 2) continue;
    const auto& q = conv[0];
    const auto& a = conv[1];
    if (!q.is_object() || !a.is_object() || q.value("from", "") != "human" ||
        a.value("from", "") != "gpt" || !q["value"].is_string() || !a["value"].is_string())
      continue;
    pairs.emplace_back(q["value"].get<std::string>(), a["value"].get<std::string>());
  }
  for (size_t i = pairs.size(); i > 1; --i) std::swap(pairs[i - 1], pairs[rng.uniform_int(i)]);
  std::vector<RequestSpec> out;
  for (const auto& [prompt, reply] : pairs) {
    if (out.size() >= n) break;
    RequestSpec r;
    r.prompt = prompt;
    r.input_tokens = counter.count(prompt);
    r.max_tokens = counter.count(reply);
    if (r.input_tokens < 4 || r.max_tokens < 4 || r.input_tokens > 1024 ||
        r.input_tokens + r.max_tokens > 2048)
      continue;
    out.push_back(std::move(r));
  }
  if (out.empty())
    return Error{"--dataset-path '" + w.dataset_path + "': no usable human/gpt pairs"};
  // Reuse the sample in order when the file has fewer usable pairs than requests.
  for (size_t i = 0; out.size() < n; ++i) out.push_back(out[i]);
  return out;
}

// Each round adds a user message and a reply of about max_context / rounds tokens together,
// so the whole history sent in the last round reaches about max_context_tokens.
Result<std::vector<RequestSpec>> build_multiturn(const WorkloadSpec& w, Rng& rng,
                                                 TokenCounter& counter) {
  if (w.rounds < 1 || w.num_conversations < 1)
    return Error{"multiturn needs --rounds and --num-conversations >= 1"};
  const int per_round = std::max(2, w.max_context_tokens / w.rounds);
  std::vector<RequestSpec> out;
  for (int round = 0; round < w.rounds; ++round) {
    for (int c = 0; c < w.num_conversations; ++c) {
      RequestSpec r;
      r.conversation_id = c;
      r.round = round;
      r.max_tokens = std::min(w.output_len.sample(rng), per_round / 2);
      r.prompt = make_text(rng, std::max(1, per_round - r.max_tokens), counter, &r.input_tokens);
      out.push_back(std::move(r));
    }
  }
  return out;
}

// Parameters and prompts at the edges of what the sampler and the model must survive. 4xx for
// invalid ones is fine; a 5xx or a dead server is not.
std::vector<RequestSpec> build_extreme(const WorkloadSpec& w, size_t n, Rng& rng,
                                       TokenCounter& counter) {
  using nlohmann::json;
  const std::vector<json> cases = {
      {{"temperature", 0.0}},
      {{"temperature", 1e6}},
      {{"temperature", 1e-7}},
      {{"temperature", 1.0}, {"top_p", 1e-9}},
      {{"temperature", 1.0}, {"top_p", 0.0}},
      {{"temperature", 1.0}, {"top_k", 1}},
      {{"temperature", 1.0}, {"min_p", 0.9999}},
      {{"temperature", 1.0}, {"frequency_penalty", 2.0}, {"presence_penalty", 2.0}},
      {{"temperature", 1.0}, {"frequency_penalty", -2.0}, {"presence_penalty", -2.0}},
      {{"temperature", 1.0}, {"repetition_penalty", 100.0}},  // vLLM's extension
      {{"temperature", 1.0}, {"logit_bias", {{"0", 100}, {"1", -100}, {"2", 100}}}},
      {{"temperature", 1.0}, {"seed", UINT64_MAX}},
      {{"temperature", -1.0}},
      {{"temperature", 1.0}, {"top_p", 1.5}, {"top_k", -5}},
      {{"temperature", 0.7}, {"stop", json::array({"the", "a", " ", "\n"})}},
      {{"temperature", 1e-30}, {"top_p", 1e-30}},
  };
  std::vector<RequestSpec> out;
  const int len = std::max(1, static_cast<int>(w.input_len.mean()));
  for (size_t i = 0; i < n; ++i) {
    RequestSpec r;
    const size_t variant = i % (cases.size() + 3);
    r.max_tokens = w.output_len.sample(rng);
    if (variant < cases.size()) {
      r.extra = cases[variant];
      r.prompt = make_text(rng, len, counter, &r.input_tokens);
    } else if (variant == cases.size()) {  // one token repeated: degenerate attention scores
      std::string p;
      for (int k = 0; k < len; ++k) p += "the ";
      r.prompt = p;
      r.input_tokens = counter.count(p);
    } else if (variant == cases.size() + 1) {  // control characters, emoji, invalid-looking text
      r.prompt = std::string("\x01\x02\t\x7f \xF0\x9F\x98\x80 \xE2\x80\xAE \\u0000 ") +
                 make_text(rng, 8, counter, nullptr);
      r.input_tokens = counter.count(r.prompt);
    } else {  // a single generated token
      r.max_tokens = 1;
      r.prompt = make_text(rng, len, counter, &r.input_tokens);
    }
    out.push_back(std::move(r));
  }
  return out;
}
}  // namespace

Result<std::vector<RequestSpec>> build_workload(const WorkloadSpec& spec, size_t num_requests,
                                                Rng& rng, TokenCounter& counter) {
  if (spec.kind == "random") return build_random(spec, num_requests, rng, counter);
  if (spec.kind == "sharegpt") return build_sharegpt(spec, num_requests, rng, counter);
  if (spec.kind == "multiturn") return build_multiturn(spec, rng, counter);
  if (spec.kind == "extreme") return build_extreme(spec, num_requests, rng, counter);
  return Error{"--workload '" + spec.kind + "': use random, sharegpt, multiturn or extreme"};
}

}  // namespace kvw::loadgen
