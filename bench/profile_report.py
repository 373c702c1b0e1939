#!/usr/bin/env python3
"""Turns the profiles of scripts/profile.sh into a Markdown report: per surface, the relay's
CPU per request (from the run without the profiler) split by where its samples were spent.

Each sample is counted once, by its leaf frame (self time): kernel samples by the system call
they were taken in, user samples by the crate of the leaf function. The microseconds of a
category are its share of the samples times the relay's CPU per request of the plain run.
"""

import argparse
import collections
import datetime
import json
import os
import re
import subprocess

CRATES = [
    ("Redis client (fred, RESP)", {"fred", "redis_protocol"}),
    ("HTTP (hyper, h2, axum, tower)", {"hyper", "hyper_util", "h2", "http", "httparse", "http_body",
                                       "http_body_util", "axum", "axum_core", "tower", "tower_http",
                                       "tungstenite", "tokio_tungstenite"}),
    ("TLS and crypto", {"rustls", "ring", "aws_lc_rs", "aws_lc_sys", "webpki", "rustls_webpki",
                        "ed25519_dalek", "curve25519_dalek", "sha2", "hmac", "aes_gcm", "chacha20poly1305"}),
    ("JSON (serde)", {"serde", "serde_json", "serde_jcs", "serde_json_canonicalizer"}),
    ("async runtime (tokio, futures)", {"tokio", "mio", "futures_util", "futures_core", "futures_channel",
                                        "parking_lot", "parking_lot_core", "crossbeam_utils", "event_listener"}),
    ("allocator (mimalloc)", {"mimalloc", "libmimalloc_sys"}),
    ("tracing and metrics", {"tracing", "tracing_core", "tracing_subscriber", "tracing_opentelemetry",
                             "opentelemetry", "opentelemetry_sdk", "metrics", "metrics_util",
                             "metrics_exporter_prometheus"}),
    ("buffers (bytes)", {"bytes"}),
    ("Rust std (core, alloc, std)", {"core", "alloc", "std", "hashbrown"}),
    ("sealrelay's own code", {"sealrelay"}),
]
CRATE_OF = {c: cat for cat, cs in CRATES for c in cs}
CRATE = re.compile(r"([a-z_][a-z0-9_]*)::")


def syscall_group(name):
    if re.search(r"send|write", name):
        return "kernel: send and write (sendto, writev, write)"
    if re.search(r"recv|read", name):
        return "kernel: receive and read (recvfrom, read)"
    if "epoll" in name:
        return "kernel: epoll"
    if re.search(r"futex|^syscall$", name):
        return "kernel: futex (wake-ups)"
    return "kernel: other system calls"


def category(stack):
    frames = stack.split(";")
    leaf = frames[-1]
    if leaf.endswith("_[k]"):
        # The system call is named by the user frame that entered the kernel (the kernel's own
        # syscall entry points are often inlined away).
        first_k = next(i for i, f in enumerate(frames) if f.endswith("_[k]"))
        if first_k == 0 or "vdso" in frames[first_k]:
            return "kernel: clock reads, interrupts, page faults"
        return syscall_group(re.sub(r"^(__GI_|__libc_|_*)", "", frames[first_k - 1]))
    if leaf.startswith(("mi_", "_mi_")):
        return "allocator (mimalloc)"
    if leaf.startswith(("ring_core_", "aws_lc_", "GFp_", "fiat_", "ge_", "sc_", "x25519_")) or leaf == "slide" \
            or re.match(r"_*(sha\d+|x25519|ed25519)", leaf):
        return "TLS and crypto"
    if re.match(r"_*mem(cpy|move|set|cmp)|__memmove|__memset|__memcpy", leaf):
        return "memcpy, memset (libc)"
    for m in CRATE.finditer(leaf):
        cat = CRATE_OF.get(m.group(1))
        if cat:
            return cat
    if leaf in ("[unknown]", ""):
        return "unresolved frames"
    if "::" not in leaf:
        return "libc and other C"
    return "other crates"


