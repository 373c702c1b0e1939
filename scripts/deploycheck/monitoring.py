"""PromQL, alerts, the runbook and the dashboard."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import yaml

from .common import (  # noqa: F401
    Check,
    GRAFANA,
    GRAFANA_VARS,
    ROOT,
    RUNBOOK,
    RUNBOOK_BASE,
    alert_rules,
    allowed_series,
    check,
    declared_metrics,
    duration_s,
    metric_names,
    one,
    render_docs,
    run,
)

# ----------------------------------------------------------------------------------------
# PromQL, alerts, runbook, dashboard
# ----------------------------------------------------------------------------------------

def dashboard_exprs(dash: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def walk(panels):
        for p in panels or []:
            for t in p.get("targets") or []:
                if t.get("expr"):
                    out.append((f"panel {p.get('id')} {p.get('title')!r} {t.get('refId')}", t["expr"]))
            walk(p.get("panels"))

    walk(dash.get("panels"))
    for v in (dash.get("templating") or {}).get("list") or []:
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            m = re.fullmatch(r"\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", q)
            out.append((f"variable {v['name']}", m.group(1) if m else q))
    return out


def substitute(expr: str) -> str:
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    return expr


@check("promql: alerts.yaml passes promtool check rules")
def check_alert_rules(c: Check, promtool: str) -> None:
    r = run([promtool, "check", "rules", str(GRAFANA / "alerts.yaml")])
    if r.returncode != 0:
        c.error(r.stdout + r.stderr)
    else:
        c.note(r.stdout.strip().splitlines()[-1].strip())


@check("promql: dashboard expressions pass promtool check rules")
def check_dashboard(c: Check, promtool: str, state: dict) -> None:
    dash = json.loads((GRAFANA / "sealrelay-dashboard.json").read_text())
    exprs = dashboard_exprs(dash)
    if not exprs:
        c.error("the dashboard has no expressions")
        return
    rules = []
    for i, (where, expr) in enumerate(exprs):
        e = substitute(expr)
        left = re.findall(r"\$\{?[A-Za-z_]+", e)
        if left:
            c.error(f"{where}: unknown Grafana variable(s) {left} (add them to GRAFANA_VARS)")
        rules.append({"record": f"dashboard:expr_{i}", "expr": e})
    state["dashboard_exprs"] = exprs
    with tempfile.NamedTemporaryFile("w", suffix=".rules.yaml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, sort_keys=False)
    try:
        r = run([promtool, "check", "rules", f.name])
        if r.returncode != 0:
            c.error((r.stdout + r.stderr).strip())
            # promtool numbers the failing rules; name the panels they come from.
            for n in sorted({int(x) for x in re.findall(r"rule (\d+)", r.stdout + r.stderr)}):
                if 0 < n <= len(exprs):
                    c.error(f"rule {n} is {exprs[n - 1][0]}: {exprs[n - 1][1]}")
        else:
            c.note(f"{len(rules)} expressions")
    finally:
        os.unlink(f.name)


@check("dashboard: namespace/pod variables, queue max()/sum(), age, saturation, SLO burn, dead-token memory apart; "
       "signed, admin, mailbox, fan-out, signal and ICE panels")
def check_dashboard_content(c: Check) -> None:
    dash = json.loads((GRAFANA / "sealrelay-dashboard.json").read_text())
    variables = {v["name"]: v for v in (dash.get("templating") or {}).get("list") or []}
    for name in ("cluster", "region", "namespace", "pod"):
        v = variables.get(name)
        q = (v or {}).get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if not v or v.get("type") != "query" or f", {name})" not in (q or ""):
            c.error(f"no query variable ${name} (label_values(..., {name}))")
    panels: list[dict] = []

    def walk(ps):
        for p in ps or []:
            panels.append(p)
            walk(p.get("panels"))

    walk(dash.get("panels"))
    targets = [(p, t["expr"]) for p in panels for t in p.get("targets") or [] if t.get("expr")]
    for p, e in targets:
        for sel in re.findall(r"\b(?:sealrelay|process)_[a-z0-9_]+\{([^}]*)\}", e):
            if any(f'{v}=~"${v}"' not in sel for v in ("cluster", "region", "namespace", "pod")):
                c.error(f"panel {p.get('title')!r}: a selector without cluster=~\"$cluster\", "
                        f"namespace=~\"$namespace\" and pod=~\"$pod\": {{{sel}}}")
        if "$instance" in e:
            c.error(f"panel {p.get('title')!r} still selects by $instance")
        if re.search(r'sum\s*(?:by\s*\([^)]*\)\s*)?\(\s*sealrelay_retry_queue_depth\{[^}]*scope="shared"', e) or \
           re.search(r'sealrelay_retry_queue_depth\{(?![^}]*scope=)[^}]*\}', e):
            c.error(f"panel {p.get('title')!r} sums the shared queue depth (every replica reports it: use max()): {e}")
    exprs = "\n".join(e for _, e in targets)

    def has(pattern: str, what: str):
        if not any(re.search(pattern, e, re.S) for _, e in targets):
            c.error(f"no panel shows {what}")

    has(r'max\s*(?:by\s*\([^)]*\)\s*)?\(\s*sealrelay_retry_queue_depth\{[^}]*scope="shared"', "the shared queue depth with max()")
    has(r'sum\s*(?:by\s*\([^)]*\)\s*)?\(\s*sealrelay_retry_queue_depth\{[^}]*scope="local"', "the local queue depth with sum()")
    has(r"sealrelay_retry_queue_oldest_age_seconds", "the oldest queued item's age")
    has(r"rate\(\s*process_cpu_seconds_total", "CPU (rate of process_cpu_seconds_total)")
    has(r"process_resident_memory_bytes", "resident memory")
    has(r"process_open_fds.*process_max_fds", "open fds against max fds")
    has(r"sealrelay_inflight_requests.*sealrelay_max_inflight", "in-flight requests against sealrelay_max_inflight")
    has(r'status!~"4\.\.".*/\s*0\.001', "the availability burn rate (error ratio / 0.1% budget)")
    has(r'le=~"2\|2\\\\\.0".*/\s*0\.01', "the latency burn rate (slow share / 1% budget)")
    if not any("burn" in (p.get("title") or "").lower() for p in panels):
        c.error("no panel titled as a burn rate")
    tr = [(p, e) for p, e in targets if 'outcome="token_remembered"' in e]
    if not tr:
        c.error("no panel shows token_remembered (dead-token memory answers)")
    for p, e in tr:
        if re.search(r'outcome=~"[^"]*token_remembered', e) or "sealrelay_apns_" in e:
            c.error(f"panel {p.get('title')!r} mixes dead-token memory answers with other answers: {e}")
    for p, e in targets:
        if re.search(r'outcome=~"[^"]*token_(rejected|remembered)[^"]*token_', e):
            c.error(f"panel {p.get('title')!r} adds token_rejected and token_remembered together")
    # The front-ends (signed pushes, admin API, mailboxes, fan-out, signal, ICE).
    frontend = [
        (r"sum by \((?:route, )?code\) \(rate\(sealrelay_signed_requests_total", "signed requests by code"),
        (r'sealrelay_signed_requests_total\{[^}]*code=~"[^"]*bad_signature|sealrelay_signature_verifications_total\{[^}]*result="invalid"',
         "signature failures"),
        (r"rate\(sealrelay_signed_replays_total", "replays"),
        (r"sealrelay_event_streams_open", "open event streams"),
        (r"sum by \([^)]*transport[^)]*\) \(rate\(sealrelay_admin_requests_total", "admin requests by transport"),
        (r"sum by \([^)]*route[^)]*\) \(rate\(sealrelay_mailbox_requests_total", "mailbox requests by route"),
        (r"sum by \([^)]*status[^)]*\) \(rate\(sealrelay_mailbox_requests_total", "mailbox requests by status"),
        (r"sum by \(bucket\) \(rate\(sealrelay_mailbox_rate_limited_total", "mailbox rate limiting by bucket"),
        (r"sum by \(service, outcome\) \(rate\(sealrelay_mailbox_pushes_total", "mailbox pushes by service and outcome"),
        (r"sum by \(kind\) \(sealrelay_mailbox_sockets_open", "open sockets by kind"),
        (r"histogram_quantile\(0\.99, sum by \(le\) \(rate\(sealrelay_fanout_delay_seconds_bucket", "fan-out delay p99"),
        (r"sealrelay_fanout_lagged_total", "lagged fan-out messages"),
        (r"sum by \(result\) \(rate\(sealrelay_signal_frames_total", "signal frames by result"),
        (r"rate\(sealrelay_signal_bytes_total", "signal bytes"),
        (r"sum by \(code\) \(increase\(sealrelay_signal_closes_total", "signal closes by code"),
        (r"histogram_quantile\(0\.99, [^\n]*sealrelay_signal_frame_delay_seconds_bucket", "signal frame delay p99"),
        (r"sum by \(provider, outcome\) \(rate\(sealrelay_ice_requests_total", "ICE requests by provider and outcome"),
    ]
    for pattern, what in frontend:
        has(pattern, what)
    # The mailbox 5xx panel shows what the alert computes: 507 and the ice route left out.
    mb = [e for _, e in targets if "sealrelay_mailbox_requests_total" in e and '"5.."' in e]
    if not any('status!="507"' in e and 'route!="ice"' in e for e in mb):
        c.error("no mailbox 5xx panel leaves out 507 mailbox_full and the ice route, as SealrelayMailboxErrorRatioHigh does")
    c.note(f"{len(panels)} panels, {len(targets)} expressions" if exprs else "no expressions")


@check("promql: the chart's rendered PrometheusRule passes promtool check rules; runbook base replaced")
def check_rendered_rules(c: Check, promtool: str, state: dict) -> None:
    docs = state.get("prometheus_rules") or []
    if not docs:
        c.error("no ci/*.yaml value set renders a PrometheusRule (enable metrics.prometheusRule in one)")
        return
    want = [r["alert"] for r in alert_rules()]
    for d in docs:
        got = [r["alert"] for g in d["spec"]["groups"] for r in g["rules"] if "alert" in r]
        if got != want:
            c.error(f"PrometheusRule alerts {got} differ from grafana/alerts.yaml {want}")
        with tempfile.NamedTemporaryFile("w", suffix=".rules.yaml", delete=False) as f:
            yaml.safe_dump({"groups": d["spec"]["groups"]}, f, sort_keys=False)
        try:
            r = run([promtool, "check", "rules", f.name])
            if r.returncode != 0:
                c.error(r.stdout + r.stderr)
        finally:
            os.unlink(f.name)
    base = "https://wiki.example.com/sealrelay/runbook"
    docs, _ = render_docs({"metrics": {"prometheusRule": {"enabled": True, "runbookBaseUrl": base + "/"}}})
    pr = one(c, docs, "PrometheusRule", "runbookBaseUrl")
    if pr:
        for g in pr["spec"]["groups"]:
            for r in g["rules"]:
                if "alert" in r and not r["annotations"].get("runbook_url", "").startswith(base + "#"):
                    c.error(f"{r['alert']}: runbook_url {r['annotations'].get('runbook_url')} ignores metrics.prometheusRule.runbookBaseUrl")


@check("promql: promtool test rules grafana/alerts.test.yaml; every alert fires and stays quiet after its `for`")
def check_rule_tests(c: Check, promtool: str) -> None:
    r = run([promtool, "test", "rules", "alerts.test.yaml"], cwd=GRAFANA)
    if r.returncode != 0:
        c.error((r.stdout + r.stderr).strip())
    rules = {a["alert"]: a for a in alert_rules()}
    tests = yaml.safe_load((GRAFANA / "alerts.test.yaml").read_text())
    fired, quiet = set(), set()
    for t in tests.get("tests") or []:
        for a in t.get("alert_rule_test") or []:
            name = a["alertname"]
            if name not in rules:
                c.error(f"alerts.test.yaml tests {name}, which alerts.yaml does not define")
                continue
            if a.get("exp_alerts"):
                fired.add(name)
            elif duration_s(a["eval_time"]) >= duration_s(rules[name].get("for", "0s")):
                # Quiet only counts once the alert could have fired: not merely pending.
                quiet.add(name)
    if set(rules) - fired:
        c.error("alerts no test makes fire: " + ", ".join(sorted(set(rules) - fired)))
    if set(rules) - quiet:
        c.error("alerts no test shows quiet after their `for`: " + ", ".join(sorted(set(rules) - quiet)))
    if not c.errors:
        c.note(f"{len(rules)} alerts, each shown firing and quiet")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    text = RUNBOOK.read_text()
    out: dict[str, str] = {}
    parts = re.split(r"^(#{2,4} .+)$", text, flags=re.M)
    for i in range(1, len(parts), 2):
        out[slug(parts[i].lstrip("#"))] = parts[i + 1]
    return out


@check("alerts: every alert links its docs/runbook.md section (meaning, how to confirm, what to do)")
def check_runbook(c: Check) -> None:
    if not RUNBOOK.exists():
        c.error("docs/runbook.md does not exist")
        return
    sections = runbook_sections()
    for r in alert_rules():
        url = (r.get("annotations") or {}).get("runbook_url", "")
        if not url.startswith(RUNBOOK_BASE + "#"):
            c.error(f"{r['alert']}: runbook_url {url!r} does not start with {RUNBOOK_BASE}#")
            continue
        anchor = url.split("#", 1)[1]
        body = sections.get(anchor)
        if body is None:
            c.error(f"{r['alert']}: docs/runbook.md has no section #{anchor}")
            continue
        for part in ("What it means", "How to confirm", "What to do"):
            if f"**{part}" not in body:
                c.error(f"{r['alert']}: its runbook section lacks **{part}**")
        for label in ("summary", "description"):
            if not (r.get("annotations") or {}).get(label):
                c.error(f"{r['alert']}: no {label} annotation")
        if (r.get("labels") or {}).get("severity") not in ("critical", "warning"):
            c.error(f"{r['alert']}: severity must be critical (page) or warning (ticket)")
    for link in re.findall(r"\]\(#([^)]+)\)", RUNBOOK.read_text()):
        if link not in sections:
            c.error(f"docs/runbook.md links #{link}, which is no heading")
    for needed in ("service-level-objectives", "burn-rates-and-the-error-budget-math"):
        if needed not in sections:
            c.error(f"docs/runbook.md has no section #{needed}")


@check("alerts: front-end alerts: mailbox 5xx (traffic guard, 507/ice out), push misconfigured, fan-out lag, "
       "ICE errors, signed 503s, signature failures (warning)")
def check_frontend_alerts(c: Check) -> None:
    rules = {r["alert"]: r for r in alert_rules()}

    def expr(name: str) -> str:
        r = rules.get(name)
        if not r:
            c.error(f"no alert {name}")
            return ""
        return re.sub(r"\s+", " ", r["expr"])

    def sev(name: str, want: str) -> None:
        got = ((rules.get(name) or {}).get("labels") or {}).get("severity")
        if name in rules and got != want:
            c.error(f"{name}: severity {got}, expected {want}")

    e = expr("SealrelayMailboxErrorRatioHigh")
    if e:
        if 'status!="507"' not in e or 'status!~"4..|507"' not in e:
            c.error("SealrelayMailboxErrorRatioHigh counts 507 mailbox_full (the reader's own doing) or 4xx as eligible")
        if 'route!="ice"' not in e:
            c.error("SealrelayMailboxErrorRatioHigh counts the ice route, which has its own alert")
        if not re.search(r"increase\(sealrelay_mailbox_requests_total\{[^}]*\}\[5m\]\)\) >= \d+", e):
            c.error("SealrelayMailboxErrorRatioHigh has no minimum-traffic guard")
    e = expr("SealrelayMailboxPushMisconfigured")
    if e and not re.search(r'increase\(sealrelay_mailbox_pushes_total\{[^}]*outcome="misconfigured"', e):
        c.error("SealrelayMailboxPushMisconfigured does not alert on an increase of outcome=\"misconfigured\"")
    if e and "by (cluster, region, namespace, service)" not in e:
        c.error("SealrelayMailboxPushMisconfigured does not name the service (fcm / apns)")
    e = expr("SealrelayFanoutLagging")
    if e and not ("increase(sealrelay_fanout_lagged_total" in e and
                  re.search(r"histogram_quantile\(0\.99, .*?rate\(sealrelay_fanout_delay_seconds_bucket[^>]*> 1\b", e)):
        c.error("SealrelayFanoutLagging must fire on lagged messages increasing or a fan-out p99 over 1 s")
    e = expr("SealrelayICEProviderFailing")
    if e and not ('outcome="error"' in e and "by (cluster, region, namespace, provider)" in e and re.search(r"\) >= \d+", e)):
        c.error("SealrelayICEProviderFailing must be the outcome=\"error\" ratio per provider, with a traffic guard")
    e = expr("SealrelaySignedUnavailable")
    if e and not ('code="unavailable"' in e and re.search(r'code=~"[^"]*created[^"]*unavailable', e)):
        c.error("SealrelaySignedUnavailable must be the code=\"unavailable\" ratio of eligible (non-4xx) signed requests")
    e = expr("SealrelaySignatureFailures")
    if e and "bad_signature" not in e:
        c.error("SealrelaySignatureFailures does not count bad signatures")
    sev("SealrelaySignatureFailures", "warning")
    for name in ("SealrelayMailboxErrorRatioHigh", "SealrelayMailboxPushMisconfigured", "SealrelaySignedUnavailable"):
        sev(name, "critical")
    for name in ("SealrelayFanoutLagging", "SealrelayICEProviderFailing"):
        sev(name, "warning")


def runbook_budgets() -> dict[str, float]:
    """SLO name -> error budget, from the runbook's SLO table."""
    out = {}
    for name, objective in re.findall(r"^\|\s*(Availability|Latency)\s*\|\s*([0-9.]+)%", RUNBOOK.read_text(), re.M):
        out[name.lower()] = round(1 - float(objective) / 100, 6)
    return out


@check("alerts: multi-window multi-burn-rate pairs against the runbook's SLOs; caller-visible credentials alert")
def check_slo_alerts(c: Check) -> None:
    budgets = runbook_budgets()
    for slo in ("availability", "latency"):
        if slo not in budgets:
            c.error(f"docs/runbook.md's SLO table has no {slo.capitalize()} row with an objective")
    rules = {r["alert"]: r for r in alert_rules()}
    ratio = {"availability": "sealrelay:slo_availability_errors:ratio_rate", "latency": "sealrelay:slo_latency_slow:ratio_rate"}
    eligible = {"availability": "sealrelay:slo_availability_eligible:rate", "latency": "sealrelay:slo_latency_eligible:rate"}
    plan = {"Fast": [("1h", "5m", "14.4"), ("6h", "30m", "6")], "Slow": [("1d", "2h", "3"), ("3d", "6h", "1")]}
    for slo, budget in budgets.items():
        for speed, pairs in plan.items():
            name = f"Sealrelay{slo.capitalize()}BudgetBurn{speed}"
            r = rules.get(name)
            if not r:
                c.error(f"no alert {name}")
                continue
            expr = re.sub(r"\s+", " ", r["expr"])
            for long_w, short_w, factor in pairs:
                for w in (long_w, short_w):
                    want = f"{ratio[slo]}{w} > ({factor} * {budget:g})"
                    if want not in expr:
                        c.error(f"{name}: no `{want}`")
                if not re.search(re.escape(eligible[slo] + long_w) + r" \* \d+ >= \d+", expr):
                    c.error(f"{name}: no minimum-traffic guard on {eligible[slo]}{long_w}")
            sev = (r.get("labels") or {}).get("severity")
            if sev != ("critical" if speed == "Fast" else "warning"):
                c.error(f"{name}: severity {sev}")
    cred = rules.get("SealrelayAPNsCredentialsRejected")
    if not cred or 'outcome="credentials_rejected"' not in cred["expr"] or "sealrelay_apns_requests_total" in cred["expr"]:
        c.error("SealrelayAPNsCredentialsRejected must alert on what callers saw (intake outcome credentials_rejected), "
                "not on APNs answers, which include the self-healing ExpiredProviderToken refresh")
    recorded = {r.get("record") for g in yaml.safe_load((GRAFANA / "alerts.yaml").read_text())["groups"] for r in g["rules"]}
    for name in set(re.findall(r"sealrelay:[a-z_:]+[0-9a-z]+", "\n".join(r["expr"] for r in rules.values()))):
        if name not in recorded:
            c.error(f"alerts use {name}, which no recording rule defines")
    c.note(f"budgets from docs/runbook.md: {budgets}")


