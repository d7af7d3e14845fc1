"""Crons: create (stateless and on a thread), search, count, update, delete."""

import pytest
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

from sdkutil import AGENT, tag, user


def test_create_search_delete(client):
    t = tag()
    cron = client.crons.create(
        AGENT, schedule="*/5 * * * *", input=user("tick"), metadata={"t": t}
    )
    cid = cron["cron_id"]
    assert cron["schedule"] == "*/5 * * * *"
    assert cron["next_run_date"]
    assert cron["thread_id"] is None
    found = client.crons.search(assistant_id=AGENT, metadata={"t": t})
    assert [c["cron_id"] for c in found] == [cid]
    assert client.crons.count(metadata={"t": t}) == 1

    tid = client.threads.create()["thread_id"]
    on_thread = client.crons.create_for_thread(tid, AGENT, schedule="0 * * * *", input=user("hourly"),
                                               metadata={"t": t})
    assert on_thread["thread_id"] == tid
    assert [c["cron_id"] for c in client.crons.search(thread_id=tid)] == [on_thread["cron_id"]]
    assert client.crons.count(metadata={"t": t}) == 2

    updated = client.crons.update(cid, schedule="*/10 * * * *", enabled=False)
    assert updated["schedule"] == "*/10 * * * *" and updated["enabled"] is False
    assert [c["cron_id"] for c in client.crons.search(metadata={"t": t}, enabled=False)] == [cid]

    client.crons.delete(cid)
    client.crons.delete(on_thread["cron_id"])
    assert client.crons.search(metadata={"t": t}) == []
    with pytest.raises(NotFoundError):
        client.crons.delete(cid)


def test_bad_schedule(client):
    with pytest.raises(UnprocessableEntityError):
        client.crons.create(AGENT, schedule="every day at noon", input=user("x"))
