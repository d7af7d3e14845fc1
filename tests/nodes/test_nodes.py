"""Three `fawn serve` processes on one Postgres schema behind a round-robin TCP proxy, driven
by the Python LangGraph SDK as a user behind a load balancer would: every request opens a
new connection, so consecutive requests land on different nodes. Once with the database
alone and once with the Redis event bus:

* a streamed run, joined through the proxy (so, usually, on another node), ends on both
  streams with the same final state; with Redis the joined stream is event for event the
  one its creator received;
* `cancel(wait=True)` through the proxy stops a run whatever node executes it;
* kill -9 of the node executing a run: another node finishes it, exactly once;
* state reads through the proxy agree whichever node answers.

Run by `make nodes-test` (the SDK venv, `TEST_DATABASE_URL`, Redis on 127.0.0.1:6379 or
`TEST_REDIS_URL`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk" / "python"))

import harness  # noqa: E402
from sdkutil import AGENT, mock, slow, user  # noqa: E402

NODES = 3
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")


class Proxy:
    """Round-robin TCP proxy: each accepted connection goes to the next live backend."""

    def __init__(self, backends: list[tuple[str, int]]):
        self.backends = backends
        self.dead: set[int] = set()
        self.turn = itertools.count()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        for _ in range(len(self.backends)):
            i = next(self.turn) % len(self.backends)
            if i in self.dead:
                continue
            try:
                upstream = socket.create_connection(self.backends[i], timeout=5)
                upstream.settimeout(None)
                break
            except OSError:
                self.dead.add(i)
        if upstream is None:
            client.close()
            return

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


class Cluster:
    def __init__(self, redis: bool):
        self.tmp = Path(tempfile.mkdtemp(prefix="fawn-nodes-"))
        self.mock = harness.MockLlm(self.tmp)
        url = os.environ.get("TEST_DATABASE_URL") or harness.DEFAULT_PG_URL
        self.pg = (url, f"fawn_nodes_{uuid.uuid4().hex[:16]}")
        self.nodes: list[harness.Process] = []
        self.ports: list[int] = []
        extra = {"REDIS_URL": REDIS_URL} if redis else {}
        database = (
            f"  backend: postgres\n  url: {json.dumps(url)}\n  postgres_schema: {self.pg[1]}"
        )
        config = harness.CONFIG.format(
            base_url=self.mock.base_url, skills=self.tmp / "skills", database=database
        ) + "run_ownership:\n  lease_seconds: 2\n"
        (self.tmp / "skills").mkdir()
        self.config = self.tmp / "config.yaml"
        self.config.write_text(config)
        self.secret = uuid.uuid4().hex + uuid.uuid4().hex
        try:
            for i in range(NODES):
                env = harness.child_env(
                    {"FAWN_HOME": str(self.tmp / f"home{i}"), "AUTH_JWT_SECRET": self.secret, **extra}
                )
                if i == 0:
                    self.key = self._make_key(env)
                node = harness.Process(
                    f"node{i}",
                    [str(harness.binary("FAWN_BIN", "fawn")), "serve", "--port", "0",
                     "--config", str(self.config)],
                    self.tmp / f"node{i}.log",
                    env,
                    self.tmp,
                )
                m = node.wait_for(r"Fawn is listening on http://[\d.]+:(\d+)")
                self.nodes.append(node)
                self.ports.append(int(m.group(1)))
        except Exception:
            self.stop()
            raise
        self.proxy = Proxy([("127.0.0.1", p) for p in self.ports])
        # A new connection per request: consecutive requests go to different nodes.
        self.headers = {"connection": "close"}

    def _make_key(self, env: dict[str, str]) -> str:
        def cli(*args: str) -> str:
            r = subprocess.run(
                [str(harness.binary("FAWN_BIN", "fawn")), *args, "--config", str(self.config)],
                env=env, capture_output=True, text=True, timeout=60, check=True,
            )
            return r.stdout

        cli("user", "add", "nodes@test.local", "--admin")
        return cli("api-key", "create", "nodes@test.local").strip()

    def client(self, node: int | None = None):
        url = self.proxy.url if node is None else f"http://127.0.0.1:{self.ports[node]}"
        return get_sync_client(url=url, api_key=self.key, headers=self.headers, timeout=60)

    def executing(self, i: int) -> float:
        """Node `i`'s `fawn_runs_executing` gauge: the runs it executes now."""
        r = httpx.get(f"http://127.0.0.1:{self.ports[i]}/metrics", headers={"x-api-key": self.key},
                      timeout=10)
        assert r.status_code == 200, r.text
        for line in r.text.splitlines():
            if line.startswith("fawn_runs_executing "):
                return float(line.split()[1])
        raise AssertionError(f"node{i}'s /metrics has no fawn_runs_executing")

    def kill(self, i: int) -> None:
        self.nodes[i].stop(signal.SIGKILL)
        self.proxy.dead.add(i)

    def logs(self) -> str:
        return "\n".join(f"--- {n.name} ---\n{n.tail()}" for n in self.nodes)

    def stop(self) -> None:
        if getattr(self, "proxy", None):
            self.proxy.close()
        for n in self.nodes:
            n.stop(signal.SIGTERM)
        self.mock.stop()
        if shutil.which("psql"):
            subprocess.run(["psql", self.pg[0], "-q", "-c", f'DROP SCHEMA IF EXISTS "{self.pg[1]}" CASCADE'],
                           capture_output=True, check=False, timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(params=["postgres", "postgres+redis"], scope="module")
def cluster(request):
    c = Cluster(redis=request.param.endswith("redis"))
    c.redis = request.param.endswith("redis")
    yield c
    c.stop()


def wait_status(client, tid: str, rid: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = client.runs.get(tid, rid)
        if run["status"] not in ("pending", "running"):
            return run
        assert time.monotonic() < deadline, f"run still {run['status']}"
        time.sleep(0.05)


def test_streams_joined_on_other_nodes_end_alike(cluster):
    c = cluster.client()
    tid = c.threads.create()["thread_id"]
    stream = c.runs.stream(
        tid, AGENT, input=user(slow(40, 30)),
        stream_mode=["values", "messages-tuple"], stream_resumable=True,
    )
    created = []
    rid = None
    for part in stream:
        created.append((part.event, part.data))
        if part.event == "metadata":
            rid = part.data["run_id"]
            break
    joined: list = []

    def join():
        for part in cluster.client().runs.join_stream(tid, rid, last_event_id="-1"):
            joined.append((part.event, part.data))

    joiner = threading.Thread(target=join)
    joiner.start()
    for part in stream:
        created.append((part.event, part.data))
    joiner.join(60)
    assert not joiner.is_alive()
    final = [d for e, d in created if e == "values"][-1]
    joined_values = [d for e, d in joined if e == "values"]
    assert joined_values and joined_values[-1] == final
    if cluster.redis:
        assert joined == created, "with Redis, the joined stream is the creator's"
    # Whichever node answers, the state is the same.
    states = {json.dumps(cluster.client().threads.get_state(tid)["values"], sort_keys=True)
              for _ in range(NODES)}
    assert len(states) == 1


def test_cancel_from_any_node(cluster):
    c = cluster.client()
    tid = c.threads.create()["thread_id"]
    run = c.runs.create(tid, AGENT, input=user(slow(400, 50)))
    deadline = time.monotonic() + 30
    while c.runs.get(tid, run["run_id"])["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Through the proxy: most likely not the node that executes it.
    cluster.client().runs.cancel(tid, run["run_id"], wait=True)
    assert c.runs.get(tid, run["run_id"])["status"] == "interrupted"


def test_a_killed_nodes_run_finishes_once_elsewhere(cluster):
    victim = len([n for n in cluster.nodes if n.proc.poll() is None]) - 1
    direct = cluster.client(victim)
    tid = direct.threads.create()["thread_id"]
    # Created on the victim, which claims it at once (its thread is free).
    run = direct.runs.create(tid, AGENT, input=user(slow(60, 50)))
    rid = run["run_id"]
    deadline = time.monotonic() + 30
    while direct.runs.get(tid, rid)["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The node killed is the one executing the run: the only run executing anywhere (a node
    # counts it a moment after the claim, and the previous test's run a moment after it ends).
    live = [i for i, n in enumerate(cluster.nodes) if n.proc.poll() is None]
    while True:
        counts = {i: cluster.executing(i) for i in live}
        if counts[victim] == 1 and sum(counts.values()) == 1:
            break
        assert time.monotonic() < deadline, f"node{victim} should execute the run: {counts}"
        time.sleep(0.05)
    cluster.kill(victim)
    c = cluster.client()
    done = wait_status(c, tid, rid)
    assert done["status"] == "success", done
    answers = [m for m in c.threads.get_state(tid)["values"]["messages"] if m["type"] == "ai"]
    assert len(answers) == 1, f"the run finished exactly once: {answers}"
