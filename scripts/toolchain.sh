#!/usr/bin/env bash
# Makes the toolchain rust-toolchain.toml pins available, before anything runs cargo.
#
# With network access rustup installs the pinned version itself. A machine without it (the CI
# machines reach crates.io and no other Rust host) often carries that same version as its one
# `stable` toolchain: rustup then refuses it by number, so this names the installed toolchain
# by its number too (a link in rustup's toolchain directory). Anything else is left to rustup,
# whose own error then says what is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
want="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$root/rust-toolchain.toml")"
command -v rustup >/dev/null 2>&1 || exit 0
# Already there (installed, downloaded or linked before).
if (cd "$root" && rustup run "$want" rustc --version) >/dev/null 2>&1; then exit 0; fi
# Outside the tree, rustup's default toolchain answers.
default_sysroot="$(cd / && rustc --print sysroot 2>/dev/null || true)"
default_version="$(cd / && rustc --version 2>/dev/null | awk '{print $2}')"
if [ -n "$default_sysroot" ] && [ "$default_version" = "$want" ]; then
  host="$(cd / && rustc -vV | sed -n 's/^host: //p')"
  toolchains="${RUSTUP_HOME:-$HOME/.rustup}/toolchains"
  ln -sfn "$default_sysroot" "$toolchains/$want-$host"
  echo "toolchain $want: the installed $(basename "$default_sysroot") is $want; named it $want-$host" >&2
fi
