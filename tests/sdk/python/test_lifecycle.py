"""Run lifecycle details the SDKs rely on: no spurious reconnects, errors surfaced as
`error` events / `__error__`, delayed runs, on_disconnect, webhooks, the thread stream."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest

from sdkutil import AGENT, answer_text, eventually, slow, tool_call, user, visible, wait_status


def test_a_finished_stream_is_not_reconnected(client):
    seen = []
    client.http.client.event_hooks["request"].append(lambda req: seen.append((req.method, req.url.path)))
    tid = client.threads.create()["thread_id"]
    seen.clear()
    parts = list(client.runs.stream(tid, AGENT, input=user(tool_call()), stream_mode=["updates"]))
    assert parts[-1].event == "updates"
    # After a close without `end` the SDK asks for the run's status; it is terminal by then,
    # so the SDK does not reconnect to Location.
    posts = [s for s in seen if s[0] == "POST"]
    reconnects = [s for s in seen if s[0] == "GET" and s[1].endswith("/stream")]
    assert len(posts) == 1 and reconnects == [], seen


def test_a_failing_run_streams_an_error_and_marks_the_thread(client):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, AGENT, input=user(tool_call()), stream_mode=["updates"],
                                    config={"recursion_limit": 2}))
    assert parts[-1].event == "error"
    assert parts[-1].data["error"] == "GraphRecursionError" and parts[-1].data["message"]
    run = client.runs.get(tid, parts[0].data["run_id"])
    assert run["status"] == "error"
    th = client.threads.get(tid)
    assert th["status"] == "error" and th["error"]["error"] == "GraphRecursionError"
    # wait answers 200 with __error__, which the SDK raises on unless raise_error=False
    with pytest.raises(Exception, match="GraphRecursionError"):
        client.runs.wait(tid, AGENT, input=user(tool_call()), config={"recursion_limit": 2})
    out = client.runs.wait(tid, AGENT, input=user(tool_call()), config={"recursion_limit": 2}, raise_error=False)
    assert out["__error__"]["error"] == "GraphRecursionError"
    # a good run clears the error
    client.runs.wait(tid, AGENT, input=user("fine again"))
    assert client.threads.get(tid)["status"] == "idle"


def test_after_seconds_delays_the_start(client):
    tid = client.threads.create()["thread_id"]
    t0 = time.monotonic()
    run = client.runs.create(tid, AGENT, input=user("later"), after_seconds=1)
    assert client.runs.get(tid, run["run_id"])["status"] == "pending"
    assert client.threads.get(tid)["status"] == "busy"
    out = client.runs.join(tid, run["run_id"])
    assert time.monotonic() - t0 >= 1.0
    assert "later" in answer_text(out)


def test_on_disconnect_cancel(client):
    tid = client.threads.create()["thread_id"]
    stream = client.runs.stream(tid, AGENT, input=user(slow(words=200, delay_ms=25)),
                                stream_mode="messages-tuple", on_disconnect="cancel")
    first = next(stream)
    next(stream)
    stream.close()
    rid = first.data["run_id"]
    assert wait_status(client, tid, rid, ("interrupted",))["status"] == "interrupted"


def test_on_disconnect_continue_is_the_default(client):
    tid = client.threads.create()["thread_id"]
    stream = client.runs.stream(tid, AGENT, input=user(slow(words=20, delay_ms=25)), stream_mode="messages-tuple")
    first = next(stream)
    stream.close()
    assert wait_status(client, tid, first.data["run_id"], ("success",))["status"] == "success"


def test_webhook_is_called_when_the_run_ends(client):
    got = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            got.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        tid = client.threads.create()["thread_id"]
        url = f"http://127.0.0.1:{srv.server_address[1]}/hook"
        out = client.runs.wait(tid, AGENT, input=user("call me back"), webhook=url)
        eventually(lambda: got, what="the webhook")
        (body,) = got
        assert body["thread_id"] == tid and body["status"] == "success"
        # The webhook carries the run's whole values; at `/` the output leaves out the
        # messages DeerFlow hides from users (its date reminder), and nothing else differs.
        assert any(m["additional_kwargs"].get("hide_from_ui") for m in body["values"]["messages"])
        assert {**body["values"], "messages": visible(body["values"])} == out
    finally:
        srv.shutdown()


def test_thread_stream_sees_every_run(client, server):
    tid = client.threads.create()["thread_id"]
    events = []
    subscribed, done = threading.Event(), threading.Event()

    def listen():
        try:
            with httpx.Client(base_url=server.url, headers=server.headers(),
                              timeout=httpx.Timeout(10.0, read=10.0)) as h:
                with h.stream("GET", f"/threads/{tid}/stream", params={"stream_mode": "lifecycle"}) as r:
                    # The server subscribes to the thread before it answers the headers.
                    subscribed.set()
                    for line in r.iter_lines():
                        if line.startswith("data:"):
                            events.append(json.loads(line[5:]))
                            if sum(1 for e in events if e.get("status") == "run_done") == 2:
                                break
        finally:
            done.set()

    threading.Thread(target=listen, daemon=True).start()
    assert subscribed.wait(10), "the thread stream answered"
    client.runs.wait(tid, AGENT, input=user("one"))
    r2 = client.runs.create(tid, AGENT, input=user("two"))
    client.runs.join(tid, r2["run_id"])
    assert done.wait(10), events
    finished = [e["run_id"] for e in events if e.get("status") == "run_done"]
    assert len(finished) == 2 and finished[1] == r2["run_id"]
