"""Threads: CRUD, search/count, copy, prune, state (get/update), history."""

import uuid

import pytest
from langgraph_sdk.errors import BadRequestError, ConflictError, NotFoundError, UnprocessableEntityError

from sdkutil import AGENT, answer_text, messages, tag, tool_call, user, without_owner

THREAD_KEYS = {
    "thread_id", "created_at", "updated_at", "metadata", "status", "config", "values",
    "interrupts",
}


def test_create_get_update_delete(client):
    t = tag()
    tid = str(uuid.uuid4())
    th = client.threads.create(thread_id=tid, metadata={"t": t, "a": 1})
    assert th["thread_id"] == tid
    assert th["status"] == "idle"
    assert set(th) >= THREAD_KEYS
    assert without_owner(client.threads.get(tid)["metadata"]) == {"t": t, "a": 1}

    with pytest.raises(ConflictError):
        client.threads.create(thread_id=tid)
    same = client.threads.create(thread_id=tid, metadata={"b": 2}, if_exists="do_nothing")
    assert without_owner(same["metadata"]) == {"t": t, "a": 1}, "do_nothing keeps the metadata"

    up = client.threads.update(tid, metadata={"b": 2})
    assert without_owner(up["metadata"]) == {"t": t, "a": 1, "b": 2}, "metadata is merged"
    assert up["updated_at"] >= th["updated_at"]

    client.threads.delete(tid)
    with pytest.raises(NotFoundError):
        client.threads.get(tid)
    with pytest.raises(NotFoundError):
        client.threads.delete(tid)


def test_graph_id_goes_into_metadata(client):
    th = client.threads.create(graph_id=AGENT)
    assert th["metadata"]["graph_id"] == AGENT


def test_search_and_count(client):
    t = tag()
    a = client.threads.create(metadata={"t": t, "kind": "a"})["thread_id"]
    b = client.threads.create(metadata={"t": t, "kind": "b"})["thread_id"]
    client.runs.wait(b, AGENT, input=user("hi"))

    found = client.threads.search(metadata={"t": t})
    assert [x["thread_id"] for x in found] == [b, a], "newest first"
    assert [x["thread_id"] for x in client.threads.search(metadata={"t": t, "kind": "a"})] == [a]
    assert client.threads.count(metadata={"t": t}) == 2
    assert client.threads.count(metadata={"t": t}, status="idle") == 2
    assert client.threads.search(metadata={"t": t}, status="busy") == []
    assert [x["thread_id"] for x in client.threads.search(ids=[a])] == [a]
    asc = client.threads.search(metadata={"t": t}, sort_by="created_at", sort_order="asc")
    assert [x["thread_id"] for x in asc] == [a, b]
    page = client.threads.search(metadata={"t": t}, limit=1, offset=1)
    assert [x["thread_id"] for x in page] == [a]
    sel = client.threads.search(metadata={"t": t}, select=["thread_id", "status"], limit=1)
    assert sel == [{"thread_id": b, "status": "idle"}]
    # values containment: b's state has messages, a has none
    with_values = client.threads.search(metadata={"t": t}, values={"thread_data": {}})
    assert [x["thread_id"] for x in with_values] == [b]
    ex = client.threads.search(
        metadata={"t": t, "kind": "b"}, extract={"last": "values.messages[-1].type"}
    )
    assert ex[0]["extracted"] == {"last": "ai"}


def test_copy_keeps_history(client):
    tid = client.threads.create(metadata={"copy": "me"})["thread_id"]
    client.runs.wait(tid, AGENT, input=user("remember this"))
    src_hist = client.threads.get_history(tid, limit=100)
    copy = client.threads.copy(tid)
    cid = copy["thread_id"]
    assert cid != tid
    assert copy["metadata"]["copy"] == "me"
    assert client.threads.get_state(cid)["values"] == client.threads.get_state(tid)["values"]
    hist = client.threads.get_history(cid, limit=100)
    assert [h["checkpoint"]["checkpoint_id"] for h in hist] == [
        h["checkpoint"]["checkpoint_id"] for h in src_hist
    ]
    assert all(h["checkpoint"]["thread_id"] == cid for h in hist)
    # The copy is independent: a run on it does not touch the source.
    client.runs.wait(cid, AGENT, input=user("only in the copy"))
    assert len(client.threads.get_history(tid, limit=100)) == len(src_hist)
    assert "only in the copy" in answer_text(client.threads.get_state(cid)["values"])


def test_prune(client):
    a = client.threads.create()["thread_id"]
    b = client.threads.create()["thread_id"]
    client.runs.wait(b, AGENT, input=user("one"))
    client.runs.wait(b, AGENT, input=user("two"))
    res = client.threads.prune([a])
    assert res == {"pruned_count": 1}
    with pytest.raises(NotFoundError):
        client.threads.get(a)
    before = client.threads.get_state(b)["values"]
    res = client.threads.prune([b], strategy="keep_latest")
    assert res["pruned_count"] == 1
    assert client.threads.get_state(b)["values"] == before
    assert len(client.threads.get_history(b, limit=100)) == 1


def test_empty_state_and_history(client):
    tid = client.threads.create()["thread_id"]
    st = client.threads.get_state(tid)
    assert st["values"] == {} and st["next"] == [] and st["checkpoint"] is None
    assert client.threads.get_history(tid) == []


