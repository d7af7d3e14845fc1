#!/usr/bin/env bash
# Starts the official LangGraph server (`langgraph dev`, in-memory runtime) over graph.py,
# for benchmarking it beside Fawn with the same client (`server_load --target`).
#
#   MOCK_LLM_URL=http://127.0.0.1:PORT/v1 scripts/official-server/run.sh [PORT] [langgraph dev args...]
#
# PORT defaults to 2025. The first run creates .venv-official here and installs
# requirements.txt (pinned, with constraints.txt for every transitive package) from PyPI;
# later runs reuse it. The server process is this script's own PID (exec), so
# `server_load --target-pid $!` measures it.
#
# Offline: the CLI's analytics, the server's version check against PyPI, LangSmith tracing
# and the Studio browser are turned off below, and no license key reaches it (so its
# metadata loop does not start). MOCK_LLM_URL must be a loopback address: the benchmark
# never talks to a real LLM. Environment knobs:
#   N_JOBS_PER_WORKER  concurrent runs the server executes (default 16; `langgraph dev`
#                      alone runs 1 at a time)
#   PYTHON             interpreter for the venv (default: python3.11, else python3; >= 3.11)
#   OFFICIAL_WORKSPACE_ROOT  where the file tools write (default: a fresh temporary dir)
#   KEEP_DATA=1        keep the threads and runs of the last start: by default each start
#                      removes .langgraph_api/ here (the in-memory runtime's periodic pickle
#                      files), so a benchmark starts from an empty server as Fawn's does
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port="${1:-2025}"
[ $# -gt 0 ] && shift

die() {
  echo "official-server/run.sh: $*" >&2
  exit 1
}

[[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$port'"
[ -n "${MOCK_LLM_URL:-}" ] ||
  die "set MOCK_LLM_URL to the mock LLM's base URL, e.g. http://127.0.0.1:PORT/v1 (start target/dist/fawn-mock-llm --mode rules --tool present_files ...)"
case "$MOCK_LLM_URL" in
  http://127.*|http://localhost[:/]*|http://\[::1\]*) ;;
  *) die "MOCK_LLM_URL must be a loopback address (the benchmark never reaches a real LLM): $MOCK_LLM_URL" ;;
esac

python="${PYTHON:-}"
if [ -z "$python" ]; then
  if command -v python3.11 >/dev/null; then python=python3.11; else python=python3; fi
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  die "$python is older than 3.11; the in-memory server needs 3.11+ (set PYTHON)"

venv="$here/.venv-official"
stamp="$venv/.installed"
if [ ! -f "$stamp" ] || [ "$here/requirements.txt" -nt "$stamp" ] || [ "$here/constraints.txt" -nt "$stamp" ]; then
  echo "official-server: installing requirements into $venv" >&2
  "$python" -m venv "$venv" || die "could not create the venv $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    -r "$here/requirements.txt" -c "$here/constraints.txt" ||
    die "pip install failed (PyPI must be reachable for the first run)"
  touch "$stamp"
fi

# Nothing leaves the machine: no CLI analytics, no PyPI version check, no LangSmith tracing,
# no license or control-plane key (the metadata loop stays off), no Studio browser
# (--no-browser below).
export LANGGRAPH_CLI_NO_ANALYTICS=1
export LANGGRAPH_NO_VERSION_CHECK=true
export LANGSMITH_TRACING=false LANGSMITH_TRACING_V2=false LANGCHAIN_TRACING_V2=false LANGCHAIN_TRACING=false
unset LANGSMITH_API_KEY LANGCHAIN_API_KEY LANGSMITH_ENDPOINT LANGCHAIN_ENDPOINT \
  LANGGRAPH_CLOUD_LICENSE_KEY LANGSMITH_CONTROL_PLANE_API_KEY OPENAI_BASE_URL
export OPENAI_API_KEY=bench
export MOCK_LLM_URL
export N_JOBS_PER_WORKER="${N_JOBS_PER_WORKER:-16}"

# `langgraph dev` quietly takes another port when PORT is busy; a benchmark must not end up
# talking to whatever holds PORT, so refuse instead.
"$venv/bin/python" -c 'import socket, sys; socket.socket().bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null ||
  die "port $port is already in use"

cd "$here"
if [ "${KEEP_DATA:-0}" != 1 ]; then
  rm -rf "$here/.langgraph_api"
fi
exec "$venv/bin/langgraph" dev --no-browser --no-reload --host 127.0.0.1 --port "$port" \
  --n-jobs-per-worker "$N_JOBS_PER_WORKER" "$@"