def syscalls(path):
    """Event counts from `perf stat -x,` output: {event: count}; empty when there is none."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                cols = line.strip().split(",")
                if len(cols) >= 3 and cols[0].isdigit():
                    out[cols[2]] = int(cols[0])
    except OSError:
        pass
    return out


def short(leaf, width=110):
    leaf = re.sub(r"::h[0-9a-f]{16}$", "", leaf)
    return leaf if len(leaf) <= width else leaf[: width - 1] + "…"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--stacks-dir", required=True)
    ap.add_argument("--surfaces", nargs="+", required=True)
    ap.add_argument("--relay-env", default="", help="the PROFILE_RELAY_ENV the relay ran with")
    a = ap.parse_args()
    runs = {}
    with open(a.results) as f:
        for line in f:
            r = json.loads(line)
            runs[r["label"]] = r
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# Profile `{a.label}`: where the relay's CPU goes\n")
    env = f"PROFILE_RELAY_ENV='{a.relay_env}' " if a.relay_env else ""
    print(f"Recorded {now} at commit `{commit}` on {os.cpu_count()} cores by "
          f"`{env}PROFILE_LABEL={a.label} scripts/profile.sh {' '.join(a.surfaces)}`. One replica on Redis, "
          "closed loop. Microseconds per request (per frame for signal) are the relay's CPU in a run "
          "without the profiler, split by the share of perf samples (self time, by leaf frame) in a "
          "second run of the same load under `perf record`.\n")
    unit = {"signal": "frame"}
    for s in a.surfaces:
        plain, prof = runs.get(f"plain-{s}"), runs.get(f"profiled-{s}")
        if not plain or not prof:
            print(f"## {s}\n\nNo measurement (the load run failed).\n")
            continue
        us = plain["processes"]["relay"]["cpu_us_per_request"]
        counts = collections.Counter()
        leaves = collections.Counter()
        with open(os.path.join(a.stacks_dir, f"stacks-{s}.folded")) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if not stack:
                    continue
                n = int(n)
                counts[category(stack)] += n
                leaves[stack.split(";")[-1]] += n
        total = sum(counts.values()) or 1
        u = unit.get(s, "request")
        print(f"## {s}\n")
        print(f"Relay CPU {us:.1f} µs per {u} at {plain['rps']:,.0f} {u}s/s without the profiler "
              f"({prof['rps']:,.0f}/s under it); {total / 1e9:.1f} s of CPU sampled. "
              f"Flame graph: [flame-{a.label}-{s}.svg](flame-{a.label}-{s}.svg).\n")
        counted = runs.get(f"counted-{s}")
        sc = syscalls(os.path.join(a.stacks_dir, f"syscalls-{s}.csv"))
        if sc and counted and counted.get("requests"):
            n_req = counted["requests"]
            total_sc = sc.pop("raw_syscalls:sys_enter", None)
            parts = ", ".join(f"{k.split('sys_enter_')[-1]} {v / n_req:.2f}" for k, v in sc.items() if v)
            if total_sc is not None:
                print(f"System calls per {u} (a third run, counted by `perf stat`, {n_req:,} {u}s): {total_sc / n_req:.2f} in all; {parts}.\n")
        print(f"| where | share | µs per {u} |\n|---|---:|---:|")
        for cat, n in counts.most_common():
            print(f"| {cat} | {100 * n / total:.1f}% | {us * n / total:.1f} |")
        print(f"\nThe twelve leaf functions with the most samples:\n\n| function | share | µs per {u} |\n|---|---:|---:|")
        for leaf, n in leaves.most_common(12):
            print(f"| `{short(leaf).replace('|', '/')}` | {100 * n / total:.1f}% | {us * n / total:.2f} |")
        print()


if __name__ == "__main__":
    main()
