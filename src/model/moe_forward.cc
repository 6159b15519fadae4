// model/moe_forward.cc: the FFN of a mixture-of-experts layer. Tokens of the step are routed one
// by one (model/moe_router.h), then grouped per expert, so each chosen expert's weights stream
// from memory once per step whatever the batch (prefill or batched decode), and experts no token
// chose are never read. Outputs are combined per token in its own routing order, so a token's
// result does not depend on which other tokens share the step.
//
//   tokens [T] --route--> (token, k) assignments --group by expert--> A rows, expert 0's first
//   gate/up/down matmuls per expert over its rows --> weighted sum per token into tmp_ [T][n_embd]
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "model/model.h"
#include "model/moe_router.h"
#include "model/oai_ops.h"

namespace kvw {

// Counting sort of this step's assignments by expert, tokens ascending within an expert (one
// thread: T x K entries, a few thousand at most, against matmuls of millions of MACs).
void Model::group_by_expert(int64_t n_tokens) {
  const int32_t E = hp_.moe.n_expert, K = hp_.moe.n_expert_used;
  std::vector<int32_t>& begin = expert_begin_;  // [E + 1]
  std::fill(begin.begin(), begin.end(), 0);
  for (int64_t i = 0; i < n_tokens * K; ++i) ++begin[route_ids_[i] + 1];
  for (int32_t e = 0; e < E; ++e) begin[e + 1] += begin[e];
  // begin[e] serves as expert e's fill cursor, which leaves it at the old begin[e + 1] ...
  for (int64_t i = 0; i < n_tokens * K; ++i) {
    const int32_t a = begin[route_ids_[i]]++;
    assign_tok_[a] = (int32_t)(i / K);
    route_slot_[i] = a;
  }
  // ... so shifting right by one restores the starts.
  for (int32_t e = E; e > 0; --e) begin[e] = begin[e - 1];
  begin[0] = 0;
}

// The expert whose rows hold assignment a (expert_begin_ is sorted; empty experts repeat a start).
int64_t Model::expert_of(int64_t a) const {
  const auto it = std::upper_bound(expert_begin_.begin(), expert_begin_.end(), (int32_t)a);
  return (it - expert_begin_.begin()) - 1;
}

void Model::run_moe_ffn(const LayerWeights& L, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const MoeParams& moe = hp_.moe;
  const int64_t d = hp_.n_embd, E = moe.n_expert, K = moe.n_expert_used, ff = moe.n_ff_exp;
  const int64_t A = n_tokens * K;
  float* xn = xn_.data();
  float* rows = moe_rows_.data();
  const float* bias = L.exp_probs_b.empty() ? nullptr : L.exp_probs_b.data();

  pool_.run([&](int ith, int nth) {
    matmul(kt, L.router, act_for(L.router, xn), n_tokens, router_logits_.data(), ith, nth);
  });
  pool_.run([&](int ith, int nth) {
    float* scratch = router_scratch_.data() + ith * router_scratch_floats(moe);
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      if (!L.router_b.empty()) {  // gpt-oss: biased logits both select and weigh
        float* logits = router_logits_.data() + t * E;
        for (int64_t i = 0; i < E; ++i) logits[i] += L.router_b[i];
      }
      route_token(moe, router_logits_.data() + t * E, bias, route_ids_.data() + t * K,
                  route_weights_.data() + t * K, scratch);
    }
  });
  group_by_expert(n_tokens);
  // Gather each assignment's input row and quantise it for the expert matmuls.
  const WeightMatrix& gate0 = L.gate_exps.first;
  const WeightMatrix& up0 = L.up_exps.first;
  const WeightMatrix& down0 = L.down_exps.first;
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(A, ith, nth);
    for (int64_t a = b; a < e; ++a) {
      std::copy_n(xn + assign_tok_[a] * d, d, rows + a * d);
      quantize_for(gate0, rows, a, d);
      if (up0.type != gate0.type) quantize_for(up0, rows, a, d);
    }
  });
  // One matmul per chosen expert over its rows; each thread takes its share of weight rows.
  auto rows_of = [&](int32_t e) { return expert_begin_[e + 1] - expert_begin_[e]; };
  pool_.run([&](int ith, int nth) {
    for (int32_t e = 0; e < E; ++e) {
      const int64_t n = rows_of(e), a0 = expert_begin_[e];
      if (n == 0) continue;
      const auto* gate_act = static_cast<const uint8_t*>(act_for(gate0, rows));
      const auto* up_act = static_cast<const uint8_t*>(act_for(up0, rows));
      matmul(kt, L.gate_exps.expert(e), gate_act + a0 * kernels::act_row_bytes(gate0.type, d), n,
             gate_.data() + a0 * ff, ith, nth);
      matmul(kt, L.up_exps.expert(e), up_act + a0 * kernels::act_row_bytes(up0.type, d), n,
             up_.data() + a0 * ff, ith, nth);
    }
  });
  const bool oai = hp_.ffn_act == FfnAct::kSwigluOai;
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(A, ith, nth);
    for (int64_t a = b; a < e; ++a) {
      float* g = gate_.data() + a * ff;
      float* u = up_.data() + a * ff;
      if (!L.gate_exps_b.empty()) {  // gpt-oss: the expert's own gate and up biases
        const int64_t x = expert_of(a);
        for (int64_t i = 0; i < ff; ++i) g[i] += L.gate_exps_b[x * ff + i];
        for (int64_t i = 0; i < ff; ++i) u[i] += L.up_exps_b[x * ff + i];
      }
      if (oai) {
        swiglu_oai(g, u, ff, g);
      } else {
        kt.silu_mul(g, u, ff, g);  // in place: elementwise
      }
      quantize_for(down0, gate_.data(), a, ff);
    }
  });
  pool_.run([&](int ith, int nth) {
    const auto* act = static_cast<const uint8_t*>(act_for(down0, gate_.data()));
    for (int32_t e = 0; e < E; ++e) {
      const int64_t n = rows_of(e), a0 = expert_begin_[e];
      if (n == 0) continue;
      matmul(kt, L.down_exps.expert(e), act + a0 * kernels::act_row_bytes(down0.type, ff), n,
             rows + a0 * d, ith, nth);
    }
  });
  // Per token, in its routing order: tmp = sum_k weight_k * expert_k(x).
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      float* out = tmp_.data() + t * d;
      for (int64_t k = 0; k < K; ++k) {
        const float w = route_weights_[t * K + k];
        float* y = rows + (int64_t)route_slot_[t * K + k] * d;
        if (!L.down_exps_b.empty()) {  // gpt-oss: bias first, then the weight (llama.cpp's order)
          const float* bias = L.down_exps_b.data() + (int64_t)route_ids_[t * K + k] * d;
          for (int64_t i = 0; i < d; ++i) y[i] += bias[i];
        }
        for (int64_t i = 0; i < d; ++i) out[i] = k == 0 ? w * y[i] : out[i] + w * y[i];
      }
    }
  });
  if (L.shexp_gate.data != nullptr) run_shared_experts(L, n_tokens);
}

