#include "model/model.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "core/huge_page_usage.h"
#include "core/ids.h"
#include "core/log.h"
#include "kernels/kernels.h"
#include "kv/window_slots.h"
#include "model/forward_util.h"
#include "model/moe_router.h"
#include "model/workspace_layout.h"

namespace kvw {
namespace {

// ", LongRoPE long factors (max_model_len 8192 > original context 4096)" when the file has them.
std::string longrope_note(const ModelWeights& w, const ModelHParams& hp, int64_t max_model_len) {
  if (w.rope_long.empty() && w.rope_short.empty()) return "";
  const int64_t ctx = max_model_len > 0 ? max_model_len : hp.n_ctx_train;
  const bool is_long = rope_factors(w, hp, max_model_len).data() == w.rope_long.data();
  return std::string(", LongRoPE ") + (is_long ? "long" : "short") + " factors (max_model_len " +
         std::to_string(ctx) + (is_long ? " > " : " <= ") + "original context " +
         std::to_string(hp.rope.orig_ctx) + ", attn_factor " + std::to_string(hp.rope.attn_factor) +
         ")";
}

void apply_rope_override(const RopeOverride& o, RopeParams& r) {
  if (o.scaling) r.scaling = *o.scaling;
  if (o.scale_factor) r.scale_factor = *o.scale_factor;
  if (o.freq_base) r.freq_base = *o.freq_base;
  if (o.orig_ctx) r.orig_ctx = *o.orig_ctx;
  if (r.scaling == RopeScaling::kNone) r.scale_factor = 1.0f;
}

// "weights: 606 of 610 MiB on 2 MiB pages (99.3%)". MADV_HUGEPAGE is a request, and whether it
// was granted decides decode speed (issue 29), so say.
void log_huge_page_share(const Model& m) {
  const uint64_t bytes = m.weights_memory_bytes();
  const std::optional<uint64_t> huge = m.weights_huge_page_bytes();
  if (!huge) {
    LOG(INFO, model) << "weights: " << (bytes >> 20)
                     << " MiB, share on 2 MiB pages unknown (/proc/self/smaps unreadable)";
    return;
  }
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.1f", bytes > 0 ? 100.0 * double(*huge) / double(bytes) : 0.0);
  LOG(INFO, model) << "weights: " << (*huge >> 20) << " of " << (bytes >> 20)
                   << " MiB on 2 MiB pages (" << pct << "%)";
}

}  // namespace

std::span<const float> rope_factors(const ModelWeights& w, const ModelHParams& hp,
                                    int64_t max_model_len) {
  if (!w.rope_freqs.empty()) return w.rope_freqs;
  const int64_t ctx = max_model_len > 0 ? max_model_len : hp.n_ctx_train;
  return ctx > hp.rope.orig_ctx ? w.rope_long : w.rope_short;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& opt) {
  if (opt.max_batch_tokens <= 0) return Error{"max batch tokens must be > 0"};
  auto file = GgufFile::open(path);
  if (!file) return Error{file.message()};
  return load(std::move(*file), opt);
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<GgufFile> file,
                                           const ModelOptions& opt) {
  auto hp = hparams_from_gguf(*file);
  if (!hp) return Error{hp.message()};
  return load(std::move(file), std::move(*hp), opt);
}

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<GgufFile> file, ModelHParams hp,
                                           const ModelOptions& opt) {
  if (opt.max_batch_tokens <= 0) return Error{"max batch tokens must be > 0"};
  apply_rope_override(opt.rope, hp.rope);
  if (hp.rope.scale_factor <= 0.0f) return Error{"rope scale factor must be > 0"};
  if (opt.attention_bf16_dot) {
    if (!kernels::attention_bf16_dot_supported(kernels::kernels())) {
      return Error{std::string("--attention-dot bf16 needs AVX512_BF16 and an AVX-512 kernel "
                               "table; this process runs ") +
                   kernels::kernels().isa + " (use --attention-dot f32)"};
    }
    if (hp.head_dim % 2 != 0 || hp.head_dim > 512) {
      return Error{"--attention-dot bf16: head_dim " + std::to_string(hp.head_dim) +
                   " is not even and at most 512"};
    }
    LOG(INFO, model) << "attention q.k products in bf16 (--attention-dot bf16)";
  }
  // Weights on huge pages: decode streams all of them every step (gguf_file.h says why).
  KVW_RETURN_IF_ERROR(file->move_tensors_to_memory());
  auto w = weights_from_gguf(*file, hp);
  if (!w) return Error{w.message()};
  if (opt.pack_weights) {
    // Prefill-speed GEMM: Q8_0/Q4_0/F32/F16/BF16 matrices are repacked once, in place
    // (kernels/packed.cc, packed_float.cc).
    auto packed = pack_matrices(*file, *w, kernels::kernels());
    if (!packed) return Error{packed.message()};
    LOG(INFO, model) << "repacked " << *packed / (1 << 20) << " MiB of weights for "
                     << kernels::kernels().isa << " matmul_packed";
  }
  auto model =
      std::unique_ptr<Model>(new Model(std::move(file), std::move(hp), std::move(w.value()), opt));
  log_huge_page_share(*model);
  return model;
}

