#!/usr/bin/env bash
# User-space instructions per DeerFlow-shaped run, counted by callgrind (docs/benchmarks.md,
# "Instructions per run"): `fawn serve` on SQLite (or Postgres) under valgrind, the rules mock
# (a present_files call, then the answer), title generation on, the file tools configured;
# 200 warm-up runs uninstrumented, then 200 streamed runs at c=4 instrumented.
#
#   scripts/instructions-per-run.sh [BIN_DIR] [--postgres URL]
#
# BIN_DIR holds fawn, fawn-mock-llm and server_load (default target/release; build them with
# `cargo build --release -p fawn -p fawn-testkit -p fawn-bench`). With --postgres the server
# uses that database, in a schema of its own that is dropped afterwards (needs psql).
# Needs valgrind (callgrind_control, callgrind_annotate). Prints the total and the per-run
# count; the callgrind file stays in the work directory it names. Run it on an otherwise idle
# machine: other load changes how SQLite's commits group, and the count with it (~1 %).
set -euo pipefail

bin=target/release
pg_url=""
while [ $# -gt 0 ]; do
  case "$1" in
    --postgres) pg_url="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) bin="$1"; shift ;;
  esac
done
bin=$(cd "$bin" && pwd)
for b in fawn fawn-mock-llm server_load; do
  [ -x "$bin/$b" ] || { echo "missing $bin/$b" >&2; exit 2; }
done
command -v callgrind_control >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

work=$(mktemp -d /tmp/fawn-instructions.XXXXXX)
schema="fawn_instr_$$"
mock_pid=""
server_pid=""
cleanup() {
  for pid in $server_pid $mock_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "$pg_url" ]; then
    psql -q "$pg_url" -c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true
  fi
  return 0
}
trap cleanup EXIT

# A free port from the kernel, for each of the two servers.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mock_port=$(free_port)
port=$(free_port)

"$bin/fawn-mock-llm" --port "$mock_port" --mode rules --tool present_files \
  --tool-args '{"filepaths": ["/mnt/user-data/outputs/report.md"]}' \
  --after-tool 'Done: the report is ready.' >"$work/mock.log" 2>&1 &
mock_pid=$!

cat >"$work/config.yaml" <<YAML
models:
  - name: mock
    use: langchain_openai:ChatOpenAI
    model: fawn-mock
    base_url: http://127.0.0.1:$mock_port/v1
    api_key: bench
    max_retries: 0
title:
  enabled: true
  model_name: mock
memory:
  enabled: false
tool_groups:
  - name: file:read
  - name: file:write
tools:
  - {name: ls, group: file:read, use: "deerflow.sandbox.tools:ls_tool"}
  - {name: read_file, group: file:read, use: "deerflow.sandbox.tools:read_file_tool"}
  - {name: glob, group: file:read, use: "deerflow.sandbox.tools:glob_tool"}
  - {name: grep, group: file:read, use: "deerflow.sandbox.tools:grep_tool"}
  - {name: write_file, group: file:write, use: "deerflow.sandbox.tools:write_file_tool"}
  - {name: str_replace, group: file:write, use: "deerflow.sandbox.tools:str_replace_tool"}
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
YAML
if [ -n "$pg_url" ]; then
  cat >>"$work/config.yaml" <<YAML
database:
  backend: postgres
  url: $pg_url
  postgres_schema: $schema
YAML
fi

out="$work/callgrind.out"
FAWN_HOME="$work" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
  "$bin/fawn" serve --no-auth --port "$port" --config "$work/config.yaml" >"$work/server.log" 2>&1 &
server_pid=$!

# valgrind starts slowly: wait for /ok (bounded), never for a fixed time.
for _ in $(seq 1 1200); do
  curl -sf "http://127.0.0.1:$port/ok" >/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.25
done
curl -sf "http://127.0.0.1:$port/ok" >/dev/null || { echo "server did not start" >&2; exit 1; }

load() { "$bin/server_load" --target "fawn=http://127.0.0.1:$port" --rounds 1 --workload deerflow "$@"; }
load --warmup 200 --only stream:4:20 >"$work/warmup.log" 2>&1
callgrind_control -i on "$server_pid" >/dev/null 2>&1
load --warmup 0 --only stream:4:200 >"$work/load.log" 2>&1
callgrind_control -d "$server_pid" >/dev/null 2>&1
grep -q "err=0" "$work/load.log" || { cat "$work/load.log" >&2; exit 1; }

dump=$(ls -t "$out".* | head -1)
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "instructions: $total over 200 runs, $((total / 200)) per run ($dump)"
