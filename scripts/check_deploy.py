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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_values_schema as gvs  # noqa: E402
from deploycheck.common import (  # noqa: E402
    CHECKS,
    PENDING_VARS,
    config_vars,
    declared_metrics,
)
from deploycheck.k8s import (  # noqa: E402
    check_k8s,
    check_k8s_hpa,
)
from deploycheck.values import (  # noqa: E402
    check_copies,
    check_schema_generated,
    check_schema_refusals,
    check_values_refs,
    check_vars,
)
from deploycheck.chart import (  # noqa: E402
    check_admin_api,
    check_capabilities,
    check_exposure,
    check_frontend_egress,
    check_frontend_secrets,
    check_helm_refusals,
    check_helm_render,
    check_helm_test,
    check_networkpolicy,
    check_pdb,
    check_termination_grace,
    check_tracing,
)
from deploycheck.deploy_doc import (  # noqa: E402
    check_alert_job,
    check_deploy_doc,
    check_env_secrets,
    check_k8s_comments,
    check_monitoring_defaults,
    check_no_redis_strategy,
    check_versions,
)
from deploycheck.monitoring import (  # noqa: E402
    check_alert_rules,
    check_dashboard,
    check_dashboard_content,
    check_dockerfile,
    check_frontend_alerts,
    check_installer,
    check_metric_names,
    check_rendered_rules,
    check_rule_tests,
    check_runbook,
    check_slo_alerts,
)


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
