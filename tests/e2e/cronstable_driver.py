#!/usr/bin/env python3
"""Drive a REAL cronstable daemon against a sealrelay URL (end-to-end test aid).

cronstable (``pip install "cronstable[push]"``, written against 1.2.72) is the
first real client of sealrelay: it seals every alert to a paired phone's
X25519 public key (libsodium sealed box) and POSTs a JSON envelope to its
``push.relay.url``.  This script plays the operator and the phone around an
unmodified daemon so a Rust integration test can prove the two interoperate.

Two subcommands, both called by the Rust test (keep the interface stable):

``run --relay-url URL --workdir DIR --token HEX [--timeout-s 60]``
    1. generates the fake phone's X25519 keypair (PyNaCl) and writes
       ``DIR/key.json`` = ``{"public": <b64>, "private": <b64>}``;
    2. writes ``DIR/cronstable.yaml``: web API on a free 127.0.0.1 port behind
       a generated bearer token (``DIR/web-token``), durable state under
       ``DIR/state``, the push registry in ``DIR/push-devices.json``,
       ``push.relay.url`` = URL, and one job that always fails (exit 3, with
       a line on stderr), scheduled for 2099-01-01 so it only runs when asked,
       whose ``onFailure`` report goes to push;
    3. starts ``<this python> -m cronstable -c DIR/cronstable.yaml`` (log in
       ``DIR/daemon.log``) and waits for ``GET /version`` to answer;
    4. pairs the phone: ``POST /push/devices`` with the base64 public key and
       the hex push token (HEX becomes the envelope's ``device`` field);
    5. ``POST /push/devices/{id}/test``: the daemon posts a ``kind: test``
       alert to the relay and answers 200 (relay 2xx) or 502 (relay error);
    6. ``POST /jobs/{name}/start``, then waits for the daemon to log that it
       is reporting the failure;
    7. stops the daemon with SIGTERM (SIGKILL after a grace period).  A
       cronstable shutdown drains in-flight reports before it exits, so a
       clean exit means the failure alert's POST has completed; the daemon
       logs only *failed* relay POSTs, so the log is then checked for those.

    Prints ONE JSON object on stdout, always::

        {"device_id": "...", "test_status": 200, "job_started": true,
         "daemon_log_tail": [...last 30 log lines...],
         "test_outcome": {...}, "failure_reported": true,
         "daemon_exit_code": 0, "errors": []}

    and exits 1 (with the reasons on stderr) if any step failed.

``open --key DIR/key.json``
    Reads one JSON document per line on stdin -- an APNs request body such as
    ``{"aps": {...}, "v": 1, "suite": "x25519", "ciphertext": "<b64>"}`` (a
    daemon->relay envelope works too: only ``ciphertext`` is used) -- opens
    each ciphertext with ``nacl.public.SealedBox(PrivateKey(...)).decrypt``
    and prints the plaintext JSON, one line each.  Exits 1 if any line does
    not decrypt to a JSON object.

Everything binds and connects to 127.0.0.1 only (plus whatever URL the caller
passes as the relay).  Dependencies: the standard library, PyNaCl, and the
cronstable package importable by this interpreter (or ``--cronstable CMD``),
so run it with the venv's python: ``VENV/bin/python cronstable_driver.py ...``.

What cronstable 1.2.72 does toward the relay (observed, for the relay side):
one POST per (alert, device) to exactly ``push.relay.url`` (path included),
``Content-Type: application/json``, ``User-Agent: Python/3.x aiohttp/3.x``,
no auth header, a fresh connection per alert; body keys ``v, device,
ciphertext, collapseId, priority, event, suite`` plus ``flapId`` on job/SLA
alerts (never on test alerts).  No retries, except one re-fitted re-POST when a
400 whose body mentions ``ciphertext`` answers a ciphertext over 3000 chars
(the daemon fits to 3800).  Redirects are followed: 307/308 re-POST the body,
but 301/302/303 turn into a bodyless GET and the daemon still counts the
alert delivered.  The whole POST is bounded by ``push.relay.timeout``.
"""

import argparse
import base64
import binascii
import importlib.util
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:
    from nacl.public import PrivateKey, SealedBox
except ImportError:  # pragma: no cover - wrong interpreter
    sys.exit("cronstable_driver: PyNaCl is not importable by {}; run this "
             "script with the venv that has cronstable[push]".format(
                 sys.executable))

JOB_NAME = "sealrelay-e2e-always-fails"
JOB_COMMAND = "echo 'sealrelay e2e: deliberate failure' >&2; exit 3"
DEVICE_NAME = "sealrelay-e2e-phone"
# cronstable's own default relay timeout is 10 s; 5 s keeps a black-holing
# relay from eating the whole test budget and is still generous on loopback.
RELAY_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 30
STARTUP_ATTEMPTS = 3  # a free port can be taken between probe and bind

