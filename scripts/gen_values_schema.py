#!/usr/bin/env python3
"""Generates helm/sealrelay/values.schema.json from the configuration table.

The source of truth is the `vars!` table of the relay (every `src/config*.rs` and
`src/config/**/*.rs` file is read): each row is

    NAME, Section, Some("default") | None, Kind, "help";

and `Kind` (the Rust enum `config::Kind`) says what the variable takes; it is read here as
`int:LO..HI` (`Int(LO, HI)`), `float:LO..HI` (`Float(LO, HI)`; both bounds inclusive), `bool`,
`enum:a|b|c` (`Enum(&["a", "b", "c"])`), `addr` (host:port), `url:SCHEME` (`RedisUrl`: every
Redis form, `HttpUrl`: http or https, `HttpsUrl`: https only), `string:MIN..MAX` (`Text`,
characters), `appleid` (10 of A-Z0-9), `path`, `secret`, `list:cidr` (`CidrList`,
comma-separated).

Each variable reaches the chart in one of two ways:

- **mapped**: a key of values.yaml whose `# -- NAME (...)` comment names the variable (the
  first word after `# --`). The key gets the variable's constraint; null and "" mean "not
  passed" (the binary's default applies) and are always allowed. (A variable whose help
  gives "" a meaning, "empty disables it", gets a boolean of its own in values.yaml, and ""
  is allowed for it under `env`.)
- **chart-managed**: set through chart structure instead of a value (listen addresses from
  the container ports, secrets mounted as files); listed in CHART_MANAGED with the reason,
  and the structure that feeds it is constrained instead (ports, mount paths).

A variable that is neither fails the generator, naming it: a new row in the table needs a
values.yaml key with a `# -- NAME (default X)` comment, or a CHART_MANAGED entry.

The rest of values.yaml is typed from its defaults (booleans stay booleans, ports integers,
...), every object the chart defines refuses unknown keys (a typo such as `apns.teamID` is
an error instead of being ignored), and FREEFORM objects (resources, security contexts,
probes, ...) pass through to Kubernetes unchecked. `env` is checked too: a known variable set
there must have its kind's form (numbers and booleans may be given as strings; ranges are only
checked when given as numbers). A variable that carries a secret (kind `secret`, plus
EXTRA_SECRET_VARS: REDIS_URL) is refused under `env`, which becomes the ConfigMap, and as a
literal `value` in `extraEnv`, which is written into the Deployment: it comes from a Secret.
The values the chart itself stores in its Secret (SENSITIVE) are marked `writeOnly` and
"Sensitive" in their descriptions.

    scripts/gen_values_schema.py           # writes helm/sealrelay/values.schema.json
    scripts/gen_values_schema.py --check   # exits 1 if the committed file differs

scripts/check_deploy.py imports this module (the same parser and the same schema).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "sealrelay"
SCHEMA_PATH = CHART / "values.schema.json"

# Variables set through chart structure rather than one value, with the reason. The values
# that feed them are constrained in STRUCTURAL below.
CHART_MANAGED: dict[str, str] = {
    "RELAY_LISTEN": "set to <listenAddress>:<containerPorts.http> so the container port, the "
                    "probes and the Services always agree with what the relay binds",
    "RELAY_ADMIN_LISTEN": "set to <listenAddress>:<containerPorts.admin> for the same reason",
    "RELAY_REGION_LISTEN": "set to <listenAddress>:<region.port> when region.name is set, so the "
                           "container port and the region Service agree with what the relay binds",
    "RELAY_REGION_KEY_FILE": "points at the copied key, <region.key.mountPath>/key, when "
                             "region.key.existingSecret is set",
    "RELAY_REGION_KEY_PREVIOUS_FILE": "points at the copied retiring key, "
                                      "<region.key.mountPath>/previous, when region.key.previousSecret is set",
    "RELAY_REGION_TLS_CERT_FILE": "points at <region.tls.mountPath>/tls.crt when region.tls.existingSecret is set",
    "RELAY_REGION_TLS_KEY_FILE": "points at <region.tls.mountPath>/tls.key when region.tls.existingSecret is set",
    "RELAY_REGION_CA_FILE": "points at the mounted bundle, <region.caBundle.mountPath>/<region.caBundle.key>, "
                            "when region.caBundle.configMap is set",
    "APNS_AUTH_KEY": "a secret: comes from the Secret named by apns.authKey.existingSecret (or "
                     "the one the chart makes from apns.authKey.value) when "
                     "apns.authKey.mountAsFile is false, never from a plain value",
    "APNS_AUTH_KEY_FILE": "points at the mounted key, <apns.authKey.mountPath>/"
                          "<apns.authKey.fileName>, whenever a key Secret is configured",
    "APNS_CA_FILE": "points at the mounted bundle, <apns.caBundle.mountPath>/<apns.caBundle.key>, "
                    "when apns.caBundle.configMap is set",
    "RELAY_QUEUE_KEY": "a secret: comes from the Secret named by redis.queueKey.existingSecret "
                       "(key redis.queueKey.existingSecretKey) or the one the chart makes from "
                       "redis.queueKey.value, never from the ConfigMap",
    "OTEL_EXPORTER_OTLP_HEADERS": "a secret (API keys): secretKeyRef to tracing.headers.existingSecret "
                                  "(key existingSecretKey) or the chart's Secret made from "
                                  "tracing.headers.value, never the ConfigMap",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a secret: secretKeyRef to tracing.tracesHeaders.existingSecret "
                                         "or the chart's Secret made from tracing.tracesHeaders.value",
    "OTEL_EXPORTER_OTLP_CERTIFICATE": "points at the mounted bundle, <tracing.caBundle.mountPath>/"
                                      "<tracing.caBundle.key>, when tracing.caBundle.configMap is set",
    "RELAY_ADMIN_TOKEN_FILE": "points at the token an init container copies (mode 0400, owned by the "
                              "pod's user, as the relay requires) from adminApi.tcp.token's Secret into "
                              "an in-memory emptyDir: <adminApi.tcp.token.mountPath>/token",
    "FCM_SERVICE_ACCOUNT_FILE": "points at the mounted JSON key, <fcm.serviceAccount.mountPath>/"
                                "<fcm.serviceAccount.fileName>, whenever its Secret is configured",
    "FCM_SERVICE_ACCOUNT": "a secret: secretKeyRef to fcm.serviceAccount's Secret when "
                           "fcm.serviceAccount.mountAsFile is false, never a plain value",
    "FCM_CA_FILE": "points at the mounted bundle, <fcm.caBundle.mountPath>/<fcm.caBundle.key>, when "
                   "fcm.caBundle.configMap is set",
    "RELAY_ICE_TURN_SECRET_FILE": "points at the mounted secret, <ice.turnSecret.mountPath>/"
                                  "<ice.turnSecret.fileName>, whenever its Secret is configured",
    "RELAY_ICE_TURN_SECRET": "a secret: secretKeyRef to ice.turnSecret's Secret when "
                             "ice.turnSecret.mountAsFile is false",
    "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE": "points at the mounted token, <ice.cloudflare.apiToken.mountPath>/"
                                           "<ice.cloudflare.apiToken.fileName>, whenever its Secret is configured",
    "RELAY_ICE_CLOUDFLARE_API_TOKEN": "a secret: secretKeyRef to ice.cloudflare.apiToken's Secret when "
                                      "ice.cloudflare.apiToken.mountAsFile is false",
    "RELAY_ICE_CLOUDFLARE_CA_FILE": "points at the mounted bundle, <ice.cloudflare.caBundle.mountPath>/"
                                    "<ice.cloudflare.caBundle.key>, when ice.cloudflare.caBundle.configMap is set",
}

# Objects whose contents are Kubernetes structures (or free maps) the chart passes through:
# typed as objects/arrays, their contents unchecked.
FREEFORM = {
    "commonLabels", "resources", "podSecurityContext", "securityContext", "startupProbe",
    "livenessProbe", "readinessProbe", "updateStrategy", "autoscaling.behavior",
    "nodeSelector", "affinity", "podAnnotations", "podLabels",
    "metrics.grafanaDashboard.labels", "metrics.grafanaDashboard.annotations",
    "metrics.serviceMonitor.labels", "metrics.prometheusRule.labels",
    "service.annotations", "service.labels", "adminService.annotations", "adminService.labels",
    "serviceAccount.annotations", "ingress.annotations", "ingress.labels",
    "httpRoute.annotations", "httpRoute.labels", "tests.smoke.resources",
    "tests.smoke.annotations", "adminApi.tcp.token.copyResources",
    "region.service.annotations", "region.service.labels", "region.networkPolicy.from",
    "region.networkPolicy.to",
}

# Variables that carry secrets besides those of kind `secret`, with the reason. Together they
# are refused under `env` (which becomes the ConfigMap, readable by anyone who can read
# ConfigMaps) and as a literal `value` in `extraEnv` (which lands in the Deployment's spec):
# they come from Secrets only (their values.yaml objects, or extraEnv valueFrom.secretKeyRef).
EXTRA_SECRET_VARS: dict[str, str] = {
    "REDIS_URL": "a Redis URL carries the password (redis://:password@host)",
}

# Name prefixes of the relay's variables: under `env`, a name with one of them must be a
# variable the relay reads (a typo such as RELAY_DEDUP_WINDOW is refused, not left to one
# WARN in the pod's log).
ENV_PREFIXES = ["RELAY", "APNS", "FCM", "OTEL", "REDIS"]
# The first entry of the list of allowed names an unknown one is refused with, so the
# validator's message starts by saying what is wrong.
UNKNOWN_NAME = "(not a variable the relay reads; `sealrelay --help` lists every one)"

# More than one replica needs Redis. The templates `fail` too, but `helm lint` only logs a
# template's `fail`; the schema refuses it in lint, template and install alike. (The
# validator reports a `then` of `required` as "missing property '<name>'", so the name is
# the message.)
_BLANK = {"enum": ["", None]}
REPLICA_GUARD = {
    "if": {"allOf": [
        {"anyOf": [
            {"properties": {"replicaCount": {"type": "integer", "minimum": 2}}, "required": ["replicaCount"]},
            {"properties": {"autoscaling": {"properties": {"enabled": {"const": True}}, "required": ["enabled"]}},
             "required": ["autoscaling"]},
        ]},
        {"properties": {"redis": {"properties": {"url": _BLANK, "existingSecret": _BLANK}}}},
        {"not": {"properties": {"extraEnv": {"type": "array", "contains": {
            "type": "object", "properties": {"name": {"const": "REDIS_URL"}}, "required": ["name"]}}},
            "required": ["extraEnv"]}},
    ]},
    "then": {"required": ["(more than one replica, replicaCount > 1 or autoscaling.enabled, needs Redis: "
                          "set redis.url or redis.existingSecret; without it every replica keeps its own "
                          "policy state and duplicates are not coalesced)"]},
}

# A relay per core (`runtime: per-core`) needs Redis too: the binary refuses it without at
# start-up, and the schema before anything is created.
RUNTIME_GUARD = {
    "if": {"allOf": [
        {"properties": {"runtime": {"const": "per-core"}}, "required": ["runtime"]},
        REPLICA_GUARD["if"]["allOf"][1],
        REPLICA_GUARD["if"]["allOf"][2],
    ]},
    "then": {"required": ["(runtime: per-core runs a whole relay on each core, and they share state "
                          "only through Redis: set redis.url or redis.existingSecret, or runtime: shared)"]},
}

# Values the chart stores in its own Secret (never the ConfigMap), for trials: marked
# writeOnly and "Sensitive" in the schema. Production points the matching existingSecret at
# a Secret managed outside the chart. (Each object's key in the chart's Secret is in
# templates/_helpers.tpl, sealrelay.inlineSecrets and secret.yaml.)
SENSITIVE: dict[str, str] = {
    "apns.authKey.value": "apns.authKey.existingSecret",
    "redis.url": "redis.existingSecret",
    "redis.queueKey.value": "redis.queueKey.existingSecret",
    "tracing.headers.value": "tracing.headers.existingSecret",
    "tracing.tracesHeaders.value": "tracing.tracesHeaders.existingSecret",
    "adminApi.tcp.token.value": "adminApi.tcp.token.existingSecret",
    "fcm.serviceAccount.value": "fcm.serviceAccount.existingSecret",
    "ice.turnSecret.value": "ice.turnSecret.existingSecret",
    "ice.cloudflare.apiToken.value": "ice.cloudflare.apiToken.existingSecret",
}


def secret_var_names(vars_: list["Var"]) -> list[str]:
    """Every variable that carries a secret: kind `secret`, plus EXTRA_SECRET_VARS."""
    return sorted({v.name for v in vars_ if v.kind == "secret"} | set(EXTRA_SECRET_VARS))


PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
ABS_PATH = {"type": "string", "pattern": "^/", "minLength": 1}
INT_OR_PERCENT = {"anyOf": [{"type": "integer", "minimum": 0},
                            {"type": "string", "pattern": "^[0-9]+%$"}]}

# Constraints for values that are not configuration variables (or feed chart-managed ones).
STRUCTURAL: dict[str, dict] = {
    "replicaCount": {"type": "integer", "minimum": 0},
    "region.port": dict(PORT, description="Container port of the region listener (RELAY_REGION_LISTEN)."),
    "region.service.port": PORT,
    "region.service.type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "region.key.mountPath": ABS_PATH,
    "region.tls.mountPath": ABS_PATH,
    "region.caBundle.mountPath": ABS_PATH,
    "listenAddress": {"type": "string", "minLength": 1,
                      "description": "Address both listeners bind (RELAY_LISTEN, RELAY_ADMIN_LISTEN)."},
    "containerPorts.http": dict(PORT, description="Port of RELAY_LISTEN (the public intake)."),
    "containerPorts.admin": dict(PORT, description="Port of RELAY_ADMIN_LISTEN (/healthz, /readyz, /metrics)."),
    "image.repository": {"type": "string", "minLength": 1},
    "image.digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "apns.authKey.mountPath": dict(ABS_PATH, description="Directory of APNS_AUTH_KEY_FILE."),
    "apns.authKey.fileName": {"type": "string", "pattern": "^[^/]+$",
                              "description": "File name of APNS_AUTH_KEY_FILE."},
    "apns.authKey.secretKey": {"type": "string", "minLength": 1},
    "apns.caBundle.mountPath": dict(ABS_PATH, description="Directory of APNS_CA_FILE."),
    "apns.caBundle.key": {"type": "string", "pattern": "^[^/]+$",
                          "description": "Key of the bundle, the file name of APNS_CA_FILE."},
    "redis.existingSecretKey": {"type": "string", "minLength": 1},
    "redis.queueKey.existingSecretKey": {"type": "string", "minLength": 1},
    # RELAY_QUEUE_KEY's help: at least 32 characters.
    "redis.queueKey.value": {"anyOf": [{"const": ""}, {"type": "string", "minLength": 32}],
                             "description": "RELAY_QUEUE_KEY (unset: derived from the APNs key), stored in the chart's Secret."},
    "terminationGracePeriodSeconds": {"type": ["integer", "null"], "minimum": 1},
    "service.type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
    "service.port": PORT,
    "service.externalTrafficPolicy": {"enum": ["", "Cluster", "Local"]},
    "adminService.port": PORT,
    "autoscaling.minReplicas": {"type": "integer", "minimum": 1},
    "autoscaling.maxReplicas": {"type": "integer", "minimum": 1},
    "autoscaling.targetCPUUtilizationPercentage": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000},
    "autoscaling.targetMemoryUtilizationPercentage": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000},
    "podDisruptionBudget.maxUnavailable": {"anyOf": [*INT_OR_PERCENT["anyOf"], {"type": "null"}]},
    "podDisruptionBudget.minAvailable": {"anyOf": [*INT_OR_PERCENT["anyOf"], {"type": "null"}]},
    "podDisruptionBudget.unhealthyPodEvictionPolicy": {"enum": ["", "IfHealthyBudget", "AlwaysAllow"]},
    "topologySpread.zone.whenUnsatisfiable": {"enum": ["ScheduleAnyway", "DoNotSchedule"]},
    "topologySpread.node.whenUnsatisfiable": {"enum": ["ScheduleAnyway", "DoNotSchedule"]},
    "networkPolicy.egress.redisPorts": {"type": "array", "items": PORT},
    "networkPolicy.egress.otlpPorts": {"type": "array", "items": PORT},
    "networkPolicy.egress.apnsCidrs": {"type": "array", "items": {"type": "string", "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}},
    "metrics.prometheusRule.runbookBaseUrl": {"type": "string", "pattern": "^https?://"},
    # A Helm release name (DNS-1123 label) or "" for no release label.
    "metrics.prometheusRelease": {"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?)?$"},
    # PromQL label matchers, comma-separated, e.g. job="kubernetes-pods", app="sealrelay"; "" is
    # job="<the job the chart's ServiceMonitor sets>".
    "metrics.prometheusRule.jobSelector": {
        "type": "string",
        "pattern": r'^(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\]|\\.)*"'
                   r'(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\]|\\.)*")*\s*)?$',
        "description": "PromQL label matchers that replace job=\"sealrelay\" in every rule of "
                       "grafana/alerts.yaml; empty: this release's series as the chart's "
                       "ServiceMonitor labels them (job, namespace, admin service, and cluster "
                       "when metrics.cluster is set).",
    },
    # A label value written into PromQL strings and a relabeling: no quotes or backslashes.
    "metrics.cluster": {"type": "string", "pattern": r"^[A-Za-z0-9_.:/-]*$", "maxLength": 128,
                        "description": "This cluster's name: the cluster label on every scraped "
                                       "series and in every rule's selector; \"\" sets none."},
    # Secrets of the new front-ends and the tracing exporter: Secret keys, file names, mounts.
    **{f"{base}.existingSecretKey": {"type": "string", "minLength": 1}
       for base in ("tracing.headers", "tracing.tracesHeaders", "adminApi.tcp.token",
                    "fcm.serviceAccount", "ice.turnSecret", "ice.cloudflare.apiToken")},
    **{f"{base}.value": {"type": "string"}
       for base in ("tracing.headers", "tracing.tracesHeaders", "adminApi.tcp.token",
                    "fcm.serviceAccount", "ice.turnSecret", "ice.cloudflare.apiToken")},
    **{f"{base}.fileName": {"type": "string", "pattern": "^[^/]+$"}
       for base in ("fcm.serviceAccount", "ice.turnSecret", "ice.cloudflare.apiToken")},
    **{f"{base}.mountPath": dict(ABS_PATH)
       for base in ("tracing.caBundle", "fcm.caBundle", "fcm.serviceAccount", "ice.turnSecret",
                    "ice.cloudflare.apiToken", "ice.cloudflare.caBundle", "adminApi.tcp.token")},
    **{f"{base}.key": {"type": "string", "pattern": "^[^/]+$"}
       for base in ("tracing.caBundle", "fcm.caBundle", "ice.cloudflare.caBundle")},
    "adminApi.socket.sizeLimit": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|k|M|G)?$"},
    "adminApi.tcp.token.copyImage.repository": {"type": "string", "minLength": 1},
    "adminApi.tcp.token.copyImage.tag": {"type": "string"},
    "adminApi.tcp.token.copyImage.digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
    "adminApi.tcp.token.copyImage.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "networkPolicy.egress.fcmCidrs": {"type": "array", "items": {"type": "string", "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}},
    "networkPolicy.egress.cloudflareCidrs": {"type": "array", "items": {"type": "string", "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}},
    "ingress.pathType": {"enum": ["Prefix", "Exact", "ImplementationSpecific"]},
}

# A variable whose table help gives the empty value a meaning of its own.
EMPTY_IS_A_VALUE = re.compile(r"\bempty (?:disables|turns off|means)\b", re.I)
VAR_COMMENT = re.compile(r"^\s*#\s*--\s+([A-Z][A-Z0-9_]*[A-Z0-9])\s+\(")
KEY_LINE = re.compile(r"^(\s*)([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(\s|$)")


class SchemaError(Exception):
    """A problem that must stop the generator (and fail check_deploy), with the reason."""


@dataclass(frozen=True)
class Var:
    name: str
    default: str | None
    kind: str
    help: str
    source: str


# ----------------------------------------------------------------------------------------
# The vars! table
# ----------------------------------------------------------------------------------------

def config_sources(root: Path = ROOT) -> list[Path]:
    src = root / "src"
    files = sorted(set(src.glob("config*.rs")) | set((src / "config").rglob("*.rs")))
    return [p for p in files if p.is_file()]


def _macro_bodies(text: str) -> list[str]:
    """The text between the braces of every `vars! { ... }` invocation (string-aware)."""
    bodies = []
    for m in re.finditer(r"\bvars!\s*\{", text):
        i, depth, start = m.end(), 1, m.end()
        in_str = False
        while i < len(text) and depth:
            ch = text[i]
            if in_str:
                if ch == "\\":
                    i += 1
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        if depth:
            raise SchemaError("unterminated vars! { ... } block")
        bodies.append(text[start:i - 1])
    return bodies


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


STR = r'"((?:[^"\\]|\\.)*)"'
KIND = r'([A-Za-z]+(?:\([^)]*\))?)'
ROW = re.compile(
    r'(?<![\w"])([A-Z][A-Z0-9_]*)\s*,\s*[A-Z][A-Za-z]*\s*,\s*(Some\(\s*' + STR + r'\s*\)|None)\s*,\s*'
    + KIND + r'\s*,\s*' + STR + r'\s*;',
    re.S)
SIMPLE_KINDS = {"Bool": "bool", "Addr": "addr", "RedisUrl": "url:redis", "HttpUrl": "url:http",
                "HttpsUrl": "url:https", "AppleId": "appleid", "Path": "path", "Secret": "secret",
                "CidrList": "list:cidr"}


def _kind(rust: str) -> str:
    """A row's `Kind` as the kind strings below: `Int(1, 64)` is `int:1..64`."""
    if rust in SIMPLE_KINDS:
        return SIMPLE_KINDS[rust]
    m = re.fullmatch(r"(Int|Float|Text)\(\s*([-0-9_.]+)\s*,\s*([-0-9_.]+)\s*\)", rust)
    if m:
        head = {"Int": "int", "Float": "float", "Text": "string"}[m.group(1)]
        return f"{head}:{m.group(2).replace('_', '')}..{m.group(3).replace('_', '')}"
    m = re.fullmatch(r"Enum\(\s*&\[(.*)\]\s*\)", rust, re.S)
    if m:
        return "enum:" + "|".join(re.findall(STR, m.group(1)))
    raise SchemaError(f"unknown Kind {rust!r}: teach scripts/gen_values_schema.py the new kind")


