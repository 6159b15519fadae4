// ChatPrompter's turn offsets (--overflow sliding-window): turn k starts at the token count of
// what the template renders for messages [0, k) without the generation prompt, provided that
// text is a prefix of the whole prompt. Rendering every prefix made a conversation of n
// messages cost n renders and n tokenisations of up to the whole text (quadratic in messages,
// issue 30). Instead the whole prompt is rendered once with the template's loop traced
// (where each message's iteration began), four prefixes are rendered to check that the trace
// cuts where the template's own prefixes end, and each prefix's tokens are counted from the
// tokenizer's fragments of the whole text (it tokenises the text between special tokens piece
// by piece, so a prefix that ends where a special token begins has exactly the whole text's
// tokens before it).
#include <algorithm>
#include <array>

#include "server/chat_prompt.h"

namespace kvw::server {

void ChatPrompter::find_turn_starts(std::span<const ChatMessage> messages,
                                    const nlohmann::ordered_json* tools,
                                    const std::vector<int64_t>& message_starts,
                                    ChatPrompt& p) const {
  p.turn_starts = {0};
  if (messages.size() <= 1) return;
  if (turn_starts_from_trace(messages, tools, message_starts, p)) return;
  prefix_renders(messages, tools, p);
}

bool ChatPrompter::turn_starts_from_trace(std::span<const ChatMessage> messages,
                                          const nlohmann::ordered_json* tools,
                                          const std::vector<int64_t>& message_starts,
                                          ChatPrompt& p) const {
  const size_t n = messages.size();
  if (message_starts.size() != n) return false;
  std::vector<int64_t> cuts;  // where messages 1..n-1 begin in p.text
  for (size_t k = 1; k < n; ++k) {
    const int64_t c = message_starts[k];
    if (c <= 0 || c > (int64_t)p.text.size() || (!cuts.empty() && c <= cuts.back())) return false;
    cuts.push_back(c);
  }
  // The trace only says where the loop began each message; the template's prefix renders
  // decide. Both ends and both roles of an alternating conversation are checked: a template
  // that writes something after the last message (loop.last, an EOS when no generation prompt
  // is asked for) or renders the newest turn differently fails here and is rendered prefix by
  // prefix instead.
  const std::array<size_t, 4> checks{1, 2, n - 2, n - 1};
  for (size_t i = 0; i < checks.size(); ++i) {
    const size_t k = checks[i];
    if (k < 1 || k > n - 1 ||
        std::find(checks.begin(), checks.begin() + i, k) != checks.begin() + i)
      continue;
    auto prefix = render(messages.first(k), /*add_generation_prompt=*/false, tools);
    ++p.num_renders;
    if (!prefix.ok() ||
        std::string_view(*prefix) != std::string_view(p.text).substr(0, cuts[k - 1]))
      return false;
  }
  cuts.push_back((int64_t)p.text.size());  // the whole text: checks the count against p.tokens
  std::vector<int64_t> counts;
  const uint64_t budget = kTurnWorkFactor * std::max<uint64_t>(1, p.text.size());
  if (!count_prefix_tokens(p.text, cuts, budget, counts, p)) {
    p.turn_starts.clear();  // too much work: no offsets, as for a template that refuses
    return true;
  }
  if (counts.back() != (int64_t)p.tokens.size()) return false;
  for (size_t k = 0; k + 1 < counts.size(); ++k) {
    if (counts[k] <= p.turn_starts.back() || counts[k] >= (int64_t)p.tokens.size()) {
      p.turn_starts.clear();
      return true;
    }
    p.turn_starts.push_back(counts[k]);
  }
  return true;
}

bool ChatPrompter::count_prefix_tokens(std::string_view text, std::span<const int64_t> cuts,
                                       uint64_t budget, std::vector<int64_t>& counts,
                                       ChatPrompt& p) const {
  using tokenizer_internal::Fragment;
  const std::vector<Fragment> frags =
      tokenizer_internal::split_special(text, specials_, /*parse_special=*/true);
  auto encoded = [&](std::string_view part) -> int64_t {
    p.num_tokenized_bytes += part.size();
    return (int64_t)tok_.encode(part, /*add_special=*/false, /*parse_special=*/true).size();
  };
  // A prefix gets BOS/EOS as tokenize() gives them: unless it starts with the BOS text.
  const Vocab& v = tok_.vocab();
  auto added = [&](int64_t cut) -> int64_t {
    const bool has_bos = !bos_text_.empty() && text.substr(0, (size_t)cut).starts_with(bos_text_);
    return has_bos ? 0 : (v.add_bos ? 1 : 0) + (v.add_eos ? 1 : 0);
  };
  const uint64_t start_bytes = p.num_tokenized_bytes;
  int64_t pos = 0;         // where the fragment begins
  int64_t before = 0;      // tokens of the fragments before it
  int64_t run_begin = 0;   // where the text after the last special token begins
  int64_t run_before = 0;  // tokens before run_begin
  size_t ci = 0;
  counts.clear();
  for (const Fragment& f : frags) {
    const bool special = f.token_id >= 0;
    if (!special && f.text.data() != text.data() + pos) return false;  // not one piece of text
    const int64_t len =
        special ? (int64_t)v.tokens[(size_t)f.token_id].size() : (int64_t)f.text.size();
    for (; ci < cuts.size() && cuts[ci] < pos + len; ++ci) {
      const int64_t c = cuts[ci];
      if (c == pos) {
        counts.push_back(before + added(c));
        continue;
      }
      // Inside a fragment: the prefix's last piece of text is tokenised on its own.
      if (p.num_tokenized_bytes - start_bytes + (uint64_t)(c - run_begin) > budget) return false;
      counts.push_back(run_before +
                       encoded(text.substr((size_t)run_begin, (size_t)(c - run_begin))) + added(c));
    }
    before += special ? 1 : encoded(f.text);
    pos += len;
    if (special) {
      run_begin = pos;
      run_before = before;
    }
  }
  for (; ci < cuts.size(); ++ci) counts.push_back(before + added(cuts[ci]));
  return pos == (int64_t)text.size();
}

void ChatPrompter::prefix_renders(std::span<const ChatMessage> messages,
                                  const nlohmann::ordered_json* tools, ChatPrompt& p) const {
  const uint64_t budget = kTurnWorkFactor * std::max<uint64_t>(1, p.text.size());
  uint64_t work = 0;
  p.turn_starts = {0};
  for (size_t k = 1; k < messages.size(); ++k) {
    auto prefix = render(messages.first(k), /*add_generation_prompt=*/false, tools);
    ++p.num_renders;
    // A template may refuse a prefix (e.g. "must end with a user turn"): no turn offsets then,
    // and sliding-window refuses the overflowing request instead of cutting mid-turn.
    if (!prefix.ok() || !p.text.starts_with(*prefix)) return p.turn_starts.clear();
    work += 2 * prefix->size();  // rendered, then tokenised
    if (work > budget) return p.turn_starts.clear();
    p.num_tokenized_bytes += prefix->size();
    const auto n = (int64_t)tokenize(*prefix).size();
    if (n <= p.turn_starts.back() || n >= (int64_t)p.tokens.size()) return p.turn_starts.clear();
    p.turn_starts.push_back(n);
  }
}

}  // namespace kvw::server
