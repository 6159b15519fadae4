#!/usr/bin/env python3
"""The worst legal request mix against `kvwarden serve --memory-budget 1GiB --api-key K`
(issue 30): prints VmHWM against the budget and what the server refused.

    bench/worst_request_mix.py [--kvwarden build/apps/kvwarden/kvwarden] [--seconds 60]
                               [--max-tokens 512] [--answer-timeout 150]

All at once, every request within the documented bounds:
  - NONSTREAM non-streamed completions: 4 prompts x n 16 = 64 choices, 16 stop strings of
    256 B (4 KiB, kMaxStopBytes), 1024 logit_bias entries (kMaxLogitBiasEntries), logprobs 5,
    max_tokens MAX_TOKENS, ignore_eos; read at full speed;
  - STREAMED streamed chat completions, n 16, logprobs with top_logprobs 20, max_tokens
    MAX_TOKENS, ignore_eos, each read by a slow client (1 KiB a second);
  - WITHHOLD unauthenticated POSTs announcing an 8 MiB body and sending none;
  - a loop of /debug/kv, /debug/trace, /debug/stats with the key.
VmHWM and VmRSS come from /proc/PID/status; request memory from /metrics.
At the end an authorised 1-token completion is sent and timed; its client waits longer than
the server's own bound (--answer-timeout, more than --max-queue-wait), and /metrics is sampled
each second while it waits, so a wait shows where it is spent.
Not part of ctest: minutes of CPU; say how busy the machine was when quoting it.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

KEY = "K"


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def metrics_text(url):
    try:
        return urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    except OSError:
        return None


def metric(url, name, label="", text=None):
    text = text if text is not None else metrics_text(url)
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith(name) and label in line:
            return float(line.rsplit(" ", 1)[1])
    return None


# Where a request can wait before its first token, as /metrics shows it.
WAIT_SERIES = [("running", "kvwarden_requests{", 'state="running"'),
               ("waiting", "kvwarden_requests{", 'state="waiting"'),
               ("preparing", "kvwarden_http_requests_preparing", ""),
               ("mem_used_MiB", "kvwarden_request_memory_bytes", 'state="used"'),
               ("mem_waiters", "kvwarden_request_memory_waiters", ""),
               ("streams", "kvwarden_http_streams", "")]


def wait_sample(url):
    text = metrics_text(url)
    out = {}
    for key, name, label in WAIT_SERIES:
        v = metric(url, name, label, text)
        out[key] = None if v is None else (round(v / 2**20, 1) if key.endswith("MiB") else int(v))
    return out


def raw_request(host, port, method, path, body=None, key=True, read=True, slow=False,
                timeout=600, head_out=None):
    """Sends one HTTP/1.1 request; returns (status, bytes read). slow: 1 KiB a second.
    head_out: a list that gets the answer's status line and headers."""
    s = socket.create_connection((host, port), timeout=timeout)
    if slow:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if key:
        head += f"Authorization: Bearer {KEY}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    s.sendall(head.encode() + b"\r\n" + data)
    if not read:
        return s, 0
    got = b""
    try:
        while True:
            chunk = s.recv(1024 if slow else 1 << 16)
            if not chunk:
                break
            got += chunk
            if slow:
                time.sleep(1.0)
    except OSError:
        pass
    s.close()
    if head_out is not None:
        head_out.append(got.split(b"\r\n\r\n", 1)[0].decode(errors="replace"))
    m = re.match(rb"HTTP/1\.[01] (\d+)", got)
    return (int(m.group(1)) if m else 0), len(got)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvwarden", default="build/apps/kvwarden/kvwarden")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--nonstream", type=int, default=8)
    ap.add_argument("--streamed", type=int, default=8)
    ap.add_argument("--withhold", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--answer-timeout", type=float, default=150,
                    help="the authorised request's client timeout (over the server's bounds)")
    ap.add_argument("--port", type=int, default=8477)
    ap.add_argument("--extra", default="", help="more serve flags")
    a = ap.parse_args()
    budget = 1 << 30
    cmd = [a.kvwarden, "serve", "--memory-budget", "1GiB", "--api-key", KEY, "--port",
           str(a.port)] + a.extra.split()
    log = open("/tmp/kvw_worst_mix.log", "w")
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{a.port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        srv.kill()
        sys.exit("server did not start: see /tmp/kvw_worst_mix.log")
    idle_hwm = status_kib(srv.pid, "VmHWM")
    bias = {str(i): 0.25 for i in range(1024)}  # kMaxLogitBiasEntries (vocab >= 1024)
    stops = [chr(ord("A") + i) * 256 for i in range(16)]
    prompt = "Once upon a time there was a little dragon who lived far away. " * 8
    results = {"nonstream": [], "streamed": [], "debug": []}
    stop_at = time.time() + a.seconds

    def nonstream():
        body = {"prompt": [prompt] * 4, "n": 16, "stop": stops, "logit_bias": bias,
                "logprobs": 5, "max_tokens": a.max_tokens, "ignore_eos": True}
        results["nonstream"].append(raw_request("127.0.0.1", a.port, "POST", "/v1/completions",
                                                body))

    def streamed():
        body = {"messages": [{"role": "user", "content": prompt}], "n": 16, "stream": True,
                "logprobs": True, "top_logprobs": 20, "max_tokens": a.max_tokens,
                "ignore_eos": True, "stop": stops}
        results["streamed"].append(raw_request("127.0.0.1", a.port, "POST",
                                               "/v1/chat/completions", body, slow=True))

    withheld = []

    def withhold():
        s = socket.create_connection(("127.0.0.1", a.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 8388608\r\n\r\n")
        withheld.append(s)

    def debug_loop():
        while time.time() < stop_at:
            for path in ("/debug/kv", "/debug/trace", "/debug/stats"):
                results["debug"].append(raw_request("127.0.0.1", a.port, "GET", path)[0])

    threads = [threading.Thread(target=withhold) for _ in range(a.withhold)]
    threads += [threading.Thread(target=nonstream) for _ in range(a.nonstream)]
    threads += [threading.Thread(target=streamed, daemon=True) for _ in range(a.streamed)]
    threads += [threading.Thread(target=debug_loop, daemon=True)]
    t0 = time.time()
    for t in threads:
        t.start()
    peak_rm = 0.0
    ended = "--seconds passed"
    while time.time() < stop_at and srv.poll() is None:
        rm = metric(url, "kvwarden_request_memory_bytes", 'state="peak"')
        if rm is not None:
            peak_rm = max(peak_rm, rm)
        if all(not t.is_alive() for t in threads if not t.daemon):
            ended = "every non-streamed request answered"
            break
        time.sleep(0.5)
    mix_s = time.time() - t0
    hwm = status_kib(srv.pid, "VmHWM") if srv.poll() is None else -1
    rss = status_kib(srv.pid, "VmRSS") if srv.poll() is None else -1
    alive = srv.poll() is None
    # The authorised request, timed, with /metrics sampled each second while it waits.
    authorised, auth_s, auth_head, samples = 0, 0.0, [], []
    if alive:
        done = threading.Event()

        def sampler():
            while not done.wait(1.0):
                samples.append((round(time.time() - t_auth, 1), wait_sample(url)))

        t_auth = time.time()
        samples.append((0.0, wait_sample(url)))
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        authorised = raw_request("127.0.0.1", a.port, "POST", "/v1/completions",
                                 {"prompt": "Hi", "max_tokens": 1}, timeout=a.answer_timeout,
                                 head_out=auth_head)[0]
        auth_s = time.time() - t_auth
        done.set()
    for s in withheld:
        s.close()
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()

    def tally(rs):
        out = {}
        for st, _ in rs:
            out[st] = out.get(st, 0) + 1
        return out

    print(f"load before: {open('/proc/loadavg').read().split()[:3]}; {os.cpu_count()} cpus")
    print(f"mix ran {mix_s:.1f} s ({ended}): {a.nonstream} non-streamed x 64 choices, "
          f"{a.streamed} streamed slow readers x 16 choices, {a.withhold} withheld bodies, "
          f"{len(results['debug'])} /debug answers")
    print(f"non-streamed statuses {tally(results['nonstream'])}; streamed (finished) "
          f"{tally(results['streamed'])}; debug {dict((s, results['debug'].count(s)) for s in set(results['debug']))}")
    print(f"authorised 1-token completion beside it all: {authorised} after {auth_s:.1f} s")
    if auth_head:
        print("  its answer: " + auth_head[0].replace("\r\n", " | ")[:300])
    print("  while it waited (s, /metrics; a line when something changed):")
    last = None
    for i, (at, smp) in enumerate(samples):
        if smp != last or i + 1 == len(samples):
            print(f"    {at:6.1f} {smp}")
        last = smp
    print(f"request memory peak {peak_rm / 2**20:.1f} MiB")
    print(f"VmHWM idle {idle_hwm / 1024:.1f} MiB, under the mix {hwm / 1024:.1f} MiB, "
          f"VmRSS at the end {rss / 1024:.1f} MiB; budget {budget / 2**20:.0f} MiB "
          f"({'within' if 0 <= hwm * 1024 <= budget else 'OVER'})")
    print("server alive through the mix" if alive else "SERVER DIED (see /tmp/kvw_worst_mix.log)")


if __name__ == "__main__":
    main()
