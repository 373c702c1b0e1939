"""k8s/: the plain manifests validated and matched to the configuration."""

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
    K8S,
    KUBE_VERSIONS,
    VAR_PATTERN,
    check,
    kube_validate,
    load_yaml_docs,
    rel,
)

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
