#include "model/model_maker.h"

#include <cmath>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

// Common English words: text built from them tokenises into whole-word pieces.
const char* const kWords[] = {
    "the",     "a",       "an",      "and",   "or",      "but",    "if",     "then",   "so",
    "because", "of",      "to",      "in",    "on",      "at",     "by",     "for",    "with",
    "from",    "up",      "down",    "out",   "over",    "under",  "again",  "once",   "upon",
    "time",    "there",   "was",     "were",  "is",      "are",    "be",     "been",   "has",
    "had",     "have",    "do",      "did",   "does",    "say",    "said",   "go",     "went",
    "come",    "came",    "see",     "saw",   "look",    "looked", "want",   "wanted", "like",
    "liked",   "love",    "loved",   "play",  "played",  "run",    "ran",    "walk",   "walked",
    "find",    "found",   "give",    "gave",  "take",    "took",   "make",   "made",   "know",
    "knew",    "think",   "thought", "feel",  "felt",    "happy",  "sad",    "big",    "small",
    "little",  "good",    "bad",     "new",   "old",     "red",    "blue",   "green",  "sun",
    "moon",    "sky",     "tree",    "park",  "house",   "home",   "dog",    "cat",    "bird",
    "fish",    "ball",    "toy",     "car",   "boat",    "girl",   "boy",    "mom",    "dad",
    "friend",  "friends", "day",     "night", "morning", "water",  "food",   "cake",   "box",
    "door",    "he",      "she",     "it",    "they",    "we",     "you",    "i",      "his",
    "her",     "their",   "our",     "your",  "my",      "this",   "that",   "these",  "those",
    "what",    "who",     "where",   "when",  "why",     "how",    "not",    "no",     "yes",
    "very",    "too",     "also",    "all",   "some",    "many",   "one",    "two",    "three",
    "first",   "last",    "memory",  "cache", "block",   "token",  "server", "model",  "request",
    "budget",  "never",   "fast",    "slow",  "hello",   "world",  "story",  "name",   "named",
    "lily",    "tom",     "ben",     "sam",
};

// Fast seeded generator (splitmix64): ~1 ns per value, so a 1.1B-parameter file takes seconds.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform with standard deviation `std` (uniform on [-sqrt(3) std, sqrt(3) std]).
  float uniform_std(float std) {
    const double u = (double)(next() >> 11) * 0x1.0p-53;
    return (float)((2.0 * u - 1.0) * 1.7320508075688772 * std);
  }

 private:
  uint64_t s_;
};

std::vector<uint8_t> encode_tensor(GgmlType type, const std::vector<float>& v, int64_t row) {
  const uint64_t rb = *row_bytes(type, row);
  const int64_t n_rows = (int64_t)v.size() / row;
  std::vector<uint8_t> out(rb * n_rows);
  for (int64_t r = 0; r < n_rows; ++r)
    quantize_row(type, v.data() + r * row, out.data() + r * rb, row);
  return out;
}

class TensorMaker {
 public:
  TensorMaker(GgufWriter& w, uint64_t seed) : w_(w), rng_(seed) {}

  // Matrix of n_rows x n_in; std 1/sqrt(n_in) keeps activations of order one through the layers.
  void matrix(const std::string& name, int64_t n_in, int64_t n_rows, GgmlType type, float std = 0) {
    if (std == 0) std = 1.0f / std::sqrt((float)n_in);
    std::vector<float> v(n_in * n_rows);
    for (auto& x : v) x = rng_.uniform_std(std);
    w_.add_tensor(name, type, {n_in, n_rows}, encode_tensor(type, v, n_in));
  }
  // n_expert stacked matrices of n_rows x n_in (ggml shape [n_in, n_rows, n_expert]).
  void experts(const std::string& name, int64_t n_in, int64_t n_rows, int64_t n_expert,
               GgmlType type) {
    const float std = 1.0f / std::sqrt((float)n_in);
    std::vector<float> v(n_in * n_rows * n_expert);
    for (auto& x : v) x = rng_.uniform_std(std);
    w_.add_tensor(name, type, {n_in, n_rows, n_expert}, encode_tensor(type, v, n_in));
  }
  // Vector around `center`: norms near 1, biases near 0.
  void vector(const std::string& name, int64_t n, float center, float std) {
    std::vector<float> v(n);
    for (auto& x : v) x = center + rng_.uniform_std(std);
    w_.add_tensor(name, GgmlType::kF32, {n}, encode_tensor(GgmlType::kF32, v, n));
  }

