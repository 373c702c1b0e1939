// Headless-Chromium test of sealrelay's hosted pages, /pair and /privacy.
//
//   node tests/browser/pages.mjs <base URL> <output dir>
//
// <base URL> is a relay's public listener (or tests/browser/serve_pages.py), e.g.
// http://127.0.0.1:8080. Drives Debian's Chromium (CHROMIUM, default /usr/bin/chromium)
// through playwright-core with a fresh profile, under the CSP the server sends (the test
// never bypasses it). Pairing fragments are built as cronstable 1.2.72 builds them
// (cronstable/pairlink.py payload() and link()); when a Python with cronstable is at hand
// (CRONSTABLE_PYTHON, else SEALRELAY_E2E_PYTHON) cronstable itself builds the links and the
// test checks that its own builder gives the same bytes. PAGES_REQUIRE_CRONSTABLE=1 makes
// that cross-check mandatory.
//
// Writes screenshots to <output dir>, prints a JSON summary on success, and exits 1 with
// "FAIL: ..." on stderr on any failure (2 when it hangs past its watchdog).

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const WATCHDOG_MS = 180_000;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const PHONE = { width: 390, height: 844 };

// A fake bearer: distinctive, so any leak of it into the page is unmistakable.
const BEARER = "csk_FAKE-bearer-7f3c9a1e5b2d8046c1e9a7b3d5f20864";

class Failure extends Error {}
function check(cond, message) {
  if (!cond) throw new Failure(message);
}

// ---- pairing links, as cronstable builds them -----------------------------------------

// cronstable/pairlink.py payload(): json.dumps({"v":1,"name":…,"url":…,"token":…},
// separators=(",", ":"), ensure_ascii=False), then each character that str.isprintable()
// rejects as its JSON escape. JSON.stringify agrees for the printable names used here
// (the dashboard's own pairLink() in web/index.html uses JSON.stringify too).
function payload(name, url, token) {
  return JSON.stringify({ v: 1, name, url, token: token || "" });
}
// cronstable/pairlink.py link(): base + "#" + urlsafe_b64encode(utf-8).rstrip("=").
function link(pairingJson, base) {
  const b64 = Buffer.from(pairingJson, "utf8").toString("base64url").replace(/=+$/, "");
  return base + "#" + b64;
}
function fragmentOf(url) {
  return url.slice(url.indexOf("#") + 1);
}
function b64url(text) {
  return Buffer.from(text, "utf8").toString("base64url");
}

function cronstableLinks(cases) {
  const python = process.env.CRONSTABLE_PYTHON || process.env.SEALRELAY_E2E_PYTHON;
  if (!python) return null;
  const program = [
    "import json, sys",
    "from cronstable import pairlink, version",
    "cases = json.load(sys.stdin)",
    "links = [pairlink.link(pairlink.payload(c['name'], c['url'], c['token']), c['base']) for c in cases]",
    "print(json.dumps({'version': version.__version__, 'links': links}))",
  ].join("\n");
  try {
    const out = execFileSync(python, ["-c", program], {
      input: JSON.stringify(cases),
      encoding: "utf8",
      timeout: 30_000,
    });
    return JSON.parse(out);
  } catch (e) {
    throw new Failure(`${python} could not build pairing links with cronstable: ${e.message}`);
  }
}

// ---- the test ----------------------------------------------------------------------------

