#!/usr/bin/env python3
"""Checks the deployment and monitoring artifacts against the source.

Run through scripts/check-deploy.sh, which installs the tools into a virtualenv first. Each
check prints one line (PASS/FAIL) with its problems; see CHECKS in main() for the list. The
sources of truth: the vars! table (every src/config*.rs and src/config/**/*.rs, parsed by
scripts/gen_values_schema.py), the metric names declared as string literals in src/**/*.rs,
README.md's configuration table, and docs/runbook.md's SLO table.

Exits 1 if any check failed.
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
RUNBOOK = ROOT / "docs" / "runbook.md"
sys.path.insert(0, str(ROOT / "scripts"))
import gen_values_schema as gvs  # noqa: E402

# Variables already decided but not yet in the vars! table, with their defaults (None:
# unset). Once a name shows up in the table, the table is the truth and its entry here is
# ignored (the script says so, so it can be deleted).
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
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "HTTPRoute"}
MONITORING_API = "monitoring.coreos.com/v1"
GATEWAY_API = "gateway.networking.k8s.io/v1"
# Grafana variables -> values that make the expressions valid PromQL for promtool.
GRAFANA_VARS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "${__rate_interval}": "5m",
    "$job": "sealrelay",
    "$namespace": ".*",
    "$pod": ".*",
}
RUNBOOK_BASE = "https://github.com/sealrelay/sealrelay/blob/main/docs/runbook.md"
METRIC_NAME = re.compile(r"\b(?:sealrelay|process)_[A-Za-z0-9_]+")


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


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def duration_s(text: str) -> float:
    """A Prometheus duration ("1h15m", "25h", "90s") in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text or "0s")
    if not parts and text not in (None, "", "0"):
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


# ----------------------------------------------------------------------------------------
# Sources of truth
# ----------------------------------------------------------------------------------------

def config_vars() -> tuple[dict[str, str | None], list[str], list]:
    """(name -> default, PENDING_VARS now in the table, the table's Var rows)."""
    rows = gvs.parse_vars(ROOT)
    found = {v.name: v.default for v in rows}
    promoted = sorted(n for n in PENDING_VARS if n in found)
    merged = dict(PENDING_VARS)
    merged.update(found)
    return merged, promoted, rows


def declared_metrics() -> dict[str, str]:
    """Every "sealrelay_..." / "process_..." string literal in src/**/*.rs -> the file."""
    out: dict[str, str] = {}
    for p in sorted((ROOT / "src").rglob("*.rs")):
        for name in re.findall(r'"((?:sealrelay|process)_[a-z0-9_]+)"', p.read_text()):
            out.setdefault(name, rel(p))
    if not any(n.startswith("sealrelay_") for n in out):
        raise SystemExit('src/**/*.rs: no "sealrelay_..." metric name literals found')
    return out


def allowed_series(declared) -> set[str]:
    out = set(declared)
    for n in declared:
        if n.endswith("_seconds"):
            out |= {n + "_bucket", n + "_sum", n + "_count"}
    return out


def metric_names(expr: str) -> set[str]:
    # Drop label matchers and strings so label values are not taken for metric names.
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return set(METRIC_NAME.findall(bare))


def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def alert_rules() -> list[dict]:
    src = yaml.safe_load((GRAFANA / "alerts.yaml").read_text())
    return [r for g in src["groups"] for r in g["rules"] if "alert" in r]


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


def chart_files() -> list[Path]:
    return sorted(p for p in CHART.rglob("*") if p.is_file())


def template_files() -> list[Path]:
    return sorted(p for p in (CHART / "templates").rglob("*") if p.is_file())


def ci_value_sets() -> list[tuple[str, dict]]:
    return [(rel(p), yaml.safe_load(p.read_text()) or {}) for p in sorted((CHART / "ci").glob("*.yaml"))]


# ----------------------------------------------------------------------------------------
# Rendering through Helm's Go SDK
# ----------------------------------------------------------------------------------------

