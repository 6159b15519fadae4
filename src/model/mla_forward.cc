// model/mla_forward.cc: multi-head latent attention (DeepSeek-V2/V3, GGUF arch "deepseek2") in
// its weight-absorbed form, for prefill and decode alike.
//
// The cache holds one row per token: [c (kv_lora_rank), k_pe (qk_rope_dim)], c the RMS-normed
// latent and k_pe the rotated key shared by all heads. Head h's key is [W_kb[h] c, k_pe] and its
// value W_vb[h] c, so
//   score(h, t) = q_nope[h] . W_kb[h] c_t + q_pe[h] . k_pe_t
//               = [W_kb[h]^T q_nope[h], q_pe[h]] . row_t
//   out[h]      = W_vb[h] (sum_t p(h, t) c_t)
// which is multi-query attention with head length kv_lora_rank + qk_rope_dim over the cached
// rows, V = the same rows (the rope part of the result is discarded). The kernels' attention
// runs it unchanged (the arena's shared_kv mode points V at K). Using one form for every token
// keeps logits bit-identical alone, batched, chunked and preempted; per-token cost is
// n_head x (kv_lora_rank + qk_rope_dim) per cached position instead of decompressing
// n_head x (qk_nope + v_head) per position, which is what makes MLA's small cache pay at decode.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "model/forward_util.h"
#include "model/model.h"