std::optional<uint64_t> Model::weights_huge_page_bytes() const {
  const std::span<const uint8_t> mem = file_->tensor_memory();
  return huge_page_bytes(mem.data(), mem.size());
}

Model::Model(std::unique_ptr<GgufFile> file, ModelHParams hp, ModelWeights w,
             const ModelOptions& opt)
    : file_(std::move(file)),
      hp_(std::move(hp)),
      w_(std::move(w)),
      rope_(mla_rope_params(hp_), rope_factors(w_, hp_, opt.max_model_len)),
      rope_swa_(hp_.has_rope_swa ? std::optional<RopeTable>(std::in_place, hp_.rope_swa,
                                                            std::span<const float>(w_.rope_freqs))
                                 : std::nullopt),
      pool_(opt.n_threads, "kvw-fwd"),
      max_tokens_(opt.max_batch_tokens),
      clamp_(opt.activation_clamp),
      bf16_dot_(opt.attention_bf16_dot) {
  // Every buffer from one description the planner sums too (model/workspace_layout.h).
  dims_ = model_dims(hp_);
  dims_.matmul = matmul_needs(*file_, hp_);
  if (!opt.pack_weights) dims_.matmul.packed.clear();  // nothing repacked: no GEMM scratch
  const WorkspaceLayout ws = workspace_layout(dims_, max_tokens_, pool_.num_threads());
  check_workspace_fits(ws);
  const MoeParams& moe = hp_.moe;
  tok_.resize(ws.tokens);
  logit_src_.resize(ws.tokens);
  x_.resize(ws.x);
  xn_.resize(ws.xn);
  act_q8_0_.resize(ws.act_q8_0_bytes);
  act_q8_k_.resize(ws.act_q8_k_bytes);
  q_.resize(ws.q);
  k_.resize(ws.k);
  v_.resize(ws.v);
  tmp_.resize(ws.tmp);
  gate_.resize(ws.gate);
  up_.resize(ws.up);
  cs_.resize(ws.cs);
  cs_swa_.resize(ws.cs_swa);
  attn_scratch_.resize(ws.attn_scratch);
  gemm_scratch_floats_ = ws.gemm_scratch_per_thread;
  gemm_scratch_.resize(ws.gemm_scratch);
  router_logits_.resize(ws.router_logits);
  router_scratch_.resize(ws.router_scratch);
  route_ids_.resize(ws.route_ids);
  route_weights_.resize(ws.route_weights);
  route_slot_.resize(ws.route_slot);
  assign_tok_.resize(ws.assign_tok);
  expert_begin_.resize(ws.expert_begin);
  moe_rows_.resize(ws.moe_rows);
  if (hp_.mla.is_mla()) mla_scale_ = mla_score_scale(hp_);
  mla_q_.resize(ws.mla_q);
  mla_in_.resize(ws.mla_in);
  mla_out_.resize(ws.mla_out);
  mla_row_.resize(ws.mla_row);
  mla_act_.resize(ws.mla_act_bytes);
  workspace_bytes_ = ws.bytes();
  LOG(INFO, model) << hp_.arch << " " << hp_.n_layer << " layers, n_embd " << hp_.n_embd
                   << ", heads " << hp_.n_head << "/" << hp_.n_head_kv << ", n_ff " << hp_.n_ff
                   << (moe.is_moe() ? ", experts " + std::to_string(moe.n_expert_used) + " of " +
                                          std::to_string(moe.n_expert)
                                    : std::string())
                   << ", vocab " << hp_.n_vocab << ", weights " << w_.total_bytes / (1 << 20)
                   << " MiB, workspace " << workspace_bytes_ / (1 << 20) << " MiB (" << max_tokens_
                   << " tokens), rope " << rope_scaling_name(hp_.rope.scaling)
                   << longrope_note(w_, hp_, opt.max_model_len) << ", kernels "
                   << kernels::kernels().isa << " x" << pool_.num_threads();
}

