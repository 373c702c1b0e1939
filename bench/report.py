#!/usr/bin/env python3
"""Turns one scripts/bench.sh run (a results directory) into BENCHMARKS.md and the plot.

    python3 bench/report.py bench/results/<stamp> BENCHMARKS.md

Reads results.jsonl (one JSON line per relay-bench run) and machine.txt, prints the table,
writes bench/latency-vs-load.png (gnuplot, in a bench/ directory next to the report) and the
report. Hand-written analysis lives in bench/notes.md and is appended verbatim, so a rerun
refreshes the numbers and keeps the notes. A partial run (scripts/bench.sh with BENCH_ONLY)
marks the targets it did not measure "not run".
"""
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

run_dir, md_path = sys.argv[1], sys.argv[2]
bench_dir = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(bench_dir)
# The plot goes next to the report it is linked from (bench/ of the repository for
# BENCHMARKS.md), so a report written elsewhere never overwrites the committed one's.
plot_dir = os.path.join(os.path.dirname(os.path.abspath(md_path)), "bench")
os.makedirs(plot_dir, exist_ok=True)

# Measurements repeated over rounds are labelled NAME@ROUND; every figure below is the median
# over the rounds of NAME, and the throughput rows also show the spread.
runs = {}
groups = {}
for line in open(os.path.join(run_dir, "results.jsonl")):
    r = json.loads(line)
    runs[r["label"]] = r
    groups.setdefault(r["label"].split("@")[0], []).append(r)


def vals(label, *path):
    out = []
    for v in groups.get(label, []):
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            out.append(float(v))
    return out


def get(label, *path, default=float("nan")):
    v = vals(label, *path)
    return statistics.median(v) if v else default


def spread(label, *path):
    """ " (min to max over N rounds)" when the figure was measured more than once."""
    v = vals(label, *path)
    if len(v) < 2:
        return ""
    return f" ({min(v):,.0f} to {max(v):,.0f} over {len(v)} rounds)"


def proc(label, name, field):
    return get(label, "processes", name, field)


nan = float("nan")
A = get("part-intake", "rps")
B = get("part-redis", "rps")
C = get("part-apns", "rps")
L = 1.0 / (1.0 / A + 1.0 / B + 1.0 / C)

cpu_intake = proc("part-intake", "intake", "cpu_us_per_request")
cpu_redis = proc("part-redis", "redis", "cpu_us_per_request")
# The client side of the Redis round trip: relay-bench encoding EVALSHA with fred, writing
# it, reading and decoding the reply. The relay pays exactly this work for its one call.
cpu_redis_client = get("part-redis", "generator_cpu_us_per_request")
cpu_h2 = get("part-apns", "generator_cpu_us_per_request")
cpu_mock = proc("part-apns", "mock", "cpu_us_per_request")
cpu_parts = cpu_intake + cpu_redis_client + cpu_redis + cpu_h2
cpu_parts_server_only = cpu_intake + cpu_redis + cpu_h2

T_mem = get("relay-memory", "forwarded_per_s")
T_r1 = get("relay-redis-1", "forwarded_per_s")
T_r2 = get("relay-redis-2", "forwarded_per_s")
T_mix = get("relay-redis-1-mix", "rps")

cpu_relay_mem = proc("relay-memory", "relay", "cpu_us_per_forwarded")
cpu_relay_r1 = proc("relay-redis-1", "relay", "cpu_us_per_forwarded")
cpu_redis_r1 = proc("relay-redis-1", "redis", "cpu_us_per_forwarded")
cpu_r1 = cpu_relay_r1 + cpu_redis_r1
cpu_r2 = (proc("relay-redis-2", "relay", "cpu_us_per_forwarded")
          + proc("relay-redis-2", "relay2", "cpu_us_per_forwarded")
          + proc("relay-redis-2", "redis", "cpu_us_per_forwarded"))
cpu_mem_vs_parts = cpu_intake + cpu_h2

ratio_tp = T_r1 / L
ratio_cpu = cpu_r1 / cpu_parts
# The same load on a replica running a relay per core (RELAY_RUNTIME=per-core): reported
# beside the targets, which are measured on the default runtime.
T_pc = get("relay-redis-1-percore", "forwarded_per_s")
cpu_relay_pc = proc("relay-redis-1-percore", "relay", "cpu_us_per_forwarded")
cpu_pc = cpu_relay_pc + proc("relay-redis-1-percore", "redis", "cpu_us_per_forwarded")
ratio_cpu_server_only = cpu_r1 / cpu_parts_server_only

# Latency curve: the median of each figure over the passes at each point.
def med_of(rs, *path):
    v = []
    for r in rs:
        for p in path:
            r = r.get(p) if isinstance(r, dict) else None
        if isinstance(r, (int, float)):
            v.append(float(r))
    return statistics.median(v) if v else nan


points = []
for label, rs in groups.items():
    if label.startswith("curve-relay-"):
        f = label[len("curve-relay-"):]
        ap = groups.get("curve-apns-" + f, [])
        pct_keys = ["p50", "p90", "p99", "p999"]
        lr = {k: med_of(rs, "latency_ms", k) for k in pct_keys}
        la = {k: med_of(ap, "latency_ms", k) for k in pct_keys} if ap else {}
        cores = statistics.median([(r.get("measured_cpu_s", nan) + r.get("generator_cpu_s", nan)) / r["elapsed_s"] for r in rs])
        cpu = (med_of(rs, "processes", "relay", "cpu_us_per_request"),
               med_of(rs, "processes", "redis", "cpu_us_per_request"),
               cores)
        points.append((float(f), med_of(rs, "target_rate"), med_of(rs, "rps"), lr,
                       med_of(ap, "rps") if ap else nan, la, cpu))
points.sort()
half = [p for p in points if abs(p[0] - 0.5) < 1e-9]
if half:
    _, _, _, lr, _, la, _ = half[0]
    added_p99 = lr["p99"] - la.get("p99", nan)
    added_p50 = lr["p50"] - la.get("p50", nan)
else:
    added_p99 = added_p50 = nan

evalsha_fwd = get("relay-redis-1", "redis_evalsha_per_forwarded")
rt_fwd = get("relay-redis-1", "redis_round_trips_per_forwarded")
rt_fwd2 = get("relay-redis-2", "redis_round_trips_per_forwarded")
path_fwd = get("relay-redis-1", "redis_request_path_calls_per_forwarded")
path_fwd2 = get("relay-redis-2", "redis_request_path_calls_per_forwarded")
bg_calls = get("relay-redis-1", "redis_background_calls", default=0)
mix_rt_req = statistics.median([r["redis_evalsha"] / max(1, r["requests"]) for r in groups.get("relay-redis-1-mix", [])] or [nan])
path_all = vals("relay-redis-1", "redis_request_path_calls_per_forwarded") + vals("relay-redis-2", "redis_request_path_calls_per_forwarded")

few_n = int(get("rss-few", "requests", default=0) + get("rss-warm", "mix", "devices", default=0))
many_n = int(few_n + get("rss-many", "requests", default=0))
rss_few = proc("rss-few", "relay", "vm_hwm_kb")
rss_many = proc("rss-many", "relay", "vm_hwm_kb")
rss_growth = (rss_many - rss_few) / rss_few if rss_few == rss_few and rss_few else nan
mem_per_dev = get("redis-memory", "bytes_per_device")
many_used = get("rss-many", "redis_used_memory")
try:
    many_keys = int(open(os.path.join(run_dir, "dbsize-many.txt")).read().strip())
