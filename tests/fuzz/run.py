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


def main() -> int:
    budget = os.environ.get("FAWN_FUZZ_SECONDS", "150")
    schemathesis = Path(sys.executable).parent / "schemathesis"
    stack = harness.Stack(["sqlite"])
    server = stack.servers["sqlite"]
    rc = 1
    try:
        cmd = [
            str(schemathesis), "run", f"{server.url}/openapi.json",
            "--checks", "not_a_server_error",
            "--header", f"x-api-key: {server.keys['admin']}",
            "--max-time", budget,
            "--request-timeout", "10",
            "--workers", "2",
            "--exclude-path-regex", r"^/api/langgraph/|/internal/truncate|^/api/channels/",
            "--suppress-health-check", "all",
            "--seed", os.environ.get("FAWN_FUZZ_SEED", "20261126"),
        ]
        print("fuzz:", " ".join(c if "x-api-key" not in c else "--header x-api-key: …" for c in cmd),
              flush=True)
        rc = subprocess.run(cmd, check=False).returncode
        if rc != 0:
            print(stack.logs(), file=sys.stderr)
    finally:
        stack.stop(keep_logs=rc != 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
