// model/forward.cc: the Llama-family decoder step (llama2.c's forward, batched and paged).
// Each phase is one ThreadPool::run; phases that work per token split tokens across threads,
// matmuls split weight rows. No phase depends on how work was split, so results are
// bit-identical for any batch composition and thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "model/forward_util.h"
#include "model/model.h"
#include "model/oai_ops.h"

namespace kvw {
namespace {

// Residual update x += add (add may be null), then the optional activation clamp.
void residual(float* x, const float* add, int64_t n, float clamp) {
  if (add != nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] += add[i];
  }
  if (clamp > 0.0f) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::clamp(x[i], -clamp, clamp);
  }
}

}  // namespace

// Converts row `row` of x [.][n_in] to the activation format `w` pairs with.
void Model::quantize_for(const WeightMatrix& w, const float* x, int64_t row, int64_t n_in) {
  const auto& kt = kernels::kernels();
  const int64_t rb = kernels::act_row_bytes(w.type, n_in);
  if (uses_q8_0(w.type)) {
    kt.quantize_act(w.type, x + row * n_in, 1, n_in, act_q8_0_.data() + row * rb, 0, 1);
  } else if (uses_q8_k(w.type)) {
    kt.quantize_act(w.type, x + row * n_in, 1, n_in, act_q8_k_.data() + row * rb, 0, 1);
  }
}

const void* Model::act_for(const WeightMatrix& w, const float* x) const {
  if (uses_q8_0(w.type)) return act_q8_0_.data();
  if (uses_q8_k(w.type)) return act_q8_k_.data();
  return x;  // float weights take f32 activations as they are
}

Status Model::forward(std::span<const SeqInput> seqs, KvArena& kv, float* logits) {
  KVW_RETURN_IF_ERROR(validate(seqs, kv));
  seqs_ = seqs;
  int64_t n_tokens = 0, n_rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqInput& s = seqs[i];
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      tok_[n_tokens] = {(int32_t)i, s.start_pos + (int64_t)j};
      if (s.all_logits || j + 1 == s.tokens.size()) logit_src_[n_rows++] = n_tokens;
      ++n_tokens;
    }
  }
  const int64_t d = hp_.n_embd;
  // Gemma: embeddings scaled by sqrt(n_embd) in f32, as llama.cpp's ggml_scale.
  const float embd_scale = hp_.gemma.scale_embd ? std::sqrt((float)d) : 1.0f;
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      const SeqInput& s = seqs[tok_[t].seq];
      const int32_t id = s.tokens[tok_[t].pos - s.start_pos];
      const auto* row =
          static_cast<const uint8_t*>(w_.token_embd.data) + id * w_.token_embd.row_bytes;
      float* x = x_.data() + t * d;
      dequantize_row(w_.token_embd.type, row, x, d);
      if (embd_scale != 1.0f) {
        for (int64_t i = 0; i < d; ++i) x[i] *= embd_scale;
      }
      residual(x, nullptr, d, clamp_);
      rope_.cos_sin(tok_[t].pos, cs_.data() + t * hp_.rope.n_rot);
      if (rope_swa_) rope_swa_->cos_sin(tok_[t].pos, cs_swa_.data() + t * hp_.rope.n_rot);
    }
  });
  for (int32_t l = 0; l < hp_.n_layer; ++l) run_layer(l, kv, n_tokens);
  compute_logits(n_rows, logits);
  return {};
}

