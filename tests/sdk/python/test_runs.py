"""Thread runs: create/stream/wait/join/join_stream/list/get/cancel/delete, batch and
cancel_many, with the headers the SDK reads (Content-Location, Location)."""

import uuid

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError

from sdkutil import (
    AGENT,
    answer_text,
    eventually,
    messages,
    names,
    slow,
    tag,
    tool_call,
    user,
    visible,
    wait_running,
    wait_status,
)

RUN_KEYS = {
    "run_id", "thread_id", "assistant_id", "created_at", "updated_at", "status", "metadata",
    "multitask_strategy", "kwargs",
}


def test_stream_reports_the_run_and_ends_with_a_terminal_run(client):
    tid = client.threads.create()["thread_id"]
    created = []
    parts = list(
        client.runs.stream(
            tid, AGENT, input=user("hello stream"), on_run_created=created.append,
            metadata={"who": "sdk"},
        )
    )
    assert parts[0].event == "metadata"
    rid = parts[0].data["run_id"]
    assert created == [{"run_id": rid, "thread_id": tid}], "Content-Location carries both ids"
    assert set(names(parts)) == {"metadata", "values"}
    assert "hello stream" in answer_text(parts[-1].data)
    run = client.runs.get(tid, rid)
    assert run["status"] == "success"
    assert set(run) >= RUN_KEYS
    assert run["metadata"]["who"] == "sdk"
    assert run["assistant_id"] == client.assistants.search(graph_id=AGENT)[0]["assistant_id"]
    assert run["kwargs"]["stream_mode"] == ["values"]
    th = client.threads.get(tid)
    assert th["status"] == "idle"
    assert th["metadata"]["graph_id"] == AGENT and th["metadata"]["assistant_id"] == run["assistant_id"]
    assert th["values"] == parts[-1].data


def test_wait_returns_the_final_values(client):
    tid = client.threads.create()["thread_id"]
    created = []
    out = client.runs.wait(tid, AGENT, input=user(tool_call(after="all listed")), on_run_created=created.append)
    assert answer_text(out) == "all listed"
    kinds = [m["type"] for m in visible(out)]
    assert kinds == ["human", "ai", "tool", "ai"]
    tool_msg = [m for m in messages(out) if m["type"] == "tool"][0]
    assert tool_msg["name"] == "ls" and tool_msg["status"] == "success"
    assert "/mnt/user-data/workspace" in tool_msg["content"]
    ai_call = [m for m in messages(out) if m["type"] == "ai"][0]
    assert ai_call["tool_calls"][0]["name"] == "ls"
    assert ai_call["tool_calls"][0]["args"] == {"path": "/mnt/user-data"}
    assert ai_call["tool_calls"][0]["id"] == tool_msg["tool_call_id"]
    assert created and created[0]["thread_id"] == tid
    assert client.runs.get(tid, created[0]["run_id"])["status"] == "success"


def test_background_run_then_join_and_list(client):
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, AGENT, input=user("in the background"), metadata={"n": 1})
    assert run["status"] in ("pending", "running")
    assert run["thread_id"] == tid
    assert client.threads.get(tid)["status"] in ("busy", "idle")
    out = client.runs.join(tid, run["run_id"])
    assert "in the background" in answer_text(out)
    assert client.runs.get(tid, run["run_id"])["status"] == "success"
    # a join on a finished run returns the thread's values at once
    assert client.runs.join(tid, run["run_id"]) == out

    r2 = client.runs.create(tid, AGENT, input=user("second"))
    client.runs.join(tid, r2["run_id"])
    listed = client.runs.list(tid)
    assert [r["run_id"] for r in listed] == [r2["run_id"], run["run_id"]], "newest first"
    assert [r["run_id"] for r in client.runs.list(tid, limit=1, offset=1)] == [run["run_id"]]
    assert client.runs.list(tid, status="success", select=["run_id", "status"]) == [
        {"run_id": r2["run_id"], "status": "success"},
        {"run_id": run["run_id"], "status": "success"},
    ]
    assert client.runs.list(tid, status="pending") == []


def test_busy_while_running_then_join_stream(client):
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(
        tid, AGENT, input=user(slow(words=60, delay_ms=30)),
        stream_mode=["values", "messages-tuple"],
    )
    rid = run["run_id"]
    assert client.threads.get(tid)["status"] == "busy"
    wait_running(client, tid, rid)
    parts = list(client.runs.join_stream(tid, rid))
    assert parts, "a live join sees the rest of the run"
    assert {"messages", "values"} & set(names(parts))
    assert client.runs.get(tid, rid)["status"] == "success"
    assert client.threads.get(tid)["status"] == "idle"
    # a join with a stream_mode filter only sees that mode
    r2 = client.runs.create(tid, AGENT, input=user(slow(words=60, delay_ms=30)), stream_mode=["values", "updates"])
    wait_running(client, tid, r2["run_id"])
    only = list(client.runs.join_stream(tid, r2["run_id"], stream_mode="updates"))
    assert only and set(names(only)) == {"updates"}


def test_cancel_interrupt_keeps_checkpoints(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user("before"))
    run = client.runs.create(tid, AGENT, input=user(slow(words=200, delay_ms=30)))
    rid = run["run_id"]
    wait_running(client, tid, rid)
    eventually(lambda: _has_human(client, tid, "w0 w1"), what="the run's input checkpoint")
    client.runs.cancel(tid, rid, wait=True)
    assert client.runs.get(tid, rid)["status"] == "interrupted"
    th = client.threads.get(tid)
    # the thread follows its latest checkpoint, which still has `agent` to run (langgraph-api)
    assert th["status"] == "interrupted"
    # the checkpoints the run wrote are kept (its input is in the state)
    assert any("w0 w1" in str(m["content"]) for m in messages(th["values"]) if m["type"] == "human")
    # the thread takes new runs
    assert "after" in answer_text(client.runs.wait(tid, AGENT, input=user("after")))


def _has_human(client, tid, text):
    values = client.threads.get_state(tid)["values"]
    return any(m["type"] == "human" and text in str(m["content"]) for m in messages(values))


def test_cancel_rollback_deletes_the_run_and_its_checkpoints(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user("kept"))
    before = client.threads.get_state(tid)
    n_hist = len(client.threads.get_history(tid, limit=100))
    run = client.runs.create(tid, AGENT, input=user(slow(words=200, delay_ms=30)))
    rid = run["run_id"]
    wait_running(client, tid, rid)
    eventually(lambda: len(client.threads.get_history(tid, limit=100)) > n_hist, what="a checkpoint of the run")
    client.runs.cancel(tid, rid, wait=True, action="rollback")
    with pytest.raises(NotFoundError):
        client.runs.get(tid, rid)
    assert client.threads.get_state(tid)["checkpoint"] == before["checkpoint"]
    assert len(client.threads.get_history(tid, limit=100)) == n_hist
    assert client.threads.get(tid)["status"] == "idle"


def test_cancel_without_wait_and_cancel_a_finished_run(client):
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, AGENT, input=user(slow(words=200, delay_ms=30)))
    wait_running(client, tid, run["run_id"])
    client.runs.cancel(tid, run["run_id"])  # 202, no wait
    wait_status(client, tid, run["run_id"], ("interrupted",))
    with pytest.raises(NotFoundError):
        client.runs.cancel(tid, run["run_id"])
    with pytest.raises(NotFoundError):
        client.runs.cancel(tid, str(uuid.uuid4()))


def test_cancel_a_pending_run(client):
    tid = client.threads.create()["thread_id"]
    first = client.runs.create(tid, AGENT, input=user(slow(words=100, delay_ms=30)))
    queued = client.runs.create(tid, AGENT, input=user("queued"), multitask_strategy="enqueue")
    assert client.runs.get(tid, queued["run_id"])["status"] == "pending"
    client.runs.cancel(tid, queued["run_id"])
    assert client.runs.get(tid, queued["run_id"])["status"] == "interrupted"
    client.runs.cancel(tid, first["run_id"], wait=True)
    assert client.threads.get(tid)["status"] == "interrupted"


def test_delete_run(client):
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, AGENT, input=user("x"))
    client.runs.join(tid, run["run_id"])
    client.runs.delete(tid, run["run_id"])
    with pytest.raises(NotFoundError):
        client.runs.get(tid, run["run_id"])
    assert client.runs.list(tid) == []


def test_if_not_exists_create(client):
    tid = str(uuid.uuid4())
    out = client.runs.wait(tid, AGENT, input=user("made on the fly"), if_not_exists="create")
    assert "made on the fly" in answer_text(out)
    th = client.threads.get(tid)
    assert th["metadata"]["graph_id"] == AGENT
    # (the SDK's wait raises a plain HTTPStatusError, not its typed NotFoundError)
    with pytest.raises(httpx.HTTPStatusError) as e:
        client.runs.wait(str(uuid.uuid4()), AGENT, input=user("x"))
    assert e.value.response.status_code == 404
    with pytest.raises(NotFoundError):
        client.runs.create(str(uuid.uuid4()), AGENT, input=user("x"))


def test_batch(client):
    t = tag()
    runs = client.runs.create_batch(
        [
            {"assistant_id": AGENT, "input": user(f"batch {i}"), "metadata": {"t": t}, "on_completion": "keep"}
            for i in range(3)
        ]
    )
    assert len(runs) == 3
    assert len({r["thread_id"] for r in runs}) == 3
    for i, r in enumerate(runs):
        out = client.runs.join(r["thread_id"], r["run_id"])
        assert f"batch {i}" in answer_text(out)
        assert client.runs.get(r["thread_id"], r["run_id"])["metadata"]["t"] == t


def test_cancel_many(client):
    a = client.threads.create()["thread_id"]
    b = client.threads.create()["thread_id"]
    ra = client.runs.create(a, AGENT, input=user(slow(words=200, delay_ms=30)))
    ra2 = client.runs.create(a, AGENT, input=user("queued"))
    rb = client.runs.create(b, AGENT, input=user(slow(words=200, delay_ms=30)))
    wait_running(client, a, ra["run_id"])
    wait_running(client, b, rb["run_id"])
    # by ids on one thread
    client.runs.cancel_many(thread_id=a, run_ids=[ra["run_id"], ra2["run_id"]])
    wait_status(client, a, ra["run_id"], ("interrupted",))
    assert client.runs.get(a, ra2["run_id"])["status"] == "interrupted"
    assert client.runs.get(b, rb["run_id"])["status"] == "running"
    # by status
    client.runs.cancel_many(status="running")
    wait_status(client, b, rb["run_id"], ("interrupted",))
    with pytest.raises(NotFoundError):
        client.runs.cancel_many(thread_id=a, run_ids=[str(uuid.uuid4())])


def test_run_errors(client):
    tid = client.threads.create()["thread_id"]
    with pytest.raises(NotFoundError):
        client.runs.get(tid, str(uuid.uuid4()))
    with pytest.raises(NotFoundError):
        client.runs.list(str(uuid.uuid4()))
    with pytest.raises(NotFoundError):
        client.runs.create(tid, str(uuid.uuid4()), input=user("x"))
    # a join on an unknown run yields one error event
    parts = list(client.runs.join_stream(tid, str(uuid.uuid4())))
    assert names(parts) == ["error"]