async function main() {
  const [baseArg, outDir] = process.argv.slice(2);
  if (!baseArg || !outDir) {
    console.error("usage: node pages.mjs <base URL> <output dir>");
    process.exit(64);
  }
  const base = new URL(baseArg).origin;
  const pairBase = base + "/pair";
  mkdirSync(outDir, { recursive: true });

  const cases = {
    paired: { name: "nas-01 backups", url: "https://nas.example.net:8443", token: BEARER, base: pairBase },
    unicode: { name: "Büro-Server ⏱ Köln", url: "http://192.168.1.20:8080", token: BEARER, base: pairBase },
    hostile: { name: "<img src=x onerror=alert(1)>", url: "https://evil.example:9443/cron", token: BEARER, base: pairBase },
    tokenless: { name: "lab.internal:8080", url: "http://lab.internal:8080", token: null, base: pairBase },
  };
  const mirror = Object.fromEntries(
    Object.entries(cases).map(([k, c]) => [k, link(payload(c.name, c.url, c.token), c.base)]),
  );
  let builtBy = "pages.mjs mirror of cronstable/pairlink.py";
  const keys = Object.keys(cases);
  const real = cronstableLinks(keys.map((k) => cases[k]));
  if (real) {
    keys.forEach((k, i) =>
      check(real.links[i] === mirror[k], `cronstable built ${real.links[i]} but the mirror built ${mirror[k]}`),
    );
    builtBy = `cronstable ${real.version} (cronstable.pairlink), cross-checked against the mirror`;
  } else if (process.env.PAGES_REQUIRE_CRONSTABLE === "1") {
    throw new Failure("PAGES_REQUIRE_CRONSTABLE=1 but neither CRONSTABLE_PYTHON nor SEALRELAY_E2E_PYTHON is set");
  }
  const links = real ? Object.fromEntries(keys.map((k, i) => [k, real.links[i]])) : mirror;

  const profile = mkdtempSync(path.join(tmpdir(), "sealrelay-pages-"));
  let context;
  const summary = { ok: false, base, chromium: null, builtBy, checks: [], requests: [], screenshots: [] };
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: PHONE,
      deviceScaleFactor: 2,
      isMobile: true,
      hasTouch: true,
      colorScheme: "light",
      locale: "en-US",
      timeout: 60_000,
    });
    summary.chromium = context.browser()?.version() ?? null;

    // Every request any page of this context makes, and every sign of a CSP violation.
    const requests = [];
    context.on("request", (r) => requests.push({ url: r.url(), type: r.resourceType(), method: r.method() }));
    await context.addInitScript(() => {
      window.__violations = [];
      document.addEventListener("securitypolicyviolation", (e) => {
        window.__violations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"}`);
      });
    });

    async function open(url, { scheme = "light" } = {}) {
      const page = await context.newPage();
      const seen = { console: [], errors: [], dialogs: [] };
      page.on("console", (m) => seen.console.push(`${m.type()}: ${m.text()}`));
      page.on("pageerror", (e) => seen.errors.push(String(e)));
      page.on("dialog", async (d) => {
        seen.dialogs.push(d.message());
        await d.dismiss();
      });
      await page.emulateMedia({ colorScheme: scheme });
      const before = requests.length;
      const response = await page.goto(url, { waitUntil: "load", timeout: 30_000 });
      check(response, `${url}: no response`);
      check(response.status() === 200, `${url}: status ${response.status()}, expected 200`);
      const headers = response.headers();
      check(
        headers["content-type"] === "text/html; charset=utf-8",
        `${url}: content-type ${headers["content-type"]}`,
      );
      const csp = headers["content-security-policy"] || "";
      check(csp.includes("default-src 'none'"), `${url}: no strict Content-Security-Policy header (got ${JSON.stringify(csp)})`);
      // Let anything late (a hashchange, a deferred load, a favicon) happen before judging.
      await page.waitForTimeout(300);
      const violations = await page.evaluate(() => window.__violations.slice());
      check(violations.length === 0, `${url.split("#")[0]}: the page breaks its CSP: ${violations.join("; ")}`);
      const ownRequests = requests.slice(before);
      return { page, seen, csp, violations, ownRequests };
    }

    // The page is clean: no CSP violation, no console output, no script error, no dialog,
    // and the only request is the document itself, on the base origin.
    function assertClean(label, r, documentPath) {
      check(r.violations.length === 0, `${label}: CSP violations: ${r.violations.join("; ")}`);
      check(r.seen.errors.length === 0, `${label}: script errors: ${r.seen.errors.join("; ")}`);
      check(r.seen.console.length === 0, `${label}: console output: ${r.seen.console.join("; ")}`);
      check(r.seen.dialogs.length === 0, `${label}: a dialog opened: ${r.seen.dialogs.join("; ")}`);
      check(r.ownRequests.length === 1, `${label}: ${r.ownRequests.length} requests, expected only the document: ${JSON.stringify(r.ownRequests)}`);
      const [req] = r.ownRequests;
      const u = new URL(req.url);
      check(u.origin === base, `${label}: a request left the base origin: ${req.url}`);
      check(req.type === "document" && u.pathname === documentPath, `${label}: unexpected request ${req.type} ${req.url}`);
    }
    async function noResourcesLoaded(label, page) {
      const n = await page.evaluate(() => performance.getEntriesByType("resource").length);
      check(n === 0, `${label}: the page loaded ${n} subresources`);
    }
    async function assertNoBearer(label, r) {
      const { page } = r;
      const html = await page.evaluate(() => document.documentElement.outerHTML);
      const text = await page.evaluate(() => document.body.innerText);
      const title = await page.title();
      for (const [where, s] of [["the DOM", html], ["the visible text", text], ["the title", title]]) {
        check(!s.includes(BEARER), `${label}: the bearer appears in ${where}`);
      }
      check(!r.seen.console.some((m) => m.includes(BEARER)), `${label}: the bearer appears in the console`);
    }
    async function pairedState(page) {
      return page.evaluate(() => {
        const vis = (id) => {
          const el = document.getElementById(id);
          return !!el && !el.hidden && el.getClientRects().length > 0;
        };
        const open = document.getElementById("open");
        return {
          paired: vis("paired"),
          invalid: vis("invalid"),
          empty: vis("empty"),
          howto: vis("howto"),
          name: document.getElementById("server-name").textContent,
          host: document.getElementById("server-host").textContent,
          href: open.getAttribute("href"),
          appLinks: document.querySelectorAll('a[href^="cronstable:"]').length,
          images: document.querySelectorAll("img").length,
          scripts: document.querySelectorAll("script").length,
          reason: document.getElementById("invalid-reason").textContent,
        };
      });
    }
    const passed = (name) => {
      summary.checks.push(name);
      tally += 1;
    };

    // (a) a real pairing link: name and host shown, the app link, no bearer anywhere.
    {
      const url = links.paired;
      const r = await open(url);
      const s = await pairedState(r.page);
      check(s.paired && !s.invalid && !s.empty && !s.howto, `paired: wrong sections shown ${JSON.stringify(s)}`);
      check(s.name === cases.paired.name, `paired: name ${JSON.stringify(s.name)}`);
      check(s.host === "nas.example.net:8443", `paired: host ${JSON.stringify(s.host)}`);
      await r.page.getByText(cases.paired.name, { exact: true }).waitFor({ state: "visible", timeout: 5000 });
      await r.page.getByText("nas.example.net:8443", { exact: true }).waitFor({ state: "visible", timeout: 5000 });
      const button = r.page.getByRole("link", { name: "Open in the app" });
      check(await button.isVisible(), "paired: no visible \"Open in the app\" link");
      check((await button.getAttribute("href")) === "cronstable://pair#" + fragmentOf(url), `paired: href ${s.href}`);
      check(s.appLinks === 1, `paired: ${s.appLinks} cronstable: links`);
      await assertNoBearer("paired", r);
      assertClean("paired", r, "/pair");
      await noResourcesLoaded("paired", r.page);
      const shot = path.join(outDir, "pair-with-code.png");
      await r.page.screenshot({ path: shot });
      summary.screenshots.push(shot);
      await r.page.emulateMedia({ colorScheme: "dark" });
      const dark = path.join(outDir, "pair-with-code-dark.png");
      await r.page.screenshot({ path: dark });
      summary.screenshots.push(dark);
      await r.page.close();
      passed("pair: name and host shown, Open in the app -> cronstable://pair#<fragment>, bearer nowhere");
    }

    // (a') UTF-8 names, padded base64url, a tokenless code, and a fragment that changes in place.
    {
      const padded = Buffer.from(payload(cases.unicode.name, cases.unicode.url, BEARER), "utf8").toString("base64");
      const paddedUrl = pairBase + "#" + padded.replace(/\+/g, "-").replace(/\//g, "_");
      check(paddedUrl.endsWith("="), "test setup: the padded case should carry padding");
      for (const [label, url, name, host] of [
        ["unicode", links.unicode, cases.unicode.name, "192.168.1.20:8080"],
        ["padded", paddedUrl, cases.unicode.name, "192.168.1.20:8080"],
        ["tokenless", links.tokenless, "lab.internal:8080", "lab.internal:8080"],
      ]) {
        const r = await open(url);
        const s = await pairedState(r.page);
        check(s.paired && s.name === name && s.host === host, `${label}: ${JSON.stringify(s)}`);
        check(s.href === "cronstable://pair#" + fragmentOf(url), `${label}: href ${s.href}`);
        await assertNoBearer(label, r);
        assertClean(label, r, "/pair");
        if (label === "tokenless") {
          // A new code in the same tab (hashchange) replaces the old one.
          await r.page.evaluate((f) => { location.hash = f; }, fragmentOf(links.paired));
          await r.page.waitForFunction(() => document.getElementById("server-host").textContent === "nas.example.net:8443");
          const t = await pairedState(r.page);
          check(t.href === "cronstable://pair#" + fragmentOf(links.paired), `hashchange: href ${t.href}`);
          await r.page.evaluate(() => { location.hash = "!!"; });
          await r.page.waitForFunction(() => !document.getElementById("invalid").hidden);
          const u = await pairedState(r.page);
          check(u.appLinks === 0 && u.name === "" && u.host === "", `hashchange to junk: ${JSON.stringify(u)}`);
        }
        await r.page.close();
      }
      passed("pair: UTF-8 name, padded base64url, tokenless code, in-place hashchange");
    }

    // (b) no fragment, and an empty one: how to get a code.
    for (const [label, url] of [["no fragment", pairBase], ["empty fragment", pairBase + "#"]]) {
      const r = await open(url);
      const s = await pairedState(r.page);
      check(s.empty && s.howto && !s.paired && !s.invalid, `${label}: wrong sections shown ${JSON.stringify(s)}`);
      check(s.appLinks === 0, `${label}: offers an app link`);
      const text = await r.page.evaluate(() => document.body.innerText);
      for (const needle of ["How to get a pairing code", "Pair a device", "cronstable pair", "Scan QR code"]) {
        check(text.includes(needle), `${label}: the page does not mention ${JSON.stringify(needle)}`);
      }
      assertClean(label, r, "/pair");
      await noResourcesLoaded(label, r.page);
      if (label === "no fragment") {
        const shot = path.join(outDir, "pair-without-code.png");
        await r.page.screenshot({ path: shot, fullPage: true });
        summary.screenshots.push(shot);
        await r.page.emulateMedia({ colorScheme: "dark" });
        const dark = path.join(outDir, "pair-without-code-dark.png");
        await r.page.screenshot({ path: dark, fullPage: true });
        summary.screenshots.push(dark);
      }
      await r.page.close();
    }
    passed("pair without a code: explains Pair a device / cronstable pair / Scan QR code");

    // (c) malformed fragments: an explanation, no link.
    {
      const good = fragmentOf(links.paired);
      const malformed = {
        "not base64url": "not*base64!",
        "standard base64 alphabet": Buffer.from('{"v":1,"name":"a>?","url":"https://h"}').toString("base64"),
        "bad padding": good.slice(0, 10) + "=",
        "cut short": good.slice(0, good.length - 7),
        "not JSON": b64url("hello, world"),
        "JSON array": b64url("[1,2,3]"),
        "wrong version": b64url(JSON.stringify({ v: 2, name: "n", url: "https://h.example", token: BEARER })),
        "no url": b64url(JSON.stringify({ v: 1, name: "n", token: BEARER })),
        "not http(s)": b64url(JSON.stringify({ v: 1, name: "n", url: "javascript:alert(1)", token: BEARER })),
        "invalid UTF-8": Buffer.from([0x7b, 0xff, 0xfe, 0x7d]).toString("base64url"),
        "bad percent escape": "%E0%A4%A",
      };
      const reasons = {};
      for (const [label, frag] of Object.entries(malformed)) {
        const r = await open(pairBase + "#" + frag);
        const s = await pairedState(r.page);
        check(s.invalid && s.howto && !s.paired && !s.empty, `malformed (${label}): wrong sections shown ${JSON.stringify(s)}`);
        check(s.reason.length > 20, `malformed (${label}): no explanation`);
        check(s.appLinks === 0 && s.href === null, `malformed (${label}): still offers a link`);
        check(!(await r.page.getByRole("link", { name: "Open in the app" }).isVisible()), `malformed (${label}): link visible`);
        await assertNoBearer(`malformed (${label})`, r);
        assertClean(`malformed (${label})`, r, "/pair");
        reasons[label] = s.reason;
        if (label === "cut short") {
          const shot = path.join(outDir, "pair-invalid-code.png");
          await r.page.screenshot({ path: shot, fullPage: true });
          summary.screenshots.push(shot);
        }
        await r.page.close();
      }
      summary.malformed = reasons;
      passed(`pair with a malformed code: explanation and no link (${Object.keys(malformed).length} cases)`);
    }

    // (e) a hostile name is text.
    {
      const r = await open(links.hostile);
      const s = await pairedState(r.page);
      check(s.paired && s.name === cases.hostile.name, `hostile: name ${JSON.stringify(s.name)}`);
      check(s.host === "evil.example:9443", `hostile: host ${JSON.stringify(s.host)}`);
      check(s.images === 0, "hostile: the name became an <img> element");
      await r.page.getByText(cases.hostile.name, { exact: true }).waitFor({ state: "visible", timeout: 5000 });
      assertClean("hostile", r, "/pair");
      await assertNoBearer("hostile", r);
      await r.page.close();
      passed("pair: a name of <img src=x onerror=alert(1)> is shown as text");
    }

    // (f) the privacy page.
    {
      const r = await open(base + "/privacy");
      const text = await r.page.evaluate(() => document.body.innerText);
      for (const needle of [
        "What the relay sees",
        "What it keeps, and for how long",
        "What it never sees",
        "75 seconds",
        "2 hours",
        "24 hours",
        "10 minutes",
        "first 8 hex characters",
      ]) {
        check(text.includes(needle), `privacy: the page does not mention ${JSON.stringify(needle)}`);
      }
      check(r.csp.includes("script-src 'none'"), `privacy: CSP allows scripts: ${r.csp}`);
      check((await pairedScripts(r.page)) === 0, "privacy: the page has a script");
      assertClean("privacy", r, "/privacy");
      await noResourcesLoaded("privacy", r.page);
      const shot = path.join(outDir, "privacy.png");
      await r.page.screenshot({ path: shot, fullPage: true });
      summary.screenshots.push(shot);
      await r.page.close();
      passed("privacy: sees / keeps / never sees, no script, clean under its CSP");
    }

    // (d) control: the CSP is enforced and the violation detector works, so the clean runs
    // above mean something. A script the page did not ship is refused.
    {
      const r = await open(pairBase);
      await r.page.evaluate(() => {
        const s = document.createElement("script");
        s.textContent = "window.__injected = true;";
        document.head.appendChild(s);
      });
      await r.page.waitForTimeout(200);
      const ran = await r.page.evaluate(() => window.__injected === true);
      const violations = await r.page.evaluate(() => window.__violations.slice());
      check(!ran, "control: an injected inline script ran: the CSP is not enforced");
      check(violations.length > 0, "control: the CSP refused a script but no violation was reported: the detector is blind");
      await r.page.close();
      passed("control: the CSP refuses an injected script and the violation is detected");
    }

    // (d) every request of the whole run went to the base origin, and only for documents.
    summary.requests = requests.map((q) => `${q.method} ${q.type} ${q.url.split("#")[0]}`);
    for (const q of requests) {
      check(new URL(q.url).origin === base, `a request left the base origin: ${q.url}`);
      check(q.type === "document", `a non-document request: ${q.type} ${q.url}`);
    }
    passed(`network: all ${requests.length} requests were documents on ${base}`);
    summary.ok = true;
  } finally {
    if (context) await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  }
  summary.requests = [...new Set(summary.requests)];
  console.log(JSON.stringify(summary, null, 2));
}

async function pairedScripts(page) {
  return page.evaluate(() => document.querySelectorAll("script").length);
}

const watchdog = setTimeout(() => {
  console.error(`FAIL: the browser test did not finish within ${WATCHDOG_MS / 1000} s`);
  process.exit(2);
}, WATCHDOG_MS);
watchdog.unref();

// A closing tally on stderr (stdout stays the JSON summary alone).
let tally = 0;
main().then(
  () => {
    console.error(`browser: ${tally} passed, 0 failed`);
    process.exit(0);
  },
  (e) => {
    console.error(`FAIL: ${e instanceof Failure ? e.message : e && e.stack ? e.stack : e}`);
    console.error(`browser: ${tally} passed, 1 failed`);
    process.exit(1);
  },
);