except Exception:
    many_keys = 0

# Signed pushes (/v2/pushes). Throughput: each round's one-target signed run right after
# that round's v1 run on the same replica; the ratio is the median of the per-round ratios.
S1 = get("signed-1", "forwarded_per_s")
signed_ratios = []
for label, r in runs.items():
    name, _, rnd = label.partition("@")
    v1 = runs.get("relay-redis-1@" + rnd)
    if name == "signed-1" and v1 and v1.get("forwarded_per_s"):
        signed_ratios.append(r["forwarded_per_s"] / v1["forwarded_per_s"])
ratio_signed = statistics.median(signed_ratios) if signed_ratios else nan


def not_delivered(label):
    """Pushes of the runs named label that did not answer 201 with every target delivered."""
    return sum(r["requests"] - r.get("forwarded", 0) for r in groups.get(label, []))


def other_outcomes(label):
    out = {}
    for r in groups.get(label, []):
        for k, v in r["outcomes"].items():
            if k != "201 delivered":
                out[k] = out.get(k, 0) + v
    return ", ".join(f"{k}: {v:,}" for k, v in sorted(out.items()))


S1_bad = not_delivered("signed-1")
S1_in_loop = sum(r.get("signed_in_loop", 0) for r in groups.get("signed-1", []))
S1_pushes = sum(r["requests"] for r in groups.get("signed-1", []))
cpu_relay_s1 = proc("signed-1", "relay", "cpu_us_per_forwarded")
cpu_redis_s1 = proc("signed-1", "redis", "cpu_us_per_forwarded")
gen_s1 = get("signed-1", "generator_cpu_us_per_request")
evalsha_s1 = get("signed-1", "redis_evalsha_request_path_per_push")
# The signed push against its own parts, each alone on the same machine: the HTTP part
# (bench-intake reading, parsing and canonicalising /v2/pushes and rendering the receipt),
# one Ed25519 verification (ring as the relay calls it, on every core), the three store calls
# of a one-target push (relay-bench signed-redis) and the APNs part (part C).
SA = get("part-sg-intake", "forwarded_per_s")
SV = get("part-sg-verify", "verifiers", "ring", "verifies_per_s_median")
SR = statistics.median([r["outcomes"].get("forwarded", 0) / r["elapsed_s"] for r in groups.get("part-sg-redis", [])] or [nan])
SL = 1.0 / (1.0 / SA + 1.0 / SV + 1.0 / SR + 1.0 / C) if min(SA, SV, SR, C) > 0 else nan
ratio_signed_parts = S1 / SL
S1_pc = get("signed-1-percore", "forwarded_per_s")
S1_pc_bad = not_delivered("signed-1-percore")
cpu_relay_s1_pc = proc("signed-1-percore", "relay", "cpu_us_per_forwarded")
F = runs.get("signed-100", {})
F_lat = F.get("latency_ms", {})
F_p50, F_p90, F_p99, F_max = (F_lat.get(k, nan) for k in ("p50", "p90", "p99", "max"))
F_pushes = F.get("requests", 0)
F_bad = not_delivered("signed-100")
F_delivered = F.get("targets_delivered", 0)
F_rate = F.get("target_rate") or nan
F_states = ", ".join(f"{k}: {v:,}" for k, v in sorted(F.get("target_states", {}).items()))
cpu_relay_f = proc("signed-100", "relay", "cpu_us_per_forwarded")


def round_trips(label, want):
    """(EVALSHA per created push on the request path, other client calls, exact, text)."""
    r = runs.get(label)
    if not r or "redis_evalsha_request_path" not in r:
        return nan, 0, False, "n/a"
    path, created = r["redis_evalsha_request_path"], r.get("created", 0)
    other = r.get("redis_other_client_calls", 0)
    exact = created > 0 and path == want * created and other == 0 and r.get("forwarded") == r["requests"]
    return (path / created if created else nan), other, exact, f"{path:,} for {created:,} pushes"


rt1, rt1_other, rt1_exact, rt1_text = round_trips("signed-rt-1", 3)
rt100, rt100_other, rt100_exact, rt100_text = round_trips("signed-rt-100", 102)

# Mailboxes (relay-bench mailbox / mailbox-redis / watch). Each op's limit of its parts is
# 1/(1/A+1/B) like v1's (which has a third part, APNs): A the HTTP intake alone
# (bench-intake answering the same requests), B Redis running mailbox.lua for them.
mb = {}
for op in ("put", "list"):
    a_ = get(f"part-mb-intake-{op}", "ok_per_s")
    b_ = get(f"part-mb-redis-{op}", "ok_per_s")
    t_ = get(f"mailbox-{op}", "ok_per_s")
    lim = 1.0 / (1.0 / a_ + 1.0 / b_) if a_ == a_ and b_ == b_ and a_ and b_ else nan
    rs = groups.get(f"mailbox-{op}", [])
    limited = sum(r.get("rate_limited", 0) for r in rs)
    total = sum(r["requests"] for r in rs)
    other_bad = sum(r["requests"] - r.get("ok", 0) - r.get("rate_limited", 0) for r in rs)
    mb[op] = dict(A=a_, B=b_, T=t_, L=lim, ratio=(t_ / lim if lim == lim and lim else nan),
                  limited=limited, total=total, other_bad=other_bad,
                  mailboxes=get(f"mailbox-{op}", "mailboxes"),
                  cpu_relay=proc(f"mailbox-{op}", "relay", "cpu_us_per_forwarded"),
                  cpu_redis=proc(f"mailbox-{op}", "redis", "cpu_us_per_forwarded"),
                  cpu_intake=proc(f"part-mb-intake-{op}", "intake", "cpu_us_per_request"),
                  cpu_redis_alone=proc(f"part-mb-redis-{op}", "redis", "cpu_us_per_request"),
                  cpu_redis_client=get(f"part-mb-redis-{op}", "generator_cpu_us_per_request"),
                  T_pc=get(f"mailbox-percore-{op}", "ok_per_s"),
                  cpu_relay_pc=proc(f"mailbox-percore-{op}", "relay", "cpu_us_per_forwarded"),
                  cpu_redis_pc=proc(f"mailbox-percore-{op}", "redis", "cpu_us_per_forwarded"))


def mb_round_trips(label):
    """(EVALSHA per request on the request path, other client calls, exact, text)."""
    r = runs.get(label)
    if not r or "redis_evalsha_request_path" not in r:
        return nan, 0, False, "n/a"
    path, n, ok = r["redis_evalsha_request_path"], r["requests"], r.get("ok", 0)
    other = r.get("redis_other_client_calls", 0)
    exact = n > 0 and ok == n and path == n and other == 0
    return (path / n if n else nan), other, exact, f"{path:,} for {n:,} requests"


