"""The Helm chart, rendered: deployments, secrets, monitoring, capabilities, probes, policies, tracing, the admin API and the front-ends."""

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
    CHART,
    Check,
    GATEWAY_API,
    MONITORING_API,
    ROOT,
    RUNBOOK,
    VAR_PATTERN,
    check,
    ci_value_sets,
    kinds,
    kube_validate,
    one,
    refused,
    render_docs,
    secret_vars,
    strip,
    var_kinds,
)
from .k8s import (  # noqa: F401
    k8s_docs,
)

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
                          ("autoscaling without Redis", {"autoscaling": {"enabled": True}}),
                          ("runtime=per-core without Redis", {"runtime": "per-core"})):
        report = helm.lint(str(CHART), values, strict=True, namespace="relay")
        errors = [m.get("error") for m in report.get("messages") or [] if m.get("severity", 0) >= 2]
        errors += report.get("errors") or []
        if not any("needs Redis" in str(e) or "only through Redis" in str(e) for e in errors):
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
