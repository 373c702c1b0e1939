"""The shared parts: paths, constants, the Check collector, the sources of truth (the vars table, the declared metrics, the alert rules) and rendering through Helm's Go SDK."""

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


ROOT = Path(__file__).resolve().parent.parent.parent
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
