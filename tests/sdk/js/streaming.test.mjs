// Streaming through the real JS SDK: SSE parsing of every mode the UIs use, messages-tuple
// chunks merged exactly as useStream merges them, run ids from Content-Location, joinStream
// with Last-Event-ID (incl. -1), and cancellation.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AGENT, client, collect, eventually, lastAi, mock, servers, slow, toolCall, user, waitStatus,
} from "./helpers.mjs";

// useStream's chunk merger (not in the package's export map, so loaded by file URL).
const sdkEntry = import.meta.resolve("@langchain/langgraph-sdk");
const { MessageTupleManager } = await import(new URL("./ui/messages.js", sdkEntry).href);

for (const [backend, url] of servers()) {
  describe(`streaming (${backend})`, () => {
    const c = client(url);

    test("values + updates + messages-tuple, run id from Content-Location", async () => {
      const { thread_id } = await c.threads.create();
      let created;
      const parts = await collect(
        c.runs.stream(thread_id, AGENT, {
          input: user(toolCall("all listed")),
          streamMode: ["values", "updates", "messages-tuple"],
          onRunCreated: (meta) => { created = meta; },
        }),
      );
      assert.equal(parts[0].event, "metadata");
      const runId = parts[0].data.run_id;
      assert.deepEqual(created, { run_id: runId, thread_id });
      const events = new Set(parts.map((p) => p.event));
      for (const e of ["values", "updates", "messages"]) assert.ok(events.has(e), e);
      assert.ok(!events.has("error"));
      const last = parts.filter((p) => p.event === "values").at(-1).data;
      assert.equal(lastAi(last).content, "all listed");
      const run = await c.runs.get(thread_id, runId);
      assert.equal(run.status, "success", "terminal before the stream closed");
      const updates = parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)[0]);
      assert.ok(updates.includes("model") && updates.includes("tools"), updates.join());
    });

    test("messages-tuple chunks merge (as useStream does) into the stored messages", async () => {
      const text = "merge these streamed words into one message";
      const { thread_id } = await c.threads.create();
      const parts = await collect(
        c.runs.stream(thread_id, AGENT, {
          input: user(toolCall(text)),
          streamMode: "messages-tuple",
        }),
      );
      const tuples = parts.filter((p) => p.event === "messages");
      assert.ok(tuples.length > 5);
      const manager = new MessageTupleManager();
      for (const { data } of tuples) {
        assert.ok(Array.isArray(data) && data.length === 2, "[chunk, metadata]");
        const [chunk, metadata] = data;
        assert.ok(chunk.id, "every chunk has an id");
        assert.equal(metadata.thread_id, thread_id);
        assert.ok(["model", "tools"].includes(metadata.langgraph_node), metadata.langgraph_node);
        assert.ok(manager.add(structuredClone(chunk), metadata));
      }
      const state = await c.threads.getState(thread_id);
      const stored = state.values.messages.filter((m) => m.type === "ai" || m.type === "tool");
      for (const m of stored) {
        const merged = manager.get(m.id)?.chunk;
        assert.ok(merged, `no streamed message for ${m.id}`);
        assert.equal(merged.content, m.content, m.id);
        if (m.type === "ai" && m.tool_calls.length) {
          assert.deepEqual(
            merged.tool_calls.map((t) => [t.name, t.args, t.id]),
            m.tool_calls.map((t) => [t.name, t.args, t.id]),
          );
        }
      }
      assert.equal(lastAi(state.values).content, text);
    });

    test("legacy messages mode and the other modes parse", async () => {
      const { thread_id } = await c.threads.create();
      const parts = await collect(
        c.runs.stream(thread_id, AGENT, {
          input: user(toolCall("modes")),
          streamMode: ["messages", "debug", "tasks", "checkpoints", "events", "custom"],
        }),
      );
      const names = new Set(parts.map((p) => p.event));
      for (const e of ["messages/metadata", "messages/partial", "messages/complete", "debug", "tasks",
        "checkpoints", "events"]) {
        assert.ok(names.has(e), `${e} in ${[...names]}`);
      }
      const partials = parts.filter((p) => p.event === "messages/partial").map((p) => p.data[0]);
      assert.equal(partials.filter((m) => m.content).at(-1).content, "modes");
    });

    test("joinStream replays with Last-Event-ID, -1 from the start", async () => {
      const { thread_id } = await c.threads.create();
      const parts = await collect(
        c.runs.stream(thread_id, AGENT, {
          input: user(toolCall("resumable")),
          streamMode: ["values", "messages-tuple"],
          streamResumable: true,
        }),
      );
      const runId = parts[0].data.run_id;
      assert.ok(parts.every((p) => p.id !== undefined), "ids on every event");
      const all = await collect(c.runs.joinStream(thread_id, runId, { lastEventId: "-1" }));
      assert.deepEqual(all.map((p) => [p.event, p.data]), parts.map((p) => [p.event, p.data]));
      const k = Math.floor(parts.length / 2);
      const rest = await collect(c.runs.joinStream(thread_id, runId, { lastEventId: parts[k].id }));
      assert.deepEqual(rest.map((p) => p.id), parts.slice(k + 1).map((p) => p.id));
      const onlyValues = await collect(
        c.runs.joinStream(thread_id, runId, { lastEventId: "-1", streamMode: ["values"] }),
      );
      assert.deepEqual(
        onlyValues.map((p) => p.data),
        parts.filter((p) => p.event === "values").map((p) => p.data),
        "the JSON-array stream_mode filter applies to the replay",
      );
    });

    test("an aborted stream resumes with joinStream without losing events", async () => {
      const { thread_id } = await c.threads.create();
      const controller = new AbortController();
      const seen = [];
      let runId;
      try {
        for await (const part of c.runs.stream(thread_id, AGENT, {
          input: user(slow(40, 40)),
          streamMode: ["messages-tuple", "values"],
          streamResumable: true,
          onDisconnect: "continue",
          signal: controller.signal,
          onRunCreated: (m) => { runId = m.run_id; },
        })) {
          seen.push(part);
          if (seen.length === 6) controller.abort();
        }
      } catch (e) {
        assert.match(String(e?.name ?? e), /Abort/);
      }
      assert.ok(runId);
      const rest = await collect(
        c.runs.joinStream(thread_id, runId, { lastEventId: seen.at(-1).id }),
      );
      await waitStatus(c, thread_id, runId, ["success"]);
      const full = await collect(c.runs.joinStream(thread_id, runId, { lastEventId: "-1" }));
      assert.deepEqual([...seen, ...rest].map((p) => p.id), full.map((p) => p.id));
      const text = full
        .filter((p) => p.event === "messages" && p.data[0].type === "AIMessageChunk")
        .map((p) => p.data[0].content).join("");
      assert.equal(text, Array.from({ length: 40 }, (_, i) => `w${i}`).join(" "));
    });

    test("thread-less joinStream (/runs/{id}/stream) of a stateless run", async () => {
      const run = await c.runs.create(null, AGENT, {
        input: user(slow(20, 30)), streamMode: ["values"], streamResumable: true,
        onCompletion: "keep",
      });
      const parts = await collect(c.runs.joinStream(null, run.run_id, { lastEventId: "-1" }));
      assert.equal(parts[0].event, "metadata");
      assert.ok(parts.some((p) => p.event === "values"));
    });

    test("cancel ends a live stream and the run is interrupted", async () => {
      const { thread_id } = await c.threads.create();
      const run = await c.runs.create(thread_id, AGENT, {
        input: user(slow(200, 30)), streamMode: ["messages-tuple"],
      });
      await waitStatus(c, thread_id, run.run_id, ["running"]);
      const join = collect(c.runs.joinStream(thread_id, run.run_id));
      await eventually(async () => {
        const st = await c.threads.getState(thread_id);
        return (st.values.messages ?? []).some((m) => m.type === "human");
      }, "the input checkpoint");
      await c.runs.cancel(thread_id, run.run_id);
      const parts = await join;
      assert.ok(!parts.some((p) => p.event === "error"), "a user cancel is not an error");
      const done = await waitStatus(c, thread_id, run.run_id, ["interrupted"]);
      assert.equal(done.status, "interrupted");
      // the thread follows its latest checkpoint, which still has `agent` to run (langgraph-api)
      assert.equal((await c.threads.get(thread_id)).status, "interrupted");
    });

    test("stateless stream and wait", async () => {
      let meta;
      const parts = await collect(c.runs.stream(null, AGENT, {
        input: user("stateless hello"), onRunCreated: (m) => { meta = m; },
      }));
      assert.equal(meta.run_id, parts[0].data.run_id);
      assert.match(lastAi(parts.at(-1).data).content, /stateless hello/);
      const out = await c.runs.wait(null, AGENT, { input: user(mock({ text: "waited" })) });
      assert.equal(lastAi(out).content, "waited");
    });
  });
}
