"""spm_bpe.py: our SentencePiece-style BPE tokenizer ("llama" vocabulary with byte fallback).

Vocabulary layout: 0 <unk>, 1 <s>, 2 </s>, 3..258 the byte tokens <0x00>..<0xFF>, then every
character of the training text, then the learned merges in the order they were learned.
A merged piece's score is -(its merge rank + 1), so earlier merges score higher.

Encoding matches llama.cpp's SPM tokenizer (and ours, src/tokenizer/spm.cc) exactly: spaces
become U+2581, a U+2581 is prefixed to the text, and the adjacent pair whose concatenation is the
highest-scoring piece is merged first (ties: leftmost) until no pair is a piece; characters that
are not pieces fall back to byte tokens. Since no piece contains U+2581 except as its first
character, no merge crosses the start of a word, so each "word" (a U+2581 and what follows up to
the next one) is encoded on its own and cached.
"""

import collections
import heapq
import json
import re

SPACE = "\u2581"
UNK, BOS, EOS = 0, 1, 2
N_BYTES = 256
FIRST_BYTE = 3

# GGUF token types (llama.cpp's llama_token_type).
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6

_WORD = re.compile(SPACE + "[^" + SPACE + "]*|[^" + SPACE + "]+")


def escape(text):
    return SPACE + text.replace(" ", SPACE)


def words(escaped):
    return _WORD.findall(escaped)


class Tokenizer:
    def __init__(self, pieces, scores, types):
        self.pieces, self.scores, self.types = pieces, scores, types
        self.piece_id = {}
        for i, (p, t) in enumerate(zip(pieces, types)):
            if t == TYPE_NORMAL and p not in self.piece_id:
                self.piece_id[p] = i
        self.cache = {}

    @classmethod
    def train(cls, documents, vocab_size):
        counts = collections.Counter()
        for doc in documents:
            counts.update(words(escape(doc)))
        chars = sorted({c for w in counts for c in w})
        pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(N_BYTES)] + chars
        scores = [0.0] * len(pieces)
        types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * N_BYTES
        types += [TYPE_NORMAL] * len(chars)
        for rank, merged in enumerate(_learn_merges(counts, vocab_size - len(pieces))):
            pieces.append(merged)
            scores.append(-float(rank + 1))
            types.append(TYPE_NORMAL)
        return cls(pieces, scores, types)

    def encode(self, text, bos=True, eos=False):
        out = [BOS] if bos else []
        for w in words(escape(text)):
            ids = self.cache.get(w)
            if ids is None:
                ids = self._encode_word(w)
                self.cache[w] = ids
            out.extend(ids)
        if eos:
            out.append(EOS)
        return out

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            t = self.types[i]
            if t == TYPE_BYTE:
                data.append(int(self.pieces[i][3:5], 16))
            elif t == TYPE_NORMAL:
                data.extend(self.pieces[i].replace(SPACE, " ").encode("utf-8"))
        text = data.decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") else text

    def _encode_word(self, w):
        # Symbols as a linked list over w; a heap of (-score, left index, left, right, length).
        n = len(w)
        start = list(range(n))
        length = [1] * n
        prev = [i - 1 for i in range(n)]
        nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
        heap = []

        def push(left, right):
            if left < 0 or right < 0:
                return
            ln = length[left] + length[right]
            pid = self.piece_id.get(w[start[left]:start[left] + ln])
            if pid is not None:
                heapq.heappush(heap, (-self.scores[pid], left, right, ln))

        for i in range(1, n):
            push(i - 1, i)
        while heap:
            _, left, right, ln = heapq.heappop(heap)
            if length[left] == 0 or length[right] == 0 or length[left] + length[right] != ln:
                continue
            length[left] += length[right]
            length[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        ids = []
        i = 0 if n else -1
        while i >= 0:
            piece = w[start[i]:start[i] + length[i]]
            pid = self.piece_id.get(piece)
            if pid is not None:
                ids.append(pid)
            else:
                ids.extend(FIRST_BYTE + b for b in piece.encode("utf-8"))
            i = nxt[i]
        return ids

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"pieces": self.pieces, "scores": self.scores, "types": self.types}, f)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            d = json.load(f)
        return cls(d["pieces"], d["scores"], d["types"])


def _learn_merges(counts, n_merges):
    """Classic BPE over word counts; returns the merged pieces in order. Ties: lexicographic."""
    vocab = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, syms in enumerate(vocab):
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    merged = []
    while len(merged) < n_merges and pair_count:
        best = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pair_count[best] < 2:
            break
        new = best[0] + best[1]
        merged.append(new)
        for wi in sorted(where.pop(best, ())):
            syms = vocab[wi]
            for a, b in zip(syms, syms[1:]):
                pair_count[(a, b)] -= freq[wi]
                if pair_count[(a, b)] <= 0:
                    del pair_count[(a, b)]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and (syms[i], syms[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            vocab[wi] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += freq[wi]
                where[(a, b)].add(wi)
    return merged
