#!/usr/bin/env python3
"""The live half of scripts/check-dashboard.sh (run that; it finds the binaries).

A dry-run relay under a short bounded load, scraped every second by a real Prometheus; every
query of the dashboard evaluated through Prometheus' HTTP API; the dashboard's grid rendered
as HTML from the query_range answers and screenshotted with headless Chromium. Everything
listens on 127.0.0.1; every process this starts is stopped by its PID; every wait is bounded.
Standard library only.
"""

import argparse
import base64
import concurrent.futures
import html
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

# Panels that legitimately have no data under this load, each with why. Keep it short: prefer
# generating the traffic that feeds a panel.
ALLOW_NO_DATA = {
    # Dry run sends nothing to APNs: every v1 forward is outcome dry_run, so the latency SLO's
    # forwarded|queued histogram has no observation (0/0) and APNs has answered nothing.
    "Forwards within 2 s (SLO 99%)": "dry run: no forwarded/queued outcome (0/0)",
    "Latency budget left (30 days)": "dry run: no forwarded/queued outcome (0/0)",
    "Latency burn rate": "dry run: no forwarded/queued outcome (0/0)",
    "APNs refusals by reason": "dry run: APNs refused nothing (reason!=\"none\" has no series)",
    "APNs error ratio": "dry run: no APNs request (0/0)",
    "APNs latency": "dry run: no APNs request (empty histogram)",
    # The checked relay is one region (no RELAY_REGION): tests/it/regions.rs checks these series.
    "Peer regions up": "one region: no peer (tests/it/regions.rs has them)",
    "Hops by outcome": "one region: no hop (tests/it/regions.rs has them)",
    "Hop latency": "one region: no hop (tests/it/regions.rs has them)",
    "v1 decided outside their home": "one region: no hop (tests/it/regions.rs has them)",
    "Hops received": "one region: no hop (tests/it/regions.rs has them)",
}

TIMEOUT = 10  # seconds, every HTTP request