mrt_put, mrt_put_other, mrt_put_exact, mrt_put_text = mb_round_trips("mailbox-rt-put")
mrt_list, mrt_list_other, mrt_list_exact, mrt_list_text = mb_round_trips("mailbox-rt-list")
W = runs.get("watch-2", {})
W_lat = W.get("latency_ms", {})
W_p50, W_p90, W_p99, W_max = (W_lat.get(k, nan) for k in ("p50", "p90", "p99", "max"))
W_rate = W.get("target_rate") or nan
W_stored, W_notified, W_missing = W.get("stored", 0), W.get("notified", 0), W.get("missing", 0)
W_put_p99 = W.get("put_latency_ms", {}).get("p99", nan)
W_bad = W.get("requests", 0) - W_stored

# Signal (relay-bench signal): latency runs once each, the ceiling every round.
def sig(label):
    r = runs.get(label, {})
    l = r.get("latency_ms", {})
    return dict(ran=bool(r), p50=l.get("p50", nan), p90=l.get("p90", nan), p99=l.get("p99", nan),
                max=l.get("max", nan), sent=r.get("frames_sent", 0), received=r.get("frames_received", 0),
                # Not run: the script's defaults, for the labels.
                lost=r.get("frames_lost", 0), rate=r.get("target_rate") or 1000, pairs=r.get("pairs", 20),
                frame=r.get("frame_bytes", 1024), per_side=r.get("per_side_rate") or 25,
                closes=", ".join(f"{k}: {v:,}" for k, v in sorted(r.get("outcomes", {}).items())
                                 if k not in ("relayed", "lost")),
                cpu_relay=r.get("processes", {}).get("relay", {}).get("cpu_us_per_request", nan))


SL_mem, SL_redis, SX = sig("signal-local-mem"), sig("signal-local-redis"), sig("signal-cross")
ceil = {}
for st in ("mem", "redis"):
    rs = groups.get(f"signal-ceiling-{st}", [])
    ceil[st] = dict(ran=bool(rs), mbs=get(f"signal-ceiling-{st}", "relayed_mb_per_s"),
                    spread=spread(f"signal-ceiling-{st}", "relayed_mb_per_s"),
                    allowed=get(f"signal-ceiling-{st}", "bucket_allowed_mb_per_s"),
                    cores=get(f"signal-ceiling-{st}", "relay_cores"),
                    gen_cores=get(f"signal-ceiling-{st}", "generator_cores"),
                    us_per_mb=get(f"signal-ceiling-{st}", "relay_cpu_us_per_mb"),
                    redis_cpu=statistics.median([r["processes"]["redis"]["cpu_s"] / r["relay_s"] for r in rs
                                                 if "redis" in r.get("processes", {})] or [nan]),
                    lost=sum(r.get("frames_lost", 0) for r in rs),
                    sent=sum(r.get("frames_sent", 0) for r in rs),
                    pairs=get(f"signal-ceiling-{st}", "pairs"),
                    frame=get(f"signal-ceiling-{st}", "frame_bytes"),
                    window=get(f"signal-ceiling-{st}", "window"))


def f0(x):
    return "n/a" if x != x else f"{x:,.0f}"


def f1(x):
    return "n/a" if x != x else f"{x:,.1f}"


def f2(x):
    return "n/a" if x != x else f"{x:,.2f}"


def pct(x):
    return "n/a" if x != x else f"{100 * x:.0f}%"


def mark(ok, ran=True):
    if not ran:
        return "not run"
    return "met" if ok else "**missed**"


