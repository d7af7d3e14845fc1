"""Stateless runs (`/runs/stream`, `/runs/wait`, `/runs`): a temporary thread, deleted after
the run unless `on_completion: keep`."""

import pytest
from langgraph_sdk.errors import NotFoundError

from sdkutil import AGENT, answer_text, eventually, names, tool_call, user


def test_stateless_stream_deletes_its_thread(client):
    created = []
    parts = list(client.runs.stream(None, AGENT, input=user("no thread"), stream_mode=["values", "updates"],
                                    on_run_created=created.append))
    assert "error" not in names(parts)
    assert "no thread" in answer_text([p.data for p in parts if p.event == "values"][-1])
    (meta,) = created
    assert meta["run_id"] == parts[0].data["run_id"]
    # A stateless stream's Content-Location names only the run; its metadata event names the
    # temporary thread.
    assert parts[0].event == "metadata"
    tid = parts[0].data.get("thread_id")
    assert tid, "the metadata event names the temporary thread"

    def gone():
        try:
            client.threads.get(tid)
            return False
        except NotFoundError:
            return True

    eventually(gone, what="the temporary thread to be deleted")


def test_stateless_wait_keep(client):
    created = []
    out = client.runs.wait(None, AGENT, input=user(tool_call(after="kept")), on_completion="keep",
                           on_run_created=created.append)
    assert answer_text(out) == "kept"
    (meta,) = created
    tid = meta["thread_id"]
    assert tid, "Content-Location names the temporary thread"
    th = client.threads.get(tid)
    assert th["status"] == "idle" and answer_text(th["values"]) == "kept"
    assert client.runs.get(tid, meta["run_id"])["status"] == "success"
    assert client.threads.get_history(tid, limit=100)


def test_stateless_wait_delete(client):
    created = []
    out = client.runs.wait(None, AGENT, input=user("gone soon"), on_run_created=created.append)
    assert "gone soon" in answer_text(out)
    tid = created[0]["thread_id"]

    def gone():
        try:
            client.threads.get(tid)
            return False
        except NotFoundError:
            return True

    eventually(gone, what="the temporary thread to be deleted")


def test_stateless_background_run(client):
    run = client.runs.create(None, AGENT, input=user("background, stateless"), on_completion="keep")
    tid = run["thread_id"]
    out = client.runs.join(tid, run["run_id"])
    assert "background, stateless" in answer_text(out)