def log(*a):
    print("check-dashboard:", *a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, unix=None):
    """(status, body bytes, headers); never raises on an HTTP error status."""
    if unix:
        # The admin socket: one HTTP/1.1 request by hand.
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(TIMEOUT)
        s.connect(unix)
        path = urllib.parse.urlsplit(url).path or "/"
        body = body or b""
        hdr = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n"
                  f"Content-Length: {len(body)}\r\n{hdr}\r\n".encode() + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        s.close()
        status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/") else 0
        return status, out.split(b"\r\n\r\n", 1)[-1], {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


class Proc:
    """A child process in its own process group, its output in a file; stopped by PID."""

    def __init__(self, name, argv, env, logdir):
        self.name = name
        self.logpath = os.path.join(logdir, f"{name}.log")
        self.logfile = open(self.logpath, "wb")
        self.p = subprocess.Popen(argv, env=env, stdout=self.logfile, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)

    def text(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait(5)
        self.logfile.close()


def wait_until(what, fn, timeout, proc=None):
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = fn()
            if v:
                return v
        except OSError:
            pass
        if proc and proc.p.poll() is not None:
            sys.exit(f"check-dashboard: {proc.name} exited while waiting for {what}:\n{proc.text()[-3000:]}")
        if time.monotonic() > deadline:
            sys.exit(f"check-dashboard: timed out waiting for {what}" + (f":\n{proc.text()[-3000:]}" if proc else ""))
        time.sleep(0.1)


# --- load -----------------------------------------------------------------------------------

def device(n):
    return f"{n:08x}" + "ab" * 28


def envelope(dev, collapse):
    return json.dumps({"v": 1, "device": dev, "suite": "x25519", "ciphertext": "A" * 68,
                       "collapseId": collapse, "priority": "time-sensitive", "event": False}).encode()


def v1_wave(base, wave, counts):
    """One wave of v1 posts: distinct devices (dry_run), exact repeats (coalesced), one device
    hammered (rate_limited), and invalid, oversized, unknown-path and wrong-method requests."""
    jobs = []
    for i in range(60):
        jobs.append(("POST", "/", envelope(device(wave * 1000 + i), f"{wave * 1000 + i:032x}")))
    for _ in range(15):
        jobs.append(("POST", "/", envelope(device(7), f"{wave:032x}")))
    for i in range(20):
        jobs.append(("POST", "/", envelope(device(9), f"{wave * 100 + i + 1:032x}")))
    jobs += [("POST", "/", b"{}")] * 8
    jobs += [("POST", "/", b'{"v":1,"device":"' + b"a" * 9000 + b'"}')] * 3
    jobs += [("GET", "/no/such/path", None)] * 3
    jobs += [("DELETE", "/", None)] * 2

    def one(j):
        m, p, b = j
        return http(m, base + p, b, {"content-type": "application/json"})[0]

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for status in ex.map(one, jobs):
            counts[status] = counts.get(status, 0) + 1


def cli(relay_bin, args, env):
    r = subprocess.run([relay_bin, *args], env=env, capture_output=True, timeout=30, text=True)
    return r.returncode, r.stdout, r.stderr


def signed_load(relay_bin, base, sock, tmp, env, wave, state):
    """Signed pushes through the CLI: a signer enrolled over the admin socket (admin API,
    unix transport), pushes (created, their targets' first outcome dry_run), a replay, a
    push from a signer never enrolled (unknown_signer), receipt reads (/v2 and admin)."""
    if "key" not in state:
        key = os.path.join(tmp, "signer.pem")
        rc, out, err = cli(relay_bin, ["keygen", "--out", key], env)
        if rc:
            raise RuntimeError(f"keygen: {err}")
        other = os.path.join(tmp, "stranger.pem")
        cli(relay_bin, ["keygen", "--out", other], env)
        rc, out, err = cli(relay_bin, ["admin", "--socket", sock, "signers", "add", "ed25519:dashboard",
                                       "--key", key, "--topic", "com.example.dashboard"], env)
        if rc:
            raise RuntimeError(f"admin signers add: {out}{err}")
        state.update(key=key, other=other, pushes=[])
    codes = {}
    for i in range(6):
        target = f"{device(50000 + wave * 10 + i)}=" + base64.b64encode(b"s" * 51).decode()
        rid = None
        args = ["push", "--url", base, "--key", state["key"], "--key-id", "ed25519:dashboard",
                "--target", target, "--topic", "com.example.dashboard", "--suite", "x25519"]
        if i == 0:
            rid = "0b7d2b0e-4b9a-4c3e-9f00-%012x" % (wave + 1)
            args += ["--request-id", rid]
        if i == 1:
            args += ["--wait", "--wait-timeout-s", "5"]
        rc, out, err = cli(relay_bin, args, env)
        codes[rc] = codes.get(rc, 0) + 1
        m = re.search(r'"pushId"\s*:\s*"([^"]+)"', out + err)
        if m:
            state["pushes"].append(m.group(1))
        if rid:  # the same request again: a replay, nothing sent
            cli(relay_bin, args, env)
    cli(relay_bin, ["push", "--url", base, "--key", state["other"], "--key-id", "ed25519:stranger",
                    "--target", f"{device(60000)}=" + base64.b64encode(b"s" * 51).decode(),
                    "--topic", "com.example.dashboard", "--suite", "x25519"], env)
    for pid in state["pushes"][-2:]:
        cli(relay_bin, ["admin", "--socket", sock, "receipt", pid], env)
    http("GET", "http://admin/admin/v1/signers", unix=sock)
    http("GET", "http://admin/admin/v1/no-such-route", unix=sock)
    return codes


def mailbox_load(base, wave):
    """Mailbox requests: claim, envelopes, list, fetch, HEAD, prune, a push registration,
    ICE; with a wrong bearer too."""
    u = f"{base}/v1/chat/mailbox/dashboard-mailbox-{wave:07d}"
    a = {"Authorization": "Bearer Zq3k8r2mT1u0wQ-dashboard-bearer"}
    statuses = []
    statuses.append(http("PUT", u, None, a)[0])
    statuses.append(http("PUT", u, None, a)[0])  # already yours: 204
    for seq in range(1, 9):
        statuses.append(http("PUT", f"{u}/p2c/{seq}", b"sealed-%d" % seq, a)[0])
    statuses.append(http("GET", f"{u}/p2c?after=0", None, a)[0])
    statuses.append(http("GET", f"{u}/p2c/1", None, a)[0])
    statuses.append(http("HEAD", f"{u}/p2c", None, a)[0])
    statuses.append(http("DELETE", f"{u}/p2c?upto=3", None, a)[0])
    statuses.append(http("GET", f"{u}/ice", None, a)[0])
    statuses.append(http("PUT", u, None, {"Authorization": "Bearer someone-else-entirely-00"})[0])
    return u, statuses


SIGNAL_JS = r"""
const [base, bearer, n] = process.argv.slice(2);
const open = side => new Promise((res, rej) => {
  const ws = new WebSocket(`${base}/signal/${side}`, ["zerobyte.v1", `zerobyte.bearer.${bearer}`]);
  ws.binaryType = "arraybuffer";
  ws.got = 0;
  ws.onmessage = m => { if (typeof m.data !== "string") ws.got++; };
  ws.onopen = () => res(ws);
  ws.onerror = e => rej(new Error(`${side}: ${e.message || "error"}`));
});
(async () => {
  const p = await open("primary"), c = await open("companion");
  await new Promise(r => setTimeout(r, 300));
  for (let i = 0; i < +n; i++) { p.send(new Uint8Array(64).fill(i)); c.send(new Uint8Array(32).fill(i)); }
  await new Promise(r => setTimeout(r, 1500));
  console.log(JSON.stringify({primary: p.got, companion: c.got}));
  p.close(1000); c.close(1000);
  setTimeout(() => process.exit(0), 300);
})().catch(e => { console.error(String(e)); process.exit(1); });
setTimeout(() => { console.error("signal: timed out"); process.exit(2); }, 15000);
"""


def signal_load(mailbox_url, tmp):
    node = shutil.which("node")
    if not node:
        return "skipped (no node)"
    js = os.path.join(tmp, "signal.js")
    with open(js, "w") as f:
        f.write(SIGNAL_JS)
    ws = mailbox_url.replace("http://", "ws://", 1)
    r = subprocess.run([node, "--no-warnings", "--experimental-websocket", js, ws,
                        "Zq3k8r2mT1u0wQ-dashboard-bearer", "20"],
                       capture_output=True, text=True, timeout=30)
    return (r.stdout or r.stderr).strip()


# --- queries ----------------------------------------------------------------------------------

def panels_of(dash):
    out = []

    def walk(ps):
        for p in ps or []:
            out.append(p)
            walk(p.get("panels"))

    walk(dash.get("panels"))
    return out


def template_values(prom, dash):
    """Each query variable's values, from Prometheus (label_values(selector, label))."""
    values = {"job": "sealrelay"}
    for v in (dash.get("templating") or {}).get("list") or []:
        if v.get("type") == "textbox":
            values[v["name"]] = v.get("query") or ""
    for v in (dash.get("templating") or {}).get("list") or []:
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]+)\)\s*", q or "")
        if not m:
            sys.exit(f"check-dashboard: templating variable ${v['name']}: cannot evaluate {q!r}")
        sel = substitute(m.group(1), values)
        st, body, _ = http("GET", f"{prom}/api/v1/label/{m.group(2)}/values?" +
                           urllib.parse.urlencode({"match[]": sel}))
        got = json.loads(body).get("data") or []
        # As Grafana does for a multi-value variable: each value's regex metacharacters
        # escaped (a backslash doubled inside the PromQL string), joined by |.
        esc = lambda x: re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", x)
        values[v["name"]] = "|".join(esc(x) for x in got) if got else v.get("allValue", ".*")
        log(f"variable ${v['name']} = {got} (from {q})")
    return values