# Log lines cronstable 1.2.72 writes when an alert did NOT reach the relay
# (push.py / job.py).  A successful relay POST logs nothing at all.
DELIVERY_FAILURE_MARKERS = (
    "push: delivery to device",  # relay non-2xx, timeout, refused, sealing
    "push: report is enabled but no device is paired",
    "push: the device registry is unavailable",
    "push: device registry unavailable",
    "Problem reporting job",  # a reporter raised
)


class DriverError(Exception):
    """A step failed; the message is what the caller reads on stderr."""


def log(msg):
    print("cronstable_driver: " + msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# workdir setup


def write_private(path, text):
    """Write ``text`` to ``path`` readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write(text)


def generate_key(workdir):
    """Create the fake phone's keypair; returns the base64 public key."""
    key = PrivateKey.generate()
    public = base64.b64encode(bytes(key.public_key)).decode("ascii")
    private = base64.b64encode(bytes(key)).decode("ascii")
    write_private(
        os.path.join(workdir, "key.json"),
        json.dumps({"public": public, "private": private}) + "\n",
    )
    return public


def free_port():
    """An unused TCP port on 127.0.0.1 (racy by nature; callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def q(value):
    """A YAML double-quoted scalar (a JSON string is one)."""
    return json.dumps(str(value))


def write_config(workdir, relay_url, port):
    """Write DIR/cronstable.yaml; returns its path.

    - ``web``: one http://127.0.0.1 listener; a bearer token is configured
      because cronstable refuses an unauthenticated /push/devices on a
      routable listener, and because ``POST /shutdown`` needs one anyway.
      The dashboard UI is off (nothing here needs it).
    - ``state``: a single-node filesystem store under DIR, so runs get a
      durable ``run_id`` (it appears in the sealed failure payload) and
      ``GET /jobs/{name}/runs`` works.  Its job API binds an ephemeral
      127.0.0.1 port.
    - ``push.devicesFile``: the pairing registry as one JSON file under DIR
      (it takes precedence over the state store and is easy to inspect).
    - the job: fails every run (stderr line + exit 3, so the payload carries
      ``exit_code``, ``fail_reason`` and a ``log_tail``); the schedule only
      matches on 2099-01-01, so it runs solely via ``POST /jobs/{name}/start``;
      ``onFailure.report.push.enabled`` routes the failure alert to push.
    """
    token_file = os.path.join(workdir, "web-token")
    text = "\n".join(
        [
            "# Generated by tests/e2e/cronstable_driver.py -- do not edit.",
            "web:",
            "  listen:",
            "    - " + q("http://127.0.0.1:{}".format(port)),
            "  authToken:",
            "    fromFile: " + q(token_file),
            "  ui: false",
            "state:",
            "  path: " + q(os.path.join(workdir, "state")),
            "  topology: single-node",
            "push:",
            "  relay:",
            "    url: " + q(relay_url),
            "    timeout: {}".format(RELAY_TIMEOUT_S),
            "  devicesFile: " + q(os.path.join(workdir, "push-devices.json")),
            "jobs:",
            "  - name: " + q(JOB_NAME),
            "    command: " + q(JOB_COMMAND),
            '    schedule: "0 0 1 1 * 2099"',
            "    onFailure:",
            "      report:",
            "        push:",
            "          enabled: true",
            "          priority: time-sensitive",
            "          includeLogTail: true",
            "",
        ]
    )
    path = os.path.join(workdir, "cronstable.yaml")
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return path


# --------------------------------------------------------------------------
# the daemon and its web API


def _die_with_parent():
    """Have Linux SIGTERM the daemon if this driver dies (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux / no libc: just skip
        pass


class Daemon:
    """One cronstable process whose combined output goes to DIR/daemon.log."""

    def __init__(self, command, config_path, workdir):
        self.argv = list(command) + ["-c", config_path, "-l", "INFO"]
        self.log_path = os.path.join(workdir, "daemon.log")
        self.workdir = workdir
        self.proc = None
        self.exit_code = None
        self.killed = False

    def start(self):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        log("started daemon pid {}: {}".format(
            self.proc.pid, " ".join(shlex.quote(a) for a in self.argv)))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def lines(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def tail(self, count=LOG_TAIL_LINES):
        return self.lines()[-count:]

    def stop(self, grace_s):
        """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log("daemon ignored SIGTERM for {:.0f}s; killing it".format(
                    grace_s))
                self.killed = True
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        return self.exit_code


class Api:
    """A tiny JSON client for the daemon's web API (proxies bypassed)."""

    def __init__(self, base_url, token):
        self.base_url = base_url
        self.token = token
        # An empty ProxyHandler: CI's http_proxy must never see loopback calls.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method, path, body=None, timeout=30.0):
        """Returns (status, parsed JSON or raw text); raises OSError on I/O."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Authorization": "Bearer " + self.token,
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        text = raw.decode("utf-8", errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


def wait_until(deadline, what, probe, daemon, interval=0.2):
    """Poll ``probe()`` until it returns a truthy value or time runs out."""
    while True:
        if not daemon.alive():
            raise DriverError("the daemon exited (code {}) while waiting for "
                              "{}".format(daemon.proc.poll(), what))
        result = probe()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise DriverError("timed out waiting for " + what)
        time.sleep(interval)


def log_has(daemon, pattern):
    rx = re.compile(pattern)
    return any(rx.search(line) for line in daemon.lines())


def start_daemon(args, workdir, token, deadline):
    """Write the config, start the daemon, wait for its web API; retry the
    whole thing on a fresh port if the listener could not bind."""
    if args.cronstable:
        command = shlex.split(args.cronstable)
    elif importlib.util.find_spec("cronstable") is None:
        raise DriverError("cronstable is not importable by {} (pip install "
                          "'cronstable[push]' into this venv, or pass "
                          "--cronstable)".format(sys.executable))
    else:
        command = [sys.executable, "-m", "cronstable"]
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        port = free_port()
        config_path = write_config(workdir, args.relay_url, port)
        daemon = Daemon(command, config_path, workdir)
        api = Api("http://127.0.0.1:{}".format(port), token)
        daemon.start()

        def version_ok():
            if log_has(daemon, r"web: no listen address could be bound"):
                return "bind-failed"
            try:
                status, _ = api.call("GET", "/version", timeout=2.0)
            except OSError:
                return None
            if status == 401:
                raise DriverError("the web API refused the generated token")
            return "up" if status == 200 else None

        try:
            state = wait_until(deadline, "the web API on port {}".format(port),
                               version_ok, daemon)
        except DriverError as exc:
            daemon.stop(grace_s=5)
            raise DaemonFailed(daemon, str(exc)) from None
        if state == "up":
            return daemon, api
        log("port {} could not be bound (attempt {}); retrying".format(
            port, attempt))
        daemon.stop(grace_s=5)
    raise DriverError("the web API could not bind a port after {} "
                      "attempts".format(STARTUP_ATTEMPTS))


class DaemonFailed(DriverError):
    """Startup failed; carries the daemon so its log can be reported."""

    def __init__(self, daemon, message):
        super().__init__(message or "the daemon's web API never came up")
        self.daemon = daemon


# --------------------------------------------------------------------------
# run


def run(args):
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    push_token = args.token.strip()
    if not re.fullmatch(r"[0-9a-fA-F]+", push_token) or len(push_token) > 512:
        raise SystemExit("cronstable_driver: --token must be 1-512 hex "
                         "characters")

    deadline = time.monotonic() + args.timeout_s
    result = {
        "device_id": None,
        "test_status": None,
        "job_started": False,
        "daemon_log_tail": [],
        "test_outcome": None,
        "failure_reported": False,
        "daemon_exit_code": None,
        "errors": [],
    }
    errors = result["errors"]

    public_key = generate_key(workdir)
    web_token = secrets.token_hex(32)
    write_private(os.path.join(workdir, "web-token"), web_token)

    daemon = None
    try:
        try:
            daemon, api = start_daemon(args, workdir, web_token, deadline)
        except DaemonFailed as exc:
            daemon = exc.daemon
            raise
        log("web API up at " + api.base_url)

        # The push service is applied by the daemon's first housekeeping
        # pass; /push/devices answers 404 until then.
        wait_until(deadline, "the push service (GET /push/devices -> 200)",
                   lambda: api.call("GET", "/push/devices")[0] == 200, daemon)

        # -- pair -----------------------------------------------------------
        status, body = api.call("POST", "/push/devices", {
            "name": DEVICE_NAME,
            "platform": "ios",
            "pushToken": push_token,
            "publicKey": public_key,
            "suite": "x25519",
        })
        if status not in (200, 201) or not isinstance(body, dict):
            raise DriverError("pairing failed: POST /push/devices -> {} "
                              "{}".format(status, body))
        result["device_id"] = body["device"]["id"]
        log("paired device {} ({})".format(result["device_id"],
                                           body["device"].get("fingerprint")))

        # -- test alert (synchronous: the daemon answers after the relay) ---
        status, body = api.call("POST", "/push/devices/{}/test".format(
            result["device_id"]))
        result["test_status"] = status
        result["test_outcome"] = body
        if status != 200:
            errors.append("test alert failed: POST /push/devices/{}/test -> "
                          "{} {}".format(result["device_id"], status, body))
        else:
            log("test alert: daemon {} / relay {}".format(
                status, body.get("status") if isinstance(body, dict) else "?"))

        # -- failing job ----------------------------------------------------
        status, body = api.call("POST", "/jobs/{}/start".format(JOB_NAME))
        result["job_started"] = status in (200, 202)
        if not result["job_started"]:
            raise DriverError("POST /jobs/{}/start -> {} {}".format(
                JOB_NAME, status, body))
        log("job started: {} {}".format(status, body))
        # Logged by the completion task right before the push fan-out.  The
        # shutdown below drains that task, so it must not start earlier: a
        # run finishing after SIGTERM is never reported.
        wait_until(deadline, "the daemon to report the job failure",
                   lambda: log_has(daemon, r"Cron job {}: reporting "
                                   r"failure".format(re.escape(JOB_NAME))),
                   daemon)
        log("daemon is reporting the failure; stopping it")
    except DriverError as exc:
        if str(exc):
            errors.append(str(exc))
    finally:
        if daemon is not None:
            # grace: the in-flight relay POST is bounded by RELAY_TIMEOUT_S
            result["daemon_exit_code"] = daemon.stop(grace_s=RELAY_TIMEOUT_S + 5)
            result["daemon_log_tail"] = daemon.tail()

    if daemon is not None and result["job_started"]:
        reporting = log_has(daemon, r"Cron job {}: reporting failure".format(
            re.escape(JOB_NAME)))
        if daemon.killed:
            errors.append("the daemon had to be SIGKILLed, so the failure "
                          "alert's relay POST may not have completed")
        bad = [l for l in daemon.lines()
               if any(m in l for m in DELIVERY_FAILURE_MARKERS)]
        if bad:
            errors.append("the daemon logged a push delivery problem: "
                          + " | ".join(line[:300] for line in bad))
        else:
            result["failure_reported"] = reporting and not daemon.killed
        if result["daemon_exit_code"] not in (0, None) and not daemon.killed:
            errors.append("the daemon exited with code {}".format(
                result["daemon_exit_code"]))

    print(json.dumps(result))
    if errors:
        for err in errors:
            log("ERROR: " + err)
        log("daemon log: " + os.path.join(workdir, "daemon.log"))
        return 1
    return 0


# --------------------------------------------------------------------------
# open


def open_lines(args):
    with open(args.key, encoding="utf-8") as stream:
        private = base64.b64decode(json.load(stream)["private"], validate=True)
    box = SealedBox(PrivateKey(private))
    failures = 0
    count = 0
    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        count += 1
        try:
            doc = json.loads(line)
            suite = doc.get("suite", "x25519")
            if suite != "x25519":
                raise ValueError("unsupported suite {!r}".format(suite))
            sealed = base64.b64decode(doc["ciphertext"], validate=True)
            plain = json.loads(box.decrypt(sealed).decode("utf-8"))
            if not isinstance(plain, dict):
                raise ValueError("plaintext is not a JSON object")
        except (ValueError, KeyError, TypeError, AttributeError,
                binascii.Error) as exc:
            failures += 1
            log("line {}: cannot open: {}: {}".format(
                lineno, type(exc).__name__, exc))
            continue
        except Exception as exc:  # nacl.exceptions.CryptoError and friends
            failures += 1
            log("line {}: decryption failed: {}: {}".format(
                lineno, type(exc).__name__, exc))
            continue
        print(json.dumps(plain, separators=(",", ":"), ensure_ascii=False),
              flush=True)
    if failures:
        log("{} of {} line(s) failed to open".format(failures, count))
        return 1
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p_run = sub.add_parser("run", help="drive a real daemon against a relay")
    p_run.add_argument("--relay-url", required=True)
    p_run.add_argument("--workdir", required=True)
    p_run.add_argument("--token", required=True,
                       help="hex APNs device token to pair with")
    p_run.add_argument("--timeout-s", type=float, default=60.0)
    p_run.add_argument("--cronstable", default=None,
                       help="command that runs cronstable (default: "
                            "'<this python> -m cronstable')")

    p_open = sub.add_parser("open", help="open sealed ciphertexts from stdin")
    p_open.add_argument("--key", required=True)

    args = parser.parse_args(argv)
    if args.cmd == "run":
        return run(args)
    return open_lines(args)


if __name__ == "__main__":
    # SIGTERM to the driver (a test harness timing out) still stops the daemon
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
