"""`/metrics` read as Prometheus reads it: parsed by the Prometheus project's own Python parser
and checked by `promtool check metrics`, with exact deltas for a known load (this module is
the only thing running on the server while it measures)."""

from __future__ import annotations

import shutil
import subprocess
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sdkutil import AGENT, tool_call, user


def scrape(http: httpx.Client) -> tuple[str, dict[tuple, float]]:
    r = http.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: dict[tuple, float] = {}
    for family in text_string_to_metric_families(r.text):
        assert family.documentation, f"{family.name} has no HELP"
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return r.text, samples


def value(samples: dict[tuple, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_idle(http: httpx.Client) -> dict[tuple, float]:
    """The server's figures once no run is pending or running (earlier tests may have left a
    background run going)."""
    deadline = time.monotonic() + 60
    while True:
        _, s = scrape(http)
        busy = (
            value(s, "fawn_runs_pending")
            + value(s, "fawn_runs_running")
            + value(s, "fawn_runs_executing")
        )
        if busy == 0:
            return s
        assert time.monotonic() < deadline, "runs never settled"
        time.sleep(0.05)


def test_metrics_pass_promtool_and_move_exactly_with_load(server, client, http):
    before = wait_idle(http)
    n = 3
    for i in range(n):
        thread = client.threads.create()
        client.runs.wait(thread["thread_id"], AGENT, input=user(tool_call(after=f"done {i}")))
    text, after = scrape(http)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("fawn_runs_created_total") == n
    assert grew("fawn_runs_finished_total", status="success") == n
    assert grew("fawn_run_duration_seconds_count", status="success") == n
    assert grew("fawn_run_attempts_total", kind="first") == n
    # Each run: a model call that asks for `ls`, the tool, a model call that answers.
    assert grew("fawn_model_calls_total", model="mock", outcome="ok") == 2 * n
    assert grew("fawn_model_call_duration_seconds_count", model="mock") == 2 * n
    assert grew("fawn_model_tokens_total", model="mock", direction="input", source="provider") > 0
    assert grew("fawn_tool_calls_total", tool="ls", outcome="ok") == n
    assert grew("fawn_tool_call_duration_seconds_count", tool="ls") == n
    assert (
        grew(
            "fawn_http_requests_total",
            method="POST",
            route="/threads/{thread_id}/runs/wait",
            status="2xx",
        )
        == n
    )
    assert grew("fawn_checkpoint_writes_total") >= n
    info = [dict(labels) for (name, labels), v in after.items() if name == "fawn_build_info" and v == 1]
    assert [i["store"] for i in info] == [server.backend], info
    assert value(after, "process_resident_memory_bytes") > 0

    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed by scripts/install-deps.sh"
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()


def test_metrics_as_json_and_for_admins_only(server, http):
    r = http.get("/metrics", params={"format": "json"})
    assert r.status_code == 200
    body = r.json()
    assert set(body["queue"]) >= {"n_pending", "n_running"}
    assert set(body["workers"]) == {"max", "active", "available"}
    assert body["metrics"]["fawn_runs_finished_total"]["type"] == "counter"
    assert server.backend in body
    with httpx.Client(base_url=server.url, headers=server.headers("other"), timeout=30) as other:
        assert other.get("/metrics").status_code == 403
    assert httpx.get(f"{server.url}/metrics", timeout=30).status_code == 401