void Model::run_layer(int32_t l, KvArena& kv, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const LayerWeights& L = w_.layers[l];
  const int64_t d = hp_.n_embd, ff = hp_.n_ff;
  float* xn = xn_.data();

  // Attention input: residual from the previous layer's FFN, then RMSNorm, then quantise for
  // the matrices that read it (q, k, v; MLA: q or its down-projection, and the latent's).
  const bool mla = hp_.mla.is_mla();
  const WeightMatrix* in0 = mla ? (hp_.mla.q_lora_rank > 0 ? &L.wq_a : &L.wq) : &L.wq;
  const WeightMatrix* in1 = mla ? &L.wkv_a : &L.wk;
  const WeightMatrix* in2 = mla ? &L.wkv_a : &L.wv;
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      if (l > 0) residual(x_.data() + t * d, tmp_.data() + t * d, d, clamp_);
      kt.rmsnorm(x_.data() + t * d, L.attn_norm.data(), d, hp_.norm_eps, xn + t * d);
      quantize_for(*in0, xn, t, d);
      if (in1->type != in0->type) quantize_for(*in1, xn, t, d);
      if (in2->type != in0->type && in2->type != in1->type) quantize_for(*in2, xn, t, d);
    }
  });
  if (mla) {
    run_mla_attention(L, l, kv, n_tokens);
  } else {
    run_attention(L, l, kv, n_tokens);
  }
  if (!L.post_attn_norm.empty()) post_norm(L.post_attn_norm, n_tokens);
  // FFN: residual, RMSNorm, then SwiGLU or routed experts.
  const bool moe = hp_.is_moe_layer(l);
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      residual(x_.data() + t * d, tmp_.data() + t * d, d, clamp_);
      kt.rmsnorm(x_.data() + t * d, L.ffn_norm.data(), d, hp_.norm_eps, xn + t * d);
      if (moe) {
        quantize_for(L.router, xn, t, d);
        continue;
      }
      quantize_for(L.gate, xn, t, d);
      if (L.up.type != L.gate.type) quantize_for(L.up, xn, t, d);
    }
  });
  if (moe) {
    run_moe_ffn(L, n_tokens);
    return;
  }
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.gate, act_for(L.gate, xn), n_tokens, gate_.data(), ith, nth);
    matmul(kt, L.up, act_for(L.up, xn), n_tokens, up_.data(), ith, nth);
  });
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      if (hp_.ffn_act == FfnAct::kGeluTanh) {
        kt.gelu_tanh_mul(gate_.data() + t * ff, up_.data() + t * ff, ff, xn + t * ff);
      } else {
        kt.silu_mul(gate_.data() + t * ff, up_.data() + t * ff, ff, xn + t * ff);
      }
      quantize_for(L.down, xn, t, ff);
    }
  });
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.down, act_for(L.down, xn), n_tokens, tmp_.data(), ith, nth);
  });
  if (!L.post_ffw_norm.empty()) post_norm(L.post_ffw_norm, n_tokens);
}

void Model::post_norm(const std::vector<float>& norm, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const int64_t d = hp_.n_embd;
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      kt.rmsnorm(tmp_.data() + t * d, norm.data(), d, hp_.norm_eps, tmp_.data() + t * d);
    }
  });
}

