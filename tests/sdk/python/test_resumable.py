"""Resumable streams: `stream_resumable` runs carry event ids, and `join_stream` with
`Last-Event-ID` replays what follows (`-1`: everything), live or after the run ended."""

import httpx

from sdkutil import AGENT, slow, tool_call, user, wait_running, wait_status

MODES = ["values", "updates", "messages-tuple"]


def ev(parts):
    return [(p.event, p.data) for p in parts]


def test_ids_and_replay_after_the_run(client):
    tid = client.threads.create()["thread_id"]
    parts = list(
        client.runs.stream(tid, AGENT, input=user(tool_call(after="resumed")), stream_mode=MODES,
                           stream_resumable=True)
    )
    rid = parts[0].data["run_id"]
    ids = [p.id for p in parts]
    assert all(ids), "resumable runs put an id on every event"
    assert [int(i) for i in ids] == sorted(int(i) for i in ids) and len(set(ids)) == len(ids)

    replay = list(client.runs.join_stream(tid, rid, last_event_id="-1"))
    assert ev(replay) == ev(parts), "-1 replays the whole run"
    assert [p.id for p in replay] == ids

    k = len(parts) // 2
    rest = list(client.runs.join_stream(tid, rid, last_event_id=ids[k]))
    assert ev(rest) == ev(parts[k + 1:]), "replay starts strictly after the given id"

    assert list(client.runs.join_stream(tid, rid, last_event_id=ids[-1])) == []
    # without Last-Event-ID a finished run's stream is empty
    assert list(client.runs.join_stream(tid, rid)) == []
    # a stream_mode filter applies to the replay too
    only = list(client.runs.join_stream(tid, rid, last_event_id="-1", stream_mode="updates"))
    assert ev(only) == [e for e in ev(parts) if e[0] == "updates"]


def test_disconnect_then_resume_mid_run(client):
    tid = client.threads.create()["thread_id"]
    seen = []
    stream = client.runs.stream(
        tid, AGENT, input=user(slow(words=60, delay_ms=40)), stream_mode=MODES,
        stream_resumable=True, on_disconnect="continue",
    )
    for part in stream:
        seen.append(part)
        if len(seen) == 8:
            break
    stream.close()
    rid = seen[0].data["run_id"]
    assert client.runs.get(tid, rid)["status"] == "running", "on_disconnect=continue keeps it going"
    rest = list(client.runs.join_stream(tid, rid, last_event_id=seen[-1].id))
    assert rest, "the live join continues after the last seen event"
    assert wait_status(client, tid, rid)["status"] == "success"
    full = list(client.runs.join_stream(tid, rid, last_event_id="-1"))
    assert ev(seen + rest) == ev(full), "nothing lost, nothing repeated"
    assert [p.id for p in seen + rest] == [p.id for p in full]


def test_background_run_joined_from_the_start(client):
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, AGENT, input=user(slow(words=20, delay_ms=30)), stream_mode=MODES,
                             stream_resumable=True)
    wait_running(client, tid, run["run_id"])
    parts = list(client.runs.join_stream(tid, run["run_id"], last_event_id="-1"))
    assert parts[0].event == "metadata" and parts[0].data["run_id"] == run["run_id"]
    assert {"values", "updates", "messages"} <= {p.event for p in parts}
    text = "".join(p.data[0]["content"] for p in parts
                   if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk")
    assert text == " ".join(f"w{i}" for i in range(20))


def test_thread_join_stream_with_last_event_id(client, server):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, AGENT, input=user("thread stream"), stream_mode=["values"],
                                    stream_resumable=True))
    # the thread-level stream never ends by itself: read with a deadline
    got = []
    with httpx.Client(base_url=server.url, headers=server.headers(),
                      timeout=httpx.Timeout(5.0, read=1.5)) as h:
        try:
            with h.stream("GET", f"/threads/{tid}/stream", headers={"Last-Event-ID": "-1"}) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        got.append(line.split(":", 1)[1].strip())
        except httpx.ReadTimeout:
            pass
    assert got[: len(parts)] == [p.event for p in parts]
