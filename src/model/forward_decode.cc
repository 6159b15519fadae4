// model/forward_decode.cc: attention of decode tokens split flash-decoding style. A decode
// token (a tile of one query) has one work item per (KV head, segment of kAttnSegment
// positions), so a single sequence at depth 8192 spreads 32 x n_kv_heads items over the threads
// instead of n_kv_heads. Items are dealt round-robin in waves that fit the threads' attention
// scratch; after each wave the segments are merged in position order with the kernels' one
// merge (kernels::attention_merge), which the unsplit path uses too: the bits do not depend on
// the thread count or on whether a token decodes alone or in a batch.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/kernels.h"
#include "model/forward_util.h"
#include "model/model.h"

namespace kvw {

// Decode tokens are the tiles of one query (tokens whose neighbours belong to other sequences).
// Their running softmax state lives in v_: [T][kv_dim] is dead once K/V are in the cache, and a
// token needs n_head x 2 floats of it (CHECKed: 2 x group <= head_dim).
void Model::attend_decode_split(const kernels::KvLayerView& view, bool window_rows, int64_t window,
                                kernels::AttnScores scores, int64_t n_tokens) {
  const auto& kt = kernels::kernels();
  const int32_t hd = hp_.head_dim, n_kv = hp_.n_head_kv, group = hp_.n_head / hp_.n_head_kv;
  const int64_t qd = hp_.q_dim(), kvd = hp_.kv_dim();
  CHECK(2 * (int64_t)hp_.n_head <= kvd) << "split decode state needs n_head x 2 floats of v_";
  const int nth = pool_.num_threads();
  const int64_t slots = kernels::attention_split_slots(hd, group);
  CHECK(slots >= 1) << "attention scratch holds no split slot for group " << group;
  const int64_t wave = slots * nth;
  const int64_t scratch_floats = kernels::attention_scratch_floats(hd);
  auto is_decode = [&](int64_t t) {
    return (t == 0 || tok_[t - 1].seq != tok_[t].seq) &&
           (t + 1 == n_tokens || tok_[t + 1].seq != tok_[t].seq);
  };
  auto range = [&](int64_t t) {
    const int64_t pos = tok_[t].pos;
    return std::pair<int64_t, int64_t>{window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0,
                                       pos + 1};
  };
  // Visits every item j of [w0, w1) as fn(j, t, kv_head, segment index, segment count).
  auto for_items = [&](int64_t w0, int64_t w1, auto&& fn) {
    int64_t j = 0;
    for (int64_t t = 0; t < n_tokens && j < w1; ++t) {
      if (!is_decode(t)) continue;
      const auto [b, e] = range(t);
      const int64_t n_seg = kernels::attn_num_segments(b, e);
      if (j + n_kv * n_seg <= w0) {
        j += n_kv * n_seg;
        continue;
      }
      for (int32_t g = 0; g < n_kv; ++g) {
        for (int64_t s = 0; s < n_seg; ++s, ++j) {
          if (j >= w0 && j < w1) fn(j, t, g, s, n_seg);
        }
      }
    }
  };
  // Item j of the wave at w0 is computed by thread (j - w0) % nth into its slot (j - w0) / nth.
  auto slot_of = [&](int64_t j, int64_t w0) {
    const int64_t r = j - w0;
    return kernels::attention_split_slot(attn_scratch_.data() + (r % nth) * scratch_floats, hd,
                                         group, r / nth);
  };
  int64_t n_items = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (is_decode(t)) n_items += n_kv * kernels::attn_num_segments(range(t).first, range(t).second);
  }
  auto out_of = [&](int64_t t, int32_t g) { return xn_.data() + t * qd + (int64_t)g * group * hd; };
  auto ml_of = [&](int64_t t, int32_t g) { return v_.data() + t * kvd + (int64_t)g * group * 2; };
  // Query head h of KV head g's sink (gpt-oss), which joins at the finish, as in kt.attention.
  auto sink_of = [&](int32_t g, int32_t h) {
    return scores.sinks != nullptr ? scores.sinks + (int64_t)g * group + h : nullptr;
  };
  for (int64_t w0 = 0; w0 < n_items; w0 += wave) {
    const int64_t w1 = std::min(n_items, w0 + wave);
    bool any_merge = false;  // contexts within one segment finish where computed: no merge phase
    pool_.run([&](int ith, int nth_run) {
      CHECK(nth_run == nth);
      float* scratch = attn_scratch_.data() + ith * scratch_floats;
      for_items(w0, w1, [&](int64_t j, int64_t t, int32_t g, int64_t s, int64_t n_seg) {
        if (ith == 0 && n_seg > 1) any_merge = true;
        if ((j - w0) % nth != ith) return;
        const auto [b, e] = range(t);
        const int64_t s0 = kernels::attn_segment_begin(b) + s * kernels::kAttnSegment;
        float* part = n_seg == 1 ? out_of(t, g) : slot_of(j, w0);
        float* ml = n_seg == 1 ? ml_of(t, g) : part + group * hd;
        const kernels::AttnQuery query = {q_.data() + t * qd + (int64_t)g * group * hd, part,
                                          std::max(b, s0), std::min(e, s0 + kernels::kAttnSegment)};
        kt.attention_segment({&query, 1}, group, kernels::kv_head_view(view, g),
                             kv_table(tok_[t].seq, window_rows), scores, ml, scratch);
        if (n_seg == 1) {
          for (int32_t h = 0; h < group; ++h)
            kernels::attention_finish(part + h * hd, ml + 2 * h, hd, sink_of(g, h));
        }
      });
    });
    if (!any_merge) continue;
    // Merge: one unit per (token, KV head) with items in this wave, dealt round-robin.
    pool_.run([&](int ith, int) {
      int64_t unit = -1, last_t = -1;
      int32_t last_g = -1;
      for_items(w0, w1, [&](int64_t j, int64_t t, int32_t g, int64_t s, int64_t n_seg) {
        if (n_seg == 1) return;  // finished in the compute phase
        if (t != last_t || g != last_g) ++unit, last_t = t, last_g = g;
        if (unit % nth != ith) return;
        const float* part = slot_of(j, w0);
        float* out = out_of(t, g);
        float* ml = ml_of(t, g);
        if (s == 0) {
          std::memcpy(out, part, sizeof(float) * group * hd);
          std::memcpy(ml, part + group * hd, sizeof(float) * group * 2);
        } else {
          for (int32_t h = 0; h < group; ++h) {
            kernels::attention_merge(out + h * hd, ml + 2 * h, part + h * hd,
                                     part + group * hd + 2 * h, hd);
          }
        }
        if (s + 1 == n_seg) {
          for (int32_t h = 0; h < group; ++h)
            kernels::attention_finish(out + h * hd, ml + 2 * h, hd, sink_of(g, h));
        }
      });
    });
  }
}

}  // namespace kvw
