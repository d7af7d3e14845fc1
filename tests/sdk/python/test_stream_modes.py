"""Every stream mode through `runs.stream`, parsed by the SDK's SSE decoder (v1 parts and the
v2 typed adapter)."""

import pytest

from sdkutil import AGENT, answer_text, mock, names, tool_call, user


def stream(client, text, modes, **kw):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, AGENT, input=user(text), stream_mode=modes, **kw))
    assert parts[0].event == "metadata"
    assert "error" not in names(parts), parts
    return tid, parts


def by(parts, event):
    return [p.data for p in parts if p.event == event]


def test_values(client):
    tid, parts = stream(client, tool_call(after="values done"), "values")
    assert set(names(parts)) == {"metadata", "values"}
    vals = by(parts, "values")
    assert answer_text(vals[-1]) == "values done"
    # like LangGraph, no event for the input checkpoint: the first state already has the input
    assert "values done" in vals[0]["messages"][0]["content"] or any(
        m["type"] == "human" for m in vals[0]["messages"]
    ), vals[0]
    # message lists only grow within the run, ending in the thread's state
    lens = [len(v.get("messages", [])) for v in vals]
    assert lens == sorted(lens)
    assert vals[-1] == client.threads.get_state(tid)["values"]


def test_values_of_a_second_turn_start_with_the_new_input(client):
    tid, _ = stream(client, "first turn", "values")
    before = client.threads.get_state(tid)["values"]
    parts = list(client.runs.stream(tid, AGENT, input=user("second turn"), stream_mode="values"))
    first = parts[1].data
    assert first != before, "the pre-input state is not re-sent"
    assert [m["content"] for m in first["messages"] if m["type"] == "human"][-1] == "second turn"


def test_updates(client):
    _, parts = stream(client, tool_call(after="updates done"), "updates")
    ups = by(parts, "updates")
    assert all(isinstance(u, dict) and len(u) == 1 for u in ups)
    nodes = [next(iter(u)) for u in ups]
    assert "model" in nodes and "tools" in nodes
    assert nodes.index("model") < nodes.index("tools")
    tool_update = ups[nodes.index("tools")]["tools"]
    assert tool_update["messages"][0]["type"] == "tool"
    last_model = [u["model"] for u in ups if "model" in u][-1]
    assert last_model["messages"][-1]["content"] == "updates done"


def test_messages_tuple(client):
    text = "alpha beta gamma delta"
    tid, parts = stream(client, mock(text=text), "messages-tuple")
    msgs = by(parts, "messages")
    assert set(names(parts)) == {"metadata", "messages"}
    chunks = [(c, m) for c, m in msgs if c["type"] == "AIMessageChunk"]
    assert len(chunks) >= 4, "one chunk per word at least"
    ids = {c["id"] for c, _ in chunks}
    assert len(ids) == 1 and next(iter(ids)), "every chunk of one message shares its id"
    assert "".join(c["content"] for c, _ in chunks) == text
    for c, meta in chunks:
        assert {"tool_call_chunks", "tool_calls", "invalid_tool_calls", "response_metadata"} <= set(c)
        assert meta["langgraph_node"] == "model"
        assert meta["thread_id"] == tid
        assert isinstance(meta["langgraph_step"], int)
    assert chunks[-1][0]["chunk_position"] == "last"
    final = client.threads.get_state(tid)["values"]["messages"][-1]
    assert final["id"] == next(iter(ids)) and final["content"] == text
    assert not any(c["type"] == "human" for c, _ in msgs), "input messages are not streamed"


def test_messages_tuple_with_a_tool_call(client):
    _, parts = stream(client, tool_call(path="/mnt/user-data/outputs", after="ok"), "messages-tuple")
    msgs = by(parts, "messages")
    call_chunks = [c for c, _ in msgs if c["type"] == "AIMessageChunk" and c["tool_call_chunks"]]
    assert call_chunks[0]["tool_call_chunks"][0]["name"] == "ls"
    args = "".join(tc["args"] or "" for c in call_chunks for tc in c["tool_call_chunks"])
    assert args.replace(" ", "") == '{"path":"/mnt/user-data/outputs"}'
    tools = [(c, m) for c, m in msgs if c["type"] == "tool"]
    assert len(tools) == 1
    assert tools[0][0]["name"] == "ls" and tools[0][1]["langgraph_node"] == "tools"


def test_messages_legacy_mode(client):
    text = "one two three"
    _, parts = stream(client, tool_call(after=text), "messages")
    ev = names(parts)
    assert set(ev) <= {"metadata", "messages/metadata", "messages/partial", "messages/complete"}
    metas = by(parts, "messages/metadata")
    assert metas and all(len(m) == 1 and "metadata" in next(iter(m.values())) for m in metas)
    partials = by(parts, "messages/partial")
    assert all(len(p) == 1 and p[0]["type"] == "ai" for p in partials)
    # partials are accumulated: the last one of the answer is the whole answer
    answer = [p[0] for p in partials if p[0]["content"]]
    assert answer[-1]["content"] == text
    assert all(text.startswith(a["content"]) for a in answer)
    completes = by(parts, "messages/complete")
    assert [c[0]["type"] for c in completes] == ["tool"]
    # each message id gets its metadata event before its first partial/complete
    seen = set()
    for p in parts:
        if p.event == "messages/metadata":
            seen |= set(p.data)
        elif p.event in ("messages/partial", "messages/complete"):
            assert p.data[0]["id"] in seen


