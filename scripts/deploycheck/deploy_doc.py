"""docs/deploy.md and the install paths: the documented Secrets and images, env secrets, monitoring defaults, versions, two releases on one cluster, the alerts' job."""

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
    K8S,
    MONITORING_API,
    ROOT,
    RUNBOOK_BASE,
    check,
    kinds,
    load_yaml_docs,
    one,
    refused,
    rel,
    render_docs,
    run,
    secret_vars,
    strip,
    var_kinds,
)
from .k8s import (  # noqa: F401
    k8s_docs,
)
from .chart import (  # noqa: F401
    container_of,
)

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