def substitute(expr, values, range_s=60):
    grafana = {
        "$__rate_interval": "1m",
        "$__interval": "5s",
        "$__range": f"{int(range_s)}s",
    }
    for k in sorted(grafana, key=len, reverse=True):
        expr = expr.replace(k, grafana[k])
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + k + "}", values[k]).replace("$" + k, values[k])
    left = re.findall(r"\$\{?[A-Za-z_]+", expr)
    if left:
        sys.exit(f"check-dashboard: unknown Grafana variable(s) {left} in {expr}")
    return expr


def query_range(prom, expr, start, end, step=1):
    st, body, _ = http("GET", f"{prom}/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step}))
    r = json.loads(body)
    if r.get("status") != "success":
        raise RuntimeError(f"{r.get('errorType')}: {r.get('error')} in {expr}")
    out = []
    for s in r["data"]["result"]:
        pts = [(float(t), float(v)) for t, v in s["values"]]
        out.append((s["metric"], pts))
    return out


def finite(pts):
    return [(t, v) for t, v in pts if math.isfinite(v)]


# --- rendering --------------------------------------------------------------------------------

COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#ff9830",
          "#96d98d", "#ffb357", "#ca95e5", "#fade2a"]
GRID_W, ROW_H = 1600 / 24, 30


