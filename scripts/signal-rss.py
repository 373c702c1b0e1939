#!/usr/bin/env python3
"""Relay memory while a signal reader never reads (MAILBOX.md, "Sockets": bounded buffers).

Starts one relay (release binary, in-process store, RELAY_APPS=bench:signal) on a free
loopback port, claims a mailbox, opens its companion side from a client that reads nothing
at all (not even the 101's Pings), then sends frames of 64 KiB on the primary side at just
under the frame bucket's rate (a burst of 390 of its 400, then 48 a second of its 50) for DURATION seconds. The
relay's resident memory (VmRSS) is sampled every second and printed with the baseline, the
peak and the end; the relay is stopped by its process id.

    scripts/signal-rss.py [DURATION_S=60] [RELAY_BINARY=target/release/sealrelay]

Only the standard library: a minimal WebSocket client (handshake, masked binary frames).
"""

import base64
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

DURATION = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
BINARY = sys.argv[2] if len(sys.argv) > 2 else "target/release/sealrelay"
FRAME = 64 * 1024
BEARER = "Zq3k8r2mT1u0wQ-rss-bearer-0001"
MAILBOX = "rss-mailbox-000000001"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def upgrade(port, path):
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (
            f"GET {path} HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n"
            f"sec-websocket-version: 13\r\nsec-websocket-key: {key}\r\n"
            f"sec-websocket-protocol: zerobyte.v1\r\nauthorization: Bearer {BEARER}\r\n\r\n"
        ).encode()
    )
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        b = s.recv(1)
        if not b:
            raise SystemExit(f"upgrade of {path} refused: {head!r}")
        head += b
    if not head.startswith(b"HTTP/1.1 101"):
        raise SystemExit(f"upgrade of {path} refused: {head!r}")
    return s


def drain(sock):
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass


def binary_frame(payload):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x82, 0x80 | n)
    elif n < 65536:
        header = struct.pack("!BBH", 0x82, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x82, 0x80 | 127, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return header + mask + masked


def main():
    port, admin = free_port(), free_port()
    env = dict(
        os.environ,
        RELAY_LISTEN=f"127.0.0.1:{port}",
        RELAY_ADMIN_LISTEN=f"127.0.0.1:{admin}",
        RELAY_ADMIN_SOCKET="",
        RELAY_DRY_RUN="true",
        RELAY_APPS="bench:signal",
        RELAY_SOCKET_PING_S="300",
        RUST_LOG="warn",
    )
    relay = subprocess.Popen([BINARY], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/v1/bench/mailbox/{MAILBOX}"
        for _ in range(100):
            try:
                req = urllib.request.Request(base, method="PUT", headers={"Authorization": f"Bearer {BEARER}"})
                urllib.request.urlopen(req).read()
                break
            except (ConnectionError, urllib.error.URLError):
                time.sleep(0.1)
        time.sleep(1)
        baseline = rss_kib(relay.pid)
        # The reader: upgraded, then never read from again.
        reader = upgrade(port, f"/v1/bench/mailbox/{MAILBOX}/signal/companion")
        sender = upgrade(port, f"/v1/bench/mailbox/{MAILBOX}/signal/primary")
        # The sender reads what comes to it (peer 1, peer 0), so only the reader is stuck.
        threading.Thread(target=drain, args=(sender,), daemon=True).start()
        time.sleep(0.5)
        frame = binary_frame(os.urandom(FRAME))
        samples, sent = [], 0
        started = time.monotonic()
        next_sample = started
        while time.monotonic() - started < DURATION:
            # Just inside the bucket (400 at once, then 50 a second): 390, then 48 a second.
            due = 390 + int((time.monotonic() - started) * 48)
            while sent < due:
                sender.sendall(frame)
                sent += 1
            now = time.monotonic()
            if now >= next_sample:
                samples.append((round(now - started), rss_kib(relay.pid)))
                next_sample += 1.0
            time.sleep(0.005)
        end = rss_kib(relay.pid)
        peak = max(kib for _, kib in samples)
        print(f"frames sent: {sent} of {FRAME} bytes ({sent * FRAME / 1048576:.0f} MiB) in {DURATION:.0f} s to a reader that never reads")
        print(f"relay RSS: baseline {baseline / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, end {end / 1024:.1f} MiB (peak - baseline {(peak - baseline) / 1024:.1f} MiB)")
        print("samples (s, MiB): " + " ".join(f"{t}:{kib / 1024:.1f}" for t, kib in samples))
        reader.close()
        sender.close()
    finally:
        relay.terminate()
        relay.wait(timeout=10)


if __name__ == "__main__":
    main()
