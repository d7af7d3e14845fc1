"""Small helpers shared by the test modules: inputs that drive the mock LLM, and waits."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable

AGENT = "lead_agent"


def mock(**directive: Any) -> str:
    """A user message that tells the mock LLM what to answer (testkit's `@mock` directive)."""
    return "@mock " + json.dumps(directive)


def user(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def slow(words: int = 60, delay_ms: int = 50) -> str:
    """A message whose answer streams `words` words, one every `delay_ms`."""
    return mock(text=" ".join(f"w{i}" for i in range(words)), delay_ms=delay_ms)


def tool_call(path: str = "/mnt/user-data", after: str = "Listed the files.") -> str:
    """A message whose answer calls the `ls` tool, then says `after`."""
    return mock(tool="ls", args={"path": path}, after_tool=after)


def clarification(question: str = "Which colour do you want?") -> str:
    return mock(
        tool="ask_clarification",
        args={"question": question, "clarification_type": "missing_info"},
    )


def messages(values: dict) -> list[dict]:
    return values.get("messages") or []


def visible(values: dict) -> list[dict]:
    """Messages a user sees (DeerFlow hides its injected reminders)."""
    return [
        m
        for m in messages(values)
        if not (m.get("additional_kwargs") or {}).get("hide_from_ui")
    ]


def last_ai(values: dict) -> dict:
    ais = [m for m in messages(values) if m["type"] == "ai"]
    assert ais, f"no AI message in {values}"
    return ais[-1]


def answer_text(values: dict) -> str:
    content = last_ai(values)["content"]
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content


def without_owner(metadata: dict) -> dict:
    """Thread metadata without the `owner` (the creating user's id) the server stamps on it."""
    return {k: v for k, v in metadata.items() if k != "owner"}


def eventually(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_status(client, thread_id: str, run_id: str, statuses=("success",), timeout=20.0) -> dict:
    def check():
        run = client.runs.get(thread_id, run_id)
        return run if run["status"] in statuses else None

    return eventually(check, timeout, f"run {run_id} to reach {statuses}")


def wait_running(client, thread_id: str, run_id: str, timeout=20.0) -> dict:
    return wait_status(client, thread_id, run_id, ("running",), timeout)


def tag() -> str:
    """A unique value to scope searches to one test."""
    return uuid.uuid4().hex


def events(parts) -> list[tuple[str, Any]]:
    return [(p.event, p.data) for p in parts]


def names(parts) -> list[str]:
    return [p.event for p in parts]
