#!/usr/bin/env bash
# The dependency policy (deny.toml): licences, banned crates, duplicate versions and sources,
# checked by cargo-deny at the version the policy is written for (installed from crates.io
# when missing). Advisories need RustSec's database from GitHub, which CI machines here cannot
# reach: `CHECK_ADVISORIES=1 scripts/check-deps.sh` adds them where it can be fetched.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
if ! cargo deny --version 2>/dev/null | grep -q "^cargo-deny $DENY_VERSION\$"; then
  echo "== installing cargo-deny $DENY_VERSION" >&2
  cargo install --locked cargo-deny --version "$DENY_VERSION"
fi
checks=(bans licenses sources)
[ "${CHECK_ADVISORIES:-0}" = 1 ] && checks+=(advisories)
cargo deny --locked check "${checks[@]}"
