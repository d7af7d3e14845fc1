"""Time travel: runs started from an older checkpoint fork the thread; history keeps both
branches."""

from sdkutil import AGENT, answer_text, messages, user


def two_turns(client):
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, AGENT, input=user("turn one"))
    after_one = client.threads.get_state(tid)
    client.runs.wait(tid, AGENT, input=user("turn two"))
    return tid, after_one


def humans(values):
    return [m["content"] for m in messages(values) if m["type"] == "human"]


def test_fork_a_run_from_a_checkpoint(client):
    tid, after_one = two_turns(client)
    old_head = client.threads.get_state(tid)["checkpoint"]["checkpoint_id"]
    out = client.runs.wait(tid, AGENT, input=user("turn two, again"), checkpoint=after_one["checkpoint"])
    assert [h for h in humans(out)] == [humans(after_one["values"])[0], "turn two, again"]
    assert "turn two, again" in answer_text(out)

    hist = client.threads.get_history(tid, limit=200)
    by_id = {h["checkpoint"]["checkpoint_id"]: h for h in hist}
    assert old_head in by_id, "the abandoned branch stays in history"
    ids = [h["checkpoint"]["checkpoint_id"] for h in hist]
    assert ids == sorted(ids, reverse=True)
    # walking parents from the new head reaches the fork point, not the old branch
    cur, chain = hist[0], []
    while cur:
        chain.append(cur["checkpoint"]["checkpoint_id"])
        parent = cur["parent_checkpoint"]
        cur = by_id.get(parent["checkpoint_id"]) if parent else None
    assert after_one["checkpoint"]["checkpoint_id"] in chain
    assert old_head not in chain
    sources = [by_id[c]["metadata"]["source"] for c in chain]
    # new input from an older checkpoint is an `input` checkpoint right under it (no `fork` copy)
    assert "fork" not in sources and sources.count("input") >= 2
    new_input = next(c for c in chain if by_id[c]["metadata"]["source"] == "input")
    assert by_id[new_input]["parent_checkpoint"]["checkpoint_id"] == after_one["checkpoint"]["checkpoint_id"]


def test_resume_from_a_finished_checkpoint_returns_its_state(client):
    # Nothing is left to run at that checkpoint: like LangGraph, the run streams that state
    # (a resumed run starts with its current values) and wait returns it.
    tid, after_one = two_turns(client)
    cid = after_one["checkpoint"]["checkpoint_id"]
    parts = list(client.runs.stream(tid, AGENT, input=None, checkpoint_id=cid, stream_mode="values"))
    assert [p.event for p in parts] == ["metadata", "values"]
    assert parts[1].data == after_one["values"]
    out = client.runs.wait(tid, AGENT, input=None, checkpoint_id=cid)
    assert humans(out) == humans(after_one["values"])


def test_update_state_on_an_old_checkpoint_forks(client):
    tid, after_one = two_turns(client)
    res = client.threads.update_state(
        tid, {"my_note": "branch"}, checkpoint_id=after_one["checkpoint"]["checkpoint_id"]
    )
    st = client.threads.get_state(tid)
    assert st["checkpoint"]["checkpoint_id"] == res["checkpoint"]["checkpoint_id"]
    assert st["parent_checkpoint"]["checkpoint_id"] == after_one["checkpoint"]["checkpoint_id"]
    assert st["values"]["my_note"] == "branch"
    assert humans(st["values"]) == humans(after_one["values"])
    out = client.runs.wait(tid, AGENT, input=user("on the branch"))
    assert humans(out)[-1] == "on the branch" and len(humans(out)) == 2
