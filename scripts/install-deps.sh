#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain. Safe to run repeatedly.
set -euo pipefail

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)

if ((${#need_apt[@]})); then
  echo "install-deps: installing ${need_apt[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null || true
  $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v bwrap >/dev/null 2>&1 || { echo "install-deps: bubblewrap is required" >&2; exit 1; }