def render(values: dict | None, name: str = "sealrelay", namespace: str = "relay",
           api_versions: tuple[str, ...] = (MONITORING_API, GATEWAY_API)) -> dict[str, str]:
    """`helm template` with --api-versions. helm-python-sdk's Chart.render does not expose the
    option, so this calls the C SDK's render directly with its documented options object
    (name, namespace, is_install, kube_version, api_versions). Values are validated against
    values.schema.json exactly as `helm install` does."""
    import helm_python as helm
    from helm_python import _native

    opts = {"name": name, "namespace": namespace, "is_install": True, "api_versions": list(api_versions)}
    with helm.Chart.load(str(CHART)) as chart:
        out = _native.call_string("helm_render", chart._raw(), json.dumps(values or {}), json.dumps(opts))
    return json.loads(out)


def render_docs(values: dict | None, **kw) -> tuple[list[dict], str]:
    """The rendered resources (NOTES.txt apart) and the NOTES text."""
    out = render(values, **kw)
    docs, notes = [], ""
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for d in yaml.safe_load_all(text):
            if d:
                d.setdefault("__template", path)
                docs.append(d)
    return docs, notes


def strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "__template"}


def kinds(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def one(c: Check, docs: list[dict], kind: str, label: str) -> dict | None:
    found = kinds(docs, kind)
    if len(found) != 1:
        c.error(f"{label}: expected one {kind}, got {len(found)}")
        return None
    return found[0]


def refused(values: dict, **kw) -> str | None:
    """The error text if rendering fails, else None."""
    try:
        render(values, **kw)
    except Exception as e:  # HelmValuesError / HelmRenderError
        return str(e)
    return None


# ----------------------------------------------------------------------------------------
# k8s/
# ----------------------------------------------------------------------------------------

def k8s_docs() -> list[tuple[Path, dict]]:
    files = sorted(p for p in K8S.glob("*.y*ml") if p.name not in ("kustomization.yaml", "kustomization.yml"))
    return [(p, d) for p in files for d in load_yaml_docs(p)]


@check("k8s/: every resource validates (kubernetes-validate, strict); kustomization lists them all")
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


@check("k8s/: no Deployment replicas next to its HPA; grace period above the shutdown budget")
def check_k8s_hpa(c: Check, known: dict) -> None:
    docs = k8s_docs()
    deps = {d["metadata"]["name"]: (p, d) for p, d in docs if d.get("kind") == "Deployment"}
    hpas = [d for _, d in docs if d.get("kind") == "HorizontalPodAutoscaler"]
    for h in hpas:
        ref = h["spec"]["scaleTargetRef"]
        if ref.get("kind") != "Deployment" or ref.get("name") not in deps:
            c.error(f"HPA {h['metadata']['name']} targets {ref}, which k8s/ does not define")
            continue
        p, d = deps[ref["name"]]
        if "replicas" in d["spec"]:
            c.error(f"{rel(p)}: Deployment {ref['name']} sets replicas: {d['spec']['replicas']} although "
                    f"HPA {h['metadata']['name']} owns the count (every kubectl apply would reset it)")
    cms = {d["metadata"]["name"]: d.get("data") or {} for _, d in docs if d.get("kind") == "ConfigMap"}
    for name, (p, d) in deps.items():
        spec = d["spec"]["template"]["spec"]
        ctr = next(x for x in spec["containers"] if x["name"] == "sealrelay") if any(
            x["name"] == "sealrelay" for x in spec["containers"]) else None
        if not ctr:
            continue
        env: dict[str, str] = {}
        for src in ctr.get("envFrom") or []:
            env.update(cms.get((src.get("configMapRef") or {}).get("name"), {}))
        delay = int(env.get("RELAY_SHUTDOWN_DELAY_S") or known.get("RELAY_SHUTDOWN_DELAY_S") or 0)
        grace = int(env.get("RELAY_SHUTDOWN_GRACE_S") or known.get("RELAY_SHUTDOWN_GRACE_S") or 0)
        tgp = spec.get("terminationGracePeriodSeconds", 30)
        if tgp <= delay + grace:
            c.error(f"{rel(p)}: terminationGracePeriodSeconds {tgp} <= RELAY_SHUTDOWN_DELAY_S {delay} + RELAY_SHUTDOWN_GRACE_S {grace}")
    c.note(f"{len(hpas)} HPA(s), {len(deps)} Deployment(s)")


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
    for t in template_files():
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


@check("helm: files/ copies equal grafana/ originals")
def check_copies(c: Check) -> None:
    for name in ("alerts.yaml", "sealrelay-dashboard.json"):
        a, b = GRAFANA / name, CHART / "files" / name
        if not b.exists() or a.read_bytes() != b.read_bytes():
            c.error(f"{rel(b)} differs from {rel(a)}: run  cp {rel(a)} {rel(b)}")


@check("config variables: README table, values.yaml, templates, values.schema.json; no unknown names")
def check_vars(c: Check, known: dict, promoted: list[str], rows: list) -> None:
    if promoted:
        c.note("now in the vars! table, can be removed from PENDING_VARS in scripts/check_deploy.py: " + ", ".join(promoted))
    values_text = (CHART / "values.yaml").read_text()
    templates_text = "\n".join(p.read_text() for p in template_files())

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

    # The schema: every mapped variable at its values path, every variable under env.
    schema_path = CHART / "values.schema.json"
    if not schema_path.exists():
        c.error("helm/sealrelay/values.schema.json does not exist (run scripts/gen_values_schema.py)")
    else:
        schema = json.loads(schema_path.read_text())
        paths, problems = gvs.mapping(rows, values_text)
        for p in problems:
            c.error(p)
        for name, path in sorted(paths.items()):
            node = schema
            for seg in path.split("."):
                node = (node.get("properties") or {}).get(seg) or {}
            if not str(node.get("description", "")).startswith(name + " "):
                c.error(f"values.schema.json has no constraint for {name} at {path}")
        env_props = ((schema.get("properties") or {}).get("env") or {}).get("properties") or {}
        missing_env = sorted(n for n in known if n in {r.name for r in rows} and n not in env_props)
        if missing_env:
            c.error("values.schema.json's env does not check: " + ", ".join(missing_env))
        c.note(f"{len(paths)} variables mapped to values, {len(gvs.CHART_MANAGED)} chart-managed")

    for p in [*chart_files(), RUNBOOK]:
        if not p.exists() or p.suffix not in (".yaml", ".yml", ".tpl", ".txt", ".json", ".md"):
            continue
        unknown = sorted(set(VAR_PATTERN.findall(p.read_text())) - set(known) - OTEL_STANDARD_VARS)
        if unknown:
            c.error(f"{rel(p)} names unknown configuration variables: {', '.join(unknown)}")

    readme = ROOT / "README.md"
    if not readme.exists():
        c.error("README.md does not exist yet, so its configuration table cannot be cross-checked")
        return
    text = readme.read_text()
    table = set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`", text, re.M))
    # The README documents what the binary reads today: a pending name joins the table when
    # it reaches the vars! table.
    not_yet = set(PENDING_VARS) - set(promoted)
    missing = sorted(n for n in known if n not in table and n not in not_yet)
    if missing:
        c.error("README.md's configuration table has no row for: " + ", ".join(missing))
    unknown = sorted(set(VAR_PATTERN.findall(text)) - set(known) - OTEL_STANDARD_VARS)
    if unknown:
        c.error("README.md names unknown configuration variables: " + ", ".join(unknown))


@check("helm: values.schema.json is what scripts/gen_values_schema.py generates; valid draft-07")
def check_schema_generated(c: Check) -> None:
    import jsonschema

    try:
        want = gvs.generate(ROOT)
    except gvs.SchemaError as e:
        c.error(f"the generator refuses: {e}")
        return
    path = CHART / "values.schema.json"
    have = path.read_text() if path.exists() else ""
    if have != want:
        c.error("helm/sealrelay/values.schema.json is stale or hand-edited: run scripts/gen_values_schema.py "
                "(inside the tools venv: ~/.cache/sealrelay-deploy-tools/venv/bin/python)")
    schema = json.loads(want)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for label, values in [("values.yaml", yaml.safe_load((CHART / "values.yaml").read_text())), *ci_value_sets()]:
        for err in validator.iter_errors(values):
            c.error(f"{label} does not satisfy the schema: {'/'.join(map(str, err.path))}: {err.message}")


def _bad_value(kind: str):
    """A value outside the kind, for the refusal check."""
    head, _, arg = kind.partition(":")
    if head == "int":
        lo, hi = (int(x) for x in arg.split(".."))
        return hi + 1
    if head == "float":
        lo, hi = (float(x) for x in arg.split(".."))
        return -1 if lo == 0 else lo / 2
    if head == "bool":
        return "yes"
    if head == "enum":
        return arg.split("|")[0] + "x"
    if head == "url":
        return "ftp://example.com"
    if head == "string":
        return "x" * (int(arg.split("..")[1]) + 1)
    if head == "appleid":
        return "abc12"
    if head == "list":
        return ["10.0.0.0"]
    if head == "addr":
        return "no port"
    return 12345  # path, secret: a number is not a string


def _set_path(path: str, value) -> dict:
    out: dict = {}
    node = out
    segs = path.split(".")
    for s in segs[:-1]:
        node = node.setdefault(s, {})
    node[segs[-1]] = value
    return out


@check("helm: the schema refuses bad values before anything renders; null/\"\" and the ci sets pass")
def check_schema_refusals(c: Check, rows: list) -> None:
    values_text = (CHART / "values.yaml").read_text()
    paths, _ = gvs.mapping(rows, values_text)
    by_name = {r.name: r for r in rows}
    bad: dict[str, dict] = {
        "redis pool size 0": {"redis": {"poolSize": 0}},
        "an enum typo (RELAY_REDIS_FAILURE)": {"redis": {"onFailure": "degarde"}},
        "a lowercase team id": {"apns": {"teamId": "abcde12345"}},
        "a Redis URL with another scheme": {"redis": {"url": "http://redis:6379"}},
        "a refill rate of 0": {"policy": {"rateRefillPerSecond": 0}},
        "an address block without a prefix length": {"intake": {"trustedProxies": ["10.0.0.0"]}},
        "a typo'd key (apns.teamID)": {"apns": {"teamID": "ABCDE12345"}},
        "a typo'd top-level key (replicaCont)": {"replicaCont": 3},
        "a container port above 65535": {"containerPorts": {"http": 70000}},
        "env with pool size 0": {"env": {"RELAY_REDIS_POOL_SIZE": 0}},
        "env with a non-number pool size": {"env": {"RELAY_REDIS_POOL_SIZE": "four"}},
        "env with an enum typo": {"env": {"RELAY_LOG_FORMAT": "text"}},
        "env as a list": {"env": [{"name": "RELAY_LOG_FORMAT", "value": "json"}]},
        "a short queue key": {"redis": {"queueKey": {"value": "short"}}},
        "PDB maxUnavailable as a word": {"podDisruptionBudget": {"maxUnavailable": "one"}},
    }
    # One out-of-kind value for every mapped variable: each constraint is enforced.
    for name, path in sorted(paths.items()):
        bad[f"{name} = {_bad_value(by_name[name].kind)!r} ({path})"] = _set_path(path, _bad_value(by_name[name].kind))
    for what, values in bad.items():
        err = refused(values)
        if err is None:
            c.error(f"rendered although the schema should refuse it: {what} ({values})")
        elif "schema" not in err:
            c.error(f"refused, but not by the schema (so only after rendering): {what}: {err.splitlines()[0]}")
    # Unset means unset: null and "" pass for every mapped value.
    for blank in (None, ""):
        values: dict = {}
        for path in paths.values():
            node = values
            segs = path.split(".")
            for s in segs[:-1]:
                node = node.setdefault(s, {})
            node[segs[-1]] = blank
        err = refused(values)
        if err:
            c.error(f"every mapped value set to {blank!r} is refused: {err.splitlines()[0]}")
    for label, values in [("defaults", {}), *ci_value_sets()]:
        err = refused(values)
        if err:
            c.error(f"{label} is refused: {err}")
    c.note(f"{len(bad)} bad values refused by the schema ({len(paths)} generated from the variables' kinds)")


# ----------------------------------------------------------------------------------------
# Helm chart, rendered
# ----------------------------------------------------------------------------------------

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


@check("helm: chart lints and renders (with the monitoring and Gateway APIs); rendered resources validate")
def check_helm_render(c: Check, known: dict, state: dict) -> None:
    import helm_python as helm

    cases: list[tuple[str, dict]] = [("defaults", {}), *ci_value_sets()]
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
            docs, _ = render_docs(values)
        except Exception as e:
            c.error(f"render ({label}) failed: {e}")
            continue
        for d in docs:
            kube_validate(c, f"{d['__template']} ({label})", strip(d))
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
            if d["kind"] == "HorizontalPodAutoscaler":
                dep = kinds(docs, "Deployment")
                if dep and "replicas" in dep[0]["spec"]:
                    c.error(f"render ({label}): the Deployment sets replicas next to an HPA")
        c.note(f"{label}: {len(docs)} resources ({', '.join(sorted({d['kind'] for d in docs}))})")

    never = sorted(set(known) - seen_vars)
    if never:
        c.error("no render sets these variables (add them to a ci/*.yaml value set, or wire them in): " + ", ".join(never))
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
    cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == deps[0]["metadata"]["name"]]
    # Secrets come from Secrets (secretKeyRef or a mounted file), never the ConfigMap.
    for secret_var in ("APNS_AUTH_KEY", "REDIS_URL", "RELAY_QUEUE_KEY"):
        if cm and secret_var in (cm[0].get("data") or {}):
            c.error(f"render ({label}): secret variable {secret_var} is in the ConfigMap")


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


@check("helm: ServiceMonitor/PrometheusRule only with monitoring.coreos.com/v1, HTTPRoute only with the Gateway API; NOTES warns")
def check_capabilities(c: Check) -> None:
    prod = yaml.safe_load((CHART / "ci" / "production-values.yaml").read_text())
    on = dict(prod, httpRoute={"enabled": True, "parentRefs": [{"name": "public"}]})
    docs, notes = render_docs(on, api_versions=(MONITORING_API, GATEWAY_API))
    for kind in ("ServiceMonitor", "PrometheusRule", "HTTPRoute"):
        if len(kinds(docs, kind)) != 1:
            c.error(f"with the APIs served and {kind} enabled, the chart renders {len(kinds(docs, kind))} {kind}")
    if "WARNING" in notes and ("monitoring.coreos.com" in notes or "gateway.networking" in notes):
        c.error("NOTES.txt warns about a missing API although it is served")
    docs, notes = render_docs(on, api_versions=())
    for kind in ("ServiceMonitor", "PrometheusRule", "HTTPRoute"):
        if kinds(docs, kind):
            c.error(f"without its API the chart still renders a {kind} (helm install would fail on the missing CRD)")
    for api, what in ((MONITORING_API, "the ServiceMonitor/PrometheusRule"), (GATEWAY_API, "the HTTPRoute")):
        if not re.search(r"WARNING:[^\n]*\n?[^\n]*" + re.escape(api.split("/")[0]), notes) and api not in notes:
            c.error(f"NOTES.txt does not warn that {what} was skipped for lack of {api}")
    docs, _ = render_docs({}, api_versions=(MONITORING_API, GATEWAY_API))
    for kind in ("ServiceMonitor", "PrometheusRule", "HTTPRoute"):
        if kinds(docs, kind):
            c.error(f"{kind} rendered although it is disabled by default")


@check("helm: terminationGracePeriodSeconds follows RELAY_SHUTDOWN_* overrides in env and extraEnv")
def check_termination_grace(c: Check) -> None:
    def tgp(values):
        docs, _ = render_docs(values)
        dep = one(c, docs, "Deployment", str(values))
        env, dups = container_env(docs)
        if dups:
            c.error(f"{values}: variables set twice: {dups}")
        return dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] if dep else None, env

    cases = [
        ({}, 5 + 25 + 10),
        ({"shutdown": {"delaySeconds": 10, "graceSeconds": 40}}, 60),
        ({"shutdown": {"delaySeconds": None, "graceSeconds": None}}, 40),
        ({"env": {"RELAY_SHUTDOWN_DELAY_S": 20}}, 20 + 25 + 10),
        ({"env": {"RELAY_SHUTDOWN_GRACE_S": "90"}}, 5 + 90 + 10),
        ({"extraEnv": [{"name": "RELAY_SHUTDOWN_GRACE_S", "value": "60"}]}, 5 + 60 + 10),
        ({"env": {"RELAY_SHUTDOWN_GRACE_S": "30"}, "extraEnv": [{"name": "RELAY_SHUTDOWN_GRACE_S", "value": "120"}]}, 135),
    ]
    for values, want in cases:
        got, env = tgp(values)
        if got != want:
            c.error(f"{values}: terminationGracePeriodSeconds {got}, expected {want}")
        for e in values.get("extraEnv") or []:
            if env.get(e["name"]) != e["value"]:
                c.error(f"{values}: the container sees {e['name']}={env.get(e['name'])!r}")
    must_fail = {
        "explicit grace period below an env override": {"env": {"RELAY_SHUTDOWN_GRACE_S": "90"}, "terminationGracePeriodSeconds": 60},
        "explicit grace period below an extraEnv override": {"extraEnv": [{"name": "RELAY_SHUTDOWN_DELAY_S", "value": "60"}], "terminationGracePeriodSeconds": 60},
        "extraEnv valueFrom without an explicit grace period": {"extraEnv": [{"name": "RELAY_SHUTDOWN_GRACE_S", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]},
    }
    for what, values in must_fail.items():
        if refused(values) is None:
            c.error(f"rendered although it should refuse: {what}")
    ok = {"extraEnv": [{"name": "RELAY_SHUTDOWN_GRACE_S", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}],
          "terminationGracePeriodSeconds": 120}
    if err := refused(ok):
        c.error(f"valueFrom with an explicit grace period is refused: {err}")


@check("helm: PodDisruptionBudget takes maxUnavailable 0 (and percentages, minAvailable)")
def check_pdb(c: Check) -> None:
    cases = [
        ({"podDisruptionBudget": {"maxUnavailable": 0}}, {"maxUnavailable": 0}),
        ({"podDisruptionBudget": {"maxUnavailable": "25%"}}, {"maxUnavailable": "25%"}),
        ({}, {"maxUnavailable": 1}),
        ({"podDisruptionBudget": {"minAvailable": 2}}, {"minAvailable": 2}),
    ]
    for values, want in cases:
        docs, _ = render_docs(values)
        pdb = one(c, docs, "PodDisruptionBudget", str(values))
        if not pdb:
            continue
        got = {k: v for k, v in pdb["spec"].items() if k in ("maxUnavailable", "minAvailable")}
        if got != want:
            c.error(f"{values}: PDB has {got}, expected {want}")


@check("helm: NetworkPolicy allows the Redis ports of standalone, Cluster and Sentinel URLs")
def check_networkpolicy(c: Check) -> None:
    def redis_ports(values) -> set[int] | None:
        values = dict(values, networkPolicy=dict(values.get("networkPolicy") or {}, enabled=True))
        docs, _ = render_docs(values)
        np = one(c, docs, "NetworkPolicy", str(values))
        if not np:
            return None
        other = {53, 443, 4318}
        ports = set()
        for rule in np["spec"].get("egress") or []:
            got = {p["port"] for p in rule.get("ports") or []}
            if got - other:
                ports |= got
        return ports

    cases = [
        ({"redis": {"url": "redis://:pw@redis:6380/0"}}, {6380}),
        ({"redis": {"url": "rediss://redis.example"}}, {6379}),
        ({"redis": {"url": "redis-cluster://:pw@n1:7000?node=n2:7001&node=n3:7002"}}, {7000, 7001, 7002}),
        ({"redis": {"url": "rediss-cluster://n1:7100?node=n2:7101"}}, {7100, 7101}),
        ({"redis": {"url": "redis-sentinel://s1:26380/0?sentinelServiceName=mymaster&node=s2:26381&node=s3:26382"}},
         {26379, 26380, 26381, 26382, 6379}),
        ({"redis": {"existingSecret": "r"}}, {6379}),
        ({"redis": {"existingSecret": "r"}, "networkPolicy": {"egress": {"redisPorts": [26379, 6380]}}}, {26379, 6380}),
        ({"env": {"REDIS_URL": "redis-cluster://a:7200?node=b:7201"}}, {7200, 7201}),
        ({"redis": {"url": "redis-cluster://n1:7000?node=n2:7001"}, "networkPolicy": {"egress": {"redisPorts": [7005]}}},
         {7000, 7001, 7005}),
    ]
    for values, want in cases:
        got = redis_ports(values)
        if got is not None and got != want:
            c.error(f"{values}: Redis egress ports {sorted(got)}, expected {sorted(want)}")
    docs, _ = render_docs({"networkPolicy": {"enabled": True}})
    np = one(c, docs, "NetworkPolicy", "no Redis")
    if np and any({p["port"] for p in r.get("ports") or []} & {6379} for r in np["spec"].get("egress") or []):
        c.error("without Redis the NetworkPolicy still opens 6379")


@check("helm: Ingress and HTTPRoute are off by default and route only to the public Service")
def check_exposure(c: Check) -> None:
    docs, _ = render_docs({})
    if kinds(docs, "Ingress") or kinds(docs, "HTTPRoute"):
        c.error("an Ingress or HTTPRoute renders by default")
    values = {"ingress": {"enabled": True, "className": "nginx", "hosts": ["relay.example.com"],
                          "tls": [{"secretName": "relay-tls", "hosts": ["relay.example.com"]}]},
              "httpRoute": {"enabled": True, "parentRefs": [{"name": "public", "namespace": "gateway"}],
                            "hostnames": ["relay.example.com"]}}
    docs, _ = render_docs(values)
    svc = [d for d in kinds(docs, "Service") if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "intake"]
    if len(svc) != 1:
        c.error(f"expected one public (intake) Service, got {len(svc)}")
        return
    svc_name, port = svc[0]["metadata"]["name"], svc[0]["spec"]["ports"][0]
    ing = one(c, docs, "Ingress", "ingress.enabled")
    if ing:
        kube_validate(c, "ingress.yaml", strip(ing))
        for r in ing["spec"]["rules"]:
            for p in r["http"]["paths"]:
                b = p["backend"]["service"]
                if b["name"] != svc_name or b["port"].get("name", b["port"].get("number")) not in (port["name"], port["port"]):
                    c.error(f"Ingress routes to {b}, not the public Service {svc_name}:{port['name']}")
        if [r.get("host") for r in ing["spec"]["rules"]] != ["relay.example.com"]:
            c.error(f"Ingress rules {ing['spec']['rules']} do not carry ingress.hosts")
    hr = one(c, docs, "HTTPRoute", "httpRoute.enabled")
    if hr:
        if hr["apiVersion"] != GATEWAY_API or not hr["spec"].get("parentRefs"):
            c.error(f"HTTPRoute {hr['apiVersion']} without parentRefs")
        for rule in hr["spec"]["rules"]:
            for b in rule["backendRefs"]:
                if b["name"] != svc_name or b["port"] != port["port"]:
                    c.error(f"HTTPRoute routes to {b}, not the public Service {svc_name}:{port['port']}")
    if refused({"httpRoute": {"enabled": True}}) is None:
        c.error("an HTTPRoute without parentRefs renders")


@check("helm: helm test hook runs `sealrelay smoke` against the public Service like the Deployment")
def check_helm_test(c: Check) -> None:
    for label, values in [("defaults", {}), *ci_value_sets()]:
        docs, _ = render_docs(values)
        pods = [d for d in kinds(docs, "Pod") if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
        dep = one(c, docs, "Deployment", label)
        if len(pods) != 1 or not dep:
            c.error(f"{label}: expected one helm test Pod, got {len(pods)}")
            continue
        pod, dspec = pods[0], dep["spec"]["template"]["spec"]
        ctr, dctr = pod["spec"]["containers"][0], dspec["containers"][0]
        svc = [d for d in kinds(docs, "Service") if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "intake"][0]
        want_url = f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{svc['spec']['ports'][0]['port']}/"
        if ctr.get("args") != ["smoke", want_url] or ctr.get("command"):
            c.error(f"{label}: test Pod runs {ctr.get('command')} {ctr.get('args')}, expected the image's sealrelay with [smoke, {want_url}]")
        if ctr["image"] != dctr["image"] or ctr.get("imagePullPolicy") != dctr.get("imagePullPolicy"):
            c.error(f"{label}: test Pod image {ctr['image']} differs from the Deployment's {dctr['image']}")
        if ctr.get("securityContext") != dctr.get("securityContext"):
            c.error(f"{label}: test container securityContext differs from the Deployment's")
        if pod["spec"].get("securityContext") != dspec.get("securityContext"):
            c.error(f"{label}: test Pod securityContext differs from the Deployment's")
        res = ctr.get("resources") or {}
        if not (res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory") and res.get("limits", {}).get("memory")):
            c.error(f"{label}: test container resources {res} lack CPU/memory requests or a memory limit")
        if pod["spec"].get("restartPolicy") != "Never" or pod["spec"].get("automountServiceAccountToken") is not False:
            c.error(f"{label}: test Pod must not restart and must not mount a service account token")
        sel = svc["spec"]["selector"]
        if all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items()):
            c.error(f"{label}: the Service selector {sel} matches the test Pod: traffic would reach it")
        kube_validate(c, f"tests/smoke.yaml ({label})", strip(pod))
    docs, _ = render_docs({"tests": {"smoke": {"enabled": False}}})
    if kinds(docs, "Pod"):
        c.error("tests.smoke.enabled=false still renders the test Pod")
    docs, _ = render_docs({"networkPolicy": {"enabled": True, "ingress": {"httpFrom": [{"namespaceSelector": {}}]}}})
    np = one(c, docs, "NetworkPolicy", "httpFrom")
    if np and not any((p.get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "smoke-test"
                      for r in np["spec"]["ingress"] for p in r.get("from") or []):
        c.error("with networkPolicy.ingress.httpFrom set, the test Pod cannot reach the intake")


@check("helm: invalid value combinations are refused")
def check_helm_refusals(c: Check) -> None:
    bad = {
        "three replicas without Redis": {"replicaCount": 3},
        "autoscaling without Redis": {"autoscaling": {"enabled": True}},
        "partial APNs credentials": {"apns": {"teamId": "ABCDE12345"}},
        "APNs key value and existingSecret": {"apns": {"authKey": {"value": "x", "existingSecret": "y"}}},
        "Redis url and existingSecret": {"redis": {"url": "redis://r:6379", "existingSecret": "y"}},
        "queue key value and existingSecret": {"redis": {"queueKey": {"value": "k" * 32, "existingSecret": "y"}}},
        "Redis url with an unknown scheme": {"redis": {"url": "http://r:6379"}},
        "dry run with credentials": {"apns": {"teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "t",
                                              "authKey": {"existingSecret": "k"}, "dryRun": True}},
        "grace period below the shutdown budget": {"terminationGracePeriodSeconds": 20},
    }
    for what, values in bad.items():
        if refused(values) is None:
            c.error(f"rendered although it should refuse: {what} ({values})")


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


@check("dashboard: namespace/pod variables, queue max()/sum(), age, saturation, SLO burn, dead-token memory apart")
def check_dashboard_content(c: Check) -> None:
    dash = json.loads((GRAFANA / "sealrelay-dashboard.json").read_text())
    variables = {v["name"]: v for v in (dash.get("templating") or {}).get("list") or []}
    for name in ("namespace", "pod"):
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
            if 'namespace=~"$namespace"' not in sel or 'pod=~"$pod"' not in sel:
                c.error(f"panel {p.get('title')!r}: a selector without namespace=~\"$namespace\" and pod=~\"$pod\": {{{sel}}}")
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


@check("promql: every sealrelay_*/process_* metric used is declared in src/**/*.rs")
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
        c.note("declared but on no dashboard panel or alert: " + ", ".join(unused))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()

    try:
        known, promoted, rows = config_vars()
    except gvs.SchemaError as e:
        print(f"check-deploy: cannot read the configuration table: {e}")
        return 1
    state: dict = {}
    check_k8s(known)
    check_k8s_hpa(known)
    check_values_refs()
    check_copies()
    check_vars(known, promoted, rows)
    check_schema_generated()
    check_schema_refusals(rows)
    check_helm_render(known, state)
    check_capabilities()
    check_termination_grace()
    check_pdb()
    check_networkpolicy()
    check_exposure()
    check_helm_test()
    check_helm_refusals()
    check_alert_rules(args.promtool)
    check_dashboard(args.promtool, state)
    check_dashboard_content()
    check_rendered_rules(args.promtool, state)
    check_rule_tests(args.promtool)
    check_runbook()
    check_slo_alerts()
    check_metric_names(state)
    check_dockerfile(known)
    check_installer()

    failed = [c for c in CHECKS if c.errors]
    print()
    pending = len(PENDING_VARS) - len(promoted)
    sources = sorted({r.source for r in rows})
    print(f"check-deploy: {len(known)} configuration variables ({len(known) - pending} in {', '.join(sources)}, "
          f"{pending} pending), {len(declared_metrics())} metric names declared in src/")
    for c in failed:
        print(f"  failed: {c.name}")
    print(f"{len(CHECKS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