def fmt(v, unit=None):
    if v is None or not math.isfinite(v):
        return "NaN"
    if unit == "percentunit":
        return f"{v * 100:.3g}%"
    if unit == "s":
        return f"{v * 1000:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"
    if unit in ("bytes", "decbytes"):
        for u in ("B", "KiB", "MiB", "GiB"):
            if abs(v) < 1024:
                return f"{v:.3g} {u}"
            v /= 1024
    if unit == "dateTimeAsIso" or unit == "dateTimeFromNow":
        return time.strftime("%H:%M:%S", time.gmtime(v / 1000))
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def legend(fmt_, metric, ref):
    if not fmt_:
        inner = ", ".join(f'{k}="{v}"' for k, v in metric.items() if k != "__name__")
        return "{" + inner + "}" if inner else ref
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt_)


def svg_series(series, w, h, start, end, unit):
    pts_all = [v for _, _, pts in series for _, v in finite(pts)]
    lo, hi = (min(pts_all), max(pts_all)) if pts_all else (0, 1)
    lo = min(lo, 0)
    if hi - lo < 1e-12:
        hi = lo + (abs(lo) or 1)
    pl, pb = 58, 18
    iw, ih = w - pl - 6, h - pb - 4
    x = lambda t: pl + (t - start) / max(end - start, 1) * iw
    y = lambda v: 4 + ih - (v - lo) / (hi - lo) * ih
    parts = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    for frac in (0, 0.5, 1):
        val = lo + (hi - lo) * frac
        yy = y(val)
        parts.append(f'<line x1="{pl}" x2="{w - 6}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#2c3235"/>'
                     f'<text x="{pl - 4}" y="{yy + 4:.1f}" fill="#8e8e8e" font-size="10" text-anchor="end">{html.escape(fmt(val, unit))}</text>')
    for frac in (0, 0.5, 1):
        t = start + (end - start) * frac
        parts.append(f'<text x="{x(t):.1f}" y="{h - 4}" fill="#8e8e8e" font-size="10" text-anchor="middle">'
                     f'{time.strftime("%H:%M:%S", time.gmtime(t))}</text>')
    for i, (_, _, pts) in enumerate(series):
        seg, segs = [], []
        for t, v in pts:
            if math.isfinite(v):
                seg.append(f"{x(t):.1f},{y(v):.1f}")
            elif seg:
                segs.append(seg)
                seg = []
        if seg:
            segs.append(seg)
        for s in segs:
            parts.append(f'<polyline fill="none" stroke="{COLORS[i % len(COLORS)]}" stroke-width="1.5" points="{" ".join(s)}"/>')
    parts.append("</svg>")
    return "".join(parts)


