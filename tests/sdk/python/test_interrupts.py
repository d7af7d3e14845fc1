"""Human in the loop: static breakpoints resumed with a null input, DeerFlow's clarification
question as an interrupt resumed with `command.resume` or dismissed by a new message."""

import pytest
from langgraph_sdk.errors import BadRequestError

from sdkutil import AGENT, answer_text, clarification, messages, names, tool_call, user


def test_interrupt_before_tools_then_resume_with_null_input(client):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(
        tid, AGENT, input=user(tool_call(after="resumed after the breakpoint")),
        stream_mode=["values", "updates"], interrupt_before=["tools"],
    ))
    ups = [p.data for p in parts if p.event == "updates"]
    assert ups[-1] == {"__interrupt__": []}, "a breakpoint shows as an empty interrupt list"
    assert "__interrupt__" not in parts[-1].data or parts[-1].data["__interrupt__"] == []
    assert client.runs.get(tid, parts[0].data["run_id"])["status"] == "success"
    th = client.threads.get(tid)
    assert th["status"] == "interrupted" and th["interrupts"] == {}
    st = client.threads.get_state(tid)
    assert st["next"] == ["tools"] and st["interrupts"] == []
    assert not any(m["type"] == "tool" for m in messages(st["values"])), "the tool has not run"

    resumed = list(client.runs.stream(tid, AGENT, input=None, stream_mode="values"))
    assert resumed[1].data == st["values"], "a resumed run streams the current state first"
    out = resumed[-1].data
    assert answer_text(out) == "resumed after the breakpoint"
    assert [m["name"] for m in messages(out) if m["type"] == "tool"] == ["ls"]
    assert client.threads.get(tid)["status"] == "idle"
    assert client.threads.get_state(tid)["next"] == []


def test_interrupt_after_model(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user(tool_call(after="after")), interrupt_after=["model"])
    st = client.threads.get_state(tid)
    assert st["next"] and client.threads.get(tid)["status"] == "interrupted"
    out = client.runs.wait(tid, AGENT, input=None)
    assert answer_text(out) == "after"


def clarified_thread(client):
    tid = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(
        tid, AGENT, input=user(clarification("Which colour do you want?")),
        stream_mode=["values", "updates"],
    ))
    assert "error" not in names(parts)
    ups = [p.data for p in parts if p.event == "updates" and "__interrupt__" in p.data]
    assert len(ups) == 1
    (intr,) = ups[0]["__interrupt__"]
    assert intr["value"]["question"] == "Which colour do you want?"
    assert len(intr["id"]) == 32
    last_values = [p.data for p in parts if p.event == "values"][-1]
    assert last_values["__interrupt__"] == [intr], "the final values carry the interrupt"
    assert client.runs.get(tid, parts[0].data["run_id"])["status"] == "success"

    th = client.threads.get(tid)
    assert th["status"] == "interrupted"
    assert [i for v in th["interrupts"].values() for i in v] == [{"id": intr["id"], "value": intr["value"]}]
    st = client.threads.get_state(tid)
    assert st["next"] and st["interrupts"] == [{"id": intr["id"], "value": intr["value"]}]
    assert [i["id"] for t in st["tasks"] for i in t["interrupts"]] == [intr["id"]]
    hist = client.threads.get_history(tid, limit=1)
    assert [i["id"] for t in hist[0]["tasks"] for i in t["interrupts"]] == [intr["id"]]
    return tid, intr


def test_clarification_resumed_with_command(client):
    tid, intr = clarified_thread(client)
    out = client.runs.wait(tid, AGENT, command={"resume": "blue"})
    assert "__interrupt__" not in out
    humans = [m for m in messages(out) if m["type"] == "human"]
    assert humans[-1]["content"] == "blue"
    assert humans[-1]["additional_kwargs"]["human_input_response"]["value"] == "blue"
    assert "blue" in answer_text(out)
    th = client.threads.get(tid)
    assert th["status"] == "idle" and th["interrupts"] == {}
    assert client.threads.get_state(tid)["interrupts"] == []


def test_clarification_resumed_by_interrupt_id(client):
    tid, intr = clarified_thread(client)
    out = client.runs.wait(tid, AGENT, command={"resume": {intr["id"]: "green"}})
    assert [m for m in messages(out) if m["type"] == "human"][-1]["content"] == "green"
    assert client.threads.get(tid)["status"] == "idle"


def test_clarification_dismissed_by_a_new_message(client):
    tid, _ = clarified_thread(client)
    out = client.runs.wait(tid, AGENT, input=user("never mind, just say hi"))
    assert "never mind" in answer_text(out)
    th = client.threads.get(tid)
    assert th["status"] == "idle" and th["interrupts"] == {}


def test_resume_on_a_stateless_run_is_rejected(client):
    with pytest.raises(BadRequestError):
        client.runs.create(None, AGENT, command={"resume": "x"})