table = []
table.append("| Figure | Value |")
table.append("| --- | --- |")
table.append(f"| A: HTTP intake alone (bench-intake, parse + 202), req/s | {f0(A)}{spread('part-intake', 'rps')} |")
table.append(f"| B: Redis alone, EVALSHA policy_admit.lua, calls/s | {f0(B)}{spread('part-redis', 'rps')} |")
table.append(f"| C: mock APNs alone, HTTP/2 requests/s (relay-bench as the relay's client) | {f0(C)}{spread('part-apns', 'rps')} |")
table.append(f"| Combined limit 1/(1/A+1/B+1/C), req/s | {f0(L)} |")
table.append(f"| sealrelay, embedded store, forwarded/s | {f0(T_mem)}{spread('relay-memory', 'forwarded_per_s')} |")
table.append(f"| sealrelay on Redis, 1 replica, forwarded/s | {f0(T_r1)}{spread('relay-redis-1', 'forwarded_per_s')} |")
table.append(f"| sealrelay on Redis, 2 replicas, forwarded/s | {f0(T_r2)}{spread('relay-redis-2', 'forwarded_per_s')} |")
table.append(f"| sealrelay on Redis, 1 replica, a relay per core (`RELAY_RUNTIME=per-core`), forwarded/s | {f0(T_pc)}{spread('relay-redis-1-percore', 'forwarded_per_s')} ({pct(T_pc / L)} of the combined limit) |")
table.append(f"| sealrelay on Redis, 1 replica, daemon mix (bursts of 100 devices x 3 nodes), req/s | {f0(T_mix)} |")
table.append(f"| CPU per request, intake alone (server), us | {f1(cpu_intake)} |")
table.append(f"| CPU per request, Redis alone: client side (fred in relay-bench) / redis-server, us | {f1(cpu_redis_client)} / {f1(cpu_redis)} |")
table.append(f"| CPU per request, HTTP/2 client alone (relay-bench), us | {f1(cpu_h2)} |")
table.append(f"| CPU per request, sum of the parts (intake + Redis client + redis-server + HTTP/2 client), us | {f1(cpu_parts)} |")
table.append(f"| CPU per request, sum of the parts without the Redis client side, us | {f1(cpu_parts_server_only)} |")
table.append(f"| CPU per forwarded, sealrelay (1 replica on Redis), us | {f1(cpu_relay_r1)} |")
table.append(f"| CPU per forwarded, redis-server under sealrelay, us | {f1(cpu_redis_r1)} |")
table.append(f"| CPU per forwarded, sealrelay + Redis, 1 replica / 2 replicas, us | {f1(cpu_r1)} / {f1(cpu_r2)} |")
table.append(f"| CPU per forwarded, a relay per core: sealrelay / sealrelay + Redis, us | {f1(cpu_relay_pc)} / {f1(cpu_pc)} ({f2(cpu_pc / cpu_parts)} x the parts) |")
table.append(f"| CPU per forwarded, sealrelay embedded store, us (parts: intake + HTTP/2 client = {f1(cpu_mem_vs_parts)}) | {f1(cpu_relay_mem)} |")
table.append(f"| (mock APNs server CPU per request, not counted on either side), us | {f1(cpu_mock)} |")
table.append(f"| p99 / p50 latency at half of peak: sealrelay on Redis, ms | {f2(half[0][3]['p99']) if half else 'n/a'} / {f2(half[0][3]['p50']) if half else 'n/a'} |")
table.append(f"| p99 / p50 latency at the same rate: mock APNs round trip alone, ms | {f2(half[0][5].get('p99', nan)) if half else 'n/a'} / {f2(half[0][5].get('p50', nan)) if half else 'n/a'} |")
table.append(f"| Redis calls per forwarded request on the request path, 1 replica / 2 replicas | {path_fwd:.4f} / {path_fwd2:.4f} |")
table.append(f"| Redis EVALSHA / all round trips per forwarded incl. background retry-queue polls ({bg_calls:,.0f} in the median run) | {evalsha_fwd:.4f} / {rt_fwd:.4f} |")
table.append(f"| Redis EVALSHA per request in the daemon mix (coalesced requests included) | {f2(mix_rt_req)} |")
table.append(f"| Relay peak RSS after the warm-up ({get('rss-warm', 'requests', default=0):,.0f} requests over {get('rss-warm', 'mix', 'devices', default=0):,.0f} devices), kB | {f0(proc('rss-warm', 'relay', 'vm_hwm_kb'))} |")
table.append(f"| Relay peak RSS after {few_n:,} distinct devices, kB | {f0(rss_few)} |")
table.append(f"| Relay peak RSS after {many_n:,} distinct devices, kB | {f0(rss_many)} |")
table.append(f"| Redis memory per device, one live alert id ({get('redis-memory', 'keys_added', default=0):,.0f} devices), bytes | {f0(mem_per_dev)} |")
table.append(f"| Redis used_memory after the {many_n:,}-device run / keys | {f0(many_used)} / {many_keys:,} ({f0(many_used / many_keys) if many_keys else 'n/a'} bytes per key incl. baseline) |")
table.append(f"| Signed part A: HTTP intake of /v2/pushes alone (bench-intake: read, parse, canonicalise, render the receipt), pushes/s | {f0(SA)}{spread('part-sg-intake', 'forwarded_per_s')} |")
table.append(f"| Signed part V: Ed25519 verifications/s, ring as the relay calls it, one thread per core | {f0(SV)}{spread('part-sg-verify', 'verifiers', 'ring', 'verifies_per_s_median')} |")
table.append(f"| Signed part S: the store calls of a one-target push alone (receipt begun, admission, outcomes recorded), pushes/s | {f0(SR)}{spread('part-sg-redis', 'rps')} |")
table.append(f"| Signed combined limit 1/(1/A+1/V+1/S+1/C), with C the APNs part above, pushes/s | {f0(SL)} |")
table.append(f"| Signed pushes (/v2/pushes, one target), 1 replica on Redis, forwarded/s | {f0(S1)}{spread('signed-1', 'forwarded_per_s')} |")
table.append(f"| Signed pushes (one target), 1 replica on Redis, a relay per core (`RELAY_RUNTIME=per-core`), forwarded/s | {f0(S1_pc)}{spread('signed-1-percore', 'forwarded_per_s')} ({pct(S1_pc / SL) if SL == SL and SL else 'n/a'} of the combined limit; relay CPU {f1(cpu_relay_s1_pc)} us per push; {S1_pc_bad:,} not answered 201 delivered) |")
table.append(f"| Signed / v1 forwarded/s, per round (v1 right before, same replica) | {' / '.join(f2(x) for x in signed_ratios) or 'n/a'} |")
table.append(f"| Signed pushes (one target) not answered 201 with the target delivered, of all | {S1_bad:,} of {S1_pushes:,}{(' (' + other_outcomes('signed-1') + ')') if S1_bad else ''} |")
table.append(f"| CPU per forwarded, sealrelay, signed one-target push / v1 push, us | {f1(cpu_relay_s1)} / {f1(cpu_relay_r1)} |")
table.append(f"| CPU per forwarded, redis-server under sealrelay, signed one-target push / v1 push, us | {f1(cpu_redis_s1)} / {f1(cpu_redis_r1)} |")
table.append(f"| Generator CPU per signed push in the timed loop, us; bodies signed in the loop (not pre-signed) | {f1(gen_s1)}; {S1_in_loop:,} |")
table.append(f"| Redis EVALSHA per signed one-target push in the throughput runs (request path) | {f2(evalsha_s1)} |")
table.append(f"| 100-target signed pushes at {f0(F_rate)}/s (open loop, {f0(F.get('elapsed_s', nan))} s): answer time p50 / p90 / p99 / max, ms | {f2(F_p50)} / {f2(F_p90)} / {f2(F_p99)} / {f2(F_max)} |")
table.append(f"| 100-target signed pushes: pushes / targets delivered / target states | {F_pushes:,} / {F_delivered:,} / {F_states or 'n/a'} |")
table.append(f"| CPU per 100-target push, sealrelay, us (per target) | {f1(cpu_relay_f)} ({f1(cpu_relay_f / 100)}) |")
table.append(f"| Redis EVALSHA per signed push on the request path, one target / 100 targets (fixed counts) | {f2(rt1)} ({rt1_text}) / {f2(rt100)} ({rt100_text}) |")
table.append(f"| Other Redis commands from the relay during those pushes, one target / 100 targets | {rt1_other:,} / {rt100_other:,} |")
for op, what in (("put", "envelope PUT (201 stored)"), ("list", "list (200, one envelope)")):
    m = mb[op]
    table.append(f"| Mailbox {what}: A, HTTP intake alone (bench-intake), req/s | {f0(m['A'])}{spread(f'part-mb-intake-{op}', 'ok_per_s')} |")
    table.append(f"| Mailbox {what}: B, Redis alone, EVALSHA mailbox.lua, calls/s | {f0(m['B'])}{spread(f'part-mb-redis-{op}', 'ok_per_s')} |")
    table.append(f"| Mailbox {what}: combined limit 1/(1/A+1/B), req/s | {f0(m['L'])} |")
    table.append(f"| Mailbox {what}: sealrelay on Redis, 1 replica, req/s ({f0(m['mailboxes'])} mailboxes) | {f0(m['T'])}{spread(f'mailbox-{op}', 'ok_per_s')} |")
    table.append(f"| Mailbox {what}: answered 429 / anything else but the expected answer, of all | {m['limited']:,} / {m['other_bad']:,} of {m['total']:,} |")
    table.append(f"| Mailbox {what}: CPU per request, sealrelay / redis-server under it, us | {f1(m['cpu_relay'])} / {f1(m['cpu_redis'])} |")
    table.append(f"| Mailbox {what}: CPU per request, parts alone: intake / Redis client (fred in relay-bench) / redis-server, us | {f1(m['cpu_intake'])} / {f1(m['cpu_redis_client'])} / {f1(m['cpu_redis_alone'])} |")
    parts_m = m['cpu_intake'] + m['cpu_redis_client'] + m['cpu_redis_alone']
    table.append(f"| Mailbox {what}: sealrelay on Redis, 1 replica, a relay per core (`RELAY_RUNTIME=per-core`), req/s | {f0(m['T_pc'])}{spread(f'mailbox-percore-{op}', 'ok_per_s')} ({pct(m['T_pc'] / m['L'] if m['L'] == m['L'] and m['L'] else nan)} of the combined limit) |")
    table.append(f"| Mailbox {what}: a relay per core, CPU per request, sealrelay / redis-server under it, us (sealrelay + Redis against the parts) | {f1(m['cpu_relay_pc'])} / {f1(m['cpu_redis_pc'])} ({f2((m['cpu_relay_pc'] + m['cpu_redis_pc']) / parts_m if parts_m == parts_m and parts_m else nan)} x) |")