def test_custom(client):
    _, parts = stream(
        client,
        mock(tool="task", args={"description": "look around", "prompt": "say hi", "subagent_type": "general-purpose"},
             after_tool="subagent finished"),
        ["custom", "values"],
        context={"subagent_enabled": True},
    )
    custom = by(parts, "custom")
    assert custom, names(parts)
    kinds = [c.get("type") for c in custom]
    assert kinds[0] == "task_started" and kinds[-1] == "task_completed", kinds
    assert answer_text(by(parts, "values")[-1]) == "subagent finished"


def test_debug(client):
    tid, parts = stream(client, "debug me", "debug")
    dbg = by(parts, "debug")
    types = {d["type"] for d in dbg}
    assert {"checkpoint", "task", "task_result"} <= types
    for d in dbg:
        assert isinstance(d["step"], int) and d["timestamp"]
    cps = [d["payload"] for d in dbg if d["type"] == "checkpoint"]
    assert cps[-1]["checkpoint"]["checkpoint_id"] == client.threads.get_state(tid)["checkpoint"]["checkpoint_id"]
    assert {"config", "values", "metadata", "next", "tasks"} <= set(cps[-1])
    tasks = [d["payload"] for d in dbg if d["type"] == "task"]
    assert {"id", "name", "input", "triggers"} <= set(tasks[0])
    results = [d["payload"] for d in dbg if d["type"] == "task_result"]
    assert {"id", "name", "error", "result", "interrupts"} <= set(results[0])


def test_tasks(client):
    _, parts = stream(client, tool_call(after="t"), "tasks")
    tasks = by(parts, "tasks")
    starts = [t for t in tasks if "input" in t]
    results = [t for t in tasks if "result" in t]
    assert starts and results
    assert {t["id"] for t in results} <= {t["id"] for t in starts}
    assert "tools" in {t["name"] for t in starts}
    assert all(t["error"] is None for t in results)


def test_checkpoints(client):
    tid, parts = stream(client, tool_call(after="c"), "checkpoints")
    cps = by(parts, "checkpoints")
    hist = client.threads.get_history(tid, limit=100)
    ids = [c["config"]["configurable"]["checkpoint_id"] for c in cps]
    assert ids == sorted(ids)
    assert ids[-1] == hist[0]["checkpoint"]["checkpoint_id"]
    assert set(ids) <= {h["checkpoint"]["checkpoint_id"] for h in hist}
    assert {"config", "parent_config", "values", "metadata", "next", "tasks"} <= set(cps[-1])
    assert cps[-1]["metadata"]["source"] == "loop"


def test_events(client):
    # Fawn's `events` mode follows astream_events(v2): the graph's chain around node chains
    # around chat-model start/stream/end and tool start/end.
    _, parts = stream(client, tool_call(after="events end"), "events")
    evs = by(parts, "events")
    kinds = {e["event"] for e in evs}
    assert {"on_chain_start", "on_chain_stream", "on_chain_end", "on_chat_model_start",
            "on_chat_model_stream", "on_chat_model_end", "on_tool_start", "on_tool_end"} <= kinds, kinds
    assert (evs[0]["event"], evs[0]["name"]) == ("on_chain_start", "LangGraph")
    assert (evs[-1]["event"], evs[-1]["name"]) == ("on_chain_end", "LangGraph")
    model_ends = [e for e in evs if e["event"] == "on_chat_model_end"]
    assert model_ends[-1]["data"]["output"]["content"] == "events end"
    for e in evs:
        assert {"event", "name", "run_id", "tags", "metadata", "data", "parent_ids"} <= set(e)
    starts = {e["run_id"]: e["name"] for e in evs if e["event"] == "on_chain_start"}
    ends = {e["run_id"]: e["name"] for e in evs if e["event"] == "on_chain_end"}
    assert starts == ends and "tools" in starts.values()
    text = "".join(
        e["data"]["chunk"]["content"] for e in evs
        if e["event"] == "on_chat_model_stream" and isinstance(e["data"]["chunk"]["content"], str)
    )
    assert text.endswith("events end")


def test_several_modes_interleave_in_production_order(client):
    _, parts = stream(client, tool_call(after="mixed"), ["values", "updates", "messages-tuple"])
    ev = names(parts)
    assert {"values", "updates", "messages"} <= set(ev)
    # the tool node's message is streamed before its update, which precedes the next values
    i_tool_msg = next(i for i, p in enumerate(parts) if p.event == "messages" and p.data[0]["type"] == "tool")
    i_tool_up = next(i for i, p in enumerate(parts) if p.event == "updates" and "tools" in p.data)
    assert i_tool_msg < i_tool_up
    assert parts[i_tool_up + 1].event == "values"


@pytest.mark.parametrize("mode", ["values", "updates", "messages-tuple", "custom", "debug"])
def test_v2_adapter(client, mode):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(tid, AGENT, input=user("v2 please"), stream_mode=mode, version="v2"))
    assert parts, "the v2 adapter yields typed parts"
    for p in parts:
        assert {"type", "ns", "data"} <= set(p)
    types = {p["type"] for p in parts}
    expected = {"messages-tuple": "messages"}.get(mode, mode)
    if mode != "custom":
        assert expected in types, types


def test_stream_subgraphs_flag_is_accepted(client):
    _, parts = stream(client, "hi", ["values", "updates"], stream_subgraphs=True)
    assert all("|" not in e for e in names(parts)), "no subgraphs in the lead agent"