// Shared experts: one SwiGLU FFN of n_ff_shared every token passes through, added to the routed
// output (llama.cpp: moe_out + ffn_shexp); qwen2moe scales it per token by
// sigmoid(ffn_gate_inp_shexp . x).
void Model::run_shared_experts(const LayerWeights& L, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const int64_t d = hp_.n_embd, fs = L.shexp_gate.n_rows;
  float* xn = xn_.data();
  float* out = moe_rows_.data();  // free again: the routed outputs are combined into tmp_
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      quantize_for(L.shexp_gate, xn, t, d);
      if (L.shexp_up.type != L.shexp_gate.type) quantize_for(L.shexp_up, xn, t, d);
    }
  });
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.shexp_gate, act_for(L.shexp_gate, xn), n_tokens, gate_.data(), ith, nth);
    matmul(kt, L.shexp_up, act_for(L.shexp_up, xn), n_tokens, up_.data(), ith, nth);
  });
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      float* g = gate_.data() + t * fs;
      kt.silu_mul(g, up_.data() + t * fs, fs, g);
      quantize_for(L.shexp_down, gate_.data(), t, fs);
    }
  });
  pool_.run([&](int ith, int nth) {
    matmul(kt, L.shexp_down, act_for(L.shexp_down, gate_.data()), n_tokens, out, ith, nth);
  });
  const float* gate_w = L.shexp_gate_inp.empty() ? nullptr : L.shexp_gate_inp.data();
  pool_.run([&](int ith, int nth) {
    auto [b, e] = thread_share(n_tokens, ith, nth);
    for (int64_t t = b; t < e; ++t) {
      float g = 1.0f;
      if (gate_w != nullptr) {
        float dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) dot += xn[t * d + i] * gate_w[i];
        g = 1.0f / (1.0f + std::exp(-dot));
      }
      for (int64_t i = 0; i < d; ++i) tmp_[t * d + i] += g * out[t * d + i];
    }
  });
}

}  // namespace kvw