def test_state_history_and_checkpoints(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user(tool_call(after="done listing")))
    st = client.threads.get_state(tid)
    assert st["next"] == [] and st["tasks"] == [] and st["interrupts"] == []
    assert answer_text(st["values"]) == "done listing"
    assert st["metadata"]["graph_id"] == AGENT
    assert st["checkpoint"]["thread_id"] == tid

    hist = client.threads.get_history(tid, limit=100)
    assert hist[0]["checkpoint"] == st["checkpoint"], "newest first"
    ids = [h["checkpoint"]["checkpoint_id"] for h in hist]
    assert ids == sorted(ids, reverse=True)
    # parents chain back to the input checkpoint at step -1
    for newer, older in zip(hist, hist[1:]):
        assert newer["parent_checkpoint"]["checkpoint_id"] == older["checkpoint"]["checkpoint_id"]
    first = hist[-1]
    assert first["metadata"]["source"] == "input" and first["metadata"]["step"] == -1
    assert first["parent_checkpoint"] is None and first["next"] == ["__start__"]
    assert {h["metadata"]["source"] for h in hist[:-1]} == {"loop"}

    # limit / before / metadata filter
    assert len(client.threads.get_history(tid, limit=2)) == 2
    older = client.threads.get_history(tid, before=hist[1]["checkpoint"], limit=100)
    assert [h["checkpoint"]["checkpoint_id"] for h in older] == ids[2:]
    inputs = client.threads.get_history(tid, metadata={"source": "input"}, limit=100)
    assert [h["checkpoint"]["checkpoint_id"] for h in inputs] == [ids[-1]]

    # state at an older checkpoint, by id and by Checkpoint object
    mid = hist[2]
    at = client.threads.get_state(tid, checkpoint=mid["checkpoint"])
    assert at["values"] == mid["values"]
    at = client.threads.get_state(tid, checkpoint_id=mid["checkpoint"]["checkpoint_id"])
    assert at["checkpoint"]["checkpoint_id"] == mid["checkpoint"]["checkpoint_id"]


def test_update_state(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user("first"))
    before = client.threads.get_state(tid)
    res = client.threads.update_state(
        tid,
        {"messages": [{"type": "ai", "content": "edited by hand", "id": "manual-1"}]},
        as_node="model",
    )
    cp = res["checkpoint"]
    assert cp["thread_id"] == tid and cp["checkpoint_id"]
    st = client.threads.get_state(tid)
    assert st["checkpoint"]["checkpoint_id"] == cp["checkpoint_id"]
    assert st["parent_checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"]
    assert st["metadata"]["source"] == "update"
    assert messages(st["values"])[-1]["content"] == "edited by hand"
    assert messages(st["values"])[-1]["id"] == "manual-1"
    # replacing a message by id goes through the add_messages reducer
    client.threads.update_state(
        tid, {"messages": [{"type": "ai", "content": "edited twice", "id": "manual-1"}]}, as_node="model"
    )
    msgs = messages(client.threads.get_state(tid)["values"])
    assert [m["content"] for m in msgs if m["id"] == "manual-1"] == ["edited twice"]
    # unknown keys round-trip
    client.threads.update_state(tid, {"my_key": {"x": [1, 2]}})
    assert client.threads.get_state(tid)["values"]["my_key"] == {"x": [1, 2]}
    # the thread's values follow the state
    assert client.threads.get(tid)["values"]["my_key"] == {"x": [1, 2]}


def test_update_state_errors(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user("x"))
    with pytest.raises(BadRequestError, match="no_such_node"):
        client.threads.update_state(tid, {"messages": []}, as_node="no_such_node")
    with pytest.raises(NotFoundError):
        client.threads.update_state(str(uuid.uuid4()), {"x": 1})
    with pytest.raises(NotFoundError):
        client.threads.get_state(str(uuid.uuid4()))
    with pytest.raises(UnprocessableEntityError):
        client.threads.get("nope")


def test_update_minimal_ttl_and_include(client):
    th = client.threads.create(ttl={"ttl": 60, "strategy": "delete"})
    tid = th["thread_id"]
    assert client.threads.update(tid, metadata={"x": 1}, return_minimal=True) is None
    assert without_owner(client.threads.get(tid)["metadata"]) == {"x": 1}
    got = client.threads.get(tid, include=["ttl"])
    assert got["ttl"]["ttl"] == 60 and got["ttl"]["strategy"] == "delete"


def test_create_with_supersteps(client):
    th = client.threads.create(
        graph_id=AGENT,
        supersteps=[
            {"updates": [{"values": {"messages": [{"type": "human", "content": "copied q"}]}, "as_node": "__start__"}]},
            {"updates": [{"values": {"messages": [{"type": "ai", "content": "copied a"}]}, "as_node": "model"}]},
        ],
    )
    st = client.threads.get_state(th["thread_id"])
    assert [m["content"] for m in messages(st["values"])] == ["copied q", "copied a"]
    assert len(client.threads.get_history(th["thread_id"], limit=10)) >= 2
    # the copied conversation continues like any other
    out = client.runs.wait(th["thread_id"], AGENT, input=user("and now?"))
    assert "and now?" in answer_text(out)


def test_delete_assistant_with_its_threads(client):
    a = client.assistants.create(AGENT, name="owner")
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, a["assistant_id"], input=user("mine"))
    assert client.threads.get(tid)["metadata"]["assistant_id"] == a["assistant_id"]
    client.assistants.delete(a["assistant_id"], delete_threads=True)
    with pytest.raises(NotFoundError):
        client.threads.get(tid)
