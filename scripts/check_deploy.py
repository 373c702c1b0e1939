#!/usr/bin/env python3
"""Checks the deployment and monitoring artifacts against the source.

Run through scripts/check-deploy.sh, which installs the tools into a virtualenv first. Each
check prints one line (PASS/FAIL) with its problems; see CHECKS in main() for the list. The
sources of truth: the vars! table (every src/config*.rs and src/config/**/*.rs, parsed by
scripts/gen_values_schema.py), the metric names declared as string literals in src/**/*.rs,
docs/configuration.md's variable table, docs/runbook.md's SLO table, and docs/deploy.md (its values,
`kubectl create secret`, `docker build/push` and `helm upgrade --install` commands, and its
Prometheus scrape config).

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

# The vars! table is the whole truth, OTEL_* included: the relay honours (and validates) only
# the OTEL_* variables it lists, so docs and values naming any other one would promise a knob
# that does nothing.
VAR_PATTERN = re.compile(r"\b(?:RELAY|APNS|REDIS|OTEL|FCM)_[A-Z0-9_]*[A-Z0-9]\b")
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
    "$cluster": ".*",
    "$region": ".*",
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


_KINDS: dict[str, str] = {}


def var_kinds() -> dict[str, str]:
    """name -> kind, from the vars! table."""
    if not _KINDS:
        _KINDS.update({v.name: v.kind for v in gvs.parse_vars(ROOT)})
    return _KINDS


def secret_vars() -> set[str]:
    """Variables that carry secrets: kind secret, and gvs.EXTRA_SECRET_VARS (REDIS_URL: URLs
    carry passwords). The same list the schema refuses under env."""
    return set(gvs.secret_var_names(gvs.parse_vars(ROOT)))


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
        unknown = sorted(set(VAR_PATTERN.findall(p.read_text())) - set(known))
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


@check("config variables: docs/configuration.md table, values.yaml, templates, values.schema.json; no unknown names")
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
        env_node = (schema.get("properties") or {}).get("env") or {}
        env_props = env_node.get("properties") or {}
        refused_env = set(((env_node.get("propertyNames") or {}).get("not") or {}).get("enum") or [])
        missing_env = sorted(n for n in known if n in {r.name for r in rows} and n not in env_props
                             and n not in refused_env)
        if missing_env:
            c.error("values.schema.json's env neither checks nor refuses: " + ", ".join(missing_env))
        c.note(f"{len(paths)} variables mapped to values, {len(gvs.CHART_MANAGED)} chart-managed")

    for p in [*chart_files(), RUNBOOK]:
        if not p.exists() or p.suffix not in (".yaml", ".yml", ".tpl", ".txt", ".json", ".md"):
            continue
        unknown = sorted(set(VAR_PATTERN.findall(p.read_text())) - set(known))
        if unknown:
            c.error(f"{rel(p)} names unknown configuration variables: {', '.join(unknown)}")

    reference = ROOT / "docs" / "configuration.md"
    if not reference.exists():
        c.error("docs/configuration.md does not exist yet, so its configuration table cannot be cross-checked")
        return
    text = reference.read_text()
    table = set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`", text, re.M))
    # The reference documents what the binary reads today: a pending name joins the table
    # when it reaches the vars! table.
    not_yet = set(PENDING_VARS) - set(promoted)
    missing = sorted(n for n in known if n not in table and n not in not_yet)
    if missing:
        c.error("docs/configuration.md's configuration table has no row for: " + ", ".join(missing))
    for doc in (reference, ROOT / "README.md"):
        if doc.exists():
            # The reference's "Unknown variables" section names, on purpose, variables the
            # relay does not read (typos it catches, other programs' variables it leaves alone).
            body = re.sub(r"^## Unknown variables\n.*?(?=^## )", "", doc.read_text(), flags=re.M | re.S)
            unknown = sorted(set(VAR_PATTERN.findall(body)) - set(known))
            if unknown:
                c.error(f"{rel(doc)} names unknown configuration variables: " + ", ".join(unknown))


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
        "env with an unknown relay variable (RELAY_DEDUP_WINDOW)": {"env": {"RELAY_DEDUP_WINDOW": 60}},
        "env with an unknown OTEL_ variable": {"env": {"OTEL_EXPORTER_OTLP_INSECURE": "true"}},
        "env with an unknown REDIS_ variable": {"env": {"REDIS_HOST": "redis"}},
        "env with a secret (REDIS_URL)": {"env": {"REDIS_URL": "redis://redis:6379"}},
        "env with a credential in a URL": {"env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:pw@collector:4318"}},
        "a tracing endpoint with a credential": {"tracing": {"otlpEndpoint": "https://u:pw@collector:4318"}},
        "extraEnv with a secret from a ConfigMap": {"extraEnv": [
            {"name": "RELAY_QUEUE_KEY", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]},
        "extraEnv with a secret as a literal value": {"extraEnv": [{"name": "REDIS_URL", "value": "redis://r"}]},
        "three replicas without Redis": {"replicaCount": 3},
        "autoscaling without Redis": {"autoscaling": {"enabled": True}},
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
    # What must pass: unknown names outside the relay's prefixes, an @ past the authority,
    # a Secret for a secret, and more than one replica with Redis (by URL, Secret or extraEnv).
    good: dict[str, dict] = {
        "env with other programs' names": {"env": {"TZ": "UTC", "RUST_LOG": "info"}},
        "env with an @ in a URL's path": {"env": {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318/a@b"}},
        "extraEnv with a secret from a Secret": {"extraEnv": [
            {"name": "RELAY_QUEUE_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        "three replicas with redis.url": {"replicaCount": 3, "redis": {"url": "redis://redis:6379"}},
        "three replicas with REDIS_URL from a Secret": {"replicaCount": 3, "extraEnv": [
            {"name": "REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "s", "key": "url"}}}]},
    }
    for label, values in good.items():
        err = refused(values)
        if err:
            c.error(f"{label} is refused: {err.splitlines()[0]}")
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
        unknown = sorted(n for n in env if VAR_PATTERN.fullmatch(n) and n not in known)
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

    # `helm lint` only logs a template's `fail`: the one-replica-without-Redis guard lives in
    # the schema so that lint refuses it too.
    for label, values in (("replicaCount=3 without Redis", {"replicaCount": 3}),
                          ("autoscaling without Redis", {"autoscaling": {"enabled": True}})):
        report = helm.lint(str(CHART), values, strict=True, namespace="relay")
        errors = [m.get("error") for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
        errors += report.get("errors") or []
        if not any("needs Redis" in str(e) for e in errors):
            c.error(f"helm lint passes {label} (the guard must fire in lint too): {errors}")
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
    check_secret_forms(c, label, deps[0], docs, env)


def check_secret_forms(c: Check, label: str, dep: dict, docs: list[dict], env: dict[str, str]) -> None:
    """Secrets reach the container from Secrets only (secretKeyRef, or a file on a Secret
    volume), never the ConfigMap or a literal; X and X_FILE are never both set; every file
    variable points under a mount of the right kind of volume."""
    spec = dep["spec"]["template"]["spec"]
    ctr = spec["containers"][0]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = {m["mountPath"].rstrip("/"): volumes.get(m["name"], {}) for m in ctr.get("volumeMounts") or []}
    cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == dep["metadata"]["name"]]
    cm_data = (cm[0].get("data") or {}) if cm else {}
    secrets = secret_vars()
    kinds_ = var_kinds()
    for name in sorted(secrets):
        if name in cm_data:
            c.error(f"render ({label}): secret variable {name} is in the ConfigMap")
        if env.get(name) and env.get(name + "_FILE"):
            c.error(f"render ({label}): both {name} and {name}_FILE are set")
    for e in ctr.get("env") or []:
        if e["name"] in secrets:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if not ref:
                c.error(f"render ({label}): secret variable {e['name']} is not from a secretKeyRef: {e}")
    for name, value in sorted(env.items()):
        if kinds_.get(name) != "path" or name == "RELAY_ADMIN_SOCKET" or not value or value == "<valueFrom>":
            continue
        vol = mounts.get(os.path.dirname(value))
        if vol is None:
            c.error(f"render ({label}): {name}={value} is not under a volume mount")
            continue
        carries_secret = name.endswith("_FILE") and (name[:-5] in secrets or name == "RELAY_ADMIN_TOKEN_FILE")
        if carries_secret and "configMap" in vol:
            c.error(f"render ({label}): {name}={value} (a secret) is mounted from a ConfigMap")
        if name == "RELAY_ADMIN_TOKEN_FILE":
            if (vol.get("emptyDir") or {}).get("medium") != "Memory":
                c.error(f"render ({label}): {name}={value} is not on the in-memory copy of the token")
        elif carries_secret and "secret" not in vol:
            c.error(f"render ({label}): {name}={value} is not on a Secret volume")
        if not carries_secret and name.endswith(("CA_FILE", "CERTIFICATE")) and "configMap" not in vol:
            c.error(f"render ({label}): {name}={value} (a CA bundle) is not mounted from a ConfigMap")


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


@check("helm: ServiceMonitor/PrometheusRule rendered when enabled, with or without monitoring.coreos.com/v1 "
       "(never dropped silently); HTTPRoute only with the Gateway API, NOTES warns")
def check_capabilities(c: Check) -> None:
    prod = yaml.safe_load((CHART / "ci" / "production-values.yaml").read_text())
    on = dict(prod, httpRoute={"enabled": True, "parentRefs": [{"name": "public"}]})
    for apis, label in (((MONITORING_API, GATEWAY_API), "with the APIs"), ((), "without --api-versions")):
        docs, notes = render_docs(on, api_versions=apis)
        for kind in ("ServiceMonitor", "PrometheusRule"):
            if len(kinds(docs, kind)) != 1:
                c.error(f"{label}: enabled, the chart renders {len(kinds(docs, kind))} {kind} "
                        f"(it must render whatever the cluster serves, not drop it silently)")
        if "monitoring.coreos.com/v1" not in notes or "CRDs" not in notes:
            c.error(f"{label}: NOTES.txt does not say the ServiceMonitor/PrometheusRule need prometheus-operator's CRDs")
        want_route = 1 if GATEWAY_API in apis else 0
        if len(kinds(docs, "HTTPRoute")) != want_route:
            c.error(f"{label}: {len(kinds(docs, 'HTTPRoute'))} HTTPRoute(s), expected {want_route}")
        warned = bool(re.search(r"WARNING:[^\n]*\n?[^\n]*gateway\.networking", notes))
        if warned != (not want_route):
            c.error(f"{label}: NOTES.txt {'warns' if warned else 'does not warn'} about the missing Gateway API")
    for apis in ((MONITORING_API, GATEWAY_API), ()):
        docs, _ = render_docs({}, api_versions=apis)
        for kind in ("ServiceMonitor", "PrometheusRule", "HTTPRoute"):
            if kinds(docs, kind):
                c.error(f"{kind} rendered although it is disabled by default (api_versions={apis})")
    values = (CHART / "values.yaml").read_text()
    if "no matches for kind" not in values or "no matches for kind" not in (ROOT / "docs" / "deploy.md").read_text():
        c.error("values.yaml / docs/deploy.md do not say what helm install does without the CRDs "
                "(no matches for kind ServiceMonitor ...)")


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
        # env.REDIS_URL is refused (a secret in the ConfigMap); from a Secret the URL is unreadable.
        ({"extraEnv": [{"name": "REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "r", "key": "u"}}}]}, {6379}),
        ({"extraEnv": [{"name": "REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "r", "key": "u"}}}],
          "networkPolicy": {"egress": {"redisPorts": [7200, 7201]}}}, {7200, 7201}),
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


def v1_intake(docs: list[dict]) -> str:
    env, _ = container_env(docs)
    return env.get("RELAY_V1_INTAKE") or "public"


@check("helm: helm test hook runs `sealrelay smoke` against the public Service like the Deployment; "
       "with RELAY_V1_INTAKE local/off no smoke Pod, and NOTES says why")
def check_helm_test(c: Check) -> None:
    local_seen = set()
    cases = [("defaults", {}), *ci_value_sets(),
             ("v1.intake=off", {"v1": {"intake": "off"}}),
             ("env RELAY_V1_INTAKE=local", {"env": {"RELAY_V1_INTAKE": "local"}}),
             ("extraEnv RELAY_V1_INTAKE=off", {"extraEnv": [{"name": "RELAY_V1_INTAKE", "value": "off"}]})]
    for label, values in cases:
        docs, notes = render_docs(values)
        pods = [d for d in kinds(docs, "Pod") if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
        dep = one(c, docs, "Deployment", label)
        intake = v1_intake(docs)
        if intake in ("local", "off"):
            local_seen.add(intake)
            if pods:
                c.error(f"{label}: RELAY_V1_INTAKE={intake} but the smoke Pod is rendered (it posts to /, which answers 403)")
            if not re.search(rf"no `helm test` smoke Pod is rendered: RELAY_V1_INTAKE={intake}", notes):
                c.error(f"{label}: RELAY_V1_INTAKE={intake}: NOTES.txt does not say why there is no smoke test")
            if "sealrelay smoke" in notes:
                c.error(f"{label}: RELAY_V1_INTAKE={intake}: NOTES.txt still suggests `sealrelay smoke`, which posts to /")
            continue
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
    if local_seen != {"local", "off"}:
        c.error(f"no ci/*.yaml value set or case renders RELAY_V1_INTAKE local and off (saw {sorted(local_seen)})")
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


def container_of(dep: dict, name: str = "sealrelay") -> dict:
    return next(x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == name)


def expand_env(entries: list[dict], pod: dict[str, str]) -> dict[str, str]:
    """Kubernetes' $(VAR) expansion of container env entries, in order: a reference expands only
    to a variable defined earlier in the list; fieldRefs resolve from `pod`."""
    out: dict[str, str] = {}
    for e in entries:
        if "value" in e:
            out[e["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                    lambda m: out.get(m.group(1), m.group(0)), str(e["value"]))
        elif "fieldRef" in (e.get("valueFrom") or {}):
            out[e["name"]] = pod.get(e["valueFrom"]["fieldRef"]["fieldPath"], "<unknown field>")
        else:
            out[e["name"]] = "<valueFrom>"
    return out


@check("helm: tracing: OTEL_RESOURCE_ATTRIBUTES carries k8s.namespace.name/k8s.pod.name from the downward "
       "API plus the user's; sampler and exporter values; OTLP headers from Secrets, the CA from a ConfigMap")
def check_tracing(c: Check) -> None:
    pod = {"metadata.name": "relay-7d9f-abcde", "metadata.namespace": "relay", "spec.nodeName": "node-1"}
    base = "k8s.namespace.name=relay,k8s.pod.name=relay-7d9f-abcde,k8s.node.name=node-1,k8s.deployment.name=sealrelay"
    cases = [
        ("defaults", {}, base),
        ("tracing.resourceAttributes", {"tracing": {"resourceAttributes": "deployment.environment=prod,team=push"}},
         base + ",deployment.environment=prod,team=push"),
        ("env.OTEL_RESOURCE_ATTRIBUTES", {"tracing": {"resourceAttributes": "a=1"},
                                          "env": {"OTEL_RESOURCE_ATTRIBUTES": "cloud.region=eu-west-1"}},
         base + ",cloud.region=eu-west-1"),
    ]
    for label, values, want in cases:
        docs, _ = render_docs(values, namespace="relay")
        dep = one(c, docs, "Deployment", label)
        if not dep:
            continue
        entries = container_of(dep).get("env") or []
        names = [e["name"] for e in entries]
        for var, field in (("POD_NAMESPACE", "metadata.namespace"), ("POD_NAME", "metadata.name")):
            e = next((e for e in entries if e["name"] == var), None)
            if not e or ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != field:
                c.error(f"{label}: no {var} from the downward API ({field}): {e}")
        if "OTEL_RESOURCE_ATTRIBUTES" not in names:
            c.error(f"{label}: the container env has no OTEL_RESOURCE_ATTRIBUTES")
            continue
        raw = next(e for e in entries if e["name"] == "OTEL_RESOURCE_ATTRIBUTES")["value"]
        if not raw.startswith("k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME)"):
            c.error(f"{label}: OTEL_RESOURCE_ATTRIBUTES={raw!r} does not start with the downward-API attributes")
        got = expand_env(entries, pod)["OTEL_RESOURCE_ATTRIBUTES"]
        if got != want:
            c.error(f"{label}: OTEL_RESOURCE_ATTRIBUTES expands to {got!r}, expected {want!r} "
                    f"(a $(VAR) must name a variable defined earlier in env)")
        cmaps = [d for d in kinds(docs, "ConfigMap") if d["metadata"]["name"] == dep["metadata"]["name"]]
        if cmaps and "OTEL_RESOURCE_ATTRIBUTES" in (cmaps[0].get("data") or {}):
            c.error(f"{label}: OTEL_RESOURCE_ATTRIBUTES is in the ConfigMap, where $(VAR) is not expanded")
        _, dups = container_env(docs)
        if dups:
            c.error(f"{label}: set twice: {dups}")
    # extraEnv replaces the whole variable.
    docs, _ = render_docs({"extraEnv": [{"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "x=1"}]})
    env, dups = container_env(docs)
    if dups or env.get("OTEL_RESOURCE_ATTRIBUTES") != "x=1":
        c.error(f"extraEnv OTEL_RESOURCE_ATTRIBUTES: container sees {env.get('OTEL_RESOURCE_ATTRIBUTES')!r}, duplicates {dups}")
    # Sampler, exporter and batch values reach the ConfigMap; the headers come from Secrets.
    values = {"tracing": {"tracesEndpoint": "https://collector.example:4318/v1/traces",
                          "sampler": {"name": "parentbased_traceidratio", "ratio": 0.1},
                          "timeoutMs": 3000, "batch": {"maxQueueSize": 4096},
                          "headers": {"existingSecret": "otlp", "existingSecretKey": "h"},
                          "tracesHeaders": {"value": "x-api-key=abc"},
                          "caBundle": {"configMap": "collector-ca", "key": "root.pem"}}}
    docs, _ = render_docs(values)
    env, _ = container_env(docs)
    want = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector.example:4318/v1/traces",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "3000", "OTEL_BSP_MAX_QUEUE_SIZE": "4096",
            "OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/sealrelay/otlp-ca/root.pem",
            "OTEL_EXPORTER_OTLP_HEADERS": "<valueFrom>", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "<valueFrom>"}
    for k, v in want.items():
        if env.get(k) != v:
            c.error(f"tracing values: the container sees {k}={env.get(k)!r}, expected {v!r}")
    dep = one(c, docs, "Deployment", "tracing values")
    refs = {e["name"]: (e.get("valueFrom") or {}).get("secretKeyRef") for e in (container_of(dep).get("env") or [])} if dep else {}
    if refs.get("OTEL_EXPORTER_OTLP_HEADERS") != {"name": "otlp", "key": "h"}:
        c.error(f"OTEL_EXPORTER_OTLP_HEADERS is not from tracing.headers.existingSecret: {refs.get('OTEL_EXPORTER_OTLP_HEADERS')}")
    sec = one(c, docs, "Secret", "tracing values")
    if sec and "OTEL_EXPORTER_OTLP_TRACES_HEADERS" not in (sec.get("data") or {}):
        c.error("tracing.tracesHeaders.value is not stored in the chart's Secret")
    for what, bad in {"a ratio with a non-ratio sampler": {"tracing": {"sampler": {"name": "always_on", "ratio": 0.5}}},
                      "a ratio with the default sampler": {"tracing": {"sampler": {"ratio": 0.5}}},
                      "headers value and existingSecret": {"tracing": {"headers": {"value": "a=b", "existingSecret": "x"}}}}.items():
        if refused(bad) is None:
            c.error(f"rendered although it should refuse: {what}")
    # Export egress follows the traces endpoint too (set alone, it enables export).
    docs, _ = render_docs({"networkPolicy": {"enabled": True},
                           "tracing": {"tracesEndpoint": "https://collector.example/v1/traces"}})
    np = one(c, docs, "NetworkPolicy", "traces endpoint egress")
    if np and not any({p["port"] for p in r.get("ports") or []} >= {4318, 443} for r in np["spec"].get("egress") or []):
        c.error("with only tracing.tracesEndpoint (https, no port) the NetworkPolicy does not open 443 and otlpPorts to the collector")


def admin_socket_checks(c: Check, label: str, dep: dict, env: dict[str, str], known: dict) -> None:
    spec = dep["spec"]["template"]["spec"]
    ctr = container_of(dep)
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = {m["mountPath"].rstrip("/"): m for m in ctr.get("volumeMounts") or []}
    path = env.get("RELAY_ADMIN_SOCKET", known.get("RELAY_ADMIN_SOCKET") or "")
    if not path:
        return
    m = mounts.get(os.path.dirname(path))
    vol = volumes.get(m["name"]) if m else None
    if not vol or "emptyDir" not in vol or m.get("readOnly"):
        c.error(f"{label}: the admin socket {path} is not in a writable emptyDir mounted at {os.path.dirname(path)} "
                f"(the root filesystem is read-only): mount {m}, volume {vol}")


@check("helm: admin API: socket in an emptyDir at its directory (disable switch passes \"\"), loopback TCP with a "
       "0400 token copy owned by the pod's user, never on a Service; NOTES and runbook show kubectl exec ... sealrelay admin")
def check_admin_api(c: Check, known: dict) -> None:
    default_path = known.get("RELAY_ADMIN_SOCKET") or ""
    cases = [
        ("defaults", {}, default_path),
        ("adminApi.socket.path", {"adminApi": {"socket": {"path": "/var/run/relay-admin/api.sock"}}}, "/var/run/relay-admin/api.sock"),
        ("env RELAY_ADMIN_SOCKET", {"env": {"RELAY_ADMIN_SOCKET": "/run/other/admin.sock"}}, "/run/other/admin.sock"),
        ("adminApi.socket.enabled=false", {"adminApi": {"socket": {"enabled": False, "path": "/run/x/admin.sock"}}}, ""),
        ("env RELAY_ADMIN_SOCKET=\"\"", {"env": {"RELAY_ADMIN_SOCKET": ""}}, ""),
    ]
    for label, values, want in cases:
        docs, notes = render_docs(values)
        dep = one(c, docs, "Deployment", label)
        if not dep:
            continue
        env, _ = container_env(docs)
        got = env.get("RELAY_ADMIN_SOCKET", default_path)
        if got != want:
            c.error(f"{label}: the relay sees RELAY_ADMIN_SOCKET={got!r}, expected {want!r}")
        if want == "" and env.get("RELAY_ADMIN_SOCKET") != "":
            c.error(f"{label}: the socket is off but RELAY_ADMIN_SOCKET is not passed as \"\" (unset means the default path)")
        admin_socket_checks(c, label, dep, env, known)
        vols = [v["name"] for v in dep["spec"]["template"]["spec"].get("volumes") or []]
        if want == "" and "admin-socket" in vols:
            c.error(f"{label}: the socket is off but its emptyDir is still mounted")
        if want and f"exec deploy/{dep['metadata']['name']} -- sealrelay admin signers list" not in notes:
            c.error(f"{label}: NOTES.txt does not show `kubectl exec deploy/{dep['metadata']['name']} -- sealrelay admin signers list`")
        for verb in ("signers add", "signers revoke", "receipt"):
            if want and f"sealrelay admin {verb}" not in notes:
                c.error(f"{label}: NOTES.txt does not show `sealrelay admin {verb}`")
        for svc in kinds(docs, "Service"):
            for port in svc["spec"]["ports"]:
                if port.get("targetPort") not in ("http", "admin"):
                    c.error(f"{label}: Service {svc['metadata']['name']} targets {port.get('targetPort')}: only http and admin may be exposed")
    # Loopback TCP with its token.
    values = {"adminApi": {"tcp": {"listen": "127.0.0.1:9091", "token": {"existingSecret": "admin-tok", "existingSecretKey": "t"}}}}
    docs, notes = render_docs(values)
    dep = one(c, docs, "Deployment", "adminApi.tcp")
    if dep:
        spec = dep["spec"]["template"]["spec"]
        env, _ = container_env(docs)
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        ctr = container_of(dep)
        mounts = {m["mountPath"].rstrip("/"): m for m in ctr.get("volumeMounts") or []}
        tf = env.get("RELAY_ADMIN_TOKEN_FILE", "")
        if env.get("RELAY_ADMIN_API_LISTEN") != "127.0.0.1:9091" or not tf:
            c.error(f"adminApi.tcp: RELAY_ADMIN_API_LISTEN={env.get('RELAY_ADMIN_API_LISTEN')!r}, RELAY_ADMIN_TOKEN_FILE={tf!r}")
        m = mounts.get(os.path.dirname(tf))
        copy_vol = volumes.get(m["name"]) if m else None
        if not m or not m.get("readOnly") or (copy_vol or {}).get("emptyDir", {}).get("medium") != "Memory":
            c.error(f"adminApi.tcp: the token file {tf} is not on a read-only, in-memory emptyDir: {m} {copy_vol}")
        inits = spec.get("initContainers") or []
        init = next((i for i in inits if any(vm["name"] == (m or {}).get("name") for vm in i.get("volumeMounts") or [])), None)
        if not init:
            c.error("adminApi.tcp: no init container writes the token copy")
        else:
            src = [volumes[vm["name"]] for vm in init.get("volumeMounts") or [] if "secret" in volumes.get(vm["name"], {})]
            cmd = " ".join(init.get("command") or [])
            if not src or src[0]["secret"].get("secretName") != "admin-tok" or src[0]["secret"]["items"][0]["key"] != "t":
                c.error(f"adminApi.tcp: the copy does not read adminApi.tcp.token's Secret: {src}")
            elif src[0]["secret"].get("defaultMode") not in (0o400, 0o440):
                c.error(f"adminApi.tcp: the token Secret's defaultMode {src[0]['secret'].get('defaultMode')!r} lets others read it")
            dest = {vm["mountPath"].rstrip("/") for vm in init.get("volumeMounts") or [] if vm["name"] == m["name"]}
            mm = re.fullmatch(r"install -m 0?400 (\S+) (\S+)", cmd)
            if not mm or os.path.dirname(mm.group(2)) not in dest or os.path.basename(mm.group(2)) != os.path.basename(tf):
                c.error(f"adminApi.tcp: the copy `{cmd}` does not write {os.path.basename(tf)} with mode 0400 into the volume the relay reads")
            if init.get("securityContext") != ctr.get("securityContext"):
                c.error("adminApi.tcp: the copy runs with another security context than the relay, so the file "
                        "would not be owned by the relay's user")
            if any(vm["name"] in [s for s, v in volumes.items() if "secret" in v and v["secret"].get("secretName") == "admin-tok"]
                   for vm in ctr.get("volumeMounts") or []):
                c.error("adminApi.tcp: the relay mounts the token Secret itself (root-owned files: the relay refuses them)")
        ports = {p["containerPort"] for p in ctr.get("ports") or []}
        if 9091 in ports:
            c.error("adminApi.tcp: the loopback admin port is declared as a container port")
        for svc in kinds(docs, "Service"):
            if any(p.get("targetPort") in (9091, "9091") or p.get("port") == 9091 for p in svc["spec"]["ports"]):
                c.error(f"adminApi.tcp: Service {svc['metadata']['name']} exposes the admin API")
        if "port-forward" not in notes or "--token-file" not in notes:
            c.error("adminApi.tcp: NOTES.txt does not say how to reach the loopback admin API (port-forward, --token-file)")
    for what, bad in {
        "a non-loopback admin listener": {"adminApi": {"tcp": {"listen": "0.0.0.0:9091", "token": {"value": "t" * 32}}}},
        "a pod-IP admin listener": {"adminApi": {"tcp": {"listen": "10.1.2.3:9091", "token": {"value": "t" * 32}}}},
        "an admin listener without a token": {"adminApi": {"tcp": {"listen": "127.0.0.1:9091"}}},
        "admin token value and existingSecret": {"adminApi": {"tcp": {"listen": "127.0.0.1:9091", "token": {"value": "t", "existingSecret": "x"}}}},
        "a relative socket path": {"adminApi": {"socket": {"path": "admin.sock"}}},
        "a socket directly under /": {"adminApi": {"socket": {"path": "/admin.sock"}}},
        "the token copy without fsGroup": {"adminApi": {"tcp": {"listen": "127.0.0.1:9091", "token": {"existingSecret": "x"}}},
                                           "podSecurityContext": {"fsGroup": None}},
    }.items():
        if refused(bad) is None:
            c.error(f"rendered although it should refuse: {what}")
    # The plain manifests: same socket directory, writable, with a read-only root.
    deps = [d for _, d in k8s_docs() if d.get("kind") == "Deployment" and d["metadata"]["name"] == "sealrelay"]
    for dep in deps:
        cms = {d["metadata"]["name"]: d.get("data") or {} for _, d in k8s_docs() if d.get("kind") == "ConfigMap"}
        env = {}
        for src in container_of(dep).get("envFrom") or []:
            env.update(cms.get((src.get("configMapRef") or {}).get("name"), {}))
        admin_socket_checks(c, "k8s/deployment.yaml", dep, env, known)
    runbook = RUNBOOK.read_text()
    for verb in ("signers list", "signers add", "signers revoke", "receipt"):
        if not re.search(r"kubectl .*exec deploy/\S+ -- sealrelay admin " + verb, runbook):
            c.error(f"docs/runbook.md does not show `kubectl exec deploy/<release> -- sealrelay admin {verb}`")


@check("helm: front-end secrets (FCM key, TURN secret, Cloudflare token) as mounted files or secretKeyRef, never both; refusals")
def check_frontend_secrets(c: Check) -> None:
    pairs = [("FCM_SERVICE_ACCOUNT", ("fcm", "serviceAccount")),
             ("RELAY_ICE_TURN_SECRET", ("ice", "turnSecret")),
             ("RELAY_ICE_CLOUDFLARE_API_TOKEN", ("ice", "cloudflare", "apiToken"))]
    extra = {"ice": {"turnUrls": "turn:turn.example.com:3478", "cloudflare": {"keyId": "k1"}}}

    def with_secret(secret: dict) -> dict:
        values = json.loads(json.dumps(extra))
        for _, path in pairs:
            node = values
            for seg in path[:-1]:
                node = node.setdefault(seg, {})
            node[path[-1]] = dict(secret)
        return values

    for label, secret, as_file in [("existing Secrets as files", {"existingSecret": "s", "existingSecretKey": "k"}, True),
                                   ("inline values as files", {"value": "v"}, True),
                                   ("existing Secrets as env", {"existingSecret": "s", "existingSecretKey": "k", "mountAsFile": False}, False)]:
        docs, _ = render_docs(with_secret(secret))
        env, dups = container_env(docs)
        if dups:
            c.error(f"{label}: set twice: {dups}")
        for name, _ in pairs:
            if as_file and (name in env or name + "_FILE" not in env):
                c.error(f"{label}: expected {name}_FILE only, the container sees {name}={env.get(name)!r} {name}_FILE={env.get(name + '_FILE')!r}")
            if not as_file and (env.get(name) != "<valueFrom>" or name + "_FILE" in env):
                c.error(f"{label}: expected {name} from a secretKeyRef only, got {env.get(name)!r} / {env.get(name + '_FILE')!r}")
        dep = one(c, docs, "Deployment", label)
        if dep:
            check_secret_forms(c, label, dep, docs, env)
    for what, bad in {
        "FCM key value and existingSecret": {"fcm": {"serviceAccount": {"value": "{}", "existingSecret": "x"}}},
        "TURN URLs without the shared secret": {"ice": {"turnUrls": "turn:t.example.com:3478"}},
        "a Cloudflare key id without its token": {"ice": {"cloudflare": {"keyId": "k"}}},
        "a Cloudflare token without its key id": {"ice": {"cloudflare": {"apiToken": {"existingSecret": "x"}}}},
        "an app with ice and no ICE provider": {"mailbox": {"apps": "chat:signal,ice"}},
        "an app with ice (first option) and no ICE provider": {"mailbox": {"apps": "notes;chat:ice"}},
    }.items():
        if refused(bad) is None:
            c.error(f"rendered although it should refuse: {what}")
    for what, ok in {"an app named ice": {"mailbox": {"apps": "ice;notes"}},
                     "a topic containing ice": {"mailbox": {"apps": "chat:push=com.example.ice"}},
                     "ice with STUN only": {"mailbox": {"apps": "chat:ice"}, "ice": {"stunUrls": "stun:s.example.com:3478"}}}.items():
        if err := refused(ok):
            c.error(f"refused although valid: {what}: {err.splitlines()[0]}")


@check("helm: NetworkPolicy egress for FCM (443 + FCM_URL's port) and Cloudflare only when configured; none for TURN/STUN")
def check_frontend_egress(c: Check) -> None:
    def rules(values) -> list[dict]:
        values = dict(values, networkPolicy=dict(values.get("networkPolicy") or {}, enabled=True))
        docs, _ = render_docs(values)
        np = one(c, docs, "NetworkPolicy", str(values))
        return (np or {}).get("spec", {}).get("egress") or []

    def open_to_any(rs, port) -> bool:
        return any(port in {p["port"] for p in r.get("ports") or []} and not r.get("to") for r in rs)

    base = rules({})
    if open_to_any(base, 443):
        c.error("without FCM or Cloudflare the NetworkPolicy opens 443 to any address")
    turn = rules({"ice": {"stunUrls": "stun:s.example.com:3478", "turnUrls": "turn:t.example.com:3478",
                          "turnSecret": {"existingSecret": "t"}}, "mailbox": {"apps": "chat:ice"}})
    if turn != base:
        c.error("STUN/TURN settings change the relay's egress (devices reach STUN/TURN, not the relay)")
    fcm = {"fcm": {"serviceAccount": {"existingSecret": "fcm"}}}
    if not open_to_any(rules(fcm), 443):
        c.error("with FCM configured the NetworkPolicy does not open 443 (fcm.googleapis.com, oauth2.googleapis.com)")
    rs = rules(dict(fcm, fcm={**fcm["fcm"], "url": "https://fcm-proxy.internal:8443"}))
    if not open_to_any(rs, 8443) or not open_to_any(rs, 443):
        c.error("with FCM_URL on port 8443 the NetworkPolicy does not open 8443 and 443 (token endpoint)")
    rs = rules(dict(fcm, networkPolicy={"egress": {"fcmCidrs": ["10.20.0.0/16"]}}))
    if not any(r.get("to") == [{"ipBlock": {"cidr": "10.20.0.0/16"}}] and {p["port"] for p in r["ports"]} == {443} for r in rs):
        c.error("networkPolicy.egress.fcmCidrs does not restrict the FCM rule")
    if not open_to_any(rules({"env": {"FCM_SERVICE_ACCOUNT_FILE": "/x/key.json"}}), 443):
        c.error("with FCM_SERVICE_ACCOUNT_FILE set through env the NetworkPolicy does not open FCM")
    cf = {"ice": {"cloudflare": {"keyId": "k", "apiToken": {"existingSecret": "cf"}}}}
    if not open_to_any(rules(cf), 443):
        c.error("with Cloudflare configured the NetworkPolicy does not open 443 to its API")
    rs = rules({"ice": {"cloudflare": {"keyId": "k", "apiToken": {"existingSecret": "cf"}, "url": "http://cf-proxy:8080"}},
                "networkPolicy": {"egress": {"cloudflareCidrs": ["10.30.0.0/16"]}}})
    if not any(r.get("to") == [{"ipBlock": {"cidr": "10.30.0.0/16"}}] and {p["port"] for p in r["ports"]} == {8080} for r in rs):
        c.error("RELAY_ICE_CLOUDFLARE_URL's port / cloudflareCidrs do not shape the Cloudflare rule")


# ----------------------------------------------------------------------------------------
# docs/deploy.md: the documented install paths, their Secrets and images
# ----------------------------------------------------------------------------------------

DEPLOY_DOC = ROOT / "docs" / "deploy.md"


def doc_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block of a Markdown text, as (language, body)."""
    return [(m.group(1).strip().lower(), m.group(2))
            for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```\s*$", text, re.S | re.M)]


def shell_commands(text: str) -> list[list[str]]:
    """The commands of the sh/bash/console blocks, each split like a shell would (backslash
    continuations joined, comments dropped, pipelines and && split into their commands)."""
    import shlex

    out: list[list[str]] = []
    for lang, body in doc_blocks(text):
        if lang not in ("sh", "bash", "shell", "console"):
            continue
        joined = re.sub(r"\\\n", " ", body)
        for line in joined.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            line = re.sub(r"^\$\s+", "", line)
            cmd: list[str] = []
            for tok in shlex.split(line, comments=True):
                if tok in ("|", "&&", ";", "||"):
                    if cmd:
                        out.append(cmd)
                    cmd = []
                else:
                    cmd.append(tok)
            if cmd:
                out.append(cmd)
    return out


def _flag(tokens: list[str], *names: str) -> list[str]:
    """Values of a flag given as `-n x`, `--namespace x` or `--namespace=x`."""
    vals = []
    for i, t in enumerate(tokens):
        for n in names:
            if t == n and i + 1 < len(tokens):
                vals.append(tokens[i + 1])
            elif t.startswith(n + "=") and n.startswith("--"):
                vals.append(t[len(n) + 1:])
    return vals


def documented_secrets(c: Check, cmds: list[list[str]]) -> dict[tuple[str, str], set[str]]:
    """(namespace, Secret name) -> keys, from `kubectl create secret generic` commands."""
    out: dict[tuple[str, str], set[str]] = {}
    for t in cmds:
        if t[:1] != ["kubectl"] or "create" not in t or "secret" not in t:
            continue
        i = t.index("secret")
        rest = [x for x in t[i + 1:]]
        if not rest or rest[0] != "generic":
            c.error(f"docs/deploy.md: only `kubectl create secret generic` is understood: {' '.join(t)}")
            continue
        # The name: the first argument after `generic` that is neither a flag nor a flag's value.
        name, skip = None, False
        for x in rest[1:]:
            if skip:
                skip = False
                continue
            if x in ("-n", "--namespace", "--type", "-o", "--output"):
                skip = True
                continue
            if x.startswith("-"):
                continue
            name = x
            break
        ns = (_flag(t, "-n", "--namespace") or ["default"])[-1]
        keys: set[str] = set()
        for v in _flag(t, "--from-literal"):
            keys.add(v.split("=", 1)[0])
        for v in _flag(t, "--from-file"):
            keys.add(v.split("=", 1)[0] if "=" in v else os.path.basename(v))
        if _flag(t, "--from-env-file"):
            c.error(f"docs/deploy.md: `{' '.join(t)}` uses --from-env-file, whose keys cannot be checked")
        if not name:
            c.error(f"docs/deploy.md: no Secret name in `{' '.join(t)}`")
            continue
        out.setdefault((ns, name), set()).update(keys)
    return out


def documented_images(cmds: list[list[str]]) -> tuple[set[str], set[str]]:
    """(images built or tagged, images pushed) by the docker/podman commands."""
    made, pushed = set(), set()
    for t in cmds:
        if t[:1] not in (["docker"], ["podman"]):
            continue
        args = t[1:]
        if args[:1] == ["buildx"]:
            args = args[1:]
        if args[:1] == ["build"]:
            tags = _flag(args, "-t", "--tag")
            made.update(tags)
            if "--push" in args:
                pushed.update(tags)
        elif args[:1] == ["tag"] and len(args) >= 3:
            made.add(args[2])
        elif args[:1] == ["push"] and len(args) >= 2:
            pushed.add(args[-1])
    return made, pushed


def pod_secret_refs(spec: dict) -> list[tuple[str, str | None, bool, str]]:
    """(Secret name, key or None for the whole Secret, optional, where) the pod reads."""
    out = []
    for ctr in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for e in ctr.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                out.append((ref["name"], ref["key"], bool(ref.get("optional")), f"{ctr['name']} env {e['name']}"))
        for src in ctr.get("envFrom") or []:
            ref = src.get("secretRef")
            if ref:
                out.append((ref["name"], None, bool(ref.get("optional")), f"{ctr['name']} envFrom"))
    for v in spec.get("volumes") or []:
        sources = [{"secret": v["secret"]}] if "secret" in v else ((v.get("projected") or {}).get("sources") or [])
        for src in sources:
            sec = src.get("secret")
            if not sec:
                continue
            name = sec.get("secretName") or sec.get("name")
            items = sec.get("items") or []
            for it in items or [{"key": None}]:
                out.append((name, it["key"], bool(sec.get("optional")), f"volume {v['name']}"))
    return out


def pod_specs(docs: list[dict]) -> list[tuple[str, dict]]:
    out = []
    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            out.append((f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"]))
        elif d.get("kind") == "Pod":
            out.append((f"Pod/{d['metadata']['name']}", d["spec"]))
    return out


def pod_images(spec: dict) -> set[str]:
    return {x["image"] for x in (spec.get("initContainers") or []) + (spec.get("containers") or [])}


def deep_merge(a: dict, b: dict) -> dict:
    out = json.loads(json.dumps(a))
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _set_dotted(values: dict, path: str, value) -> None:
    node = values
    segs = path.split(".")
    for s in segs[:-1]:
        node = node.setdefault(s, {})
    node[segs[-1]] = value


def _get_dotted(values: dict, path: str):
    node = values
    for s in path.split("."):
        if not isinstance(node, dict) or s not in node:
            return None
        node = node[s]
    return node


def deploy_doc_values(c: Check, text: str) -> tuple[dict[str, dict], list[tuple[str, dict]]]:
    """(file name -> values of its `# <file>.yaml` block, [(label, values) of `# add to <file>` blocks])."""
    files: dict[str, dict] = {}
    additions: list[tuple[str, dict]] = []
    for lang, body in doc_blocks(text):
        if lang not in ("yaml", "yml"):
            continue
        first = body.splitlines()[0] if body.strip() else ""
        m = re.fullmatch(r"#\s*add to (\S+\.ya?ml):\s*(.+)", first.strip())
        if m:
            additions.append((f"{m.group(1)} + {m.group(2)}", yaml.safe_load(body) or {}))
            continue
        m = re.fullmatch(r"#\s*(\S+\.ya?ml)", first.strip())
        if m and "/" not in m.group(1):
            files[m.group(1)] = yaml.safe_load(body) or {}
    return files, additions


def check_pod_secrets(c: Check, label: str, docs: list[dict], namespace: str,
                      created: dict[tuple[str, str], set[str]]) -> None:
    rendered: dict[str, set[str]] = {}
    for d in kinds(docs, "Secret"):
        rendered[d["metadata"]["name"]] = set((d.get("data") or {})) | set((d.get("stringData") or {}))
    for where, spec in pod_specs(docs):
        for name, key, optional, what in pod_secret_refs(spec):
            if name in rendered:
                if key is not None and key not in rendered[name]:
                    c.error(f"{label}: {where} ({what}) reads key {key} of the chart's Secret {name}, "
                            f"which holds only {sorted(rendered[name])}")
                continue
            keys = created.get((namespace, name))
            if keys is None:
                c.error(f"{label}: {where} ({what}) reads Secret {name} (key {key}) in namespace {namespace}: "
                        f"the chart does not render it and docs/deploy.md never creates it "
                        f"(kubectl -n {namespace} create secret generic {name} --from-literal={key}=...)")
            elif key is not None and key not in keys:
                c.error(f"{label}: {where} ({what}) reads key {key} of Secret {name}, but docs/deploy.md "
                        f"creates it with keys {sorted(keys)} only")


@check("docs/deploy.md: every install path creates every Secret name+key the pod reads; the pod runs the "
       "image the docs build and push; its values are ci/readme-values.yaml")
def check_deploy_doc(c: Check) -> None:
    if not DEPLOY_DOC.exists():
        c.error("docs/deploy.md does not exist")
        return
    text = DEPLOY_DOC.read_text()
    cmds = shell_commands(text)
    created = documented_secrets(c, cmds)
    made, pushed = documented_images(cmds)
    files, additions = deploy_doc_values(c, text)
    readme_values = yaml.safe_load((CHART / "ci" / "readme-values.yaml").read_text()) or {}
    installs = [t for t in cmds if t[:3] == ["helm", "upgrade", "--install"] or t[:2] == ["helm", "install"]]
    if not installs:
        c.error("docs/deploy.md has no `helm upgrade --install` command")
        return
    for p in sorted(pushed - made):
        c.error(f"docs/deploy.md pushes {p}, which no docker build/tag command of it makes")
    renders = 0
    seen_values: list[dict] = []
    for t in installs:
        # Positional arguments, minus flag values.
        flags_with_value = {"-n", "--namespace", "-f", "--values", "--set", "--set-string", "--version"}
        args = t[3:] if t[1] == "upgrade" else t[2:]
        pos, skip = [], False
        for x in args:
            if skip:
                skip = False
                continue
            if x in flags_with_value:
                skip = True
                continue
            if not x.startswith("-"):
                pos.append(x)
        release = pos[0] if pos else "sealrelay"
        ns = (_flag(t, "-n", "--namespace") or ["default"])[-1]
        values: dict = {}
        for f in _flag(t, "-f", "--values"):
            if f not in files:
                c.error(f"`{' '.join(t)}`: docs/deploy.md shows no `# {f}` values block")
                continue
            values = deep_merge(values, files[f])
            if files[f] != readme_values:
                c.error(f"docs/deploy.md's {f} differs from helm/sealrelay/ci/readme-values.yaml "
                        f"(keep them the same: CI renders the ci/ file)")
        for kv in _flag(t, "--set") + _flag(t, "--set-string"):
            k, _, v = kv.partition("=")
            _set_dotted(values, k, v)
        cases = [(" ".join(t[:2]) + f" {release} -n {ns}", values)]
        cases += [(f"{lbl}", deep_merge(values, add)) for lbl, add in additions]
        everything = values
        for _, add in additions:
            everything = deep_merge(everything, add)
        cases.append(("every optional block at once", everything))
        for label, vals in cases:
            try:
                docs, _ = render_docs(vals, name=release, namespace=ns)
            except Exception as e:
                c.error(f"{label}: the documented values do not render: {str(e).splitlines()[0]}")
                continue
            renders += 1
            seen_values.append(vals)
            check_pod_secrets(c, label, docs, ns, created)
            for where, spec in pod_specs(docs):
                for img in sorted(pod_images(spec)):
                    if img not in pushed:
                        c.error(f"{label}: {where} runs {img}, which docs/deploy.md does not build (or "
                                f"mirror) and push; it pushes {sorted(pushed) or 'nothing'}")
    # Every Secret-backed value of the chart is shown with its existingSecret.
    for value_path, secret_path in sorted(gvs.SENSITIVE.items()):
        if not any(_get_dotted(v, secret_path) for v in seen_values):
            c.error(f"docs/deploy.md never sets {secret_path} (the production form of {value_path}), "
                    f"so it gives no command for that Secret")
    # The kustomize path: k8s/ creates what it requires; the docs create everything it reads.
    k8s = [d for _, d in k8s_docs()]
    k8s_secrets = {d["metadata"]["name"]: set(d.get("data") or {}) | set(d.get("stringData") or {})
                   for d in k8s if d.get("kind") == "Secret"}
    for where, spec in pod_specs(k8s):
        for name, key, optional, what in pod_secret_refs(spec):
            if not optional and (name not in k8s_secrets or (key and key not in k8s_secrets[name])):
                c.error(f"k8s/: {where} ({what}) requires Secret {name} key {key}, which no k8s/ manifest creates")
            # For production the docs replace k8s/'s placeholder Secrets: they must create
            # every one the pod reads (optional ones too), with the same keys.
            keys = created.get(("sealrelay", name))
            if keys is None or (key and key not in keys):
                c.error(f"k8s/: {where} ({what}) reads Secret {name} key {key}; docs/deploy.md "
                        f"gives no kubectl command creating it in namespace sealrelay for production")
    c.note(f"{renders} renders of the documented values; {len(created)} Secrets created by "
           f"docs/deploy.md; images pushed: {', '.join(sorted(pushed))}")


@check("helm: secret variables are refused in env (ConfigMap) and as literal extraEnv values; other env passes; "
       "sensitive values are writeOnly and land only in the chart's Secret")
def check_env_secrets(c: Check) -> None:
    import base64

    secrets = sorted(secret_vars())
    kinds_ = var_kinds()
    creds = {"apns": {"teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "com.example.app"}}
    expected = sorted({n for n, k in kinds_.items() if k == "secret"} | {"REDIS_URL"})
    if secrets != expected:
        c.error(f"the secret variables are {secrets}, expected every kind=secret variable and REDIS_URL: {expected}")
    for name in secrets:
        for label, values in (("env", {"env": {name: "redis://:pw@r:6379" if name == "REDIS_URL" else "x" * 40}}),
                              ("extraEnv value", {"extraEnv": [{"name": name, "value": "x" * 40}]})):
            err = refused(values)
            if err is None:
                c.error(f"{label}: {name} is accepted, so a secret would land in the "
                        f"{'ConfigMap' if label == 'env' else 'Deployment spec'}")
            elif "schema" not in err:
                c.error(f"{label}: {name} is refused only after rendering, not by the schema: {err.splitlines()[0]}")
            elif label == "env" and name not in err:
                c.error(f"env: the refusal of {name} does not name it: {err}")
        ok = {"extraEnv": [{"name": name, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
        if name == "RELAY_ICE_TURN_SECRET":
            ok["ice"] = {"turnUrls": "turn:t.example.com:3478"}
        if name == "APNS_AUTH_KEY":
            ok.update(creds)
        if name == "RELAY_ICE_CLOUDFLARE_API_TOKEN":
            ok["ice"] = {"cloudflare": {"keyId": "k"}}
        if err := refused(ok):
            c.error(f"extraEnv {name} from a secretKeyRef is refused: {err.splitlines()[0]}")
    legit = {**creds, "env": {"RELAY_LOG_FORMAT": "pretty", "APNS_AUTH_KEY_FILE": "/var/run/k/AuthKey.p8",
                     "RELAY_REDIS_PREFIX": "sealrelay:eu:", "OTEL_SERVICE_NAME": "relay-eu",
                     "RELAY_DEDUP_WINDOW_S": "90", "SOME_SIDECAR_SETTING": "1"}}
    if err := refused(legit):
        c.error(f"legitimate env values are refused: {err.splitlines()[0]}")
    # Sensitive values: writeOnly in the schema, and only in the chart's Secret once rendered.
    schema = json.loads((CHART / "values.schema.json").read_text())
    values: dict = {"ice": {"cloudflare": {"keyId": "k"}}, "adminApi": {"tcp": {"listen": "127.0.0.1:9091"}},
                    "apns": dict(creds["apns"])}
    markers: dict[str, str] = {}
    for i, path in enumerate(sorted(gvs.SENSITIVE)):
        node = schema
        for seg in path.split("."):
            node = (node.get("properties") or {}).get(seg) or {}
        if node.get("writeOnly") is not True or "Sensitive" not in str(node.get("description")):
            c.error(f"values.schema.json: {path} is not marked writeOnly / Sensitive")
        marker = f"sensitive-marker-{i:02d}-0123456789abcdef0123456789"
        markers[path] = marker
        _set_dotted(values, path, f"redis://:{marker}@redis:6379/0" if path == "redis.url" else marker)
    docs, _ = render_docs(values)
    secret_text = {}
    for d in kinds(docs, "Secret"):
        for k, v in (d.get("data") or {}).items():
            secret_text[k] = base64.b64decode(v).decode()
    for path, marker in markers.items():
        for d in docs:
            if d["kind"] != "Secret" and marker in yaml.safe_dump(strip(d)):
                c.error(f"{path}: its value appears in the {d['kind']} {d['metadata']['name']}")
        if not any(marker in v for v in secret_text.values()):
            c.error(f"{path}: its value is in no Secret the chart renders")
    c.note(f"refused in env: {', '.join(secrets)}")


@check("helm: kube-prometheus-stack selects the ServiceMonitor and PrometheusRule by default (release label "
       "from metrics.prometheusRelease); labels win; \"\" adds none")
def check_monitoring_defaults(c: Check) -> None:
    on = {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
    stock = {"release": "kube-prometheus-stack"}  # a stock kube-prometheus-stack's selectors

    def labels(values, kind):
        docs, _ = render_docs(values)
        d = one(c, docs, kind, f"{kind} {values}")
        return (d or {}).get("metadata", {}).get("labels") or {}

    for kind in ("ServiceMonitor", "PrometheusRule"):
        got = labels(on, kind)
        if not all(got.get(k) == v for k, v in stock.items()):
            c.error(f"defaults: the {kind} carries {got}: a stock kube-prometheus-stack (selecting {stock}) ignores it")
        got = labels(deep_merge(on, {"metrics": {"prometheusRelease": "monitoring"}}), kind)
        if got.get("release") != "monitoring":
            c.error(f"metrics.prometheusRelease=monitoring: the {kind} has release={got.get('release')!r}")
        got = labels(deep_merge(on, {"metrics": {"prometheusRelease": ""}}), kind)
        if "release" in got:
            c.error(f"metrics.prometheusRelease=\"\": the {kind} still has release={got['release']!r}")
        key = "serviceMonitor" if kind == "ServiceMonitor" else "prometheusRule"
        got = labels(deep_merge(on, {"metrics": {key: {"labels": {"release": "prom", "team": "sre"}}}}), kind)
        if got.get("release") != "prom" or got.get("team") != "sre":
            c.error(f"metrics.{key}.labels do not win over the release label: {got}")
    text = DEPLOY_DOC.read_text() if DEPLOY_DOC.exists() else ""
    for needed in ("metrics.prometheusRelease", "release: <its Helm release name>"):
        if needed not in text:
            c.error(f"docs/deploy.md does not document {needed!r}")


@check("helm: without Redis the Deployment uses Recreate (never two pods with separate state); with Redis "
       "updateStrategy; NOTES and docs/deploy.md say what a restart costs")
def check_no_redis_strategy(c: Check) -> None:
    costs = {"queued": r"202 queued", "rate limits": r"rate-limit", "coalescing": r"coalescing|dedup",
             "tombstones": r"tombstone", "signers": r"signers", "receipts": r"receipts", "mailboxes": r"mailboxes",
             "downtime": r"down"}
    sref = {"name": "r", "key": "u"}
    cases = [
        ("defaults", {}, False),
        ("updateStrategy set, no Redis", {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}, False),
        ("redis.url", {"redis": {"url": "redis://r:6379"}}, True),
        ("redis.existingSecret", {"redis": {"existingSecret": "r"}}, True),
        ("extraEnv REDIS_URL from a Secret", {"extraEnv": [{"name": "REDIS_URL", "valueFrom": {"secretKeyRef": sref}}]}, True),
    ]
    for label, values, redis in cases:
        docs, notes = render_docs(values)
        dep = one(c, docs, "Deployment", label)
        if not dep:
            continue
        st = dep["spec"].get("strategy") or {}
        if redis and st != (values.get("updateStrategy") or yaml.safe_load((CHART / "values.yaml").read_text())["updateStrategy"]):
            c.error(f"{label}: with Redis the strategy is {st}, not updateStrategy")
        if not redis:
            if st != {"type": "Recreate"}:
                c.error(f"{label}: without Redis the strategy is {st}: a surge pod would run beside the old one "
                        f"with in-process state of its own (expected {{type: Recreate}})")
            for what, pat in costs.items():
                if not re.search(pat, notes.split("NOTE: no Redis", 1)[-1] if "NOTE: no Redis" in notes else ""):
                    c.error(f"{label}: NOTES.txt does not say a restart without Redis loses {what}")
        elif "strategy Recreate" in notes:
            c.error(f"{label}: NOTES.txt talks about Recreate although Redis is configured")
    for what, bad in {"two replicas without Redis": {"replicaCount": 2},
                      "an HPA without Redis": {"autoscaling": {"enabled": True}}}.items():
        if refused(bad) is None:
            c.error(f"rendered although it should refuse: {what}")
    text = DEPLOY_DOC.read_text() if DEPLOY_DOC.exists() else ""
    section = text.split("What a restart costs", 1)[-1] if "restart costs" in text else ""
    if not section:
        c.error("docs/deploy.md has no section on what a restart costs")
    for what, pat in costs.items():
        if section and not re.search(pat, section):
            c.error(f"docs/deploy.md's restart section does not say a restart without Redis loses {what}")
    # The plain manifests: a relay Deployment without REDIS_URL would need Recreate too.
    for p, d in k8s_docs():
        if d.get("kind") != "Deployment" or d["metadata"]["name"] != "sealrelay":
            continue
        names = {e["name"] for e in container_of(d).get("env") or []}
        cm = {k for _, x in k8s_docs() if x.get("kind") == "ConfigMap" for k in (x.get("data") or {})}
        if "REDIS_URL" not in names | cm and (d["spec"].get("strategy") or {}).get("type") != "Recreate":
            c.error(f"{rel(p)}: no REDIS_URL, yet strategy {d['spec'].get('strategy')}")


@check("image: Chart.yaml appVersion equals Cargo.toml's version; default image ghcr.io/sealrelay/sealrelay:<it> "
       "in the chart and k8s/; docs/deploy.md says to build your own until it is published")
def check_versions(c: Check) -> None:
    import tomllib

    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    version = (cargo.get("package") or {}).get("version")
    if isinstance(version, dict) or version is None:
        version = ((cargo.get("workspace") or {}).get("package") or {}).get("version")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    if str(chart.get("appVersion")) != str(version):
        c.error(f"helm/sealrelay/Chart.yaml appVersion {chart.get('appVersion')!r} is not Cargo.toml's version {version!r} "
                f"(the release workflow publishes ghcr.io/sealrelay/sealrelay:<Cargo version>)")
    want = f"ghcr.io/sealrelay/sealrelay:{version}"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    if values["image"]["repository"] != "ghcr.io/sealrelay/sealrelay" or values["image"].get("tag"):
        c.error(f"values.yaml image {values['image']}: the repository must be ghcr.io/sealrelay/sealrelay and the "
                f"tag empty (it defaults to appVersion)")
    docs, _ = render_docs({})
    for where, spec in pod_specs(docs):
        for img in pod_images(spec):
            if img != want:
                c.error(f"defaults: {where} runs {img}, expected {want}")
    for p, d in k8s_docs():
        if d.get("kind") == "Deployment" and d["metadata"]["name"] == "sealrelay":
            img = container_of(d)["image"]
            if img != want:
                c.error(f"{rel(p)}: image {img}, expected {want}")
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for im in kust.get("images") or []:
        if im.get("name") == "ghcr.io/sealrelay/sealrelay" and str(im.get("newTag", version)) != str(version):
            c.error(f"k8s/kustomization.yaml sets newTag {im.get('newTag')!r}, not {version!r}")
    text = DEPLOY_DOC.read_text() if DEPLOY_DOC.exists() else ""
    for needed in ("ghcr.io/sealrelay/sealrelay", "(image.md)", "image.repository", "image.tag",
                   "does\nnot exist", "docker push"):
        if needed.replace("\n", " ") not in text.replace("\n", " "):
            c.error(f"docs/deploy.md does not say {needed!r} (build and push your own image until the release is published)")
    c.note(f"version {version}")


@check("k8s/: comments name files that exist and say what an empty value does; no empty value of a "
       "variable with a default; no secret in a ConfigMap")
def check_k8s_comments(c: Check, known: dict) -> None:
    rows = {r.name: r for r in gvs.parse_vars(ROOT)}
    secrets = secret_vars()
    for p in sorted(K8S.rglob("*.y*ml")):
        text = p.read_text()
        comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
        for ref in sorted(set(re.findall(r"(?<![\w$/.-])((?:[\w.-]+/)*[\w*-]+(?:\.[\w*-]+)*\.(?:ya?ml|md|json|sh|py))\b", comments))):
            bases = [p.parent, K8S, ROOT]
            if not any(list(b.glob(ref)) for b in bases):
                c.error(f"{rel(p)}: a comment names {ref}, which does not exist")
        if re.search(r"empty value means unset", comments, re.I):
            c.error(f"{rel(p)}: a comment says an empty value means unset; for a variable with a default "
                    f"an empty value is the value itself (and stops start-up for numbers, choices, addresses, URLs)")
    for p, d in k8s_docs():
        if d.get("kind") != "ConfigMap":
            continue
        for name, value in (d.get("data") or {}).items():
            if name in secrets:
                c.error(f"{rel(p)}: secret variable {name} is in a ConfigMap (put it in a Secret)")
            row = rows.get(name)
            if row and str(value) == "" and row.default is not None \
                    and not gvs.EMPTY_IS_A_VALUE.search(row.help) and not row.kind.startswith("string:0.."):
                c.error(f"{rel(p)}: {name}: \"\" is not its default {row.default!r}: the relay takes \"\" as the "
                        f"value and refuses it ({row.kind}); delete the line instead")


def k8s_monitoring_docs() -> list[tuple[Path, dict]]:
    d = K8S / "monitoring"
    return [(p, x) for p in sorted(d.glob("*.y*ml")) if p.name != "kustomization.yaml" for x in load_yaml_docs(p)]


def check_two_releases(c: Check, promtool: str) -> None:
    """Two releases in one cluster, one Prometheus: each release's PrometheusRule selects its
    own namespace and admin Service (and cluster, when metrics.cluster is set), so neither
    evaluates nor records the other's series. promtool runs each release's rules over the
    series of both: the recording rules and SealrelayAllReplicasDown name only its own."""
    releases = [("a", "relay-a"), ("b", "relay-b")]
    rendered: dict[str, tuple[list, str]] = {}
    for name, ns in releases:
        docs, _ = render_docs({"metrics": {"cluster": "eu", "prometheusRule": {"enabled": True},
                                           "serviceMonitor": {"enabled": True}}}, name=name, namespace=ns)
        pr = one(c, docs, "PrometheusRule", f"release {name}")
        sm = one(c, docs, "ServiceMonitor", f"release {name}")
        admin = [d for d in kinds(docs, "Service")
                 if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "admin"]
        if not (pr and sm and len(admin) == 1):
            return
        relabel = [r for ep in sm["spec"]["endpoints"] for r in ep.get("relabelings") or []]
        if {"targetLabel": "cluster", "replacement": "eu"} not in relabel:
            c.error(f"release {name}: metrics.cluster=eu, but the ServiceMonitor does not set cluster=\"eu\": {relabel}")
        rendered[name] = (pr["spec"]["groups"], admin[0]["metadata"]["name"])
    series = []
    for (name, ns) in releases:
        svc = rendered[name][1]
        labels = f'job="sealrelay",cluster="eu",namespace="{ns}",service="{svc}",instance="10.0.0.1:9090"'
        series += [{"series": f"up{{{labels}}}", "values": "0x20"},
                   {"series": f'sealrelay_intake_requests_total{{{labels},outcome="forwarded",status="202"}}',
                    "values": "0+60x20"}]
    for name, ns in releases:
        groups, svc = rendered[name]
        test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [{
                "expr": "count by (cluster, region, namespace) (sealrelay:slo_availability_eligible:rate5m)",
                "eval_time": "10m",
                "exp_samples": [{"labels": f'{{cluster="eu",namespace="{ns}"}}', "value": 1}],
            }],
            "alert_rule_test": [{
                "alertname": "SealrelayAllReplicasDown", "eval_time": "10m",
                "exp_alerts": [{
                    "exp_labels": {"cluster": "eu", "namespace": ns, "severity": "critical"},
                    "exp_annotations": {
                        "summary": "No sealrelay replica is up",
                        "description": f"None of the sealrelay replicas in namespace {ns} has been "
                                       "scrapeable for 2 minutes.",
                        "runbook_url": f"{RUNBOOK_BASE}#sealrelayallreplicasdown",
                    },
                }],
            }],
        }]}
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
            (Path(tmp) / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
            r = run([promtool, "test", "rules", "test.yaml"], cwd=tmp)
            if r.returncode != 0:
                c.error(f"release {name} in {ns} evaluates another release's series (two releases, one "
                        "Prometheus):\n" + (r.stdout + r.stderr).strip()[-2500:])
    c.note("two releases on one Prometheus: each records and alerts on its own namespace only")


@check("alerts: job selector configurable in the chart (rules and promtool tests pass with another one); "
       "k8s/ scraping (ServiceMonitor, docs' scrape config) yields the job the alerts select")
def check_alert_job(c: Check, promtool: str) -> None:
    alerts_text = (GRAFANA / "alerts.yaml").read_text()
    jobs = set(re.findall(r'\bjob="([^"]*)"', alerts_text))
    if jobs != {"sealrelay"}:
        c.error(f"grafana/alerts.yaml selects jobs {sorted(jobs)}: keep the plain file at the default job=\"sealrelay\"")
    # Every selector of a raw series (not a recording rule) carries the job matcher, so
    # replacing it re-targets every rule.
    groups = yaml.safe_load(alerts_text)["groups"]
    for g in groups:
        for r in g["rules"]:
            expr = r["expr"]
            # String literals blanked (same length), so label values are not taken for names.
            bare = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: '"' + "x" * (len(m.group()) - 2) + '"', expr)
            for m in re.finditer(r"(?<![:\w])((?:sealrelay|process)_[a-z0-9_]+|up)\b(\{[^}]*\})?", bare):
                sel = expr[m.start(2):m.end(2)] if m.group(2) else ""
                if 'job="sealrelay"' not in sel:
                    c.error(f"{r.get('alert') or r.get('record')}: {m.group(1)} is selected without job=\"sealrelay\"")
                    break

    def strings(x):
        if isinstance(x, str):
            yield x
        elif isinstance(x, dict):
            for v in x.values():
                yield from strings(v)
        elif isinstance(x, list):
            for v in x:
                yield from strings(v)
    custom = 'job="kubernetes-pods", app_kubernetes_io_name="sealrelay"'
    docs, _ = render_docs({"metrics": {"prometheusRule": {"enabled": True, "jobSelector": custom}}})
    pr = one(c, docs, "PrometheusRule", "jobSelector")
    docs, _ = render_docs({"nameOverride": "relay", "metrics": {"prometheusRule": {"enabled": True}}})
    pr_default = one(c, docs, "PrometheusRule", "default job")
    if pr_default and not any('job="relay"' in x for x in strings(pr_default["spec"]["groups"])):
        c.error("with nameOverride=relay the PrometheusRule does not select job=\"relay\" (what its ServiceMonitor sets)")
    if pr:
        rendered = list(strings(pr["spec"]["groups"]))
        if any('job="sealrelay"' in x for x in rendered):
            c.error("metrics.prometheusRule.jobSelector is set, but the PrometheusRule still selects job=\"sealrelay\"")
        want_count = sum(x.count('job="sealrelay"') for x in strings(groups))
        if sum(x.count(custom) for x in rendered) != want_count:
            c.error(f"jobSelector replaced {sum(x.count(custom) for x in rendered)} matchers, "
                    f"grafana/alerts.yaml has {want_count}")
        # The promtool unit tests, re-labelled for that scrape job, pass against the rendered rules.
        tests = (GRAFANA / "alerts.test.yaml").read_text().replace('job="sealrelay"', custom)
        tests = re.sub(r"^(\s*)job: sealrelay\s*$", r"\1job: kubernetes-pods\n\1app_kubernetes_io_name: sealrelay",
                       tests, flags=re.M)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "alerts.yaml").write_text(yaml.safe_dump({"groups": pr["spec"]["groups"]}, sort_keys=False))
            (Path(tmp) / "alerts.test.yaml").write_text(tests)
            r = run([promtool, "test", "rules", "alerts.test.yaml"], cwd=tmp)
            if r.returncode != 0:
                c.error("promtool test rules with jobSelector " + custom + ":\n" + (r.stdout + r.stderr).strip()[-3000:])
    if refused({"metrics": {"prometheusRule": {"jobSelector": "job=sealrelay"}}}) is None:
        c.error("a jobSelector that is no PromQL matcher list (job=sealrelay) is accepted")
    check_two_releases(c, promtool)
    # k8s/: no annotation scraping (it cannot set the job); the ServiceMonitor sets job="sealrelay".
    for p, d in k8s_docs():
        if d.get("kind") == "Deployment" and d["metadata"]["name"] == "sealrelay":
            ann = d["spec"]["template"]["metadata"].get("annotations") or {}
            if ann.get("prometheus.io/scrape") == "true":
                c.error(f"{rel(p)}: scraped by annotation, the series get the discovering job's name, not job=\"sealrelay\"")
    mon = K8S / "monitoring" / "kustomization.yaml"
    if not mon.exists():
        c.error("k8s/monitoring/kustomization.yaml does not exist")
    else:
        kust = yaml.safe_load(mon.read_text())
        for r in kust.get("resources") or []:
            if not (mon.parent / r).exists():
                c.error(f"k8s/monitoring/kustomization.yaml lists {r}, which does not exist")
    svcs = [d for _, d in k8s_docs() if d.get("kind") == "Service"]
    sms = [d for _, d in k8s_monitoring_docs() if d.get("kind") == "ServiceMonitor"]
    if len(sms) != 1:
        c.error(f"k8s/monitoring has {len(sms)} ServiceMonitors, expected one")
    for sm in sms:
        if sm.get("apiVersion") != MONITORING_API:
            c.error(f"k8s/monitoring ServiceMonitor apiVersion {sm.get('apiVersion')}")
        sel = sm["spec"]["selector"]["matchLabels"]
        matched = [s for s in svcs if all((s["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items())]
        if len(matched) != 1:
            c.error(f"k8s/monitoring ServiceMonitor selects {len(matched)} k8s/ Services, expected the admin one")
            continue
        job = (matched[0]["metadata"].get("labels") or {}).get(sm["spec"].get("jobLabel") or "")
        if job != "sealrelay":
            c.error(f"k8s/monitoring ServiceMonitor sets job={job!r} (jobLabel {sm['spec'].get('jobLabel')!r}), "
                    f"the alerts select job=\"sealrelay\"")
        ports = {p["name"] for p in matched[0]["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            if ep.get("port") not in ports or ep.get("path") != "/metrics":
                c.error(f"k8s/monitoring ServiceMonitor endpoint {ep} does not scrape /metrics on {ports}")
        if (sm["metadata"].get("labels") or {}).get("release") != "kube-prometheus-stack":
            c.error("k8s/monitoring ServiceMonitor lacks release: kube-prometheus-stack (a stock install ignores it)")
    # docs/deploy.md's plain scrape config.
    text = DEPLOY_DOC.read_text() if DEPLOY_DOC.exists() else ""
    blocks = [yaml.safe_load(b) for lang, b in doc_blocks(text) if lang in ("yaml", "yml") and "scrape_configs" in b]
    if not blocks:
        c.error("docs/deploy.md has no Prometheus scrape config")
        return
    cfg = blocks[0]
    jobs_cfg = [j for j in cfg.get("scrape_configs") or []]
    admin = next((s for s in svcs if (s["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "admin"), None)
    meta = {}
    if admin:
        for k, v in (admin["metadata"].get("labels") or {}).items():
            meta["__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
        meta["__meta_kubernetes_endpoint_port_name"] = admin["spec"]["ports"][0]["name"]
    for j in jobs_cfg:
        if j.get("job_name") != "sealrelay":
            c.error(f"docs/deploy.md's scrape config names the job {j.get('job_name')!r}, the alerts select sealrelay")
        targets = {r.get("target_label") for r in j.get("relabel_configs") or []}
        for lbl in ("namespace", "pod"):
            if lbl not in targets:
                c.error(f"docs/deploy.md's scrape config does not set {lbl} (the alerts and dashboard use it)")
        for r in j.get("relabel_configs") or []:
            if r.get("action") == "keep":
                val = (r.get("separator") or ";").join(meta.get(s, "") for s in r.get("source_labels") or [])
                if not re.fullmatch(r.get("regex", "(.*)"), val):
                    c.error(f"docs/deploy.md's scrape config keep rule {r.get('regex')!r} drops k8s/'s admin "
                            f"Service endpoint ({val!r})")
    for j in jobs_cfg:
        for sd in j.get("kubernetes_sd_configs") or []:
            if sd.get("role") not in ("endpoints", "endpointslice", "pod", "service"):
                c.error(f"docs/deploy.md's scrape config: kubernetes_sd_configs role {sd.get('role')!r}")

    def promtool_config(config: dict) -> subprocess.CompletedProcess:
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            yaml.safe_dump(config, f)
        try:
            return run([promtool, "check", "config", "--syntax-only", f.name])
        finally:
            os.unlink(f.name)

    r = promtool_config(cfg)
    if r.returncode != 0 and "kubernetes_sd_configs not found" in r.stdout + r.stderr:
        # Debian's promtool is built without Kubernetes discovery: check the rest of the job
        # (relabelling and all) with a static target in its place.
        c.note("this promtool lacks kubernetes_sd_configs; checked the scrape config with static_configs instead")
        stand_in = json.loads(json.dumps(cfg))
        for j in stand_in.get("scrape_configs") or []:
            if j.pop("kubernetes_sd_configs", None) is not None:
                j["static_configs"] = [{"targets": ["127.0.0.1:9090"]}]
        r = promtool_config(stand_in)
    if r.returncode != 0:
        c.error("promtool check config on docs/deploy.md's scrape config:\n" + (r.stdout + r.stderr).strip())


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
    check_tracing()
    check_admin_api(known)
    check_frontend_secrets()
    check_frontend_egress()
    check_helm_refusals()
    check_deploy_doc()
    check_env_secrets()
    check_monitoring_defaults()
    check_no_redis_strategy()
    check_versions()
    check_k8s_comments(known)
    check_alert_rules(args.promtool)
    check_dashboard(args.promtool, state)
    check_dashboard_content()
    check_rendered_rules(args.promtool, state)
    check_rule_tests(args.promtool)
    check_alert_job(args.promtool)
    check_runbook()
    check_slo_alerts()
    check_frontend_alerts()
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