def render(dash, results, start, end):
    panels = panels_of(dash)
    height = max((p["gridPos"]["y"] + p["gridPos"]["h"]) for p in panels if p.get("gridPos")) * ROW_H
    out = ['<!doctype html><html><head><meta charset="utf-8"><style>'
           'body{margin:0;background:#111217;color:#d8d9da;font:12px sans-serif;}'
           '.p{position:absolute;box-sizing:border-box;background:#181b1f;border:1px solid #2c3235;border-radius:3px;overflow:hidden;padding:4px 6px;}'
           '.row{position:absolute;box-sizing:border-box;font-size:15px;font-weight:600;padding:6px 4px;color:#ccccdc;}'
           '.t{font-weight:600;font-size:12px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;color:#ccccdc;}'
           '.stat{font-size:30px;font-weight:600;text-align:center;margin-top:10px;color:#73bf69;}'
           '.nodata{color:#f2495c;font-size:18px;text-align:center;margin-top:30px;font-weight:600;}'
           '.allowed{color:#8e8e8e;}'
           '.lg{font-size:10px;line-height:12px;max-height:40px;overflow:hidden;}'
           '.lg span{margin-right:8px;white-space:nowrap;}'
           'table{font-size:11px;border-collapse:collapse;margin-top:6px}td,th{border-bottom:1px solid #2c3235;padding:2px 8px;text-align:left}'
           f'</style></head><body><div style="position:relative;width:1600px;height:{height + 40}px">'
           f'<div class="row" style="left:0;top:0;width:1600px;height:40px;font-size:18px">'
           f'{html.escape(dash.get("title", ""))} — {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(start))} to '
           f'{time.strftime("%H:%M:%S", time.gmtime(end))} (check-dashboard.sh: live relay, Prometheus, every panel query)</div>']
    for idx, p in enumerate(panels):
        g = p.get("gridPos") or {}
        left, top = g.get("x", 0) * GRID_W, 40 + g.get("y", 0) * ROW_H
        w, h = g.get("w", 12) * GRID_W - 4, g.get("h", 8) * ROW_H - 4
        title = html.escape(p.get("title") or "")
        if p.get("type") == "row":
            out.append(f'<div class="row" style="left:{left}px;top:{top}px;width:{w}px;height:{h}px">{title}</div>')
            continue
        res = results.get(idx)
        unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        body = ""
        if res is None:
            body = '<div class="nodata">(no queries)</div>'
        elif not res["has_data"]:
            why = ALLOW_NO_DATA.get(p.get("title"))
            body = (f'<div class="nodata{" allowed" if why else ""}">No data</div>' +
                    (f'<div style="text-align:center;color:#8e8e8e">allowed: {html.escape(why)}</div>' if why else ""))
        elif p.get("type") == "stat":
            vals = [finite(pts)[-1][1] for _, _, pts in res["series"] if finite(pts)]
            body = f'<div class="stat">{html.escape(" / ".join(fmt(v, unit) for v in vals[:3]))}</div>'
        elif p.get("type") == "table":
            rows = [m for _, m, pts in res["series"] if finite(pts)]
            keys = sorted({k for m in rows for k in m})
            body = "<table><tr>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>" + "".join(
                "<tr>" + "".join(f"<td>{html.escape(m.get(k, ''))}</td>" for k in keys) + "</tr>" for m in rows) + "</table>"
        else:
            shown = [s for s in res["series"] if finite(s[2])][:12]
            lg = "".join(f'<span><b style="color:{COLORS[i % len(COLORS)]}">&#9644;</b> {html.escape(name)}</span>'
                         for i, (name, _, _) in enumerate(shown))
            body = svg_series(shown, int(w - 12), int(h - 62), start, end, unit) + f'<div class="lg">{lg}</div>'
        out.append(f'<div class="p" style="left:{left}px;top:{top}px;width:{w}px;height:{h}px">'
                   f'<div class="t">{title}</div>{body}</div>')
    out.append("</div></body></html>")
    return "".join(out), int(height + 40)