@check("promql: every sealrelay_*/process_* metric used is declared in src/**/*.rs, and every declared one is shown")
def check_metric_names(c: Check, state: dict) -> None:
    declared = declared_metrics()
    allowed = allowed_series(declared)
    used: dict[str, set[str]] = {}
    src = yaml.safe_load((GRAFANA / "alerts.yaml").read_text())
    for g in src["groups"]:
        for r in g["rules"]:
            for n in metric_names(r["expr"]):
                used.setdefault(n, set()).add(f"alerts.yaml {r.get('alert') or r.get('record')}")
    for where, expr in state.get("dashboard_exprs") or []:
        for n in metric_names(expr):
            used.setdefault(n, set()).add(f"dashboard {where}")
    tests = (GRAFANA / "alerts.test.yaml").read_text()
    for n in re.findall(r"series:\s*'((?:sealrelay|process)_[a-z0-9_]+)", tests):
        used.setdefault(n, set()).add("alerts.test.yaml")
    missing = sorted(n for n in used if n not in allowed)
    for n in missing:
        c.error(f"{n} is not declared in src/**/*.rs (used by {', '.join(sorted(used[n])[:3])}"
                f"{', ...' if len(used[n]) > 3 else ''})")
    base = {re.sub(r"_(bucket|sum|count)$", "", n) if re.sub(r"_(bucket|sum|count)$", "", n) in declared else n for n in used}
    unused = sorted(n for n in set(declared) - base if n.startswith("sealrelay_"))
    if unused:
        c.error("declared in src/ but on no dashboard panel or alert (the code exports it; show it): " + ", ".join(unused))
    c.note(f"{len(used)} series names used, {len(declared)} metric names declared in "
           f"{', '.join(sorted(set(declared.values())))}")


