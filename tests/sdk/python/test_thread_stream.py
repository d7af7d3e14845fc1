"""The thread-centric streaming protocol as langgraph-sdk 0.4.14's `client.threads.stream()`
speaks it, over both of its transports (`sse`, `websocket`): commands to
`POST /threads/{id}/commands`, events from `POST /threads/{id}/stream/events` or a WebSocket
on the same path.

The same tests run against the official server: start the mock LLM in directives mode and
`scripts/official-server/run.sh` (its `lead_agent` graph answers the same `@mock` directives),
then `FAWN_SDK_OFFICIAL_URL=http://127.0.0.1:PORT pytest test_thread_stream.py`. The tests of
authentication and of the `Origin` check are Fawn's only (`langgraph dev` has neither), and so
is the `tool_calls` projection (langgraph-api 0.16.7 sends no `tools` events for a prebuilt
ReAct agent's tool node). With `FAWN_SDK_TRANSCRIPTS=DIR`, each test also writes the raw
events of its thread to `DIR/<server>-<test>.json` (see ../compare_transcripts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from sdkutil import AGENT, clarification, mock, tool_call, user

OFFICIAL = os.environ.get("FAWN_SDK_OFFICIAL_URL")
TRANSCRIPTS = os.environ.get("FAWN_SDK_TRANSCRIPTS")
TIMEOUT = 60

ALL_CHANNELS = ["values", "updates", "messages", "tools", "lifecycle", "input",
                "checkpoints", "tasks", "custom"]


@dataclass
class Target:
    name: str
    url: str
    headers: dict = field(default_factory=dict)
    other_headers: dict | None = None

    @property
    def official(self) -> bool:
        return self.name == "official"

    def client(self, headers: dict | None = None):
        h = self.headers if headers is None else headers
        return get_client(url=self.url, api_key=h.get("x-api-key"), timeout=30)


if OFFICIAL:

    @pytest.fixture(scope="module")
    def target():
        return Target("official", OFFICIAL.rstrip("/"))

else:

    @pytest.fixture
    def target(server):
        return Target(server.backend, server.url, server.headers("admin"), server.headers("other"))


@pytest.fixture(params=["sse", "websocket"])
def transport(request):
    return request.param


def fawn_only(target: Target, why: str) -> None:
    if target.official:
        pytest.skip(why)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


async def until(check, what: str, timeout: float = 30.0) -> None:
    """Waits for `check()` to hold (re-checked as the event loop runs other tasks)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def stream(client, target: Target, transport: str, thread_id: str | None = None):
    # The SDK's WebSocket handshake carries only the headers given here (not the client's
    # own, such as its `x-api-key`), so they are passed explicitly.
    return client.threads.stream(
        thread_id, assistant_id=AGENT, transport=transport, headers=target.headers
    )


def text_of(message) -> str:
    content = message.get("content") if isinstance(message, dict) else message.content
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


async def record(target: Target, thread_id: str, name: str, runs: int) -> None:
    """Writes the thread's raw events (a fresh all-channel stream, which replays the
    thread's runs) to the transcripts directory, until `runs` runs ended."""
    if not TRANSCRIPTS:
        return
    events = []
    ended = 0
    async with httpx.AsyncClient(base_url=target.url, headers=target.headers, timeout=30) as c:
        async with c.stream("POST", f"/threads/{thread_id}/stream/events",
                            json={"channels": ALL_CHANNELS}) as r:
            assert r.status_code == 200, await r.aread()
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                ev = json.loads(line[6:])
                events.append(ev)
                p = ev.get("params") or {}
                if (ev.get("method") == "lifecycle" and not p.get("namespace")
                        and (p.get("data") or {}).get("event") in ("completed", "failed", "interrupted")):
                    ended += 1
                    if ended >= runs:
                        break
    out = Path(TRANSCRIPTS)
    out.mkdir(parents=True, exist_ok=True)
    server = "official" if target.official else "fawn"
    (out / f"{server}-{name}.json").write_text(json.dumps(events, indent=1))


# ------------------------------------------------------------------------------ a plain turn


