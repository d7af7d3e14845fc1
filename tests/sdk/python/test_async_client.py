"""The async client (its own httpx.AsyncClient and SSE path) against the same server."""

import asyncio

from langgraph_sdk import get_client

from sdkutil import AGENT, answer_text, tool_call, user


def test_async_stream_wait_and_join(server):
    async def main():
        client = get_client(url=server.url, api_key=server.keys["admin"])
        tid = (await client.threads.create())["thread_id"]
        created = []
        parts = [p async for p in client.runs.stream(
            tid, AGENT, input=user(tool_call(after="async done")),
            stream_mode=["values", "messages-tuple"], stream_resumable=True,
            on_run_created=created.append,
        )]
        rid = parts[0].data["run_id"]
        assert created == [{"run_id": rid, "thread_id": tid}]
        assert answer_text(parts[-1].data) == "async done"
        replay = [p async for p in client.runs.join_stream(tid, rid, last_event_id="-1")]
        assert [(p.event, p.data) for p in replay] == [(p.event, p.data) for p in parts]
        out = await client.runs.wait(tid, AGENT, input=user("async wait"))
        assert "async wait" in answer_text(out)
        run = await client.runs.create(tid, AGENT, input=user("async join"))
        assert "async join" in answer_text(await client.runs.join(tid, run["run_id"]))
        assert (await client.threads.get(tid))["status"] == "idle"

    asyncio.run(main())