@check("Dockerfile: locked release build, non-root, both ports")
def check_dockerfile(c: Check, known: dict) -> None:
    text = (ROOT / "Dockerfile").read_text()
    if "cargo build --release --locked" not in text:
        c.error("Dockerfile must build with cargo build --release --locked")
    if not re.search(r"^USER\s+(?!0\b|root\b)\S+", text, re.M):
        c.error("Dockerfile's final image must set a non-root USER")
    ports = set(re.findall(r"^EXPOSE\s+(.+)$", text, re.M)[-1].split()) if "EXPOSE" in text else set()
    for var in ("RELAY_LISTEN", "RELAY_ADMIN_LISTEN"):
        port = (known.get(var) or "").rsplit(":", 1)[-1]
        if port not in ports:
            c.error(f"Dockerfile does not EXPOSE {port}, the port of {var}'s default {known.get(var)}")
    hadolint = os.environ.get("HADOLINT") or "hadolint"
    try:
        r = run([hadolint, str(ROOT / "Dockerfile")])
    except FileNotFoundError:
        c.error(f"hadolint not found at {hadolint} (scripts/check-deploy.sh installs it into its venv)")
        return
    if r.returncode != 0:
        c.error("hadolint:\n" + (r.stdout + r.stderr).strip())
    else:
        c.note("hadolint clean")


@check("scripts/check-deploy.sh: tools in a virtualenv, never the system Python or ~/.local; no kill by name")
def check_installer(c: Check) -> None:
    text = (ROOT / "scripts" / "check-deploy.sh").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if "-m venv" not in code:
        c.error("check-deploy.sh does not create a virtualenv")
    for bad in ("--user", "--break-system-packages", "pkill", "killall", "sudo pip"):
        if bad in code:
            c.error(f"check-deploy.sh uses {bad}")
    if re.search(r'"\$PYTHON"\s+(?:"\$\{args\[@\]\}"|-m pip)', code):
        c.error("check-deploy.sh runs pip with the interpreter on PATH instead of the venv's")
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    if not in_venv:
        c.note("check_deploy.py is not running inside a virtualenv (run it through scripts/check-deploy.sh)")