def test_plain_turn_output_values_and_messages(target, transport):
    async def main():
        client = target.client()
        async with stream(client, target, transport) as thread:
            snapshots, texts = [], []

            async def values():
                async for v in thread.values:
                    snapshots.append(v)

            # A projection feeds its items as it is iterated: keep iterating, await them after.
            async def messages():
                streams = [m async for m in thread.messages]
                texts.extend([await m.text for m in streams])

            tasks = [asyncio.create_task(values()), asyncio.create_task(messages())]
            started = await thread.run.start(input=user("hello protocol"))
            assert re.fullmatch(r"[0-9a-f-]{36}", started["run_id"])
            out = await thread.output
            await asyncio.gather(*tasks)
            await record(target, thread.thread_id, f"plain-{transport}", 1)
            return thread.thread_id, out, snapshots, texts

    tid, out, snapshots, texts = run(main())
    answer = text_of([m for m in out["messages"] if m["type"] == "ai"][-1])
    assert "hello protocol" in answer
    # The values projection starts with the state before the run, then every snapshot.
    assert snapshots and snapshots[-1]["messages"][-1]["id"] == out["messages"][-1]["id"]
    assert texts == [answer], "one streamed message whose text is the answer"
    state = httpx.get(f"{target.url}/threads/{tid}/state", headers=target.headers).json()
    assert state["values"]["messages"][-1]["id"] == out["messages"][-1]["id"]


# ------------------------------------------------------------------------ a tool-calling turn


def test_tool_calling_turn(target, transport):
    fawn_only(target, "langgraph-api 0.16.7 sends no `tools` events for create_react_agent's ToolNode")

    async def main():
        client = target.client()
        async with stream(client, target, transport) as thread:
            calls = []

            async def tool_calls():
                handles = [c async for c in thread.tool_calls]
                calls.extend([(c.name, c.input, await c.output) for c in handles])

            streamed_calls = []

            async def messages():
                streams = [m async for m in thread.messages]
                for m in streams:
                    streamed_calls.extend((await m).tool_calls)

            tasks = [asyncio.create_task(tool_calls()), asyncio.create_task(messages())]
            await thread.run.start(input=user(tool_call(after="Listed the files.")))
            out = await thread.output
            await asyncio.gather(*tasks)
            await record(target, thread.thread_id, f"tools-{transport}", 1)
            return out, calls, streamed_calls

    out, calls, streamed_calls = run(main())
    assert [(n, i) for n, i, _ in calls] == [("ls", {"path": "/mnt/user-data"})]
    result = calls[0][2]
    assert result["type"] == "tool" and result["name"] == "ls"
    assert result["tool_call_id"] == streamed_calls[0]["id"]
    assert [(c["name"], c["args"]) for c in streamed_calls] == [("ls", {"path": "/mnt/user-data"})]
    assert text_of(out["messages"][-1]).endswith("Listed the files.")


def test_tool_call_blocks_stream_on_messages(target, transport):
    """The message projection carries the tool call (both servers)."""

    async def main():
        client = target.client()
        async with stream(client, target, transport) as thread:
            finals = []

            async def messages():
                streams = [m async for m in thread.messages]
                finals.extend([await m for m in streams])

            task = asyncio.create_task(messages())
            await thread.run.start(input=user(tool_call(after="done")))
            out = await thread.output
            await task
            if target.official:
                await record(target, thread.thread_id, f"tools-{transport}", 1)
            return out, finals

    out, finals = run(main())
    calls = [c for f in finals for c in f.tool_calls]
    assert [(c["name"], c["args"]) for c in calls] == [("ls", {"path": "/mnt/user-data"})]
    assert "done" in text_of(finals[-1])
    tool_messages = [m for m in out["messages"] if m["type"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [calls[0]["id"]]


def test_subagent_work_under_its_own_namespace(target, transport):
    fawn_only(target, "the official server's lead_agent graph has no subagents")

    async def main():
        client = target.client()
        async with stream(client, target, transport) as thread:
            handles = []

            async def subagents():
                async for h in thread.subagents:
                    handles.append(h)

            task = asyncio.create_task(subagents())
            await thread.run.start(
                input=user(mock(
                    tool="task",
                    args={"description": "look around", "prompt": "say hi from the subagent",
                          "subagent_type": "general-purpose"},
                    after_tool="subagent finished",
                )),
                config={"configurable": {"subagent_enabled": True}},
            )
            out = await thread.output
            await task
            texts = []
            for h in handles:
                streams = [m async for m in h.messages]
                texts.append([await s.text for s in streams])
            await record(target, thread.thread_id, f"subagent-{transport}", 1)
            return out, handles, texts

    out, handles, texts = run(main())
    (h,) = handles
    call = [c for m in out["messages"] if m["type"] == "ai" for c in m.get("tool_calls") or []][0]
    assert (h.graph_name, h.trigger_call_id) == ("tools", call["id"])
    assert h.namespace == [f"tools:{call['id']}"]
    assert h.status == "completed"
    assert any("say hi from the subagent" in t for t in texts[0]), texts
    assert text_of(out["messages"][-1]) == "subagent finished"


# ------------------------------------------------------------------------ clarification


def test_clarification_answered_with_respond(target, transport):
    async def main():
        client = target.client()
        async with stream(client, target, transport) as thread:
            await thread.run.start(input=user(clarification("Which colour do you want?")))
            # The lifecycle watcher sets `interrupted` from the `input.requested` event.
            await until(lambda: thread.interrupted, "the interrupt to be requested")
            (pending,) = thread.interrupts
            state = await client.threads.get_state(thread.thread_id)
            assert [i["id"] for i in state["interrupts"]] == [pending["interrupt_id"]]
            question = state["interrupts"][0]["value"]["question"]
            assert await thread.run.respond("blue") == {}
            out = await thread.output
            await record(target, thread.thread_id, f"clarify-{transport}", 2)
            return question, out, pending

    question, out, pending = run(main())
    assert question == "Which colour do you want?"
    assert pending["namespace"] == [] and len(pending["interrupt_id"]) == 32
    assert "blue" in text_of(out["messages"][-1])


def test_respond_to_an_unknown_interrupt_is_a_protocol_error(target):
    async def main():
        client = target.client()
        async with stream(client, target, "sse") as thread:
            await thread.run.start(input=user("no question here"))
            await thread.output
            return thread.thread_id

    tid = run(main())
    r = httpx.post(f"{target.url}/threads/{tid}/commands", headers=target.headers, json={
        "id": 7, "method": "input.respond",
        "params": {"interrupt_id": "0" * 32, "namespace": [], "response": "x"}})
    assert r.status_code == 200
    body = r.json()
    assert (body["type"], body["id"], body["error"]) == ("error", 7, "no_such_interrupt")


# ------------------------------------------------------------------- reconnect mid-run


class Proxy:
    """A TCP proxy to the server whose connections the test can cut at once."""

    def __init__(self, upstream: str):
        m = re.match(r"https?://([^:/]+):(\d+)", upstream)
        assert m, upstream
        self.host, self.port = m.group(1), int(m.group(2))
        self.writers: set[asyncio.StreamWriter] = set()
        self.cuts = 0
        self.accepted = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader, writer):
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        self.writers.update((writer, up_writer))

        async def pipe(r, w):
            with contextlib.suppress(Exception):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(Exception):
                w.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.writers.discard(writer)
        self.writers.discard(up_writer)

    def cut(self) -> None:
        """Drops every open connection (an abortive close, as a network failure)."""
        self.cuts += 1
        for w in list(self.writers):
            w.transport.abort()
        self.writers.clear()

    async def stop(self) -> None:
        self.cut()
        self.server.close()
        await self.server.wait_closed()


def test_reconnect_after_the_connection_drops_mid_run(target, transport):
    words = [f"w{i}" for i in range(40)]

    async def main():
        proxy = Proxy(target.url)
        url = await proxy.start()
        try:
            client = get_client(url=url, api_key=target.headers.get("x-api-key"), timeout=30)
            async with client.threads.stream(
                assistant_id=AGENT, transport=transport, headers=target.headers
            ) as thread:
                seen_ids: list[str] = []
                seqs: list[int] = []
                deltas: list[str] = []
                before_cut: list[int] = []
                cut_done = asyncio.Event()

                async def raw():
                    async for ev in thread.subscribe(["messages", "lifecycle", "values"]):
                        seen_ids.append(ev["event_id"])
                        seqs.append(ev["seq"])
                        d = ev["params"]["data"]
                        if ev["method"] == "messages" and d.get("event") == "content-block-delta":
                            deltas.append(d["delta"].get("text", ""))
                            if len(deltas) == 5 and not cut_done.is_set():
                                before_cut.append(proxy.accepted)
                                proxy.cut()
                                cut_done.set()

                task = asyncio.create_task(raw())
                await thread.run.start(input=user(mock(text=" ".join(words), delay_ms=60)))
                out = await thread.output
                await task
                await record(target, thread.thread_id, f"reconnect-{transport}", 1)
                reconnected = proxy.accepted - before_cut[0]
                return out, seen_ids, seqs, deltas, reconnected
        finally:
            await proxy.stop()

    out, seen_ids, seqs, deltas, reconnected = run(main())
    assert reconnected >= 1, "the client connected again after the cut"
    assert len(seen_ids) == len(set(seen_ids)), "no event twice"
    assert seqs == sorted(seqs), "in order"
    # Every text delta arrived once: together they are the answer, word for word.
    assert "".join(deltas) == " ".join(words) == text_of(out["messages"][-1])


# -------------------------------------------------------- two subscriptions on one thread


def test_two_subscriptions_with_different_channels(target, transport):
    async def main():
        client = target.client()
        async with stream(client, target, transport) as thread:
            a, b = [], []

            async def collect(channels, into):
                async for ev in thread.subscribe(channels):
                    into.append(ev)

            tasks = [
                asyncio.create_task(collect(["values"], a)),
                asyncio.create_task(collect(["messages", "lifecycle"], b)),
            ]
            await thread.run.start(input=user("two subscriptions"))
            await thread.output
            await asyncio.gather(*tasks)
            await record(target, thread.thread_id, f"two-subs-{transport}", 1)
            return a, b

    a, b = run(main())
    assert a and {e["method"] for e in a} == {"values"}
    assert {e["method"] for e in b} == {"messages", "lifecycle"}
    kinds = [e["params"]["data"]["event"] for e in b]
    assert kinds[0] == "running" and kinds[-1] == "completed"
    assert "message-start" in kinds and "message-finish" in kinds


def test_two_raw_streams_are_filtered_by_the_server(target):
    """Two connections on one thread, each with its own filter: each gets its channels only."""

    async def main():
        client = target.client()
        async with stream(client, target, "sse") as thread:
            await thread.run.start(input=user("filtered"))
            await thread.output
            tid = thread.thread_id
        got = {}
        async with httpx.AsyncClient(base_url=target.url, headers=target.headers, timeout=30) as c:
            for channels in (["values"], ["lifecycle"]):
                async with c.stream("POST", f"/threads/{tid}/stream/events",
                                    json={"channels": channels}) as r:
                    assert r.status_code == 200
                    events = []
                    async for line in r.aiter_lines():
                        if line.startswith("data: "):
                            events.append(json.loads(line[6:]))
                            d = events[-1]["params"]["data"]
                            if channels == ["values"] and len(events) >= 2:
                                break
                            if channels == ["lifecycle"] and d.get("event") == "completed":
                                break
                    got[channels[0]] = events
        return got

    got = run(main())
    assert {e["method"] for e in got["values"]} == {"values"}
    assert [e["params"]["data"]["event"] for e in got["lifecycle"]] == ["running", "completed"]


# ------------------------------------------------------------------ access: users, origins


def test_another_users_thread_is_404(target, transport):
    fawn_only(target, "langgraph dev runs without authentication")

    async def main():
        admin = target.client()
        async with stream(admin, target, transport) as thread:
            await thread.run.start(input=user("mine"))
            await thread.output
            tid = thread.thread_id
        other = Target(target.name, target.url, target.other_headers)
        client = other.client()
        async with stream(client, other, transport, thread_id=tid) as theirs:
            with pytest.raises(httpx.HTTPStatusError) as e:
                await theirs.run.start(input=user("not yours"))
            assert e.value.response.status_code == 404
            with pytest.raises((httpx.HTTPStatusError, InvalidStatus)) as e:
                async for _ in theirs.subscribe(["values"]):
                    pass
            status = getattr(e.value.response, "status_code", None)
            assert status == 404, e.value
        # Nothing leaked into the thread.
        state = httpx.get(f"{target.url}/threads/{tid}/state", headers=target.headers).json()
        assert not any("not yours" in text_of(m) for m in state["values"]["messages"])

    run(main())


def ws_url(target: Target, tid: str) -> str:
    return target.url.replace("http://", "ws://") + f"/threads/{tid}/stream/events"


def test_websocket_from_a_foreign_origin_is_refused(target):
    fawn_only(target, "langgraph dev does not check the Origin of a WebSocket")

    async def main():
        admin = target.client()
        async with stream(admin, target, "sse") as thread:
            await thread.run.start(input=user("origin check"))
            await thread.output
            tid = thread.thread_id
        headers = list(target.headers.items())
        with pytest.raises(InvalidStatus) as e:
            async with ws_connect(ws_url(target, tid),
                                  additional_headers=headers + [("Origin", "https://evil.example")]):
                pass
        assert e.value.response.status_code == 403
        # A page served from this machine may connect (and gets its events).
        async with ws_connect(ws_url(target, tid),
                              additional_headers=headers + [("Origin", "http://localhost:3000")]) as ws:
            await ws.send(json.dumps({"id": 1, "method": "subscription.subscribe",
                                      "params": {"channels": ["lifecycle"]}}))
            frames = [json.loads(await ws.recv()) for _ in range(3)]
        assert frames[0]["type"] == "success" and frames[0]["id"] == 1
        assert [f["params"]["data"]["event"] for f in frames[1:]] == ["running", "completed"]
        # Without credentials the handshake is refused as well.
        with pytest.raises(InvalidStatus) as e:
            async with ws_connect(ws_url(target, tid)):
                pass
        assert e.value.response.status_code == 401

    run(main())