 private:
  GgufWriter& w_;
  Rng rng_;
};

// ChatML: used by Qwen2 and a common choice for small chat models.
const char* const kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

Status MakeModelSpec::validate() const {
  if (arch != "llama" && arch != "qwen2") return Error{"--arch must be llama or qwen2"};
  if (vocab_type != "spm" && vocab_type != "bpe") return Error{"--vocab-type must be spm or bpe"};
  if (n_embd <= 0 || n_layer <= 0 || n_head <= 0 || n_head_kv <= 0 || n_ff <= 0 || n_ctx <= 0)
    return Error{"--dim, --layers, --heads, --kv-heads, --ffn and --context must be > 0"};
  if (n_embd % n_head != 0) return Error{"--dim must be a multiple of --heads"};
  if (n_head % n_head_kv != 0) return Error{"--heads must be a multiple of --kv-heads"};
  if ((n_embd / n_head) % 2 != 0) return Error{"head dimension (--dim / --heads) must be even"};
  const int64_t blk = type_traits(weight_type).block_elems;
  if (n_embd % blk != 0 || n_ff % blk != 0) {
    return Error{"--dim and --ffn must be multiples of " + std::to_string(blk) +
                 " for --weight-type " + std::string(type_traits(weight_type).name)};
  }
  if (weight_type == GgmlType::kQ8_K) return Error{"--weight-type q8_K is not a weight type"};
  if (rope_scaling != RopeScaling::kNone && rope_scale <= 0)
    return Error{"--rope-scale must be > 0"};
  if (gguf_version != 2 && gguf_version != 3) return Error{"--gguf-version must be 2 or 3"};
  if (n_expert < 0) return Error{"--experts must be >= 0"};
  if (n_expert > 0 && arch != "llama") return Error{"--experts needs --arch llama"};
  if (n_expert > 0 && (n_expert_used < 1 || n_expert_used > n_expert))
    return Error{"--experts-used must be between 1 and --experts"};
  if (n_expert == 0 && n_expert_used != 0) return Error{"--experts-used needs --experts"};
  return {};
}

Result<MakeModelSpec> make_model_preset(const std::string& name) {
  MakeModelSpec s;
  if (name == "tiny") return s;
  if (name == "tinyllama-1.1b") {
    s.name = "tinyllama-1.1b-shaped-random";
    s.n_embd = 2048;
    s.n_layer = 22;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.n_ff = 5632;
    s.n_vocab = 32000;
    s.n_ctx = 2048;
    return s;
  }
  if (name == "mixtral-tiny") {
    s.name = "mixtral-tiny-random";
    s.n_layer = 4;
    s.n_expert = 8;
    s.n_expert_used = 2;
    return s;
  }
  if (name == "mixtral-1b") {
    // Mixtral-8x7B's proportions (GQA 4:1, ffn 3.5 x dim, 8 experts, top-2) at dim 1024:
    // 0.79B parameters, 0.26B active per token.
    s.name = "mixtral-1b-shaped-random";
    s.n_embd = 1024;
    s.n_layer = 8;
    s.n_head = 16;
    s.n_head_kv = 4;
    s.n_ff = 3584;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_vocab = 32000;
    s.n_ctx = 4096;
    return s;
  }
  return Error{"unknown --preset '" + name +
               "' (expected tiny, tinyllama-1.1b, mixtral-tiny or mixtral-1b)"};
}

