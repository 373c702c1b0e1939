"""The Helm chart, statically: values and their references, the copies of generated files, the variables and the schema (generated, and refusing what it must)."""

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

import gen_values_schema as gvs  # noqa: E402

from .common import (  # noqa: F401
    CHART,
    Check,
    GRAFANA,
    PENDING_VARS,
    ROOT,
    RUNBOOK,
    VAR_PATTERN,
    chart_files,
    check,
    ci_value_sets,
    refused,
    rel,
    template_files,
)

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
