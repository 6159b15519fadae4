#include "model/model_maker.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker_tensors.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

using namespace maker;  // TensorMaker

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

// The hyper-parameters a reader finds in the file make_model writes for `s`: the keys the
// family's write_keys writes and the tensors the spec's switches add. The family's tensor
// declaration is made from them, as the loader makes it from the file's (the family test
// checks the two agree for every family).
ModelHParams spec_hparams(const MakeModelSpec& s, int64_t n_vocab) {
  const ModelFamily& family = *find_family(s.arch);
  ModelHParams hp;
  hp.arch = s.arch;
  hp.n_vocab = (int32_t)n_vocab;
  hp.n_embd = s.n_embd;
  hp.n_layer = s.n_layer;
  hp.n_head = s.n_head;
  hp.n_head_kv = s.n_head_kv;
  hp.head_dim = s.head_len();
  hp.n_ff = s.n_ff;
  hp.tied_embeddings = s.tied;
  hp.qkv_bias = family.qkv_bias;
  hp.qkv_fused = family.qkv_fused;
  hp.qk_norm = family.qk_norm;
  hp.gate_up_fused = family.gate_up_fused;
  hp.gemma.post_norms = family.post_norms;
  hp.gemma.scale_embd = family.scale_embd;
  hp.rope.n_rot = s.n_rot > 0 ? s.n_rot : s.head_len();
  hp.longrope = s.longrope;
  MoeParams& moe = hp.moe;
  moe.n_expert = s.n_expert;
  moe.n_expert_used = s.n_expert_used;
  moe.n_ff_exp = s.n_ff_exp > 0 ? s.n_ff_exp : s.n_ff;  // llama's experts: feed_forward_length
  moe.n_ff_shared = s.n_ff_shexp > 0 ? s.n_ff_shexp : s.n_ff_exp * s.n_expert_shared;
  moe.n_layer_dense_lead = s.n_layer_dense_lead;
  moe.probs_bias = s.probs_bias;
  if (s.kv_lora_rank > 0) {
    MlaParams& mla = hp.mla;
    mla.q_lora_rank = s.q_lora_rank;
    mla.kv_lora_rank = s.kv_lora_rank;
    mla.qk_rope_dim = s.qk_rope_dim;
    mla.qk_nope_dim = s.qk_nope_dim;
    mla.v_head_dim = s.v_head_dim;
    mla.split_kv_b = s.mla_layout == MlaLayout::kSplit;
    hp.head_dim = s.qk_nope_dim + s.qk_rope_dim;
    hp.rope.n_rot = s.qk_rope_dim;
  }
  return hp;
}

// Writes every required entry of the family's declaration, in order, drawn as it says.
void write_declared(const TensorTable& table, const MakeModelSpec& s, TensorMaker& tm) {
  const std::vector<TensorDecl>& entries = table.entries();
  std::vector<float> v_b;  // the second part of a split attn_kv_b draw
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorDecl& d = entries[i];
    if (d.optional) continue;
    const GgmlType type = d.store == TensorStore::kF32          ? GgmlType::kF32
                          : d.store == TensorStore::kExpertType ? s.expert_type
                                                                : s.weight_type;
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    const float std = d.std != 0 ? d.std : 1.0f / std::sqrt((float)d.shape[0]);
    switch (d.fill) {
      case TensorFill::kUniform:
        tm.put(d.name, type, d.shape, tm.draw(n, std, d.center));
        break;
      case TensorFill::kLongRopeLong: {
        std::vector<float> v = tm.draw(n, std, d.center);
        for (int64_t k = 0; k < n; ++k) {
          const float x = (float)k / (float)n;
          v[k] += 20.0f * x * x;
        }
        tm.put(d.name, type, d.shape, v);
        break;
      }
      case TensorFill::kMlaKvBSplit: {
        // One attn_kv_b draw (per head h: nope rows of W_kb[h], then vd rows of W_vb[h], each r
        // long): k_b = W_kb[h]^T ({nope, r, nh}), v_b = W_vb[h] ({r, vd, nh}).
        CHECK(i + 1 < entries.size() && entries[i + 1].fill == TensorFill::kMlaKvBSecond);
        const int64_t nope = d.shape[0], r = d.shape[1], nh = d.shape[2];
        const int64_t vd = entries[i + 1].shape[1];
        const std::vector<float> kv_b = tm.draw(nh * (nope + vd) * r, std);
        std::vector<float> k_b(nh * r * nope);
        v_b.assign(nh * vd * r, 0.0f);
        for (int64_t h = 0; h < nh; ++h) {
          const float* head = kv_b.data() + h * (nope + vd) * r;
          for (int64_t a = 0; a < nope; ++a)
            for (int64_t j = 0; j < r; ++j) k_b[(h * r + j) * nope + a] = head[a * r + j];
          std::copy(head + nope * r, head + (nope + vd) * r, v_b.begin() + h * vd * r);
        }
        tm.put(d.name, type, d.shape, k_b);
        break;
      }
      case TensorFill::kMlaKvBSecond:
        tm.put(d.name, type, d.shape, v_b);
        break;
    }
  }
}

}  // namespace

