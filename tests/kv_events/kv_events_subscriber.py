#!/usr/bin/python3
"""Drives a running `kvwarden serve --kv-events-config ...` and checks its KV event stream the
way a prefix-aware router consumes it (vLLM's examples/online_serving/kv_events_subscriber.py,
llm-d's kvevents pool): ZeroMQ SUB, 3-frame messages [topic, seq, msgpack payload], replay over
a DEALER to the ROUTER.

mirror URL PUB REPLAY: subscriber A from the start, a workload with prefix hits, evictions and
  preemptions, subscriber B joining late and catching up through the replay socket; both mirrors
  must equal the hashes /debug/kv reports, and the /metrics counters must show the workload.
stall URL PUB: a subscriber that never reads while the workload runs; every request must still
  complete and kvwarden_kv_events_dropped_total must rise (the engine never waits).
"""
import json
import os
import struct
import sys
import threading
import time
import urllib.request

import msgpack
import zmq

BLOCK_STORED, BLOCK_REMOVED, ALL_CLEARED = "BlockStored", "BlockRemoved", "AllBlocksCleared"
END_SEQ = -1


def fail(msg):
    print("FAIL:", msg, flush=True)
    os._exit(1)  # also from a subscriber thread


def check_batch(payload, block_size):
    """Decodes one KVEventBatch strictly as vLLM v0.11 lays it out; returns its events."""
    batch = msgpack.unpackb(payload, raw=False)
    if not (isinstance(batch, list) and len(batch) == 3):
        fail(f"batch is not [ts, events, dp_rank]: {batch!r}")
    ts, events, dp_rank = batch
    if not isinstance(ts, float) or abs(ts - time.time()) > 600:
        fail(f"ts {ts!r} is not a float near now")
    if dp_rank != 0:
        fail(f"data_parallel_rank {dp_rank!r}")
    for e in events:
        tag = e[0]
        if tag == BLOCK_STORED:
            if len(e) != 7:
                fail(f"BlockStored has {len(e)} fields: {e!r}")
            _, hashes, parent, tokens, bs, lora_id, medium = e
            if block_size is not None and bs != block_size:
                fail(f"block_size {bs}, /debug/kv says {block_size}")
            if len(tokens) != bs * len(hashes) or not hashes:
                fail(f"BlockStored sizes: {len(hashes)} hashes, {len(tokens)} tokens, bs {bs}")
            if not (parent is None or isinstance(parent, int)) or lora_id is not None:
                fail(f"BlockStored parent/lora: {parent!r} {lora_id!r}")
            if medium != "CPU":
                fail(f"medium {medium!r}")
        elif tag == BLOCK_REMOVED:
            if len(e) != 3 or not e[1] or e[2] != "CPU":
                fail(f"BlockRemoved: {e!r}")
        elif tag == ALL_CLEARED:
            if len(e) != 1:
                fail(f"AllBlocksCleared: {e!r}")
        else:
            fail(f"unknown event {e!r}")
        if tag != ALL_CLEARED and not all(isinstance(h, int) and 0 <= h < 2**64 for h in e[1]):
            fail(f"hashes are not uint64: {e[1]!r}")
    return events


class Mirror:
    """The set of cached block hashes, rebuilt from events applied in sequence order."""

    def __init__(self, block_size):
        self.block_size = block_size
        self.hashes = set()
        self.next_seq = None
        self.counts = {BLOCK_STORED: 0, BLOCK_REMOVED: 0, ALL_CLEARED: 0}
        self.parents_seen = 0

    def apply(self, seq, payload):
        if self.next_seq is not None and seq != self.next_seq:
            fail(f"sequence {seq} after {self.next_seq - 1}: a gap or a repeat")
        self.next_seq = seq + 1
        for e in check_batch(payload, self.block_size):
            self.counts[e[0]] += 1
            if e[0] == ALL_CLEARED:
                self.hashes.clear()
            elif e[0] == BLOCK_STORED:
                if e[2] is not None:
                    self.parents_seen += 1
                for h in e[1]:
                    if h in self.hashes:
                        fail(f"hash {h} stored twice")
                    self.hashes.add(h)
            else:
                for h in e[1]:
                    if h not in self.hashes:
                        fail(f"hash {h} removed but not stored")
                    self.hashes.discard(h)