Model::~Model() = default;

// The layout's matmul needs come from the file's tensor table (as the planner reads it); every
// weight the loader made must fit them, or a step would write past its buffers.
void Model::check_workspace_fits(const WorkspaceLayout& ws) const {
  const MatmulNeeds& n = dims_.matmul;
  auto check = [&](const WeightMatrix& m, const char* what) {
    if (m.data == nullptr) return;
    const int64_t row = kernels::act_row_bytes(m.type, m.n_in);
    CHECK(!uses_q8_0(m.type) || row <= n.act_q8_0_row_bytes)
        << what << ": Q8_0 row " << row << " B > " << n.act_q8_0_row_bytes;
    CHECK(!uses_q8_k(m.type) || row <= n.act_q8_k_row_bytes)
        << what << ": Q8_K row " << row << " B > " << n.act_q8_k_row_bytes;
    const int64_t scratch = kernels::packed_scratch_bytes(m.type, m.n_in, ws.tokens);
    CHECK(!m.packed || scratch <= 4 * ws.gemm_scratch_per_thread)
        << what << ": GEMM scratch " << scratch << " B > " << 4 * ws.gemm_scratch_per_thread;
  };
  check(w_.output, "output");
  for (const auto& l : w_.layers) {
    for (const auto* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router, &l.gate_exps.first,
          &l.up_exps.first, &l.down_exps.first, &l.shexp_gate, &l.shexp_up, &l.shexp_down, &l.wq_a,
          &l.wq_b, &l.wkv_a, &l.k_b.first, &l.v_b.first}) {
      check(*m, "layer matrix");
    }
  }
  if (hp_.mla.is_mla()) {
    const LayerWeights& l0 = w_.layers[0];
    const int64_t act = std::max(kernels::act_row_bytes(l0.k_b.first.type, l0.k_b.first.n_in),
                                 kernels::act_row_bytes(l0.v_b.first.type, dims_.kv_lora_rank));
    CHECK(act <= n.mla_act_row_bytes)
        << "MLA per-head row " << act << " B > " << n.mla_act_row_bytes;
  }
}

void Model::matmul(const kernels::KernelTable& kt, const WeightMatrix& w, const void* act,
                   int64_t n_tokens, float* y, int ith, int nth) {
  kvw::matmul(kt, w, act, n_tokens, y, ith, nth, gemm_scratch_.data() + ith * gemm_scratch_floats_);
}

KvArenaConfig Model::kv_config(uint32_t num_blocks, int32_t block_size, KvDtype dtype,
                               uint32_t num_window_slots) const {
  KvArenaConfig c = kv_arena_shape(dims_, block_size, dtype);
  c.num_blocks = num_blocks;
  if (num_window_slots > 0 && hp_.sliding_window > 0 && hp_.kv_window() == 0) {
    c.num_window_slots = num_window_slots;
    for (int32_t l = 0; l < hp_.n_layer; ++l) c.window_layers.push_back(hp_.is_swa_layer(l));
  }
  return c;
}

