#!/usr/bin/env python3
"""Serve sealrelay's hosted pages the way src/v1/pages.rs does, for developing them.

    python3 tests/browser/serve_pages.py [--port 0] [--ttl 300] [--aasa-app-id ID ...]

Listens on 127.0.0.1 only (port 0: a free one), prints its base URL on the first line of
stdout, and stops by itself after --ttl seconds (or on Ctrl-C). The HTML comes from
src/v1/pages/*.html and the Content-Security-Policy strings from pages.rs's PAIR_CSP and
PRIVACY_CSP, evaluated from their concat!() the way rustc does, so this server sends the
same bytes and headers as the relay: a page whose hash constant is stale fails under this
server's CSP too. Standard library only.
"""

import argparse
import json
import pathlib
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES_RS = ROOT / "src" / "v1" / "pages.rs"
PAGES_DIR = ROOT / "src" / "v1" / "pages"
AASA_PATH = "/.well-known/apple-app-site-association"
AASA_COMMENT = "cronstable pairing links: the payload rides in the fragment"
NOT_FOUND = b'{"v":1,"error":"not found"}'
METHOD_NOT_ALLOWED = b'{"v":1,"error":"method not allowed"}'


def rust_str_consts(source: str) -> dict[str, str]:
    """The `&str` constants of pages.rs that are a literal or a concat!() of literals and
    `name!()` calls to literal-only macros."""
    macros = dict(
        re.findall(
            r'macro_rules!\s+(\w+)\s*\{\s*\(\)\s*=>\s*\{\s*"([^"\\]*)"\s*\};?\s*\}', source
        )
    )
    consts = {}
    for name, expr in re.findall(
        r"const\s+(\w+)\s*:\s*&str\s*=\s*(.*?);\s*$", source, re.S | re.M
    ):
        expr = expr.strip()
        if expr.startswith("concat!(") and expr.endswith(")"):
            parts = re.findall(r'"([^"\\]*)"|(\w+)!\(\)', expr[len("concat!(") : -1])
            consts[name] = "".join(lit if lit else macros[mac] for lit, mac in parts)
        elif re.fullmatch(r'"[^"\\]*"', expr):
            consts[name] = expr[1:-1]
    return consts


def load_pages() -> dict[str, tuple[bytes, str]]:
    consts = rust_str_consts(PAGES_RS.read_text(encoding="utf-8"))
    return {
        "/pair": ((PAGES_DIR / "pair.html").read_bytes(), consts["PAIR_CSP"]),
        "/privacy": ((PAGES_DIR / "privacy.html").read_bytes(), consts["PRIVACY_CSP"]),
    }


def make_handler(pages, aasa_ids):
    aasa_body = None
    if aasa_ids:
        aasa_body = json.dumps(
            {
                "applinks": {
                    "details": [
                        {
                            "appIDs": aasa_ids,
                            "components": [{"/": "/pair", "comment": AASA_COMMENT}],
                        }
                    ]
                }
            },
            separators=(",", ":"),
        ).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "serve_pages"
        sys_version = ""

        def log_message(self, fmt, *args):  # quiet: the browser test records requests itself
            pass

        def _send(self, status, body, headers, head=False):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _static(self, content_type):
            return [
                ("Content-Type", content_type),
                ("X-Content-Type-Options", "nosniff"),
                ("Referrer-Policy", "no-referrer"),
                ("Cache-Control", "public, max-age=3600"),
            ]

        def _route(self):
            path = urlsplit(self.path).path
            head = self.command == "HEAD"
            known = path in pages or (path == AASA_PATH and aasa_body is not None)
            if not known:
                return self._send(404, NOT_FOUND, [("Content-Type", "application/json")], head)
            if self.command not in ("GET", "HEAD"):
                return self._send(
                    405,
                    METHOD_NOT_ALLOWED,
                    [("Content-Type", "application/json"), ("Allow", "GET, HEAD")],
                )
            if path == AASA_PATH:
                return self._send(200, aasa_body, self._static("application/json"), head)
            body, csp = pages[path]
            headers = self._static("text/html; charset=utf-8")
            headers.insert(1, ("Content-Security-Policy", csp))
            return self._send(200, body, headers, head)

        def __getattr__(self, name):
            # do_GET, do_HEAD, do_POST, do_BREW, ...: every method goes through _route.
            if name.startswith("do_"):
                return self._route
            raise AttributeError(name)

    return Handler


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--ttl", type=float, default=300.0, help="seconds until it stops by itself")
    ap.add_argument("--aasa-app-id", action="append", default=[], help="serve the AASA file")
    args = ap.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(load_pages(), args.aasa_app_id))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print("http://{}:{}".format(host, port), flush=True)
    timer = threading.Timer(args.ttl, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        timer.cancel()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