class Subscriber(threading.Thread):
    def __init__(self, ctx, pub, block_size, replay=None, topic=b""):
        super().__init__(daemon=True)
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(pub)
        self.ctx, self.replay, self.topic = ctx, replay, topic
        self.mirror = Mirror(block_size)
        self.lock = threading.Lock()
        self.stop = False
        self.replayed = 0
        self.first_live_seq = None

    def catch_up(self, first_live):
        """Asks the replay socket for everything from seq 0 and applies what precedes first_live."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay)
        dealer.send_multipart([b"", struct.pack(">q", 0)])
        while True:
            if not dealer.poll(5000):
                fail("no answer from the replay socket")
            empty, seq_bytes, payload = dealer.recv_multipart()
            seq = struct.unpack(">q", seq_bytes)[0]
            if seq == END_SEQ:
                if payload != b"":
                    fail("end marker with a payload")
                break
            if seq < first_live:
                self.mirror.apply(seq, payload)
                self.replayed += 1
        dealer.close(linger=0)

    def run(self):
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        while not self.stop:
            if not poller.poll(50):
                continue
            topic, seq_bytes, payload = self.sub.recv_multipart()
            if topic != self.topic or len(seq_bytes) != 8:
                fail(f"bad frames: topic {topic!r}, seq of {len(seq_bytes)} bytes")
            seq = struct.unpack(">Q", seq_bytes)[0]
            with self.lock:
                if self.first_live_seq is None:
                    self.first_live_seq = seq
                    # Without replay the mirror starts empty: right only for a subscriber that
                    # joined an idle server before its first request (subscriber A).
                    if self.replay is not None:
                        self.catch_up(seq)
                self.mirror.apply(seq, payload)

    def hashes(self):
        with self.lock:
            return set(self.mirror.hashes)


def http(url, body=None, timeout=120):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def metrics(url):
    out = {}
    for line in http(url + "/metrics").splitlines():
        if line.startswith("kvwarden_") and "{" not in line.split(" ")[0]:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        elif line.startswith("kvwarden_preemptions_total{"):
            out["preemptions"] = out.get("preemptions", 0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith('kvwarden_swap_bytes_total{direction="in"}'):
            out["swap_in_bytes"] = float(line.rsplit(" ", 1)[1])
    return out


def debug_kv(url):
    kv = json.loads(http(url + "/debug/kv"))
    return kv["block_size"], {h for h in kv["block_hash"] if h is not None}


def workload(url, prompts, max_tokens, concurrency):
    """Sends every prompt (token ids) with ignore_eos; returns how many completed."""
    done, errors, lock = [0], [], threading.Lock()
    todo = list(prompts)

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop()
            try:
                r = json.loads(http(url + "/v1/completions",
                                    {"model": "m", "prompt": p, "max_tokens": max_tokens,
                                     "ignore_eos": True, "temperature": 0}))
                if r["usage"]["completion_tokens"] != max_tokens:
                    raise RuntimeError(f"usage {r['usage']}")
                with lock:
                    done[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail(f"{len(errors)} requests failed, first: {errors[0]}")
    return done[0]


def prompts_for(phase, n):
    """Half share one of two 64-token system prefixes (prefix hits), all end uniquely (evictions
    once the pool fills)."""
    out = []
    for i in range(n):
        prefix = [10 + (i % 2) + 3 * t % 50 for t in range(64)] if i % 4 != 3 else []
        tail = [(7 * i + 13 * phase + t) % 200 + 5 for t in range(40 + 17 * (i % 3))]
        out.append(prefix + tail)
    return out


def wait_equal(url, subs, what):
    deadline = time.time() + 15
    while True:
        _, server = debug_kv(url)
        views = [s.hashes() for s in subs]
        if all(v == server for v in views):
            return server
        if time.time() > deadline:
            for s, v in zip(subs, views):
                print(f"  mirror {len(v)} hashes, server {len(server)}: "
                      f"{len(v - server)} extra, {len(server - v)} missing")
            fail(f"{what}: the mirrors never matched /debug/kv")
        time.sleep(0.2)


def mirror(url, pub, replay):
    block_size, _ = debug_kv(url)
    ctx = zmq.Context()
    topic = b"kv@test@m"  # the e2e script's --kv-events-config topic
    a = Subscriber(ctx, pub, block_size, topic=topic)
    a.start()
    time.sleep(0.5)  # PUB/SUB: a subscription takes effect only once the connection is up
    t0 = time.time()
    # Enough steps before B joins that its replay is over 1000 batches: a ROUTER's default hwm.
    # How many steps 320 prompts take depends on how the engine batches them (under ASan it
    # once published only 929), so more prompts follow until the server has published 1,100.
    n1 = workload(url, prompts_for(1, 320), 40, 8)
    for phase in range(3, 9):
        if metrics(url).get("kvwarden_kv_event_batches_published_total", 0) > 1100:
            break
        n1 += workload(url, prompts_for(phase, 80), 40, 8)
    b = Subscriber(ctx, pub, block_size, replay=replay, topic=topic)
    b.start()
    time.sleep(0.5)
    n2 = workload(url, prompts_for(2, 24), 40, 8)
    elapsed = time.time() - t0
    server = wait_equal(url, [a, b], "after the workload")
    m = metrics(url)
    for s in (a, b):
        s.stop = True
    print(f"{n1 + n2} requests in {elapsed:.1f} s; server caches {len(server)} block hashes; "
          f"A saw {a.mirror.counts}, B replayed {b.replayed} batches then saw {b.mirror.counts}")
    print("metrics: " + ", ".join(f"{k}={m.get(k, 0):g}" for k in (
        "kvwarden_kv_events_published_total", "kvwarden_kv_event_batches_published_total",
        "kvwarden_kv_events_dropped_total", "kvwarden_prefix_cache_hits_total",
        "kvwarden_prefix_cache_evictions_total", "preemptions", "swap_in_bytes")))
    if b.replayed <= 1000:
        fail(f"the late subscriber replayed {b.replayed} batches, want > 1000")
    if a.mirror.counts[BLOCK_REMOVED] == 0 or a.mirror.parents_seen == 0:
        fail("no BlockRemoved, or no BlockStored with a parent: the workload did not exercise "
             "evictions and prefix chains")
    for k in ("kvwarden_kv_events_published_total", "kvwarden_prefix_cache_hits_total",
              "kvwarden_prefix_cache_evictions_total", "preemptions", "swap_in_bytes"):
        if m.get(k, 0) <= 0:
            fail(f"{k} is {m.get(k, 0)}: the workload did not exercise it")
    if m.get("kvwarden_kv_events_dropped_total", -1) != 0:
        fail("events were dropped with a large queue")


def stall(url, pub):
    ctx = zmq.Context()
    reader = ctx.socket(zmq.SUB)  # reads: sees a gap in seq for every batch dropped at the queue
    reader.setsockopt(zmq.SUBSCRIBE, b"")
    reader.connect(pub)
    seqs = []

    def read():
        while reader.poll(1000):
            _, seq_bytes, payload = reader.recv_multipart()
            check_batch(payload, None)
            seqs.append(struct.unpack(">Q", seq_bytes)[0])

    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 1)
    sub.setsockopt(zmq.RCVBUF, 4096)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub)  # and never reads
    time.sleep(0.5)
    reading = threading.Thread(target=read)
    reading.start()
    t0 = time.time()
    n = workload(url, prompts_for(3, 24), 40, 8)
    elapsed = time.time() - t0
    reading.join()  # ends 1 s after the last message
    m = metrics(url)
    published = m.get("kvwarden_kv_events_published_total", 0)
    dropped = m.get("kvwarden_kv_events_dropped_total", 0)
    dropped_batches = m.get("kvwarden_kv_event_batches_dropped_total", 0)
    gaps = (seqs[-1] - seqs[0] + 1 - len(seqs)) if seqs else 0
    print(f"stalled subscriber: {n} requests completed in {elapsed:.1f} s; events published "
          f"{published:g}, dropped {dropped:g} ({dropped_batches:g} batches); the reader got "
          f"{len(seqs)} batches with {gaps} missing sequence numbers")
    if n != 24:
        fail(f"{n} of 24 requests completed")
    if published <= 0 or dropped <= 0:
        fail("with max_queue_size 2 some steps' batches must be dropped and others published")
    if seqs != sorted(set(seqs)):
        fail("sequence numbers not strictly increasing")
    if gaps < 1:
        fail("batches were dropped but the reader saw no gap in the sequence numbers")
    sub.close(linger=0)


if __name__ == "__main__":
    if sys.argv[1] == "mirror":
        mirror(*sys.argv[2:5])
    elif sys.argv[1] == "stall":
        stall(*sys.argv[2:4])
    else:
        fail(f"unknown mode {sys.argv[1]}")
    print("PASS")
