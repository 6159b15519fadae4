#!/usr/bin/env python3
"""What refusals cost the requests already admitted: paced storms of requests that must be refused.

  bench/refusal_storm.py --url http://127.0.0.1:8000 [--rate 300] [--prompt-kb 30] [--window 20]

Keeps the server's admission full with closed-loop long streaming requests (--fill clients, as
many as --max-num-seqs + --max-queue of the server), then alternates quiet and storm windows of
--window seconds: quiet, storm, quiet. A storm sends --rate requests/s, each on a new connection
(with --keep-alive: on its sender's connection for as long as the server keeps it open),
with a prompt of --prompt-kb KB, which the server must refuse (429/503 + Retry-After). Reports, per
window, generated tokens/s (from kvwarden_generation_tokens_total), and for the storm its ratio
to the mean of the quiet windows around it, refusals answered/s, the share with Retry-After, and
the server CPU of its I/O and handler threads (kvwarden_thread_cpu_seconds_total{thread="kvw-io"
and "kvw-http"}) per refusal. Stdlib only. The load generator shares the machine with the server
when both run on one host; say so with the figures.
"""
import argparse
import http.client
import json
import random
import re
import threading
import time
import urllib.parse


def scrape(host, port):
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    def total(pattern):
        return sum(float(m.group(1)) for m in re.finditer(pattern + r"\S* (\S+)\n", text))
    return {
        "tokens": total(r"(?m)^kvwarden_generation_tokens_total"),
        "io_cpu": total(r'(?m)^kvwarden_thread_cpu_seconds_total\{thread="kvw-(?:io|http)"\}'),
        "cpu": total(r"(?m)^kvwarden_process_cpu_seconds_total"),
    }


def model_id(host, port):
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


def filler(host, port, model, stop, lo, hi, seed):
    """One closed-loop client keeping a slot busy with a long streamed completion.

    Lengths are drawn from [lo, hi] so the fillers' contexts spread out and the decode rate
    settles instead of slowing in lockstep; a refused filler retries after 10 ms, not after
    Retry-After, so a slot freed between two fillers stays free as briefly as possible (storm
    requests that slip into such a gap pass the door).
    """
    rng = random.Random(seed)
    while not stop.is_set():
        body = json.dumps({"model": model, "prompt": "And God said", "max_tokens": rng.randint(lo, hi),
                           "stream": True, "ignore_eos": True, "temperature": 0.8})
        try:
            c = http.client.HTTPConnection(host, port, timeout=600)
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                r.read()
                time.sleep(0.01)
                continue
            while not stop.is_set() and r.read1(65536):
                pass
            c.close()
        except OSError:
            time.sleep(0.1)