table.append(f"| Mailbox Redis EVALSHA per request on the request path, envelope PUT / list (fixed counts) | {f2(mrt_put)} ({mrt_put_text}) / {f2(mrt_list)} ({mrt_list_text}) |")
table.append(f"| Other Redis commands from the relay during those requests, PUT / list | {mrt_put_other:,} / {mrt_list_other:,} |")
table.append(f"| Watch notification across two replicas at {f0(W_rate)} PUTs/s ({f0(W.get('mailboxes', nan))} mailboxes, {f0(W.get('elapsed_s', nan))} s): p50 / p90 / p99 / max, ms | {f2(W_p50)} / {f2(W_p90)} / {f2(W_p99)} / {f2(W_max)} |")
table.append(f"| Watch run: PUTs stored / notified / missing; PUT answer p99, ms | {W_stored:,} / {W_notified:,} / {W_missing:,}; {f2(W_put_p99)} |")
for name, x in (("one replica, embedded store", SL_mem), ("one replica on Redis", SL_redis), ("two replicas through Redis", SX)):
    table.append(f"| Signal frames of {x['frame']:,} B at {f0(x['rate'])}/s over {x['pairs']} pairs ({f1(x['per_side'])}/s per side), {name}: p50 / p90 / p99 / max, ms | {f2(x['p50'])} / {f2(x['p90'])} / {f2(x['p99'])} / {f2(x['max'])} |")
    table.append(f"| Signal, {name}: frames sent / received / lost{'; ' + x['closes'] if x['closes'] else ''} | {x['sent']:,} / {x['received']:,} / {x['lost']:,} |")
for st, name in (("mem", "embedded store"), ("redis", "on Redis")):
    c = ceil[st]
    table.append(f"| Signal relayed-bytes ceiling, one replica, {name} ({f0(c['pairs'])} pairs, {f0(c['frame'])} B frames, {f0(c['window'])} in flight per side), MB/s | {f1(c['mbs'])}{c['spread']} |")
    table.append(f"| Signal ceiling, {name}: relay cores busy / relay CPU per MB, us / load generator cores busy{' / redis-server cores' if st == 'redis' else ''} | {f2(c['cores'])} / {f0(c['us_per_mb'])} / {f2(c['gen_cores'])}{(' / ' + f2(c['redis_cpu'])) if st == 'redis' else ''} |")
    table.append(f"| Signal ceiling, {name}: what the frame buckets of all sides allowed, MB/s; frames lost of sent (not received within 500 ms) | {f1(c['allowed'])}; {c['lost']:,} of {c['sent']:,} |")

targets = []
targets.append(("Throughput on Redis >= 90% of the combined limit", f"{pct(ratio_tp)} ({f0(T_r1)} / {f0(L)})", ratio_tp >= 0.90))
targets.append(("CPU per forwarded request <= 1.2 x the sum of the parts (the relay's own work <= 0.2 x the parts)", f"{f2(ratio_cpu)} x ({f1(cpu_r1)} us / {f1(cpu_parts)} us; own work {f1(cpu_r1 - cpu_parts)} us); {f2(ratio_cpu_server_only)} x if Redis's part counts redis-server only", ratio_cpu <= 1.2))
targets.append(("Latency added over the mock APNs round trip at half of peak, p99 < 2 ms", f"{f2(added_p99)} ms (p50: {f2(added_p50)} ms)", added_p99 < 2.0))
targets.append(("Exactly one Redis call per forwarded request", f"{path_fwd:.4f} on the request path ({rt_fwd:.4f} with background queue polls)", bool(path_all) and all(abs(x - 1.0) < 0.001 for x in path_all)))
targets.append((f"Relay memory flat within 10% from {few_n:,} to {many_n:,} devices", f"{'+' if rss_growth >= 0 else ''}{pct(rss_growth)} ({f0(rss_few)} kB -> {f0(rss_many)} kB)", abs(rss_growth) <= 0.10))
targets.append(("Redis memory per device with one live alert id < 512 bytes", f"{f0(mem_per_dev)} bytes", mem_per_dev < 512))
# Which targets this run measured (a BENCH_ONLY run leaves some out).
ran = [ratio_tp == ratio_tp, ratio_cpu == ratio_cpu, added_p99 == added_p99, bool(path_all),
       rss_growth == rss_growth, mem_per_dev == mem_per_dev]
signed_bad_text = f"; {S1_bad:,} of {S1_pushes:,} pushes not answered 201 delivered" if S1_bad else ""
targets.append(("Signed pushes of one target >= 80% of the combined limit of their parts (HTTP in, one Ed25519 verification, three store calls, APNs out)",
                f"{pct(ratio_signed_parts)} ({f0(S1)} / {f0(SL)}){signed_bad_text}",
                ratio_signed_parts >= 0.80 and S1_bad == 0))
ran.append(ratio_signed_parts == ratio_signed_parts)
fanout_bad_text = f"; {F_bad:,} of {F_pushes:,} pushes not answered 201 with all 100 delivered ({other_outcomes('signed-100')})" if F_bad else ""
targets.append((f"100-target signed pushes at {f0(F_rate)}/s: p99 answer time against the mock < 100 ms",
                f"{f2(F_p99)} ms (p50: {f2(F_p50)} ms, max: {f2(F_max)} ms; {F_pushes:,} pushes){fanout_bad_text}",
                F_p99 < 100 and F_bad == 0 and F_pushes > 0))
ran.append(bool(F))
targets.append(("Redis round trips per signed push: 3 for one target, 102 for 100 targets",
                f"{f2(rt1)} / {f2(rt100)} EVALSHA on the request path; {rt1_other + rt100_other:,} other commands",
                rt1_exact and rt100_exact))
ran.append("signed-rt-1" in runs or "signed-rt-100" in runs)
for op, what in (("put", "Mailbox envelope PUT"), ("list", "Mailbox list")):
    m = mb[op]
    bad = m["limited"] + m["other_bad"]
    bad_text = f"; {bad:,} of {m['total']:,} requests not answered as expected ({m['limited']:,} were 429)" if bad else ""
    targets.append((f"{what} on Redis >= 90% of the combined limit of its parts (HTTP intake, one mailbox.lua call)",
                    f"{pct(m['ratio'])} ({f0(m['T'])} / {f0(m['L'])}){bad_text}",
                    m["ratio"] >= 0.90 and bad == 0))
    ran.append(m["ratio"] == m["ratio"])
    m_parts = m["cpu_intake"] + m["cpu_redis_client"] + m["cpu_redis_alone"]
    m_cpu = m["cpu_relay"] + m["cpu_redis"]
    m_ratio = m_cpu / m_parts if m_parts == m_parts and m_parts else nan
    targets.append((f"{what}: CPU per request <= 1.2 x the sum of its parts (intake + Redis client + redis-server)",
                    f"{f2(m_ratio)} x ({f1(m_cpu)} us / {f1(m_parts)} us)",
                    m_ratio <= 1.2))
    ran.append(m_ratio == m_ratio)
targets.append(("Exactly one Redis round trip per mailbox request (envelope PUT and list)",
                f"{f2(mrt_put)} / {f2(mrt_list)} EVALSHA on the request path; {mrt_put_other + mrt_list_other:,} other commands",
                mrt_put_exact and mrt_list_exact))
ran.append("mailbox-rt-put" in runs or "mailbox-rt-list" in runs)
watch_bad = f"; {W_missing:,} stored PUTs never notified, {W_bad:,} PUTs not stored" if (W_missing or W_bad) else ""
targets.append((f"Watch notification across two replicas at {f0(W_rate) if W else '1,000'} writes/s: p99 < 5 ms",
                f"{f2(W_p99)} ms (p50: {f2(W_p50)} ms, max: {f2(W_max)} ms; {W_notified:,} notifications){watch_bad}",
                W_p99 < 5 and W_missing == 0 and W_bad == 0 and W_notified > 0))