void write_rope_scaling_keys(const MakeModelSpec& s, const std::string& a, GgufWriter& w) {
  if (s.rope_scaling == RopeScaling::kNone) return;
  w.set_string(a + "rope.scaling.type", rope_scaling_name(s.rope_scaling));
  w.set_f32(a + "rope.scaling.factor", s.rope_scale);
  w.set_u32(a + "rope.scaling.original_context_length",
            s.rope_orig_ctx > 0 ? s.rope_orig_ctx : s.n_ctx);
}

const char* mla_layout_name(MlaLayout layout) {
  return layout == MlaLayout::kSplit ? "split" : "kv_b";
}

Result<MlaLayout> parse_mla_layout(const std::string& name) {
  if (name == "kv_b") return MlaLayout::kKvB;
  if (name == "split") return MlaLayout::kSplit;
  return Error{"--mla-layout must be kv_b or split, not '" + name + "'"};
}

Result<ExpertGating> parse_expert_gating(const std::string& name) {
  if (name == "softmax") return ExpertGating::kSoftmax;
  if (name == "sigmoid") return ExpertGating::kSigmoid;
  return Error{"--gating must be softmax or sigmoid, not '" + name + "'"};
}

namespace {

// A flag that only some families read, set for one that does not: refused naming the flag and
// the families that take it, so a file cannot silently ignore it.
Status refuse_foreign_flags(const MakeModelSpec& s, const ModelFamily& family) {
  const struct {
    bool set;
    uint32_t bit;
    const char* flag;
  } uses[] = {
      {s.n_rot != 0, kMakeLongRope, "--rope-dim"},
      {s.longrope, kMakeLongRope, "--longrope"},
      {s.expert_type != GgmlType::kMXFP4, kMakeExpertType, "--expert-type"},
      {s.attn_softcap != 0, kMakeAttnSoftcap, "--attn-softcap"},
      {s.final_softcap != 0, kMakeGemma, "--final-softcap"},
      {s.swa_period != 0, kMakeGemma, "--swa-period"},
      {s.rope_theta_swa != 0, kMakeLocalRopeBase, "--rope-theta-swa"},
      {s.head_dim != 0, kMakeHeadDim, "--head-dim"},
      {s.n_expert != 0, kMakeExperts, "--experts"},
      {s.n_ff_exp != 0, kMakeExpertFfn, "--expert-ffn"},
      {s.n_ff_shexp != 0, kMakeSharedExpert, "--shared-expert-ffn"},
      {s.sliding_window != 0, kMakeWindow, "--sliding-window"},
      {s.q_lora_rank != 0, kMakeMla, "--q-lora-rank"},
      {s.kv_lora_rank != 0, kMakeMla, "--kv-lora-rank"},
      {s.qk_rope_dim != 0, kMakeMla, "--qk-rope-dim"},
      {s.qk_nope_dim != 0, kMakeMla, "--qk-nope-dim"},
      {s.v_head_dim != 0, kMakeMla, "--v-head-dim"},
      {s.mla_layout != MlaLayout::kKvB, kMakeMla, "--mla-layout"},
      {s.n_expert_shared != 0, kMakeMla, "--experts-shared"},
      {s.n_layer_dense_lead != 0, kMakeMla, "--dense-lead"},
      {s.gating != ExpertGating::kSoftmax, kMakeMla, "--gating"},
      {s.n_group != 0, kMakeMla, "--expert-groups"},
      {s.n_group_used != 0, kMakeMla, "--expert-groups-used"},
      {s.expert_weights_scale != 1.0f, kMakeMla, "--expert-weights-scale"},
      {s.expert_weights_norm, kMakeMla, "--expert-weights-norm"},
      {s.probs_bias, kMakeMla, "--probs-bias"},
      {s.yarn_log_multiplier != 0.0f, kMakeMla, "--yarn-log-multiplier"},
  };
  for (const auto& u : uses) {
    if (u.set && !(family.maker.flags & u.bit))
      return Error{std::string(u.flag) + " needs --arch " + families_taking(u.bit)};
  }
  return {};
}

}  // namespace