def _plain(markdown: str) -> str:
    """A row's help (Markdown, as the configuration reference shows it) as plain text."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown).replace("`", "")


def parse_vars(root: Path = ROOT) -> list[Var]:
    """Every row of every vars! table, in table order. Raises SchemaError on anything odd."""
    found: dict[str, Var] = {}
    files = config_sources(root)
    for path in files:
        text = path.read_text()
        for body in _macro_bodies(text):
            rows = ROW.findall(body)
            names = re.findall(r'(?:^|;)\s*([A-Z][A-Z0-9_]*)\s*,', body)
            parsed = [r[0] for r in rows]
            if sorted(names) != sorted(parsed):
                missed = sorted(set(names) - set(parsed))
                raise SchemaError(f"{path.relative_to(root)}: cannot parse vars! rows for {missed} "
                                  f'(expected NAME, Section, Some("default") | None, Kind, "help";)')
            for name, alt, default, kind, help_ in rows:
                v = Var(name, None if alt == "None" else _unescape(default), _kind(kind),
                        _plain(_unescape(help_)), str(path.relative_to(root)))
                old = found.get(name)
                if old and (old.default, old.kind) != (v.default, v.kind):
                    raise SchemaError(f"{name} is defined twice, differently: {old.source} and {v.source}")
                found.setdefault(name, v)
    if not found:
        where = ", ".join(str(p.relative_to(root)) for p in files) or "no src/config*.rs file"
        raise SchemaError(f"no vars! {{ ... }} table found (read {where})")
    return list(found.values())


# ----------------------------------------------------------------------------------------
# Kinds -> JSON schema
# ----------------------------------------------------------------------------------------

REDIS_SCHEMES = ["redis", "rediss", "redis-cluster", "rediss-cluster", "redis-sentinel"]
URL_SCHEMES = {"redis": REDIS_SCHEMES, "http": ["http", "https"], "https": ["https"]}
CIDR = r"[0-9a-fA-F:.]+/[0-9]{1,3}"
NUMBER_TEXT = r"^-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$"


def _range(kind: str, spec: str, conv) -> tuple:
    m = re.fullmatch(r"(-?[0-9.]+)\.\.(-?[0-9.]+)", spec)
    if not m:
        raise SchemaError(f"kind {kind!r}: expected LO..HI")
    return conv(m.group(1)), conv(m.group(2))


def kind_schema(kind: str) -> dict:
    """The schema of a value of this kind as the chart takes it in values.yaml."""
    head, _, arg = kind.partition(":")
    if head == "int":
        lo, hi = _range(kind, arg, int)
        return {"type": "integer", "minimum": lo, "maximum": hi}
    if head == "float":
        lo, hi = _range(kind, arg, float)
        return {"type": "number", "minimum": _num(lo), "maximum": _num(hi)}
    if head == "bool" and not arg:
        return {"type": "boolean"}
    if head == "enum" and arg:
        return {"enum": arg.split("|")}
    if head == "addr" and not arg:
        return {"type": "string", "pattern": r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$"}
    if head == "url" and arg in URL_SCHEMES:
        alts = "|".join(URL_SCHEMES[arg])
        if arg == "redis":
            return {"type": "string", "pattern": rf"^({alts})://[^\s/?#]+\S*$"}
        # No user information (user:password@host): a credential would land in the
        # ConfigMap; it goes in a headers variable, from a Secret.
        return {"type": "string", "pattern": rf"^({alts})://[^\s/?#@]+([/?#]\S*)?$"}
    if head == "string":
        lo, hi = _range(kind, arg, int)
        s = {"type": "string", "maxLength": hi}
        if lo:
            s["minLength"] = lo
        return s
    if head == "appleid" and not arg:
        return {"type": "string", "pattern": "^[A-Z0-9]{10}$"}
    if head in ("path", "secret") and not arg:
        return {"type": "string", "minLength": 1}
    if head == "list" and arg == "cidr":
        return {"anyOf": [{"type": "array", "items": {"type": "string", "pattern": f"^{CIDR}$"}},
                          {"type": "string", "pattern": rf"^{CIDR}(\s*,\s*{CIDR})*$"}]}
    raise SchemaError(f"unknown kind {kind!r} (the generator knows int:LO..HI, float:LO..HI, bool, "
                      f"enum:a|b, addr, url:redis|http|https, string:MIN..MAX, appleid, path, secret, "
                      f"list:cidr): teach scripts/gen_values_schema.py the new kind")


def env_schema(var: Var) -> dict:
    """The schema of the variable given as `env: {NAME: value}` (a string, or a YAML scalar)."""
    head, _, arg = var.kind.partition(":")
    if head == "int":
        lo, hi = _range(var.kind, arg, int)
        s = {"type": ["integer", "string"], "minimum": lo, "maximum": hi, "pattern": "^-?[0-9]+$"}
    elif head == "float":
        s = dict(kind_schema(var.kind), type=["number", "string"], pattern=NUMBER_TEXT)
    elif head == "bool":
        s = {"enum": [True, False, "true", "false", "1", "0"]}
    elif head == "list":
        s = {"type": "string", "pattern": rf"^{CIDR}(\s*,\s*{CIDR})*$"}
    else:
        s = kind_schema(var.kind)
    if var.default is None or EMPTY_IS_A_VALUE.search(var.help):
        # An empty value of an unset-by-default variable leaves it unset; for a variable whose
        # help says an empty value means something ("empty disables it": RELAY_ADMIN_SOCKET),
        # "" is that setting.
        s = {"anyOf": [{"const": ""}, s]}
    return dict(s, description=f"{var.name}: {var.help}")


def _num(x: float):
    return int(x) if float(x).is_integer() else x


def nullable(schema: dict) -> dict:
    """null and "" mean "not passed": allowed for every mapped value."""
    alts = [{"type": "null"}, {"const": ""}]
    inner = schema["anyOf"] if set(schema) == {"anyOf"} else [schema]
    return {"anyOf": alts + inner}


# ----------------------------------------------------------------------------------------
# values.yaml -> which key takes which variable
# ----------------------------------------------------------------------------------------

def values_var_paths(values_text: str) -> dict[str, str]:
    """VARIABLE -> dotted values path, from `# -- VARIABLE (...)` comments above keys."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: str | None = None
    for lineno, line in enumerate(values_text.splitlines(), 1):
        m = VAR_COMMENT.match(line)
        if m:
            pending = m.group(1)
            continue
        if line.strip().startswith("#") or not line.strip():
            continue
        k = KEY_LINE.match(line)
        if not k:
            pending = None
            continue
        indent = len(k.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([s for _, s in stack] + [k.group(2)])
        stack.append((indent, k.group(2)))
        if pending:
            if pending in out:
                raise SchemaError(f"values.yaml line {lineno}: {pending} is named by the comments of "
                                  f"both {out[pending]} and {path}")
            out[pending] = path
            pending = None
    return out


# ----------------------------------------------------------------------------------------
# The schema
# ----------------------------------------------------------------------------------------

def _infer(value, path: str) -> dict:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        return {"type": "object"}
    return {}  # null default: anything


def mapping(vars_: list[Var], values_text: str) -> tuple[dict[str, str], list[str]]:
    """(VARIABLE -> values path, problems). Every variable must be mapped or chart-managed."""
    paths = values_var_paths(values_text)
    known = {v.name for v in vars_}
    problems = []
    for v in vars_:
        if v.name in paths and v.name in CHART_MANAGED:
            problems.append(f"{v.name} is both mapped (values.yaml {paths[v.name]}) and listed in CHART_MANAGED")
        elif v.name not in paths and v.name not in CHART_MANAGED:
            problems.append(f"{v.name} ({v.source}, kind {v.kind}) is not mapped: add a values.yaml key "
                            f"with a `# -- {v.name} (default ...)` comment above it and wire it in "
                            f"templates/_helpers.tpl, or list it in CHART_MANAGED in "
                            f"scripts/gen_values_schema.py with the reason")
    for name, path in sorted(paths.items()):
        if name not in known:
            problems.append(f"values.yaml {path} names {name}, which is not in the vars! table")
    for name in sorted(set(CHART_MANAGED) - known):
        problems.append(f"CHART_MANAGED lists {name}, which is not in the vars! table")
    return {n: p for n, p in paths.items() if n in known}, problems


def build_schema(vars_: list[Var], values_text: str) -> dict:
    values = yaml.safe_load(values_text) or {}
    paths, problems = mapping(vars_, values_text)
    if problems:
        raise SchemaError("\n".join(problems))
    by_path = {p: next(v for v in vars_ if v.name == n) for n, p in paths.items()}
    secrets = secret_var_names(vars_)
    for p in list(by_path) + list(STRUCTURAL) + list(SENSITIVE) + list(SENSITIVE.values()):
        if _lookup(values, p) is _MISSING:
            raise SchemaError(f"values.yaml has no key {p} (named by "
                              f"{'the comment of ' + by_path[p].name if p in by_path else 'STRUCTURAL'})")

    def sensitive(schema: dict, path: str) -> dict:
        """writeOnly, and said so, for a value the chart keeps in its Secret."""
        if path not in SENSITIVE:
            return schema
        note = (f"Sensitive: stored in the chart's Secret, never the ConfigMap; in production "
                f"leave it empty and set {SENSITIVE[path]} instead.")
        desc = schema.get("description")
        return dict(schema, writeOnly=True, description=f"{desc} {note}" if desc else note)

    def node(value, path: str) -> dict:
        if path in by_path:
            v = by_path[path]
            s = nullable(kind_schema(v.kind))
            default = "unset" if v.default is None else f"default {v.default}"
            return sensitive(dict(s, description=f"{v.name} ({default}): {v.help}"), path)
        if path == "extraEnv":
            # A secret variable may come from a Secret (valueFrom), never as a literal value
            # written into the Deployment.
            return {
                "type": "array",
                "items": {
                    "type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string", "minLength": 1}},
                    "if": {"properties": {"name": {"enum": secrets}}, "required": ["name"]},
                    # Neither a literal value (written into the Deployment) nor a
                    # configMapKeyRef (a ConfigMap): a Secret.
                    "then": {"not": {"required": ["value"]},
                             "required": ["valueFrom"],
                             "properties": {"valueFrom": {"type": "object", "required": ["secretKeyRef"]}},
                             "description": "A secret variable: valueFrom.secretKeyRef only."},
                },
                "description": "Extra EnvVar entries. Secret variables (" + ", ".join(secrets) +
                               ") only with valueFrom.secretKeyRef, never a literal value or a "
                               "configMapKeyRef.",
            }
        if path in STRUCTURAL:
            return sensitive(dict(STRUCTURAL[path]), path)
        if path == "env":
            # A secret named here is refused with a value that says where it goes (the
            # validator prints "value must be '<that text>'"); an unknown name under the
            # relay's prefixes is refused by a list that starts with the same kind of text.
            where = {}
            for name in secrets:
                mapped = paths.get(name)
                parent = mapped.rsplit(".", 1)[0] if mapped and "." in mapped else None
                if parent and _lookup(values, f"{parent}.existingSecret") is not _MISSING:
                    where[name] = f"{parent}.existingSecret"
            refusals = {
                name: {"enum": [f"({name} is a secret and env is a ConfigMap: set "
                                f"{where[name] + ' or ' if name in where else ''}"
                                f"extraEnv with valueFrom.secretKeyRef)"],
                       "description": f"{name}: a secret, refused here."}
                for name in secrets
            }
            known = sorted(v.name for v in vars_)
            return {
                "type": "object",
                "description": "Extra or overriding environment variables, NAME: value, written "
                               "into the ConfigMap. Known variables must have their kind's form; "
                               "a name under " + ", ".join(p + "_" for p in ENV_PREFIXES) +
                               " must be one the relay reads (`sealrelay --help` lists them). "
                               "Secret variables (" + ", ".join(secrets) + ") are refused here: "
                               "they come from Secrets (their values.yaml objects' existingSecret, "
                               "or extraEnv with valueFrom.secretKeyRef).",
                "propertyNames": {
                    "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                    "if": {"pattern": "^(" + "|".join(ENV_PREFIXES) + ")_"},
                    "then": {"enum": [UNKNOWN_NAME] + known},
                },
                "properties": {**{v.name: env_schema(v) for v in vars_ if v.name not in secrets},
                               **refusals},
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            }
        if path in FREEFORM or not isinstance(value, dict) or not value:
            return sensitive(_infer(value, path), path)
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: node(v, f"{path}.{k}" if path else k) for k, v in value.items()},
        }

    top = node(values, "")
    top["properties"]["global"] = {"type": "object", "description": "Umbrella-chart globals (unused)."}
    top["allOf"] = [REPLICA_GUARD, RUNTIME_GUARD]
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": "Generated by scripts/gen_values_schema.py from the vars! table in src/config*.rs "
                    "and helm/sealrelay/values.yaml; do not edit by hand.",
        "title": "sealrelay chart values",
        **top,
    }


_MISSING = object()


def _lookup(values: dict, path: str):
    node = values
    for seg in path.split("."):
        if not isinstance(node, dict) or seg not in node:
            return _MISSING
        node = node[seg]
    return node


def render(schema: dict) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def generate(root: Path = ROOT) -> str:
    vars_ = parse_vars(root)
    return render(build_schema(vars_, (root / "helm" / "sealrelay" / "values.yaml").read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()
    try:
        text = generate()
    except SchemaError as e:
        print(f"gen_values_schema: {e}", file=sys.stderr)
        return 1
    if args.check:
        if not SCHEMA_PATH.exists() or SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH.relative_to(ROOT)} is stale: run scripts/gen_values_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
