"""Starts what the SDK compatibility suites drive: one `fawn-mock-llm` (directives mode) and
one `fawn serve` per database backend, each on 127.0.0.1 port 0, stopped by their own PIDs.

Standard library only, so both suites can use it:

* pytest imports it (see python/conftest.py);
* the JS suite runs under it: `python3 tests/sdk/harness.py -- node --test …` starts the
  servers, exports their URLs as `FAWN_SDK_SERVERS` (JSON `{"sqlite": url, "postgres": url}`)
  and their API keys as `FAWN_SDK_KEYS` (JSON `{"sqlite": {"admin": key, "other": key}, …}`),
  runs the command and stops everything, exiting with the command's status.

Every server runs with authentication on (the default of `fawn serve`). Before it starts, the
harness creates two accounts in its database with the CLI — the admin `sdk-admin@test.local`
and the plain user `sdk-other@test.local` — and mints one API key for each
(`fawn api-key create`); the suites send them as `x-api-key`.

Binaries: `FAWN_BIN` / `FAWN_MOCK_LLM_BIN`, default `target/debug/{fawn,fawn-mock-llm}`.
Backends: `FAWN_SDK_BACKENDS` (default `sqlite,postgres`); Postgres uses `TEST_DATABASE_URL`
with a fresh schema per server (dropped afterwards when `psql` is available).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/test"
START_TIMEOUT = 60.0

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# The accounts every server gets (see FawnServer.create_accounts); keys are minted per server.
USERS = {"admin": "sdk-admin@test.local", "other": "sdk-other@test.local"}
API_KEY = re.compile(r"^(fawn_\S+)$", re.MULTILINE)


def binary(env_name: str, name: str) -> Path:
    path = Path(os.environ.get(env_name) or REPO / "target" / "debug" / name)
    if not path.is_file():
        raise RuntimeError(
            f"{path} does not exist: build it first (`cargo build -p fawn -p fawn-testkit --bins`) "
            f"or set {env_name}"
        )
    return path


def backends() -> list[str]:
    raw = os.environ.get("FAWN_SDK_BACKENDS", "sqlite,postgres")
    names = [b.strip() for b in raw.split(",") if b.strip()]
    for b in names:
        if b not in ("sqlite", "postgres"):
            raise RuntimeError(f"FAWN_SDK_BACKENDS: unknown backend {b!r}")
    return names


class Process:
    """A child process whose output goes to a log file; started and stopped by its PID."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str], cwd: Path):
        self.name = name
        self.log = log
        self._log_file = open(log, "wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output()
            m = regex.search(text)
            if m:
                return m
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready:\n{self.tail()}"
                )
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} was not ready after {timeout}s:\n{self.tail()}")

    def output(self) -> str:
        try:
            return ANSI.sub("", self.log.read_text(errors="replace"))
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log_file.close()


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (
            "DATABASE_URL", "FAWN_CONFIG", "DEER_FLOW_CONFIG_PATH", "FAWN_HOME", "DEER_FLOW_HOME",
            # the servers run with authentication on, whatever the caller's environment says
            "DEER_FLOW_AUTH_DISABLED", "FAWN_INSECURE_NO_AUTH",
        )
        and not k.startswith(("OPENAI_", "ANTHROPIC_", "LANGSMITH_", "LANGCHAIN_"))
    }
    # (the mock model does not support thinking: one warning per run otherwise)
    env.setdefault("RUST_LOG", "info,fawn_agent::options=error")
    # The webhook test's receiver listens on loopback, which the SSRF guard refuses unless
    # it is allowed by name.
    env.setdefault("FAWN_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


class MockLlm:
    def __init__(self, workdir: Path):
        self.process = Process(
            "fawn-mock-llm",
            [str(binary("FAWN_MOCK_LLM_BIN", "fawn-mock-llm")), "--mode", "directives", "--port", "0"],
            workdir / "mock-llm.log",
            child_env({}),
            workdir,
        )
        m = self.process.wait_for(r"listening on (http://\S+/v1)")
        self.base_url = m.group(1)

    def stop(self) -> None:
        self.process.stop(signal.SIGINT)


CONFIG = """\
config_version: 34
log_level: info
models:
  - name: mock
    display_name: Mock model (fawn-mock-llm)
    use: langchain_openai:ChatOpenAI
    model: fawn-mock
    base_url: {base_url}
    api_key: not-needed
    max_retries: 0
    timeout: 60
    supports_thinking: false
    supports_vision: false
tool_groups:
  - name: file:read
  - name: file:write
tools:
  - name: ls
    group: file:read
    use: deerflow.sandbox.tools:ls_tool
  - name: read_file
    group: file:read
    use: deerflow.sandbox.tools:read_file_tool
  - name: write_file
    group: file:write
    use: deerflow.sandbox.tools:write_file_tool
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
  allow_host_bash: false
skills:
  path: {skills}
title:
  enabled: false
summarization:
  enabled: false
memory:
  enabled: false
database:
{database}
"""


class FawnServer:
    """`fawn serve --port 0` with a generated config on one backend, authentication on, and
    an API key per account in `USERS` (`self.keys`: {"admin": key, "other": key})."""

    def __init__(self, backend: str, mock_base_url: str, workdir: Path):
        self.backend = backend
        self.workdir = workdir
        self.pg: tuple[str, str] | None = None
        home = workdir / "home"
        (workdir / "skills").mkdir(parents=True, exist_ok=True)
        if backend == "sqlite":
            database = f"  backend: sqlite\n  sqlite_path: {home / 'data' / 'fawn.db'}"
        else:
            url = os.environ.get("TEST_DATABASE_URL") or DEFAULT_PG_URL
            schema = f"fawn_sdk_{uuid.uuid4().hex[:16]}"
            self.pg = (url, schema)
            database = f"  backend: postgres\n  url: {json.dumps(url)}\n  postgres_schema: {schema}"
        config = workdir / "config.yaml"
        config.write_text(
            CONFIG.format(base_url=mock_base_url, skills=workdir / "skills", database=database)
        )
        self.config = config
        self.env = child_env({"FAWN_HOME": str(home)})
        self.process: Process | None = None
        try:
            # (the CLI opens the same database as `serve`: same FAWN_HOME and --config)
            self.keys = self.create_accounts()
            self.process = Process(
                f"fawn serve ({backend})",
                [str(binary("FAWN_BIN", "fawn")), "serve", "--host", "127.0.0.1", "--port", "0",
                 "--config", str(config)],
                workdir / "fawn.log",
                self.env,
                workdir,
            )
            m = self.process.wait_for(r"Fawn is listening on (http://\S+)")
        except Exception:
            self.stop()
            raise
        self.url = m.group(1)

    def cli(self, *args: str) -> str:
        """Runs `fawn ARGS… --config CONFIG` against this server's database; its stdout."""
        argv = [str(binary("FAWN_BIN", "fawn")), *args, "--config", str(self.config)]
        r = subprocess.run(
            argv, env=self.env, cwd=self.workdir, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=START_TIMEOUT, check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(
                f"`{' '.join(args)}` ({self.backend}) exited with {r.returncode}:\n{r.stdout}{r.stderr}"
            )
        return ANSI.sub("", r.stdout)

    def create_accounts(self) -> dict[str, str]:
        """`fawn user add` for each of USERS (the "admin" one with --admin), then one
        `fawn api-key create` each; the keys by role."""
        keys = {}
        for role, email in USERS.items():
            self.cli("user", "add", email, *(["--admin"] if role == "admin" else []))
            out = self.cli("api-key", "create", email, "--name", f"sdk {role}")
            m = API_KEY.search(out)
            if not m:
                raise RuntimeError(f"no API key in the output of `fawn api-key create {email}`:\n{out}")
            keys[role] = m.group(1)
        return keys

    def headers(self, role: str = "admin") -> dict[str, str]:
        """The header that authenticates as `role` ("admin" or "other")."""
        return {"x-api-key": self.keys[role]}

    def stop(self) -> None:
        if self.process:
            self.process.stop(signal.SIGTERM)
        if self.pg and shutil.which("psql"):
            url, schema = self.pg
            subprocess.run(
                ["psql", url, "-q", "-c", f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                timeout=30,
            )


class Stack:
    """The mock and one server per backend, in a temporary directory."""

    def __init__(self, names: list[str] | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix="fawn-sdk-"))
        self.mock: MockLlm | None = None
        self.servers: dict[str, FawnServer] = {}
        try:
            self.mock = MockLlm(self.tmp)
            for name in names or backends():
                d = self.tmp / name
                d.mkdir()
                self.servers[name] = FawnServer(name, self.mock.base_url, d)
        except Exception:
            self.stop()
            raise

    def urls(self) -> dict[str, str]:
        return {name: s.url for name, s in self.servers.items()}

    def keys(self) -> dict[str, dict[str, str]]:
        return {name: dict(s.keys) for name, s in self.servers.items()}

    def logs(self) -> str:
        return "\n".join(
            f"--- {s.process.name} (last lines of {s.process.log}) ---\n{s.process.tail()}"
            for s in self.servers.values()
            if s.process
        )

    def stop(self, keep_logs: bool = False) -> None:
        for s in self.servers.values():
            s.stop()
        if self.mock:
            self.mock.stop()
        if not keep_logs:
            shutil.rmtree(self.tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: harness.py -- COMMAND [ARGS…]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    stack = Stack()
    failed = True
    try:
        env = dict(
            os.environ,
            FAWN_SDK_SERVERS=json.dumps(stack.urls()),
            FAWN_SDK_KEYS=json.dumps(stack.keys()),
        )
        print(f"harness: servers {stack.urls()}", flush=True)
        rc = subprocess.run(command, env=env, check=False).returncode
        failed = rc != 0
        if failed:
            print(stack.logs(), file=sys.stderr)
            print(f"harness: logs kept in {stack.tmp}", file=sys.stderr)
        return rc
    finally:
        stack.stop(keep_logs=failed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