def storm(host, port, model, rate, prompt_kb, seconds, senders, result, keep_alive=False):
    words = ("lorem ipsum dolor sit amet " * (prompt_kb * 1024 // 27 + 1))[: prompt_kb * 1024]
    body = json.dumps({"model": model, "prompt": words, "max_tokens": 16}).encode()
    t0 = time.time()
    lock = threading.Lock()

    def sender(k):
        i = k
        c = None  # with keep_alive: one connection per sender, reopened when the server closes it
        while True:
            due = t0 + i / rate
            if due >= t0 + seconds:
                return
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            try:
                if c is None:
                    c = http.client.HTTPConnection(host, port, timeout=30)
                    with lock:
                        result["connections"] += 1
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                with lock:
                    result["answers"][r.status] = result["answers"].get(r.status, 0) + 1
                    result["retry_after"] += r.getheader("Retry-After") is not None
                if not keep_alive or r.will_close:
                    c.close()
                    c = None
            except OSError as e:
                if c is not None:
                    c.close()
                    c = None
                with lock:
                    result["errors"] += 1
            i += senders

    ts = [threading.Thread(target=sender, args=(k,)) for k in range(senders)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--prompt-kb", type=int, default=30)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--fill", type=int, default=32, help="closed-loop long requests keeping admission full")
    ap.add_argument("--fill-tokens", default="1500:3500",
                    help="LO:HI tokens per filler request, drawn uniformly for each request")
    ap.add_argument("--warmup", type=float, default=60,
                    help="seconds before the first window, for the fillers' lengths to spread out")
    ap.add_argument("--senders", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=1,
                    help="quiet/storm pairs before the last quiet window; with several short "
                         "windows the fillers' slow drift (their contexts grow) averages out")
    ap.add_argument("--keep-alive", action="store_true",
                    help="each sender reuses its connection (as SDK clients do) while the server keeps it")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    model = model_id(host, port)
    stop = threading.Event()
    lo, hi = (int(x) for x in a.fill_tokens.split(":"))
    fillers = [threading.Thread(target=filler, args=(host, port, model, stop, lo, hi, k), daemon=True)
               for k in range(a.fill)]
    for t in fillers:
        t.start()
    time.sleep(a.warmup)
    rows = []
    for phase in ["quiet", "storm"] * a.cycles + ["quiet"]:
        before, t0 = scrape(host, port), time.time()
        res = {"answers": {}, "retry_after": 0, "errors": 0, "connections": 0}
        if phase == "storm":
            storm(host, port, model, a.rate, a.prompt_kb, a.window, a.senders, res, a.keep_alive)
        else:
            time.sleep(a.window)
        after, dt = scrape(host, port), time.time() - t0
        rows.append((phase, after["tokens"] - before["tokens"], res,
                     after["io_cpu"] - before["io_cpu"], after["cpu"] - before["cpu"], dt))
    stop.set()

    def rate(name):  # tokens/s over every window of that phase together
        sel = [r for r in rows if r[0] == name]
        return sum(r[1] for r in sel) / sum(r[5] for r in sel)
    quiet = rate("quiet")
    storms = [r for r in rows if r[0] == "storm"]
    print(f"refusal storm: {a.rate:.0f}/s offered, {a.prompt_kb} KB prompts, {a.cycles} x {a.window:.0f} s storm "
          f"windows between quiet ones, {a.fill} long requests keeping admission full, "
          f"{sum(r[2]['connections'] for r in storms)} storm connections "
          f"({'kept alive' if a.keep_alive else 'one per request'})")
    print("| window | tokens/s | vs quiet | answers | answered/s | Retry-After | I/O+handler CPU per answer | process CPU (cores) |")
    print("|---|---|---|---|---|---|---|---|")
    for phase, tokens, res, io_cpu, cpu, dt in rows:
        tps = tokens / dt
        n = sum(res["answers"].values())
        per = f"{io_cpu / n * 1e6:.0f} us" if n else "-"
        ans = " ".join(f"{k}:{v}" for k, v in sorted(res["answers"].items())) or "-"
        ra = f"{res['retry_after'] / n:.2f}" if n else "-"
        print(f"| {phase} | {tps:.0f} | {tps / quiet:.2f} | {ans} | {n / dt:.0f} | {ra} | {per} | {cpu / dt:.2f} |")
    if a.cycles > 1:
        print(f"all storm windows against all quiet windows: {rate('storm') / quiet:.2f}")
    # The I/O threads also stream the fillers' tokens: their CPU rate in the quiet windows is
    # taken off the storm windows' before dividing by the refusals.
    def io_rate(name):
        sel = [r for r in rows if r[0] == name]
        return sum(r[3] for r in sel) / sum(r[5] for r in sel)
    answered = sum(sum(r[2]["answers"].values()) for r in storms) / sum(r[5] for r in storms)
    if answered > 0:
        print(f"I/O+handler CPU per refusal beyond the quiet windows' (streaming the fillers): "
              f"{(io_rate('storm') - io_rate('quiet')) / answered * 1e6:.0f} us; the storm windows "
              f"spent {io_rate('storm') - io_rate('quiet'):.3f} cores more on I/O than the quiet ones")
    errors = sum(r[2]["errors"] for r in storms)
    if errors:
        print(f"connection errors during the storm: {errors}")


if __name__ == "__main__":
    main()
