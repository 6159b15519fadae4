#!/usr/bin/env python3
"""Splits a retry storm's engine work by phase (bench/storm_waste.sh OUT writes OUT's files).

Reads OUT/scrape.txt (/metrics every 2 s, each block after a "T <epoch>" line), OUT/bench.txt
(the bench's lines, each after its epoch time) and OUT/retry.json (the bench report). The quiet
phase runs from the bench's "quiet phase:" line to its "quiet capacity:" line, the storm from
there to the last scrape. Per phase: forward tokens (all run through the model), the part of
finished requests that completed (stop/length), were cancelled, and the part recomputed after a
preemption; generated tokens per forward token; the server's CPU seconds by thread kind (engine,
I/O, the rest) and forward tokens per server CPU second, which on a busy machine says what the
storm cost the server better than tokens per second do; then the bench's goodput and both phases'
mix.
"""
import json
import os
import sys


def load_scrapes(path):
    snaps, cur = [], None
    for line in open(path):
        if line.startswith("T "):
            cur = {"t": float(line.split()[1])}
            snaps.append(cur)
        elif cur is not None and not line.startswith("#") and " " in line:
            key, value = line.rsplit(" ", 1)
            cur[key] = float(value)
    return [s for s in snaps if len(s) > 1]


def phase_times(path):
    start = end = None
    for line in open(path):
        t, _, text = line.partition(" ")
        if text.startswith("quiet phase:") and start is None:
            start = float(t)
        if text.startswith("quiet capacity:") and end is None:
            end = float(t)
    return start, end


FIN = 'kvwarden_forward_tokens_finished_total{reason="%s"}'
KEYS = {
    "forward": "kvwarden_forward_tokens_total",
    "completed": (FIN % "stop", FIN % "length"),
    "cancelled": FIN % "cancelled",
    "error": FIN % "error",
    "recomputed": "kvwarden_recomputed_tokens_total",
    "generated": "kvwarden_generation_tokens_total",
    "prefix_hits": "kvwarden_prefix_cache_hits_total",
    "cpu_engine": "cpu_ticks_engine",
    "cpu_io": "cpu_ticks_io",
    "cpu_other": "cpu_ticks_other",
}
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def value(snap, key):
    if isinstance(key, tuple):
        return sum(snap.get(k, 0.0) for k in key)
    return snap.get(key, 0.0)


def main(out):
    snaps = load_scrapes(out + "/scrape.txt")
    start, end = phase_times(out + "/bench.txt")
    if not snaps or start is None or end is None:
        sys.exit("storm_waste.py: no scrapes or no quiet phase in " + out)

    def at(t):
        return max((s for s in snaps if s["t"] <= t), key=lambda s: s["t"], default=snaps[0])

    report = json.load(open(out + "/retry.json"))
    for name, a, b in (("quiet", at(start), at(end + 0.5)), ("storm", at(end + 0.5), snaps[-1])):
        d = {k: value(b, key) - value(a, key) for k, key in KEYS.items()}
        fwd = max(d["forward"], 1)
        print(f"{name}: {b['t'] - a['t']:.0f} s, forward tokens {d['forward']:.0f}: completed "
              f"{d['completed'] / fwd:.3f}, cancelled {d['cancelled'] / fwd:.3f}, error "
              f"{d['error'] / fwd:.3f}, recomputed {d['recomputed'] / fwd:.3f}; generated "
              f"{d['generated']:.0f} ({d['generated'] / fwd:.4f} per forward token); prefix-cache "
              f"hits {d['prefix_hits']:.0f}")
        cpu = {k: d["cpu_" + k] * TICK_S for k in ("engine", "io", "other")}
        total = sum(cpu.values())
        if total > 0:
            print(f"  server CPU {total:.1f} s ({total / max(b['t'] - a['t'], 1e-9):.2f} cores): "
                  f"engine {cpu['engine']:.1f}, I/O {cpu['io']:.1f} ({cpu['io'] / total:.3f}), "
                  f"other {cpu['other']:.1f}; forward tokens per server CPU s "
                  f"{d['forward'] / total:.0f}")
    r = report
    print(f"goodput {r.get('goodput_tokens_per_s', 0):.1f} tok/s, quiet capacity "
          f"{r.get('quiet_capacity_tokens_per_s', 0):.1f}, ratio {r.get('goodput_ratio', 0):.3f}; "
          f"admitted {r.get('admitted')}, p99/max admitted wait "
          f"{r.get('p99_admitted_wait_ms', 0) / 1e3:.1f}/{r.get('max_admitted_wait_ms', 0) / 1e3:.1f} s")
    for phase, prefix in (("storm", ""), ("quiet", "quiet_")):
        print(f"{phase} mix: {r.get(prefix + 'completed_requests')} completed, mean prompt "
              f"{r.get(prefix + 'completed_mean_input_tokens', 0):.0f}, mean output (all choices) "
              f"{r.get(prefix + 'completed_mean_output_tokens', 0):.1f} tokens")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
