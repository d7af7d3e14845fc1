"""Fixtures: one mock LLM and one `fawn serve` per backend for the whole session (see
../harness.py); every test runs once per backend through the parametrized `server` fixture.

The servers run with authentication on: `client` and `http` act as the admin account
(`server.keys["admin"]`); `server.keys["other"]` is a plain user's key (see test_auth.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402


@pytest.fixture(scope="session")
def stack():
    s = harness.Stack()
    failed_before = _failures()
    yield s
    keep = _failures() > failed_before
    if keep:
        print(f"\nfawn logs kept in {s.tmp}", file=sys.stderr)
    s.stop(keep_logs=keep)


_session = {"failed": 0}


def _failures() -> int:
    return _session["failed"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _session["failed"] += 1
        server = item.funcargs.get("server") if hasattr(item, "funcargs") else None
        if server is not None:
            report.sections.append(
                (f"fawn log ({server.backend})", server.process.tail(40))
            )


@pytest.fixture(scope="session", params=harness.backends())
def server(request, stack):
    return stack.servers[request.param]


@pytest.fixture
def client(server):
    return get_sync_client(url=server.url, api_key=server.keys["admin"], timeout=30)


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, headers=server.headers("admin"), timeout=30) as c:
        yield c