ran.append(bool(W))
sl_bad = f"; {SL_mem['lost']:,} frames lost" if SL_mem["lost"] else ""
def sig_load(x):
    return f"{f0(x['rate'])} frames/s of {x['frame']:,} B"


targets.append((f"Signal frame latency within one replica at {sig_load(SL_mem)}: p99 < 1 ms",
                f"{f2(SL_mem['p99'])} ms on the embedded store (p50: {f2(SL_mem['p50'])} ms){sl_bad}; one replica on Redis (frames through Redis pub/sub): {f2(SL_redis['p99'])} ms",
                SL_mem["p99"] < 1 and SL_mem["lost"] == 0 and SL_mem["received"] > 0))
ran.append(SL_mem["ran"])
sx_bad = f"; {SX['lost']:,} frames lost" if SX["lost"] else ""
targets.append((f"Signal frame latency across two replicas through Redis at {sig_load(SX)}: p99 < 5 ms",
                f"{f2(SX['p99'])} ms (p50: {f2(SX['p50'])} ms, max: {f2(SX['max'])} ms){sx_bad}",
                SX["p99"] < 5 and SX["lost"] == 0 and SX["received"] > 0))
ran.append(SX["ran"])

tt = ["| Target | Measured | |", "| --- | --- | --- |"]
for (name, val, ok), did in zip(targets, ran):
    tt.append(f"| {name} | {val} | {mark(ok, did)} |")

# Scaling on paper: one million alerts per minute.
rate = 1_000_000 / 60.0
util = 0.7
relay_us = cpu_relay_r1
redis_us = cpu_redis_r1
relay_cores = rate * relay_us / 1e6
replicas = math.ceil(relay_cores / (2 * util)) if relay_us == relay_us else 0
# A replica below its peak pays more CPU per request (fewer requests per wakeup); size with
# the cost measured at half of peak as well.
half_relay_us = half[0][6][0] if half else nan
half_redis_us = half[0][6][1] if half else nan
relay_cores_half = rate * half_relay_us / 1e6
replicas_half = math.ceil(relay_cores_half / (2 * util)) if half_relay_us == half_relay_us else 0
redis_shard_cap = util * 1e6 / redis_us if redis_us == redis_us and redis_us else nan
shards = math.ceil(rate / redis_shard_cap) if redis_shard_cap == redis_shard_cap else 0
r1_per_replica = T_r1
scaling = f"""One million alerts per minute is {rate:,.0f} envelopes per second (each device of a
fan-out is one envelope). From the per-request costs measured above (1 replica on Redis):

- **Replicas.** sealrelay spends {f1(relay_us)} us of CPU per forwarded request, so
  {rate:,.0f}/s needs {relay_cores:.1f} cores of relay. At 2-core replicas run at {int(util * 100)}%
  that is **{replicas} replicas** (plus one for failure: {replicas + 1}). A replica well below
  its peak pays more per request ({f1(half_relay_us)} us at half of peak, see the latency
  table), which gives {relay_cores_half:.1f} cores and **{replicas_half} replicas** ({replicas_half + 1} with one spare);
  plan with the larger figure. Measured directly,
  one replica on this 2-core box, sharing the cores with Redis, the mock APNs and the load
  generator, forwarded {f0(r1_per_replica)}/s.
- **Redis.** redis-server spends {f1(redis_us)} us per admission (one EVALSHA, including its
  network handling), so one single-threaded shard kept at {int(util * 100)}% serves about
  {f0(redis_shard_cap)} admissions/s: **{shards} shard(s)** of Redis Cluster carry
  {rate:,.0f}/s ({max(shards, 3)} masters with the usual minimum of three for a Cluster, each with a
  replica for failover). Device keys carry their own hash tag, so load spreads evenly.
  Memory: {f0(mem_per_dev)} bytes per active device, so even 10 million devices with a live
  alert fit in {f1(mem_per_dev * 1e7 / 2**30)} GiB.
- **APNs.** Each replica multiplexes its pushes over one HTTP/2 connection per environment;
  Apple allows on the order of 1000 concurrent streams per connection, so at a real round
  trip of ~100 ms one connection carries ~10 000 pushes/s: {rate:,.0f}/s needs at least
  {math.ceil(rate / 10000)} connections, which {max(replicas, replicas_half)} replicas provide.
- **First bottleneck.** Per request, the relay's own CPU ({f1(relay_us)} us) is the largest
  cost; Redis ({f1(redis_us)} us) scales by shards, the relay by replicas. With the relay's
  CPU scaled out, the first hard limit is a single Redis shard's main thread at about
  {f0(redis_shard_cap)} admissions/s, which Cluster removes; after that, APNs's own
  per-connection stream limit and Apple's throttling of bursts to one device.
"""

# Plot.
dat = os.path.join(run_dir, "latency-vs-load.dat")
with open(dat, "w") as f:
    f.write("# fraction offered_rps relay_rps relay_p50 relay_p99 relay_p999 apns_rps apns_p50 apns_p99 apns_p999\n")
    for fr, tr, rr, lr, ar, la, _ in points:
        f.write(f"{fr} {tr} {rr} {lr['p50']} {lr['p99']} {lr['p999']} {ar} {la.get('p50', nan)} {la.get('p99', nan)} {la.get('p999', nan)}\n")
png = os.path.join(plot_dir, "latency-vs-load.png")
shutil.copy(dat, os.path.join(plot_dir, "latency-vs-load.dat"))
plot_ok = False
if shutil.which("gnuplot") and points:
    gp = f"""
set terminal pngcairo size 900,560 noenhanced
set output '{png}'
set title 'Latency versus offered load (open loop), sealrelay on Redis, 1 replica, 2 cores'
set xlabel 'offered load, requests/s'
set ylabel 'latency, ms'
set logscale y
set grid
set key top left
plot '{dat}' using 2:5 with linespoints lw 2 title 'sealrelay p99', \\
     '{dat}' using 2:4 with linespoints lw 2 title 'sealrelay p50', \\
     '{dat}' using 2:9 with linespoints lw 2 dt 2 title 'mock APNs alone p99', \\
     '{dat}' using 2:8 with linespoints lw 2 dt 2 title 'mock APNs alone p50'
"""
    r = subprocess.run(["gnuplot"], input=gp, text=True, capture_output=True)
    if r.returncode != 0 and "pngcairo" in r.stderr:
        r = subprocess.run(["gnuplot"], input=gp.replace("pngcairo", "png"), text=True, capture_output=True)
    plot_ok = r.returncode == 0
    if not plot_ok:
        print(r.stderr, file=sys.stderr)

