#!/usr/bin/env python3
"""Server CPU per door refusal, measured from the server's own thread clocks.

  bench/refusal_cost.py --url http://127.0.0.1:8473 --pid PID [--requests 5000] [--prompt-kb 30]
                        [--mode keep-alive,new-connection]

Start the server with a breaker that sheds after a few completions and does not recover during
the run, so that every completion is refused at the door (503 + Retry-After) while the engine
is idle and nothing else runs on the I/O threads, e.g.
  kvwarden serve --port 8473 --latency-sla 0.001 --breaker-latency-seconds 0.2 \
    --breaker-recover-seconds 100000 --breaker-tick-ms 50
(bench/refusal_cost.sh does). The script sends short completions until /ready reports
shedding; then, per mode, one client sends --requests completions with a --prompt-kb KB prompt,
one at a time, each waiting for its answer: on one kept-alive connection (`keep-alive`), or
each on a new connection closed after the answer (`new-connection`). Every answer must be
429/503 with Retry-After; others are counted apart.

CPU is read from /proc/PID/task/*/: the I/O threads' (kvw-io-*) on-CPU time from schedstat (ns)
and their user/system split from stat (clock ticks), before and after; a window of the same
length with no requests follows, and its I/O-thread CPU is subtracted. Reports, per mode:
refusals, µs of I/O-thread CPU per refusal (total, user, system) and of the whole process.
Stdlib only; run the client on other cores than the server (taskset) where possible.
"""
import argparse
import json
import os
import socket
import time
import urllib.parse

from refusal_storm import model_id

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def io_thread_cpu(pid):
    """(on-CPU ns, user s, system s) summed over the server's kvw-io threads, and process (user+sys) s."""
    ns = user = system = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith("kvw-io"):
                    continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11]) * TICK_S
            system += int(fields[12]) * TICK_S
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    process = (int(fields[11]) + int(fields[12])) * TICK_S
    return ns, user, system, process


def prime_shedding(host, port, model, timeout_s=60):
    """Sends short completions until /ready says the breaker sheds."""
    body = json.dumps({"model": model, "prompt": "And God said", "max_tokens": 8}).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    ready = f"GET /ready HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    end = time.time() + timeout_s
    while time.time() < end:
        with socket.create_connection((host, port), timeout=30) as s:
            s.sendall(req)
            read_answer(s)
            s.sendall(ready)
            if read_answer(s)[0] == 503:
                return
        time.sleep(0.05)
    raise SystemExit("the breaker did not shed: start the server as this script's help says")


def read_answer(s):
    """(status, has Retry-After, server closes) of one answer with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed before the answer")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
    left = int(fields.get("content-length", "0")) - len(rest)
    while left > 0:
        chunk = s.recv(min(left, 65536))
        if not chunk:
            raise OSError("closed inside the answer")
        left -= len(chunk)
    return status, "retry-after" in fields, fields.get("connection", "").lower() == "close"


def send_refused(host, port, request, n, keep_alive, counts):
    s = None
    for _ in range(n):
        if s is None:
            s = socket.create_connection((host, port), timeout=30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(request)
        status, retry_after, closes = read_answer(s)
        key = "refused" if status in (429, 503) and retry_after else f"other {status}"
        counts[key] = counts.get(key, 0) + 1
        if closes or not keep_alive:
            s.close()
            s = None
    if s is not None:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8473")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--prompt-kb", type=int, default=30)
    ap.add_argument("--mode", default="keep-alive,new-connection")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    model = model_id(host, port)
    prime_shedding(host, port, model)

    words = ("lorem ipsum dolor sit amet " * (a.prompt_kb * 1024 // 27 + 1))[: a.prompt_kb * 1024]
    body = json.dumps({"model": model, "prompt": words, "max_tokens": 16}).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    print(f"door refusals of {len(request)}-byte requests ({a.prompt_kb} KB prompts), one at a time, "
          f"by a shedding server")
    print("| mode | refusals | other answers | refusals/s | I/O-thread CPU per refusal | user | system | process CPU per refusal |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in a.mode.split(","):
        counts = {}
        t0, c0 = time.time(), io_thread_cpu(a.pid)
        send_refused(host, port, request, a.requests, mode == "keep-alive", counts)
        dt, c1 = time.time() - t0, io_thread_cpu(a.pid)
        time.sleep(0.2)
        q0 = io_thread_cpu(a.pid)
        time.sleep(dt)  # no requests, as long as the storm took
        q1 = io_thread_cpu(a.pid)
        n = counts.get("refused", 0)
        if n == 0:
            print(f"| {mode} | 0 | {counts} | - | - | - | - | - |")
            continue
        per = [((c1[i] - c0[i]) - (q1[i] - q0[i])) / n for i in range(4)]
        other = " ".join(f"{k}:{v}" for k, v in counts.items() if k != "refused") or "-"
        print(f"| {mode} | {n} | {other} | {n / dt:.0f} | {per[0] / 1e3:.1f} us | {per[1] * 1e6:.0f} us "
              f"| {per[2] * 1e6:.0f} us | {per[3] * 1e6:.0f} us |")


if __name__ == "__main__":
    main()
