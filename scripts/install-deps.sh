#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Safe to run repeatedly.
# - bubblewrap (the bash sandbox);
# - promtool (Debian's prometheus package; the metrics test checks /metrics with it);
# - python3 with venv/ensurepip and node >= 20 with npm (the SDK compatibility suites; the
#   pinned SDKs themselves are installed by `make sdk-test` into .venv and tests/sdk/js).
set -euo pipefail

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
else
  need_apt+=(python3 python3-venv)
fi

if ((${#need_apt[@]})); then
  echo "install-deps: installing ${need_apt[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null || true
  $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
command -v bwrap >/dev/null 2>&1 || { echo "install-deps: bubblewrap is required" >&2; exit 1; }
command -v promtool >/dev/null 2>&1 || { echo "install-deps: promtool (package prometheus) is required" >&2; exit 1; }
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || {
  echo "install-deps: python3 with venv/ensurepip is required (tests/sdk/python)" >&2
  exit 1
}
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ] || ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: node >= 20 with npm is required (tests/sdk/js); found: $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi
