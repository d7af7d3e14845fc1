"""Bad input: the SDK raises its typed errors; raw malformed requests get a 4xx with a JSON
`detail` (never 5xx/429, which clients retry), nothing is half-written, and the server keeps
serving."""

import uuid

import pytest
from langgraph_sdk.errors import (
    BadRequestError,
    ConflictError,
    NotFoundError,
    UnprocessableEntityError,
)

from sdkutil import AGENT, answer_text, slow, user, wait_running, without_owner


def test_typed_errors_from_the_sdk(client):
    tid = client.threads.create()["thread_id"]
    with pytest.raises(NotFoundError) as e:
        client.threads.get(str(uuid.uuid4()))
    assert e.value.response.status_code == 404 and "not found" in str(e.value).lower()
    with pytest.raises(ConflictError):
        client.threads.create(thread_id=tid)
    with pytest.raises(UnprocessableEntityError):
        client.runs.create(tid, AGENT, input=user("x"), stream_mode="no-such-mode")
    with pytest.raises(UnprocessableEntityError):
        client.runs.create(tid, AGENT, input=user("x"), multitask_strategy="explode")
    with pytest.raises(UnprocessableEntityError):
        client.runs.create(tid, "not a graph", input=user("x"))
    with pytest.raises(UnprocessableEntityError):
        client.runs.create(tid, AGENT, input=user("x"), checkpoint_id="not-a-uuid")
    with pytest.raises(BadRequestError):
        client.runs.create(tid, AGENT, input=user("x"), config={"configurable": {"a": 1}}, context={"b": 2})
    with pytest.raises(UnprocessableEntityError):
        client.threads.search(status="sleepy")
    with pytest.raises(UnprocessableEntityError):
        client.runs.cancel_many(thread_id=tid, run_ids=[str(uuid.uuid4())], status="all")
    # none of that touched the thread
    assert client.runs.list(tid) == []
    assert client.threads.get(tid)["status"] == "idle"


def test_conflict_on_a_busy_thread(client):
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, AGENT, input=user(slow(words=100, delay_ms=25)))
    wait_running(client, tid, run["run_id"])
    with pytest.raises(ConflictError) as e:
        client.runs.create(tid, AGENT, input=user("x"), multitask_strategy="reject")
    assert "already running" in str(e.value).lower()
    client.runs.cancel(tid, run["run_id"], wait=True)


RAW_CASES = [
    # (method, path, body bytes or json, expected status)
    ("POST", "/threads", b"{not json", 400),
    ("POST", "/threads", b"[1, 2]", 422),
    ("POST", "/threads", {"thread_id": "nope"}, 422),
    ("POST", "/threads", {"metadata": "a string"}, 422),
    ("POST", "/threads/search", {"limit": "ten"}, 422),
    ("POST", "/threads/search", {"limit": -1}, 422),
    ("POST", "/assistants", {"graph_id": 42}, 422),
    ("POST", "/assistants", {}, 422),
    ("POST", "/assistants/search", {"sort_by": "colour"}, 422),
    ("POST", "/runs/stream", {"input": {}}, 422),
    ("POST", "/runs/wait", {"assistant_id": AGENT, "stream_mode": 5}, 422),
    ("POST", "/runs/batch", {"assistant_id": AGENT}, 422),
    ("PUT", "/store/items", {"namespace": "flat", "key": "k", "value": {}}, 422),
    ("PUT", "/store/items", {"namespace": ["a"], "value": {}}, 422),
    ("POST", "/store/items/search", {"namespace_prefix": [1, 2]}, 422),
    ("POST", "/runs/crons", {"assistant_id": AGENT}, 422),
    ("GET", "/threads/not-a-uuid", None, 422),
    ("GET", f"/threads/{uuid.uuid4()}", None, 404),
    ("DELETE", f"/assistants/{uuid.uuid4()}", None, 404),
]


@pytest.mark.parametrize("method,path,body,status", RAW_CASES, ids=[f"{m} {p} {s}" for m, p, _, s in RAW_CASES])
def test_raw_bad_requests(http, method, path, body, status):
    kw = {}
    if isinstance(body, bytes):
        kw = {"content": body, "headers": {"content-type": "application/json"}}
    elif body is not None:
        kw = {"json": body}
    r = http.request(method, path, **kw)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail


def test_thread_run_with_bad_bodies(client, http):
    tid = client.threads.create()["thread_id"]
    cases = [
        ({"assistant_id": AGENT, "input": {"messages": [{"role": "robot", "content": "x"}]}}, 422),
        ({"assistant_id": AGENT, "input": {"messages": [{"type": "robot", "content": "x"}]}}, 422),
        ({"assistant_id": AGENT, "input": {"messages": [{"content": "no role"}]}}, 422),
        ({"assistant_id": AGENT, "input": {"messages": [42]}}, 422),
        ({"assistant_id": AGENT, "input": "just a string"}, 422),
        ({"assistant_id": AGENT, "input": {"todos": 5}}, 422),
        ({"assistant_id": AGENT, "command": {"update": {"messages": [{"type": "robot", "content": "x"}]}}}, 422),
        ({"assistant_id": AGENT, "if_not_exists": "maybe"}, 422),
        ({"assistant_id": AGENT, "interrupt_before": 3}, 422),
        ({"assistant_id": AGENT, "after_seconds": "soon"}, 422),
        ({"assistant_id": AGENT, "checkpoint": {"checkpoint_id": 7}}, 422),
    ]
    for body, status in cases:
        r = http.post(f"/threads/{tid}/runs", json=body)
        assert r.status_code == status, (body, r.status_code, r.text)
        assert r.json()["detail"]
    r = http.post(f"/threads/{tid}/state", json={"values": {"messages": [{"type": "robot", "content": "x"}]}})
    assert r.status_code == 422 and r.json()["detail"]
    # nothing half-written, and the thread still works
    assert client.runs.list(tid) == []
    assert client.threads.get_state(tid)["checkpoint"] is None
    assert "fine" in answer_text(client.runs.wait(tid, AGENT, input=user("fine")))


def test_oversized_body_is_refused_and_the_server_keeps_serving(client, http):
    big = {"metadata": {"blob": "x" * (11 * 1024 * 1024)}}
    r = http.post("/threads", json=big)
    assert r.status_code == 413
    assert r.json()["detail"]
    tid = client.threads.create()["thread_id"]
    assert "still here" in answer_text(client.runs.wait(tid, AGENT, input=user("still here")))


def test_text_plain_json_is_accepted(http):
    r = http.post("/threads", content=b'{"metadata": {"plain": true}}', headers={"content-type": "text/plain"})
    assert r.status_code == 200 and without_owner(r.json()["metadata"]) == {"plain": True}


def test_unknown_fields_are_ignored(client, http):
    tid = client.threads.create()["thread_id"]
    r = http.post(f"/threads/{tid}/runs/wait", json={
        "assistant_id": AGENT, "input": user("lenient"), "strict_resume": False,
        "langsmith_tracer": {"project_name": "p"}, "some_future_field": {"x": 1},
    })
    assert r.status_code == 200
    assert "lenient" in answer_text(r.json())