Status make_model(const MakeModelSpec& s, const std::string& path) {
  KVW_RETURN_IF_ERROR(s.validate());
  std::vector<std::string> words(std::begin(kWords), std::end(kWords));
  Vocab vocab = s.vocab_type == "spm"
                    ? build_spm_vocab(words, s.n_vocab)
                    : build_bpe_vocab(words, s.arch == "qwen2" ? "qwen2" : "llama3", s.n_vocab);
  if (s.arch == "qwen2" || s.vocab_type == "bpe") vocab.chat_template = kChatMlTemplate;
  const int64_t n_vocab = (int64_t)vocab.tokens.size();

  GgufWriter w(s.gguf_version);
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", s.name);
  w.set_u32(a + "context_length", s.n_ctx);
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "block_count", s.n_layer);
  w.set_u32(a + "feed_forward_length", s.n_ff);
  w.set_u32(a + "attention.head_count", s.n_head);
  w.set_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_u32(a + "rope.dimension_count", s.n_embd / s.n_head);
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", s.n_expert);
    w.set_u32(a + "expert_used_count", s.n_expert_used);
  }
  if (s.rope_scaling != RopeScaling::kNone) {
    w.set_string(a + "rope.scaling.type", rope_scaling_name(s.rope_scaling));
    w.set_f32(a + "rope.scaling.factor", s.rope_scale);
    w.set_u32(a + "rope.scaling.original_context_length",
              s.rope_orig_ctx > 0 ? s.rope_orig_ctx : s.n_ctx);
  }
  vocab_to_gguf(vocab, w);

  TensorMaker tm(w, s.seed);
  const int64_t d = s.n_embd, hd = s.n_embd / s.n_head, q = s.n_head * hd, kv = s.n_head_kv * hd;
  tm.matrix("token_embd.weight", d, n_vocab, s.weight_type, 1.0f);
  for (int32_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tm.vector(p + "attn_norm.weight", d, 1.0f, 0.1f);
    tm.matrix(p + "attn_q.weight", d, q, s.weight_type);
    tm.matrix(p + "attn_k.weight", d, kv, s.weight_type);
    tm.matrix(p + "attn_v.weight", d, kv, s.weight_type);
    if (s.arch == "qwen2") {
      tm.vector(p + "attn_q.bias", q, 0.0f, 0.1f);
      tm.vector(p + "attn_k.bias", kv, 0.0f, 0.1f);
      tm.vector(p + "attn_v.bias", kv, 0.0f, 0.1f);
    }
    tm.matrix(p + "attn_output.weight", q, d, s.weight_type);
    tm.vector(p + "ffn_norm.weight", d, 1.0f, 0.1f);
    if (s.n_expert == 0) {
      tm.matrix(p + "ffn_gate.weight", d, s.n_ff, s.weight_type);
      tm.matrix(p + "ffn_up.weight", d, s.n_ff, s.weight_type);
      tm.matrix(p + "ffn_down.weight", s.n_ff, d, s.weight_type);
      continue;
    }
    // The router stays f32, as llama.cpp's quantizer leaves ffn_gate_inp; std 3/sqrt(d) spreads
    // router logits (std ~3) so the top-k choice is rarely a near-tie.
    tm.matrix(p + "ffn_gate_inp.weight", d, s.n_expert, GgmlType::kF32, 3.0f / std::sqrt((float)d));
    tm.experts(p + "ffn_gate_exps.weight", d, s.n_ff, s.n_expert, s.weight_type);
    tm.experts(p + "ffn_up_exps.weight", d, s.n_ff, s.n_expert, s.weight_type);
    tm.experts(p + "ffn_down_exps.weight", s.n_ff, d, s.n_expert, s.weight_type);
  }
  tm.vector("output_norm.weight", d, 1.0f, 0.1f);
  if (!s.tied) tm.matrix("output.weight", d, n_vocab, s.weight_type);
  return w.write(path);
}

}  // namespace kvw