Status MakeModelSpec::validate() const {
  // The families the reader knows (model/families), no others.
  const ModelFamily* family = find_family(arch);
  if (family == nullptr) return Error{"--arch must be one of " + supported_families()};
  KVW_RETURN_IF_ERROR(refuse_foreign_flags(*this, *family));
  for (const std::string& t : extra_control_tokens) {
    if (t.empty()) return Error{"--control-tokens: a token must not be empty"};
  }
  if (vocab_type != "spm" && vocab_type != "bpe") return Error{"--vocab-type must be spm or bpe"};
  if (weight_type == GgmlType::kQ8_K) return Error{"--weight-type q8_K is not a weight type"};
  if (rope_scaling != RopeScaling::kNone && rope_scale <= 0)
    return Error{"--rope-scale must be > 0"};
  if (gguf_version != 2 && gguf_version != 3) return Error{"--gguf-version must be 2 or 3"};
  if (n_expert < 0) return Error{"--experts must be >= 0"};
  if (n_expert > 0 && (n_expert_used < 1 || n_expert_used > n_expert))
    return Error{"--experts-used must be between 1 and --experts"};
  if (n_expert == 0 && n_expert_used != 0) return Error{"--experts-used needs --experts"};
  return family->maker.validate(*this);
}

Status validate_llama_shape(const MakeModelSpec& s) {
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 ||
      s.n_ctx <= 0)
    return Error{"--dim, --layers, --heads, --kv-heads, --ffn and --context must be > 0"};
  if (s.head_dim < 0) return Error{"--head-dim must be >= 0 (0: --dim / --heads)"};
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    return Error{"--dim must be a multiple of --heads"};
  if (s.n_head % s.n_head_kv != 0) return Error{"--heads must be a multiple of --kv-heads"};
  if (s.head_len() % 2 != 0)
    return Error{"head dimension (--head-dim or --dim / --heads) must be even"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_embd % blk != 0 || s.n_ff % blk != 0 || ((int64_t)s.n_head * s.head_len()) % blk != 0) {
    return Error{"--dim, --ffn and --heads x head dimension must be multiples of " +
                 std::to_string(blk) + " for --weight-type " +
                 std::string(type_traits(s.weight_type).name)};
  }
  return {};
}

Result<MakeModelSpec> make_model_preset(const std::string& name) {
  for (const ModelFamily* f : all_families()) {
    for (const MakerPreset& p : f->maker.presets) {
      if (p.name == name) return p.make();
    }
  }
  return Error{"unknown --preset '" + name + "' (expected " + make_model_preset_names() + ")"};
}

std::string make_model_preset_names() {
  std::string out;
  for (const ModelFamily* f : all_families()) {
    for (const MakerPreset& p : f->maker.presets)
      out += (out.empty() ? "" : ", ") + std::string(p.name);
  }
  return out;
}

Status make_model(const MakeModelSpec& s, const std::string& path) {
  KVW_RETURN_IF_ERROR(s.validate());
  const MakerRules& rules = find_family(s.arch)->maker;
  std::vector<std::string> words(std::begin(kWords), std::end(kWords));
  // A SentencePiece vocabulary that ends in the family's eos control token keeps --n-vocab.
  const bool spm = s.vocab_type == "spm";
  const bool spm_eos = spm && !rules.spm_eos_token.empty();
  Vocab vocab = spm ? build_spm_vocab(words, spm_eos && s.n_vocab > 0 ? s.n_vocab - 1 : s.n_vocab)
                    : build_bpe_vocab(words, std::string(rules.bpe_pre), s.n_vocab);
  if (spm_eos) {
    vocab.eos_id = (int32_t)vocab.tokens.size();
    vocab.tokens.emplace_back(rules.spm_eos_token);
    vocab.scores.push_back(-1000.0f);  // as convert_hf_to_gguf.py scores added tokens
    vocab.types.push_back(TokenType::kControl);
  }
  for (const std::string& t : s.extra_control_tokens) {
    vocab.tokens.push_back(t);
    if (!vocab.scores.empty()) vocab.scores.push_back(-1000.0f);  // byte-level BPE has none
    vocab.types.push_back(TokenType::kControl);
  }
  if (rules.chat_template != nullptr) {
    vocab.chat_template = rules.chat_template;
  } else if (!spm) {
    vocab.chat_template = kChatMlTemplate;
  }
  vocab.add_space_prefix = vocab.add_space_prefix && rules.add_space_prefix;
  const int64_t n_vocab = (int64_t)vocab.tokens.size();

  GgufWriter w(s.gguf_version);
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", s.name);
  rules.write_keys(s, w);
  vocab_to_gguf(vocab, w);

  TensorMaker tm(w, s.seed);
  write_declared(declared_tensors(spec_hparams(s, n_vocab)), s, tm);
  return w.write(path);
}

}  // namespace kvw
