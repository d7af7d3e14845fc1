"""The four multitask strategies on a thread that is already running a run."""

import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError

from sdkutil import AGENT, answer_text, eventually, messages, slow, user, wait_running, wait_status


def busy_thread(client, words=200):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user("before"))
    n_hist = len(client.threads.get_history(tid, limit=200))
    first = client.runs.create(tid, AGENT, input=user(slow(words=words, delay_ms=25)))
    wait_running(client, tid, first["run_id"])
    # the first run has written its input checkpoint
    eventually(lambda: len(client.threads.get_history(tid, limit=200)) > n_hist, what="a checkpoint of the first run")
    return tid, first["run_id"], n_hist


def humans(values):
    return [m["content"] for m in messages(values) if m["type"] == "human"]


def test_reject(client):
    tid, first, _ = busy_thread(client)
    with pytest.raises(ConflictError):
        client.runs.create(tid, AGENT, input=user("second"), multitask_strategy="reject")
    with pytest.raises(ConflictError):
        list(client.runs.stream(tid, AGENT, input=user("second"), multitask_strategy="reject"))
    assert [r["run_id"] for r in client.runs.list(tid)][0] == first
    client.runs.cancel(tid, first, wait=True)


def test_enqueue(client):
    tid, first, _ = busy_thread(client, words=60)
    second = client.runs.create(tid, AGENT, input=user("second"), multitask_strategy="enqueue")
    assert client.runs.get(tid, second["run_id"])["status"] == "pending"
    out = client.runs.join(tid, second["run_id"])
    assert client.runs.get(tid, first)["status"] == "success", "the first run finished first"
    assert "second" in answer_text(out)
    h = humans(out)
    assert "before" in h[0] and "w0 w1" in h[1] and "second" in h[2]


def test_interrupt(client):
    tid, first, _ = busy_thread(client)
    out = client.runs.wait(tid, AGENT, input=user("second"), multitask_strategy="interrupt")
    assert client.runs.get(tid, first)["status"] == "interrupted"
    assert "second" in answer_text(out)
    h = humans(out)
    assert len(h) == 3 and "w0 w1" in h[1], "the interrupted run's checkpoints are kept"
    assert client.threads.get(tid)["status"] == "idle"


def test_rollback(client):
    tid, first, n_hist = busy_thread(client)
    parts = list(client.runs.stream(tid, AGENT, input=user("second"), multitask_strategy="rollback"))
    out = parts[-1].data
    with pytest.raises(NotFoundError):
        client.runs.get(tid, first)
    h = humans(out)
    assert len(h) == 2 and "before" in h[0] and "second" in h[1], "the rolled-back run left no trace"
    assert "w0 w1" not in str(client.threads.get_history(tid, limit=200))
    assert client.threads.get(tid)["status"] == "idle"
    assert wait_status(client, tid, parts[0].data["run_id"])["status"] == "success"


def test_strategies_do_not_cross_threads(client):
    tid, first, _ = busy_thread(client)
    other = client.threads.create()["thread_id"]
    out = client.runs.wait(other, AGENT, input=user("elsewhere"), multitask_strategy="reject")
    assert "elsewhere" in answer_text(out)
    assert client.runs.get(tid, first)["status"] == "running"
    client.runs.cancel(tid, first, wait=True)


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_the_replaced_runs_stream_ends_cleanly(client, server, strategy):
    import threading

    from langgraph_sdk import get_sync_client

    tid = client.threads.create()["thread_id"]
    other = get_sync_client(url=server.url, api_key=server.keys["admin"], timeout=30)
    parts, errors, done = [], [], threading.Event()

    def consume():
        try:
            for p in other.runs.stream(tid, AGENT, input=user(slow(words=200, delay_ms=25)),
                                       stream_mode=["messages-tuple", "values"]):
                parts.append(p)
        except BaseException as e:  # a thread's exception is lost unless handed over
            errors.append(e)
        finally:
            done.set()

    def first_streaming():
        assert not errors, f"the first run's stream failed: {errors[0]!r}"
        return any(p.event == "messages" for p in parts)

    threading.Thread(target=consume, daemon=True).start()
    eventually(first_streaming, what="the first run streaming")
    first = parts[0].data["run_id"]
    out = client.runs.wait(tid, AGENT, input=user("take over"), multitask_strategy=strategy)
    assert "take over" in answer_text(out)
    assert done.wait(10), "the first run's stream closed"
    assert not errors, f"the first run's stream ended with an exception: {errors[0]!r}"
    assert "error" not in [p.event for p in parts]
    if strategy == "interrupt":
        assert client.runs.get(tid, first)["status"] == "interrupted"
    else:
        with pytest.raises(NotFoundError):
            client.runs.get(tid, first)