curve = ["| Fraction of peak | Offered req/s | sealrelay req/s | p50 ms | p99 ms | p99.9 ms | mock APNs alone p50 ms | p99 ms | p99.9 ms | relay / Redis CPU per request, us | cores busy (relay + Redis + generator) |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for fr, tr, rr, lr, ar, la, (c_relay, c_redis, cores) in points:
    curve.append(f"| {fr} | {f0(tr)} | {f0(rr)} | {f2(lr['p50'])} | {f2(lr['p99'])} | {f2(lr['p999'])} | {f2(la.get('p50', nan))} | {f2(la.get('p99', nan))} | {f2(la.get('p999', nan))} | {f1(c_relay)} / {f1(c_redis)} | {f2(cores)} |")

outcomes = []
for label, r in runs.items():
    if label.split("@")[0] in ["part-intake", "part-redis", "part-apns", "part-sg-intake", "part-sg-redis", "relay-memory", "relay-redis-1", "signed-1", "relay-redis-1-mix", "relay-redis-2", "relay-redis-1-percore", "signed-1-percore", "signed-100", "signed-rt-1", "signed-rt-100", "rss-warm", "rss-few", "rss-many",
                                   "part-mb-intake-put", "part-mb-intake-list", "part-mb-redis-put", "part-mb-redis-list",
                                   "mailbox-put", "mailbox-list", "mailbox-percore-put", "mailbox-percore-list", "mailbox-rt-put", "mailbox-rt-list", "watch-2",
                                   "signal-ceiling-mem", "signal-ceiling-redis", "signal-local-mem", "signal-local-redis", "signal-cross"]:
        l = r["latency_ms"]
        outcomes.append(f"| {label} | {r['requests']:,} | {r['elapsed_s']:.1f} | {f0(r['rps'])} | {f2(l['p50'])} / {f2(l['p90'])} / {f2(l['p99'])} / {f2(l['p999'])} | {', '.join(f'{k}: {v:,}' for k, v in r['outcomes'].items())} |")

machine = open(os.path.join(run_dir, "machine.txt")).read().strip()
notes_path = os.path.join(bench_dir, "notes.md")
notes = open(notes_path).read().strip() if os.path.exists(notes_path) else ""
rel_run = os.path.relpath(run_dir, repo)

md = f"""# Benchmarks

Generated by `scripts/bench.sh` (run `{os.path.basename(run_dir)}`; raw JSON lines in
`{rel_run}/results.jsonl`, which is not committed). Everything below ran on one machine, in
one go, with the load generator on the same cores as everything it measures.

## Targets

{chr(10).join(tt)}

## Figures

{chr(10).join(table)}

Definitions. A, B and C are each measured alone with the same generator and concurrency
({f0(get('part-intake', 'connections'))} connections / in-flight requests): A drives `bench-intake` (hyper HTTP/1.1,
`sealrelay::v1::envelope::parse`, 202) with the same envelopes as the relay runs; B is
`relay-bench redis`, EVALSHA of `src/store/policy/policy_admit.lua` (with `gcra.lua` in front, as the relay loads it) with the relay's key layout and
arguments for a fresh device per call (every call a forward), over 4 pipelined connections
like the relay's pool; C is `relay-bench apns`, a hyper-util HTTP/2 client configured like
`src/push/apns/client.rs` sending the relay's headers and payload to the fast mock APNs (TLS,
no JWT verification). CPU time is utime+stime from `/proc/<pid>/stat` over the measured
interval. The parts' CPU sum is the relay's side of each hop plus Redis: intake server + the
Redis client (relay-bench's fred issuing the EVALSHA, the same work the relay does for its one
call) + redis-server + the HTTP/2 client (the relay's side of C). The mock APNs server's CPU
is counted on neither side. The first run of this benchmark left the Redis client side out
of the sum, which compared the relay's own fred work against nothing; the table shows the
sum both ways, and the target line quotes both ratios. Throughput of
sealrelay counts forwarded requests (every request of the distinct-devices mix forwards).

Signed pushes (`POST /v2/pushes`, `relay-bench signed`). The replica runs with an admin
socket in the run's directory; `sealrelay keygen` makes the run's key and `sealrelay admin
signers add {F.get('key_id', 'ed25519:bench')} --key ... --topic <APNS_TOPIC>` enrols it over that socket.
relay-bench signs every request itself with the relay's own `sealrelay::parts::sign_request`
(RFC 8785 canonical JSON, Ed25519): schemaVersion "2", a fresh lowercase UUID requestId, a
fresh collapseId and flapId (so nothing coalesces), distinct devices never used before (as in
the v1 runs), the v1 runs' ciphertext, issuedAtMs when signed. Bodies are signed before the
timed loop on every core (as many as v1 forwarded in that round plus a quarter), so the
generator's signing does not take the relay's cores during the measurement; a body older than
four minutes, or a push past the pre-signed ones, is signed in the loop and counted above.
A push counts as forwarded only when it answers 201 with every target `delivered`; anything
else is counted and shown. Throughput: one-target pushes, closed loop, the same
{f0(get('signed-1', 'connections'))} connections and duration as v1, on the same replica right after that round's v1 run,
every round; the target is the median of the per-round ratios signed / v1. 100-target pushes:
a fresh replica, open loop at {f0(F_rate)} pushes/s over {f0(F.get('connections', nan))} connections, the answer time from the
request leaving to the whole receipt read (from when it was due if it left more than 2 ms
late, as in the latency curve).
Round trips: `INFO commandstats` before and after a fixed count of pushes on that replica,
after a warm-up (the signer in the replica's cache); EVALSHA minus the background ones (the
retry-queue worker's claim polls and the queue gauges' stats scripts, one ZRANGEBYSCORE or
ZCARD inside each) per push answered 201, and any other command from the relay counted
apart; commands the scripts run inside are not round trips.

Mailboxes (`relay-bench mailbox`, `mailbox-redis`, `watch`; app `bench` in `RELAY_APPS`,
`RELAY_MAILBOX_MAX_ENVELOPES=100000`). Every run claims its own fresh mailboxes (a bearer each)
before the timed loop and spreads its requests over them, request i to mailbox i mod M, so no
mailbox gets more than 100 PUTs (its envelope bucket: 120, then 2 per second) or 200 lists
(reads: 240, then 4 per second); answers 429 are counted and shown, and a target is missed if
any request was not answered as expected. A PUT stores {f0(get('mailbox-put', 'body_bytes', default=256))} opaque bytes at a
fresh seq of `p2c` (201); a list is `GET .../p2c?after=0&limit=64` on a mailbox that holds one
such envelope (200 with it, base64 in the JSON). The parts, every round in the same run with
the same requests, connections ({f0(get('mailbox-put', 'connections', default=64))}) and duration: A is bench-intake answering them
without a store (the bearer's shape checked, the PUT's body read, the list's JSON built and
base64-encoded per request); B is `relay-bench mailbox-redis`, EVALSHA of the relay's script
(`gcra.lua` in front of `src/store/mailbox/mailbox.lua`, read from the source tree since the
relay exposes no function returning it) with the relay's keys, bearer hash and arguments over 4
pipelined connections. Limit = 1/(1/A+1/B), as v1's with its third part left out; the ratio is
the median relay throughput over that limit. Round trips: `INFO commandstats` around a fixed
count of PUTs and of lists on a fresh replica; EVALSHA minus the background ones (retry-queue
claim polls, one ZRANGEBYSCORE inside each, and queue-gauge scripts, one ZCARD inside each,
less the one ZCARD inside every stored PUT) per request, other client commands apart. Watch:
two replicas on one Redis; one watch (`GET .../p2c/watch`, subprotocol `zerobyte.v1`) per
mailbox on replica A, PUTs open loop on replica B over 16 connections; the latency of a PUT is
from when it left (or was due, if it left more than 2 ms late) to its `seq <n>` on A's socket,
in one process on one clock.

Signal (`relay-bench signal`, `GET .../signal/<primary|companion>`). Each mailbox is a pair:
its primary side on replica A, its companion on A (one replica) or B (two replicas), both
waiting for `peer 1` before the timed loop. Frames go both ways and carry their number and the
instant they were timed from in their first 16 bytes, so the receiving side (same process,
same clock) takes the latency. Latency runs: open loop, {f0(SL_mem['rate'])} frames/s of {SL_mem['frame']:,} bytes in
total over {SL_mem['pairs']} pairs ({f1(SL_mem['per_side'])} frames/s per side, under the side's frame bucket of 400,
then 50 per second), timed like the latency curve; within one replica on the embedded store
(the target) and on Redis, where even a frame between two sockets of one replica goes through
Redis pub/sub, and across two replicas through Redis. Ceiling: one replica, every round, on
each store: many pairs, large frames, closed loop per side with a few frames in flight, every
side pacing itself under its frame bucket (at most 360 in a burst, then one per 21 ms) so the
relay never closes it with 1008; MB/s is frame bytes received by the other sides (1 MB =
10^6 bytes) over the time to the last one, next to what the buckets of all sides allowed over
that time. The bucket limits frames, not bytes, so a ceiling close to that allowance is the
buckets', not the relay's: run more pairs. The load generator masks and unmasks every frame
on the same two cores (its cores are shown); a side gives up on frames not received within
500 ms, and those are counted as lost (on Redis, the relay's fan-out drops messages when its
subscriber falls behind, `sealrelay_fanout_lagged_total`).

## Latency versus load

![latency versus load](bench/latency-vs-load.png)

Open loop: request i is due at start + i/rate over {f0(get('relay-redis-1', 'connections'))} keep-alive connections; a
request that leaves more than 2 ms late is timed from when it was due (no coordinated
omission). "Peak" is the median closed-loop throughput of sealrelay on Redis with one replica
over the rounds. The mock APNs alone is driven by the HTTP/2 client at the same rates, right
after sealrelay at each point. The curve is run {len(groups.get('curve-relay-0.5', [])) or 1} time(s), and every
figure in the table is the median over those passes; the added latency in the targets is the
median sealrelay p99 minus the median mock-alone p99 at the 0.5 point.

{chr(10).join(curve)}

## Runs

| Run | Requests | Seconds | Req/s | Latency ms p50 / p90 / p99 / p99.9 | Outcomes |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(outcomes)}

## Scaling on paper

{scaling}
## Machine

```text
{machine}
```

## Commands

```sh
scripts/bench.sh                                   # everything below, in one go
BENCH_DURATION=8 BENCH_MANY_DEVICES=1000000 scripts/bench.sh   # the knobs (see the script's header)

# The pieces, by hand (all 127.0.0.1, all bounded):
target/release/relay-bench mock --state-dir /tmp/apns --port 8443 --max-seconds 600
target/release/bench-intake --port 8081 --max-seconds 600
target/release/relay-bench load --url http://127.0.0.1:8081/ --connections 64 --duration 8 --max-requests 400000 --pid intake=<pid>
target/release/relay-bench redis --redis-url redis://127.0.0.1:6390 --concurrency 64 --duration 8 --max-requests 400000
target/release/relay-bench apns --url https://127.0.0.1:8443 --ca /tmp/apns/ca.pem --concurrency 64 --duration 8 --max-requests 400000
target/release/relay-bench load --url http://127.0.0.1:8080/ --connections 64 --duration 8 --max-requests 400000 \\
    --pid relay=<pid> --redis-url redis://127.0.0.1:6390 [--rate R] [--burst 100 --dup 3 --devices 20000]
BENCH_ONLY=signed scripts/bench.sh                 # only the signed pushes (and the v1 runs they are compared with)
BENCH_ONLY=mailbox scripts/bench.sh                # only the mailbox phases (their parts, PUT and list, round trips, watch)
BENCH_ONLY=signal scripts/bench.sh                 # only the signal phases (latency on one and two replicas, ceiling)
# Mailboxes and signal: relays with RELAY_APPS=bench:signal RELAY_MAILBOX_MAX_ENVELOPES=100000 (A, and B on the same Redis):
target/release/bench-intake --port 8081 --list-envelopes 1 --envelope-bytes 256
target/release/relay-bench mailbox --url http://127.0.0.1:8080/ --op put --per-mailbox 100 --body-bytes 256 \\
    --connections 64 --duration 8 --max-requests 400000 --pid relay=<pid> --redis-url redis://127.0.0.1:6390   # or --op list --per-mailbox 200
target/release/relay-bench mailbox-redis --redis-url redis://127.0.0.1:6390 --op put --per-mailbox 100 --concurrency 64 --duration 8
target/release/relay-bench watch --url http://127.0.0.1:<B>/ --watch-url http://127.0.0.1:<A>/ --rate 1000 --duration 10 --max-requests 10510
target/release/relay-bench signal --url http://127.0.0.1:<A>/ [--peer-url http://127.0.0.1:<B>/] --pairs 20 --frame-bytes 1024 --rate 1000 --duration 10
target/release/relay-bench signal --url http://127.0.0.1:<A>/ --pairs 128 --frame-bytes 65536 --window 2 --duration 8 --pid relay=<pid>
# Signed pushes: a relay with RELAY_ADMIN_SOCKET=/tmp/b/admin.sock, the signer enrolled with the binary itself:
target/release/sealrelay keygen --out /tmp/b/signer.pem
target/release/sealrelay admin --socket /tmp/b/admin.sock signers add ed25519:bench --key /tmp/b/signer.pem --topic com.example.cronstable
target/release/relay-bench signed --url http://127.0.0.1:8080/ --key /tmp/b/signer.pem --key-id ed25519:bench \\
    --connections 64 --duration 8 --max-requests 400000 --pregen 150000 --pid relay=<pid> --redis-url redis://127.0.0.1:6390 \\
    [--targets 100 --rate 20 --connections 8]
# Ed25519 verification alone, ring against ed25519-dalek, interleaved rounds (median us per verification, ratio):
target/release/relay-bench verify --rounds 11 --iterations 4000 [--threads 0]
# The signed push's store part alone (receipt begun, admission, outcomes recorded), and its HTTP part (bench-intake on /v2/pushes):
target/release/relay-bench signed-redis --redis-url redis://127.0.0.1:6390 --concurrency 64 --duration 8 --pregen 250000
target/release/relay-bench signed --url http://127.0.0.1:8081/ --key /tmp/b/signer.pem --connections 64 --duration 8 --pregen 250000 --pid intake=<pid>
```

The relay runs with `RELAY_IP_RATE_CAPACITY=0` (one generator is one client address),
`RELAY_RATE_CAPACITY=1000000 RELAY_RATE_REFILL_PER_S=10000` (device buckets never decide),
`RELAY_LOG_FORMAT=json RUST_LOG=warn`, `APNS_ENVIRONMENT=production`, against the mock's CA
and a freshly generated auth key.

{notes}
"""
with open(md_path, "w") as f:
    f.write(md)

print("\n".join(tt))
print()
print("\n".join(table))
print()
print("\n".join(curve))
if not plot_ok:
    print("bench: the plot was not made (gnuplot missing or failed)", file=sys.stderr)