namespace kvw {

RopeParams mla_rope_params(const ModelHParams& hp) {
  RopeParams r = hp.rope;
  // llama.cpp's deepseek2 graph cancels the YaRN magnitude in the rotation (attn_factor
  // 1 / (1 + 0.1 ln s)) and puts DeepSeek's own mscale into the score scale instead.
  if (hp.mla.is_mla() && r.scaling == RopeScaling::kYarn) {
    r.attn_factor = 1.0f / (1.0f + 0.1f * std::log(r.scale_factor));
  }
  return r;
}

float mla_score_scale(const ModelHParams& hp) {
  const float s = hp.rope.scaling == RopeScaling::kNone ? 1.0f : hp.rope.scale_factor;
  const float mscale = hp.rope.attn_factor * (1.0f + hp.mla.yarn_log_mul * std::log(s));
  return mscale * mscale / std::sqrt((float)(hp.mla.qk_nope_dim + hp.mla.qk_rope_dim));
}

// out[h][t][0, w.n_rows) = w.expert(h) x in[h][t][0, w.n_in) for every head: quantise all
// (head, token) rows, then one phase of matmuls in which each thread takes its rows of every head.
void Model::per_head_matmul(const ExpertMatrices& w, const float* in, int64_t n_tokens,
                            float* out) {
  const auto& kt = kernels::kernels();
  const WeightMatrix& m = w.first;
  const int64_t rows = (int64_t)w.n_expert * n_tokens;
  const int64_t rb = kernels::act_row_bytes(m.type, m.n_in);
  const bool quantised = takes_quantised_act(m.type);
  if (quantised) {
    pool_.run([&](int ith, int nth) {
      auto [b, e] = thread_share(rows, ith, nth);
      for (int64_t r = b; r < e; ++r) {
        kt.quantize_act(m.type, in + r * m.n_in, 1, m.n_in, mla_act_.data() + r * rb, 0, 1);
      }
    });
  }
  pool_.run([&](int ith, int nth) {
    for (int32_t h = 0; h < w.n_expert; ++h) {
      const void* act = quantised ? static_cast<const void*>(mla_act_.data() + h * n_tokens * rb)
                                  : static_cast<const void*>(in + h * n_tokens * m.n_in);
      matmul(kt, w.expert(h), act, n_tokens, out + h * n_tokens * m.n_rows, ith, nth);
    }
  });
}

void Model::run_mla_attention(const LayerWeights& L, int32_t l, KvArena& kv, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const MlaParams& m = hp_.mla;
  const int64_t nh = hp_.n_head, hd = hp_.head_dim, qd = hp_.q_dim();
  const int64_t nope = m.qk_nope_dim, rope = m.qk_rope_dim, r = m.kv_lora_rank;
  const int64_t row = r + rope;  // cached latent row, and an absorbed query head
  const int64_t vd = m.v_head_dim;
  float* xn = xn_.data();
  float* kva = k_.data();  // [T][row] attn_kv_a_mqa output, then the cache row
  const WeightMatrix& wq_in = m.q_lora_rank > 0 ? L.wq_a : L.wq;

  // Queries (or their low-rank down-projection) and the latent, from the normed input.
  pool_.run([&](int ith, int nth) {
    matmul(kt, wq_in, act_for(wq_in, xn), n_tokens, m.q_lora_rank > 0 ? gate_.data() : q_.data(),
           ith, nth);
    matmul(kt, L.wkv_a, act_for(L.wkv_a, xn), n_tokens, kva, ith, nth);
  });
  if (m.q_lora_rank > 0) {
    pool_.run([&](int ith, int nth) {
      auto [b, e] = thread_share(n_tokens, ith, nth);
      for (int64_t t = b; t < e; ++t) {
        kt.rmsnorm(gate_.data() + t * m.q_lora_rank, L.q_a_norm.data(), m.q_lora_rank, hp_.norm_eps,
                   xn + t * m.q_lora_rank);
        quantize_for(L.wq_b, xn, t, m.q_lora_rank);
      }
    });
    pool_.run([&](int ith, int nth) {
      matmul(kt, L.wq_b, act_for(L.wq_b, xn), n_tokens, q_.data(), ith, nth);
    });
  }
  // Norm the latent, rotate the shared key and the queries' rope parts, store the cache row, and
  // lay out the query heads' no-rope parts for the absorption (head-major).
  const kernels::KvLayerView view = layer_view(kv, l);
  float* qa = mla_q_.data();  // [T][nh][row] absorbed queries
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      float* c = kva + t * row;
      kt.rmsnorm(c, L.kv_a_norm.data(), r, hp_.norm_eps, c);
      const float* cs = cs_.data() + t * rope;
      rope_.apply(c + r, 1, (int32_t)rope, cs);
      float* q = q_.data() + t * qd;
      rope_.apply(q + nope, (int32_t)nh, (int32_t)hd, cs);
      // One row serves as K and V (shared_kv): encode it once.
      kernels::kv_store_row(view, false, seqs_[tok_[t].seq].block_table, tok_[t].pos, 0, c);
      for (int64_t h = 0; h < nh; ++h) {
        std::copy_n(q + h * hd + nope, rope, qa + (t * nh + h) * row + r);
        if (!L.k_b_transposed)
          std::copy_n(q + h * hd, nope, mla_in_.data() + (h * n_tokens + t) * nope);
      }
    }
  });
  // Absorb W_kb into the queries: qa[t][h][0, r) = W_kb[h]^T q_nope[t][h].
  if (L.k_b_transposed) {
    // attn_kv_b holds W_kb[h] as nope rows of r: accumulate row i scaled by q_nope[i], i in order.
    pool_.run([&](int ith, int nth) {
      float* wrow = mla_row_.data() + ith * r;
      for (int64_t h = ith; h < nh; h += nth) {
        const WeightMatrix w = L.k_b.expert((int32_t)h);
        for (int64_t t = 0; t < n_tokens; ++t) std::fill_n(qa + (t * nh + h) * row, r, 0.0f);
        for (int64_t i = 0; i < nope; ++i) {
          dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + i * w.row_bytes, wrow, r);
          for (int64_t t = 0; t < n_tokens; ++t) {
            const float s = q_[t * qd + h * hd + i];
            float* y = qa + (t * nh + h) * row;
            for (int64_t j = 0; j < r; ++j) y[j] += s * wrow[j];
          }
        }
      }
    });
  } else {
    per_head_matmul(L.k_b, mla_in_.data(), n_tokens, mla_out_.data());
    pool_.run([&](int ith, int nth) {
      auto [b, e] = thread_share(n_tokens * nh, ith, nth);
      for (int64_t i = b; i < e; ++i) {
        const int64_t h = i / n_tokens, t = i % n_tokens;
        std::copy_n(mla_out_.data() + i * r, r, qa + (t * nh + h) * row);
      }
    });
  }
  // Attention over the cached rows: one KV head for all query heads. Items are (tile, head
  // group); each head's result does not depend on its group (kernels.h), so the grouping may
  // follow the thread count.
  pool_.run([&](int ith, int nth) {
    float* scratch = attn_scratch_.data() + ith * kernels::attention_scratch_floats((int32_t)row);
    const int64_t hg = std::max<int64_t>(1, (nh + nth - 1) / nth);
    kernels::AttnQuery tile[kAttnTile];
    int64_t item = 0;
    for (int64_t t0 = 0; t0 < n_tokens;) {
      int64_t t1 = t0 + 1;
      while (t1 < n_tokens && t1 - t0 < kAttnTile && tok_[t1].seq == tok_[t0].seq) ++t1;
      const std::span<const uint32_t> table = seqs_[tok_[t0].seq].block_table;
      for (int64_t h0 = 0; h0 < nh; h0 += hg, ++item) {
        if (item % nth != ith) continue;
        const int64_t n = std::min(hg, nh - h0);
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t off = (t * nh + h0) * row;
          tile[t - t0] = {qa + off, xn + off, 0, tok_[t].pos + 1};
        }
        kt.attention({tile, (size_t)(t1 - t0)}, (int32_t)n, view, table, {mla_scale_}, scratch);
      }
      t0 = t1;
    }
  });
  // Values: out[t][h] = W_vb[h] (weighted latent), then attn_output.
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens * nh, ith, nth);
    for (int64_t i = b; i < e; ++i) {
      const int64_t h = i / n_tokens, t = i % n_tokens;
      std::copy_n(xn + (t * nh + h) * row, r, mla_in_.data() + i * r);
    }
  });
  per_head_matmul(L.v_b, mla_in_.data(), n_tokens, mla_out_.data());
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      for (int64_t h = 0; h < nh; ++h) {
        std::copy_n(mla_out_.data() + (h * n_tokens + t) * vd, vd, xn + t * nh * vd + h * vd);
      }
      quantize_for(L.wo, xn, t, nh * vd);
    }
  });
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.wo, act_for(L.wo, xn), n_tokens, tmp_.data(), ith, nth);
  });
}

}  // namespace kvw