int64_t Model::num_logit_rows(std::span<const SeqInput> seqs) {
  int64_t n = 0;
  for (const auto& s : seqs) n += s.all_logits ? (int64_t)s.tokens.size() : 1;
  return n;
}

// Window-slot arenas: the windowed layers' table names a slot for every block a new token's
// window reaches (start_pos + 1 - w on); entries wholly below may be kNoWindowSlot.
static Status validate_window_table(const SeqInput& s, const KvArenaConfig& c,
                                    const std::string& who, int64_t window) {
  if (c.num_window_slots == 0) return Status::ok_status();
  if (s.window_block_table.size() != s.block_table.size()) {
    return Error{who + ": window block table has " + std::to_string(s.window_block_table.size()) +
                 " entries, block table " + std::to_string(s.block_table.size())};
  }
  const int64_t attended = s.start_pos + 1 - window;
  for (size_t i = 0; i < s.window_block_table.size(); ++i) {
    const uint32_t slot = s.window_block_table[i];
    if (slot == kNoWindowSlot && (int64_t)(i + 1) * c.block_size <= attended) continue;
    if (slot >= c.num_window_slots) {
      return Error{
          who + ": window slot " + std::to_string(slot) + " of entry " + std::to_string(i) +
          (slot == kNoWindowSlot ? " missing inside the attention window" : " out of range")};
    }
  }
  return Status::ok_status();
}

Status Model::validate(std::span<const SeqInput> seqs, const KvArena& kv) const {
  const auto& c = kv.config();
  if (c.n_layer != hp_.n_layer || c.n_kv_heads != hp_.cache_heads() ||
      c.head_dim != hp_.cache_head_dim() || c.shared_kv != hp_.mla.is_mla()) {
    return Error{"KV arena shape does not match the model"};
  }
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqInput& s = seqs[i];
    const std::string who = "sequence " + std::to_string(i);
    if (s.tokens.empty()) return Error{who + ": no tokens"};
    if (s.start_pos < 0) return Error{who + ": negative start position"};
    total += (int64_t)s.tokens.size();
    const int64_t end = s.start_pos + (int64_t)s.tokens.size();
    if ((int64_t)s.block_table.size() * c.block_size < end) {
      return Error{who + ": block table covers " +
                   std::to_string(s.block_table.size() * c.block_size) + " positions, needs " +
                   std::to_string(end)};
    }
    // Sliding window on every layer: leading entries may be holes (kNullBlock, released by the
    // KvManager) when they lie wholly below start_pos + 1 - w, the first position any new token
    // attends to.
    const int64_t attended = hp_.kv_window() > 0 ? s.start_pos + 1 - hp_.kv_window() : 0;
    for (size_t i = 0; i < s.block_table.size(); ++i) {
      const uint32_t b = s.block_table[i];
      if (b == index_of(kNullBlock) && (int64_t)(i + 1) * c.block_size <= attended) continue;
      if (b >= c.num_blocks) {
        return Error{who + ": block id " + std::to_string(b) + " of entry " + std::to_string(i) +
                     (b == index_of(kNullBlock) ? " is a hole inside the attention window"
                                                : " out of range")};
      }
    }
    KVW_RETURN_IF_ERROR(validate_window_table(s, c, who, hp_.sliding_window));
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= hp_.n_vocab) {
        return Error{who + ": token id " + std::to_string(t) + " outside the vocabulary (" +
                     std::to_string(hp_.n_vocab) + ")"};
      }
    }
  }
  if (total == 0) return Error{"empty batch"};
  if (total > max_tokens_) {
    return Error{"batch of " + std::to_string(total) + " tokens exceeds max batch tokens " +
                 std::to_string(max_tokens_)};
  }
  return {};
}

}  // namespace kvw