// Multi-head / grouped-query attention: q, k, v projections, RoPE, K/V into the paged cache,
// attention, and attn_output into tmp_.
void Model::run_attention(const LayerWeights& L, int32_t l, KvArena& kv, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const int64_t qd = hp_.q_dim(), kvd = hp_.kv_dim();
  const int32_t hd = hp_.head_dim;
  float* xn = xn_.data();
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.wq, act_for(L.wq, xn), n_tokens, q_.data(), ith, nth);
    matmul(kt, L.wk, act_for(L.wk, xn), n_tokens, k_.data(), ith, nth);
    matmul(kt, L.wv, act_for(L.wv, xn), n_tokens, v_.data(), ith, nth);
  });
  // Biases, per-head Q/K norms, RoPE (a windowed layer's own, if it has one), and K/V into the
  // paged cache.
  const kernels::KvLayerView view = layer_view(kv, l);
  const bool swa_rope = hp_.has_rope_swa && hp_.is_swa_layer(l);
  const bool window_rows = kv.config().is_window_layer(l);  // rows addressed by window slot
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      float* q = q_.data() + t * qd;
      float* k = k_.data() + t * kvd;
      float* v = v_.data() + t * kvd;
      if (!L.bq.empty()) {
        for (int64_t i = 0; i < qd; ++i) q[i] += L.bq[i];
        for (int64_t i = 0; i < kvd; ++i) k[i] += L.bk[i];
        for (int64_t i = 0; i < kvd; ++i) v[i] += L.bv[i];
      }
      if (!L.q_norm.empty()) {  // qwen3: each head RMS-normalised before RoPE
        for (int32_t h = 0; h < hp_.n_head; ++h)
          kt.rmsnorm(q + h * hd, L.q_norm.data(), hd, hp_.norm_eps, q + h * hd);
        for (int32_t h = 0; h < hp_.n_head_kv; ++h)
          kt.rmsnorm(k + h * hd, L.k_norm.data(), hd, hp_.norm_eps, k + h * hd);
      }
      const float* cs = (swa_rope ? cs_swa_.data() : cs_.data()) + t * hp_.rope.n_rot;
      rope_.apply(q, hp_.n_head, hd, cs);
      rope_.apply(k, hp_.n_head_kv, hd, cs);
      kt.kv_store(view, kv_table(tok_[t].seq, window_rows), tok_[t].pos, k, v);
    }
  });
  // Attention: one work item per (tile, KV head); a tile is up to kAttnTile consecutive tokens
  // of one sequence, whose query heads of that KV head read each K/V row once. Items are dealt
  // round-robin: later tiles attend to more positions, and contiguous shares would leave the
  // last thread most of the work.
  const int32_t group = hp_.n_head / hp_.n_head_kv;
  const float scale = hp_.attn_scale > 0.0f ? hp_.attn_scale : 1.0f / std::sqrt((float)hd);
  const int64_t window = hp_.layer_window(l);
  // Gemma-2's soft-capped scores and gpt-oss's sinks are variants of the kernels' attention
  // (kernels::AttnScores); sinks are indexed by query head, so each KV head's call gets its own.
  const kernels::AttnScores scores = {scale, hp_.gemma.attn_softcap,
                                      L.attn_sinks.empty() ? nullptr : L.attn_sinks.data(),
                                      bf16_dot_};
  const auto scores_of = [&](int32_t g) {
    kernels::AttnScores s = scores;
    if (s.sinks != nullptr) s.sinks += (int64_t)g * group;
    return s;
  };
  // Decode tokens (tiles of one query) go to attend_decode_split, which also splits each over
  // its context (forward_decode.cc), unless a token's n_head x 2 split states do not fit in its
  // row of v_.
  const bool split = 2 * (int64_t)hp_.n_head <= kvd;
  bool any_tile = !split;  // a pure decode step skips this phase and its barrier
  for (int64_t t = 1; t < n_tokens && !any_tile; ++t) any_tile = tok_[t].seq == tok_[t - 1].seq;
  const auto attend_tiles = [&](int ith, int nth) {
    float* scratch = attn_scratch_.data() + ith * kernels::attention_scratch_floats(hd);
    kernels::AttnQuery tile[kAttnTile];
    int64_t item = 0;
    for (int64_t t0 = 0; t0 < n_tokens;) {
      int64_t t1 = t0 + 1;
      while (t1 < n_tokens && t1 - t0 < kAttnTile && tok_[t1].seq == tok_[t0].seq) ++t1;
      const std::span<const uint32_t> table = kv_table(tok_[t0].seq, window_rows);
      const bool decode = t1 == t0 + 1 && (t0 == 0 || tok_[t0 - 1].seq != tok_[t0].seq) &&
                          (t1 == n_tokens || tok_[t1].seq != tok_[t0].seq);
      if (split && decode) {
        t0 = t1;
        continue;
      }
      for (int32_t g = 0; g < hp_.n_head_kv; ++g, ++item) {
        if (item % nth != ith) continue;
        const int64_t head0 = (int64_t)g * group;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t pos = tok_[t].pos;
          const int64_t begin = window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
          tile[t - t0] = {q_.data() + t * qd + head0 * hd, xn + t * qd + head0 * hd, begin,
                          pos + 1};
        }
        const std::span<const kernels::AttnQuery> queries(tile, (size_t)(t1 - t0));
        kt.attention(queries, group, kernels::kv_head_view(view, g), table, scores_of(g), scratch);
      }
      t0 = t1;
    }
  };
  if (any_tile) pool_.run(attend_tiles);
  if (split) attend_decode_split(view, window_rows, window, scores, n_tokens);
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) quantize_for(L.wo, xn, t, qd);
  });
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.wo, act_for(L.wo, xn), n_tokens, tmp_.data(), ith, nth);
  });
  if (!L.bo.empty()) add_row_bias(L.bo, n_tokens);
}

// tmp_ [T][n_embd] += bias per token (gpt-oss's attn_output.bias).
void Model::add_row_bias(const std::vector<float>& bias, int64_t n_tokens) {
  const int64_t d = hp_.n_embd;
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < d; ++i) tmp_[t * d + i] += bias[i];
    }
  });
}

void Model::compute_logits(int64_t n_rows, float* logits) {
  const auto& kt = kernels::kernels();
  const int64_t d = hp_.n_embd;
  float* xn = xn_.data();
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_rows, ith, nth);
    for (int64_t r = b; r < e; ++r) {
      const int64_t t = logit_src_[r];
      float* x = x_.data() + t * d;
      residual(x, tmp_.data() + t * d, d, clamp_);
      kt.rmsnorm(x, w_.output_norm.data(), d, hp_.norm_eps, xn + r * d);
      quantize_for(w_.output, xn, r, d);
    }
  });
  pool_.run([&](int ith, int nth) {
    matmul(kt, w_.output, act_for(w_.output, xn), n_rows, logits, ith, nth);
  });
  if (const float cap = hp_.gemma.final_softcap; cap > 0.0f) {
    // Split by element, not by row: a decode's one 256k-entry row is most of the work.
    pool_.run([&](int ith, int nth) {
      auto [b, e] = thread_share(n_rows * hp_.n_vocab, ith, nth);
      kt.softcap(logits + b, e - b, cap);
    });
  }
}

}  // namespace kvw
