"""Fuzzes Fawn's whole HTTP API with schemathesis: one `fawn serve` (SQLite, authentication
on, the testkit mock LLM; started by ../sdk/harness.py), its own `/openapi.json` as the
schema, the admin's API key, a time budget, and one check: `not_a_server_error`. Zero 5xx
answers is the bar; any is a failure with the request that caused it.

    .venv-fuzz/bin/python tests/fuzz/run.py        # FAWN_FUZZ_SECONDS (default 150)

The `/api/langgraph` mount serves the same handlers as `/`, so it is left out to spend the
budget on distinct routes; the test hook `/internal/truncate` is left out too (it would wipe
what the fuzzer builds on), and so are DeerFlow's IM channel routes, which Fawn does not
implement and which answer 501 by design.
"""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))

import harness  # noqa: E402


# The schemathesis CLI, with its transports imported first, on the main thread. Left to it,
# its two worker threads import them on their first case at the same moment, and Python
# 3.11 can then fail the import (anyio compiles its own source as it loads, and concurrent
# `compile` calls trip CPython's "AST constructor recursion depth mismatch"): an error of
# the fuzzer, reported for every case of the operations it hit, not of the server.
SCHEMATHESIS = (
    "import sys\n"
    "import schemathesis.transport.asgi, schemathesis.transport.requests, "
    "schemathesis.transport.wsgi\n"
    "from schemathesis.cli import schemathesis\n"
    "sys.argv[0] = 'schemathesis'\n"
    "sys.exit(schemathesis())\n"
)


def main() -> int:
    budget = os.environ.get("FAWN_FUZZ_SECONDS", "150")
    stack = harness.Stack(["sqlite"])
    server = stack.servers["sqlite"]
    rc = 1
    try:
        cmd = [
            sys.executable, "-c", SCHEMATHESIS, "run", f"{server.url}/openapi.json",
            "--checks", "not_a_server_error",
            "--header", f"x-api-key: {server.keys['admin']}",
            "--max-time", budget,
            "--request-timeout", "10",
            "--workers", "2",
            "--exclude-path-regex", r"^/api/langgraph/|/internal/truncate|^/api/channels/",
            "--suppress-health-check", "all",
            "--seed", os.environ.get("FAWN_FUZZ_SEED", "20261126"),
        ]
        shown = ["schemathesis"] + cmd[3:]
        print("fuzz:", " ".join(c if "x-api-key" not in c else "x-api-key: …" for c in shown),
              flush=True)
        rc = subprocess.run(cmd, check=False).returncode
        if rc != 0:
            print(stack.logs(), file=sys.stderr)
    finally:
        stack.stop(keep_logs=rc != 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