# --- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--relay", required=True)
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--waves", type=int, default=6, help="load waves, about 3 s apart")
    args = ap.parse_args()
    t_begin = time.monotonic()
    dash = json.load(open(args.dashboard))
    tmp = tempfile.mkdtemp(prefix="check-dashboard-")
    procs = []
    try:
        sock = os.path.join(tmp, "admin.sock")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp,
               "RUST_LOG": "warn,sealrelay::app=info", "RELAY_LOG_FORMAT": "json",
               "RELAY_DRY_RUN": "true", "RELAY_LISTEN": "127.0.0.1:0", "RELAY_ADMIN_LISTEN": "127.0.0.1:0",
               "RELAY_ADMIN_SOCKET": sock, "RELAY_APPS": "chat:signal,ice",
               "RELAY_ICE_STUN_URLS": "stun:127.0.0.1:3478"}
        relay = Proc("relay", [args.relay], env, tmp)
        procs.append(relay)

        def serving():
            for line in relay.text().splitlines():
                if "sealrelay serving" in line:
                    v = json.loads(line)
                    return v["addr"], v["admin_addr"]
            return None

        addr, admin = wait_until("the relay's \"sealrelay serving\" line", serving, 30, relay)
        base, admin_url = f"http://{addr}", f"http://{admin}"
        wait_until("the relay's /readyz", lambda: http("GET", admin_url + "/readyz")[0] == 200, 20, relay)
        log(f"relay {args.relay} (pid {relay.p.pid}) on {base}, admin {admin_url}, dry run, in-process store")

        prom_port = free_port()
        prom = f"http://127.0.0.1:{prom_port}"
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: sealrelay\n    static_configs:\n"
                    f"      - targets: ['{admin}']\n"
                    "        labels: {namespace: check-dashboard, pod: sealrelay-0}\n")
        promp = Proc("prometheus", [args.prometheus, f"--config.file={cfg}",
                                    f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                    f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                     {"PATH": env["PATH"], "HOME": tmp}, tmp)
        procs.append(promp)
        wait_until("Prometheus /-/ready", lambda: http("GET", prom + "/-/ready")[0] == 200, 30, promp)

        def scraped():
            st, body, _ = http("GET", prom + "/api/v1/query?query=" + urllib.parse.quote('up{job="sealrelay"}'))
            r = json.loads(body)["data"]["result"]
            return r and r[0]["value"][1] == "1"

        wait_until("the first scrape of the relay", scraped, 20, promp)
        start = time.time() - 2
        log(f"prometheus (pid {promp.p.pid}) on {prom} scrapes {admin} every 1s")

        counts, signed_state, signed_codes, mailbox_statuses, signal = {}, {}, {}, [], ""
        for wave in range(args.waves):
            t = time.monotonic()
            log(f"load wave {wave + 1}/{args.waves}")
            v1_wave(base, wave, counts)
            for k, v in signed_load(args.relay, base, sock, tmp, env, wave, signed_state).items():
                signed_codes[k] = signed_codes.get(k, 0) + v
            u, st = mailbox_load(base, wave)
            mailbox_statuses += st
            if wave in (1, args.waves - 2):
                signal = signal_load(u, tmp)
            time.sleep(max(0, 3 - (time.monotonic() - t)))
        log(f"v1 answers by status {dict(sorted(counts.items()))}; signed pushes by CLI exit code {signed_codes}; "
            f"mailbox statuses {sorted(set(mailbox_statuses))}; signal {signal}")
        time.sleep(4)  # a few more scrapes after the last request
        end = time.time()

        values = template_values(prom, dash)
        results, failures, allowed_seen = {}, [], []
        panels = panels_of(dash)
        for idx, p in enumerate(panels):
            targets = [t for t in p.get("targets") or [] if t.get("expr")]
            if p.get("type") == "row" or not targets:
                continue
            series, errors = [], []
            for t in targets:
                expr = substitute(t["expr"], values, end - start)
                try:
                    for metric, pts in query_range(prom, expr, start, end):
                        series.append((legend(t.get("legendFormat"), metric, t.get("refId", "")), metric, pts))
                except RuntimeError as e:
                    errors.append(str(e))
            has = any(finite(pts) for _, _, pts in series)
            results[idx] = {"series": series, "has_data": has and not errors}
            title = p.get("title")
            if errors:
                failures.append(f"{title}: query error: {'; '.join(errors)}")
                state = "ERROR"
            elif has:
                state = f"data ({sum(1 for s in series if finite(s[2]))} series)"
                if title in ALLOW_NO_DATA:
                    allowed_seen.append(title)
            elif title in ALLOW_NO_DATA:
                state = f"no data, allowed: {ALLOW_NO_DATA[title]}"
            else:
                state = "NO DATA" + (" (only NaN)" if series else " (empty answer)")
                failures.append(f"{title}: no data")
            print(f"  {state:<60} {p.get('type'):<10} {title}")
        for t in sorted(set(ALLOW_NO_DATA) - {p.get("title") for p in panels}):
            failures.append(f"ALLOW_NO_DATA names {t!r}, which is no panel of the dashboard")

        page, height = render(dash, results, start, end)
        page_path = os.path.join(tmp, "dashboard.html")
        with open(page_path, "w") as f:
            f.write(page)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
        shot = os.path.join(tmp, "dashboard.png")
        r = subprocess.run([args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking", "--disable-component-update",
                            "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
                            f"--screenshot={shot}", f"--window-size=1600,{height}", "file://" + page_path],
                           capture_output=True, text=True, timeout=90, start_new_session=True)
        if not os.path.exists(shot):
            failures.append(f"chromium wrote no screenshot: {r.stderr[-2000:]}")
        else:
            shutil.copyfile(shot, args.out)
            log(f"screenshot {args.out} (1600x{height})")
        n = len(results)
        log(f"{n} panels with queries: {n - len(failures)} with data or allowed; "
            f"{len([p for p in results.values() if not p['has_data']])} without data; {time.monotonic() - t_begin:.0f}s in all")
        for t in allowed_seen:
            log(f"note: {t!r} is in ALLOW_NO_DATA but has data now: remove it from the list")
        if failures:
            log("FAILED:\n  " + "\n  ".join(failures))
            return 1
        return 0
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _terminate(signum, _frame):
    # SIGTERM/SIGINT (a CI timeout): unwind, so main's finally stops the relay and Prometheus.
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    import faulthandler
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints where it waits
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    # The whole run is bounded: past this, unwind (and stop what was started) with an error.
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("check-dashboard: over the 170 s budget"))
    signal.alarm(170)
    sys.exit(main())
