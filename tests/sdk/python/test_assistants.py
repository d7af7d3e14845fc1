"""Assistants: the system `lead_agent` assistant and the CRUD/version surface."""

import uuid

import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from sdkutil import AGENT, answer_text, tag, user

SYSTEM_ID = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), AGENT))


def test_system_assistant_is_found_by_search_get_and_graph_id(client):
    found = client.assistants.search(graph_id=AGENT, metadata={"created_by": "system"})
    assert [a["assistant_id"] for a in found] == [SYSTEM_ID]
    a = client.assistants.get(SYSTEM_ID)
    assert a["graph_id"] == AGENT
    assert a["name"] == AGENT
    assert a["metadata"] == {"created_by": "system"}
    assert a["version"] == 1
    assert set(a) >= {
        "assistant_id", "graph_id", "config", "context", "metadata", "name",
        "description", "version", "created_at", "updated_at",
    }
    assert client.assistants.count(graph_id=AGENT) >= 1
    obj = client.assistants.search(graph_id=AGENT, limit=1, response_format="object")
    assert len(obj["assistants"]) == 1


def test_graph_and_schemas(client):
    graph = client.assistants.get_graph(SYSTEM_ID)
    ids = {n["id"] for n in graph["nodes"]}
    assert {"__start__", "__end__"} <= ids
    assert len(ids) > 2
    for e in graph["edges"]:
        assert e["source"] in ids and e["target"] in ids
    assert client.assistants.get_graph(SYSTEM_ID, xray=True)["nodes"]
    schemas = client.assistants.get_schemas(SYSTEM_ID)
    assert schemas["graph_id"] == AGENT
    assert "messages" in schemas["state_schema"]["properties"]
    assert set(schemas) >= {"input_schema", "output_schema", "config_schema", "context_schema"}
    assert isinstance(client.assistants.get_subgraphs(SYSTEM_ID), dict)


def test_create_update_versions_latest_delete(client):
    t = tag()
    a = client.assistants.create(
        AGENT,
        config={"configurable": {"model_name": "mock"}},
        metadata={"t": t, "v": 1},
        name="first",
        description="made by the SDK suite",
    )
    aid = a["assistant_id"]
    assert a["version"] == 1 and a["name"] == "first"
    assert a["context"] == {"model_name": "mock"}, "context mirrors config.configurable"
    assert a["description"] == "made by the SDK suite"

    with pytest.raises(ConflictError):
        client.assistants.create(AGENT, assistant_id=aid)
    same = client.assistants.create(AGENT, assistant_id=aid, if_exists="do_nothing", name="other")
    assert same["name"] == "first" and same["version"] == 1

    b = client.assistants.update(aid, metadata={"v": 2}, name="second")
    assert b["version"] == 2 and b["name"] == "second"
    assert b["metadata"]["t"] == t and b["metadata"]["v"] == 2, "metadata is merged"
    assert b["config"] == a["config"], "omitted fields are kept"

    versions = client.assistants.get_versions(aid)
    assert [v["version"] for v in versions] == [2, 1]
    assert [v["name"] for v in versions] == ["second", "first"]

    back = client.assistants.set_latest(aid, 1)
    assert back["version"] == 1 and back["name"] == "first"
    assert client.assistants.get(aid)["name"] == "first"

    assert [x["assistant_id"] for x in client.assistants.search(metadata={"t": t})] == [aid]
    assert client.assistants.count(metadata={"t": t}) == 1
    sel = client.assistants.search(metadata={"t": t}, select=["assistant_id", "name"])
    assert sel == [{"assistant_id": aid, "name": "first"}]

    # A run with the user assistant's id uses the lead_agent graph.
    out = client.runs.wait(None, aid, input=user("hello from a custom assistant"))
    assert "hello from a custom assistant" in answer_text(out)

    client.assistants.delete(aid)
    with pytest.raises(NotFoundError):
        client.assistants.get(aid)
    assert client.assistants.count(metadata={"t": t}) == 0


def test_search_pagination_and_sort(client):
    t = tag()
    ids = [
        client.assistants.create(AGENT, metadata={"t": t}, name=f"n{i}")["assistant_id"]
        for i in range(3)
    ]
    page1 = client.assistants.search(metadata={"t": t}, limit=2, response_format="object")
    assert len(page1["assistants"]) == 2
    assert page1["next"] is not None
    page2 = client.assistants.search(
        metadata={"t": t}, limit=2, offset=int(page1["next"]), response_format="object"
    )
    assert len(page2["assistants"]) == 1 and page2["next"] is None
    assert {a["assistant_id"] for a in page1["assistants"] + page2["assistants"]} == set(ids)
    asc = client.assistants.search(metadata={"t": t}, sort_by="name", sort_order="asc")
    assert [a["name"] for a in asc] == ["n0", "n1", "n2"]
    desc = client.assistants.search(metadata={"t": t}, sort_by="name", sort_order="desc")
    assert [a["name"] for a in desc] == ["n2", "n1", "n0"]
    for aid in ids:
        client.assistants.delete(aid)


def test_assistant_errors(client):
    with pytest.raises(NotFoundError):
        client.assistants.get(str(uuid.uuid4()))
    with pytest.raises(NotFoundError):
        client.assistants.create("no_such_graph")
    with pytest.raises(UnprocessableEntityError):
        client.assistants.get("not-a-uuid")
    with pytest.raises(NotFoundError):
        client.assistants.update(str(uuid.uuid4()), metadata={"x": 1})
    with pytest.raises(NotFoundError):
        client.assistants.delete(str(uuid.uuid4()))
