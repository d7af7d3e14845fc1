// Threads, state, history, assistants, store, crons and errors through the real JS SDK
// (which sends list query params as JSON arrays and booleans as "1"/"0").
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import {
  AGENT, api, client, collect, lastAi, mock, rejectsWith, servers, slow, toolCall, user, waitStatus,
  withoutOwner,
} from "./helpers.mjs";

for (const [backend, url] of servers()) {
  describe(`resources (${backend})`, () => {
    const c = client(url);

    test("threads: create, get, update, search, count, copy, delete", async () => {
      const tag = randomUUID();
      const t = await c.threads.create({ metadata: { tag, n: 1 } });
      assert.equal(t.status, "idle");
      await rejectsWith(409, () => c.threads.create({ threadId: t.thread_id }));
      const same = await c.threads.create({ threadId: t.thread_id, ifExists: "do_nothing" });
      assert.equal(same.thread_id, t.thread_id);
      const up = await c.threads.update(t.thread_id, { metadata: { m: 2 } });
      assert.deepEqual(withoutOwner(up.metadata), { tag, n: 1, m: 2 });
      await c.runs.wait(t.thread_id, AGENT, { input: user("hello js") });
      const other = await c.threads.create({ metadata: { tag } });
      const found = await c.threads.search({ metadata: { tag }, limit: 10 });
      assert.deepEqual(found.map((x) => x.thread_id), [other.thread_id, t.thread_id]);
      assert.equal(await c.threads.count({ metadata: { tag } }), 2);
      const sel = await c.threads.search({ metadata: { tag }, select: ["thread_id"], limit: 1 });
      assert.deepEqual(sel, [{ thread_id: other.thread_id }]);
      const copy = await c.threads.copy(t.thread_id);
      assert.notEqual(copy.thread_id, t.thread_id);
      assert.deepEqual(
        (await c.threads.getState(copy.thread_id)).values,
        (await c.threads.getState(t.thread_id)).values,
      );
      await c.threads.delete(t.thread_id);
      await rejectsWith(404, () => c.threads.get(t.thread_id));
    });

    test("state, history (newest first, parents chain), updateState, getState at a checkpoint", async () => {
      const { thread_id } = await c.threads.create();
      const empty = await c.threads.getState(thread_id);
      assert.equal(empty.checkpoint, null);
      assert.deepEqual(await c.threads.getHistory(thread_id), []);
      await c.runs.wait(thread_id, AGENT, { input: user(toolCall("done")) });
      const state = await c.threads.getState(thread_id);
      assert.deepEqual(state.next, []);
      assert.equal(lastAi(state.values).content, "done");
      const history = await c.threads.getHistory(thread_id, { limit: 100 });
      assert.deepEqual(history[0].checkpoint, state.checkpoint);
      for (let i = 0; i + 1 < history.length; i++) {
        assert.equal(history[i].parent_checkpoint.checkpoint_id, history[i + 1].checkpoint.checkpoint_id);
      }
      const first = history.at(-1);
      assert.equal(first.metadata.source, "input");
      assert.deepEqual(first.next, ["__start__"]);
      const older = await c.threads.getHistory(thread_id, { limit: 100, before: history[1].checkpoint });
      assert.equal(older.length, history.length - 2);
      const at = await c.threads.getState(thread_id, history[2].checkpoint);
      assert.deepEqual(at.values, history[2].values);
      const atById = await c.threads.getState(thread_id, history[2].checkpoint.checkpoint_id);
      assert.equal(atById.checkpoint.checkpoint_id, history[2].checkpoint.checkpoint_id);
      const res = await c.threads.updateState(thread_id, { values: { note: "js" } });
      assert.equal(res.checkpoint.thread_id, thread_id);
      assert.equal((await c.threads.getState(thread_id)).values.note, "js");
      await c.threads.patchState(thread_id, { reviewed: true });
      const patched = await c.threads.getState(thread_id);
      assert.equal(patched.metadata.reviewed, true);
      assert.equal(patched.checkpoint.checkpoint_id, res.checkpoint.checkpoint_id);
    });

    test("thread joinStream follows every run of the thread", async () => {
      const { thread_id } = await c.threads.create();
      const controller = new AbortController();
      const seen = [];
      // The server subscribes to the thread before it answers the stream's headers: a client
      // whose fetch says when they arrive lets the runs start only once nothing can be missed.
      let answered;
      const subscribed = new Promise((resolve) => { answered = resolve; });
      const watcher = client(url, {
        fetch: async (input, init) => {
          const res = await fetch(input, init);
          if (String(input).includes(`/threads/${thread_id}/stream`)) answered(res.status);
          return res;
        },
      });
      const reading = (async () => {
        try {
          for await (const part of watcher.threads.joinStream(thread_id, {
            streamMode: ["lifecycle"], signal: controller.signal,
          })) {
            seen.push(part);
            if (seen.filter((p) => p.data?.status === "run_done").length === 2) controller.abort();
          }
        } catch (e) {
          if (!controller.signal.aborted) throw e;
        }
      })();
      assert.equal(await subscribed, 200, "the thread stream answered");
      const a = await c.runs.create(thread_id, AGENT, { input: user("one") });
      await c.runs.join(thread_id, a.run_id);
      const b = await c.runs.create(thread_id, AGENT, { input: user("two") });
      await c.runs.join(thread_id, b.run_id);
      const timer = setTimeout(() => controller.abort(), 10000);
      await reading;
      clearTimeout(timer);
      const done = seen.filter((p) => p.data?.status === "run_done").map((p) => p.data.run_id);
      assert.deepEqual(done, [a.run_id, b.run_id]);
    });

    test("runs: create, join, list with status/select, get, delete, batch", async () => {
      const { thread_id } = await c.threads.create();
      let meta;
      const run = await c.runs.create(thread_id, AGENT, {
        input: user("background js"), onRunCreated: (m) => { meta = m; },
      });
      assert.deepEqual(meta, { run_id: run.run_id, thread_id });
      const out = await c.runs.join(thread_id, run.run_id);
      assert.match(lastAi(out).content, /background js/);
      const listed = await c.runs.list(thread_id, { status: "success", select: ["run_id", "status"] });
      assert.deepEqual(listed, [{ run_id: run.run_id, status: "success" }]);
      await c.runs.delete(thread_id, run.run_id);
      await rejectsWith(404, () => c.runs.get(thread_id, run.run_id));
      const batch = await c.runs.createBatch([
        { assistantId: AGENT, input: user("b0"), on_completion: "keep" },
        { assistantId: AGENT, input: user("b1"), on_completion: "keep" },
      ]);
      assert.equal(batch.length, 2);
      for (const r of batch) await waitStatus(c, r.thread_id, r.run_id, ["success"]);
    });

    test("multitask reject is a 409 and rollback removes the old run", async () => {
      const { thread_id } = await c.threads.create();
      const first = await c.runs.create(thread_id, AGENT, { input: user(slow(200, 25)) });
      await waitStatus(c, thread_id, first.run_id, ["running"]);
      await rejectsWith(409, () =>
        c.runs.create(thread_id, AGENT, { input: user("x"), multitaskStrategy: "reject" }));
      const out = await c.runs.wait(thread_id, AGENT, { input: user("second"), multitaskStrategy: "rollback" });
      assert.match(lastAi(out).content, /second/);
      await rejectsWith(404, () => c.runs.get(thread_id, first.run_id));
    });

    test("interrupt before tools, then resume", async () => {
      const { thread_id } = await c.threads.create();
      const parts = await collect(c.runs.stream(thread_id, AGENT, {
        input: user(toolCall("resumed")), interruptBefore: ["tools"], streamMode: ["updates"],
      }));
      assert.deepEqual(parts.at(-1).data, { __interrupt__: [] });
      assert.equal((await c.threads.get(thread_id)).status, "interrupted");
      const out = await c.runs.wait(thread_id, AGENT, { input: null });
      assert.equal(lastAi(out).content, "resumed");
    });

    test("clarification interrupt, resumed with a command", async () => {
      const { thread_id } = await c.threads.create();
      const out = await c.runs.wait(thread_id, AGENT, {
        input: user(mock({ tool: "ask_clarification", args: { question: "Size?", clarification_type: "missing_info" } })),
      });
      assert.equal(out.__interrupt__[0].value.question, "Size?");
      const th = await c.threads.get(thread_id);
      assert.equal(th.status, "interrupted");
      const resumed = await c.runs.wait(thread_id, AGENT, { command: { resume: "large" } });
      assert.match(lastAi(resumed).content, /large/);
      assert.equal((await c.threads.get(thread_id)).status, "idle");
    });

    test("assistants", async () => {
      const [system] = await c.assistants.search({ graphId: AGENT, metadata: { created_by: "system" } });
      assert.equal(system.name, AGENT);
      const graph = await c.assistants.getGraph(system.assistant_id);
      assert.ok(graph.nodes.length > 2);
      const schemas = await c.assistants.getSchemas(system.assistant_id);
      assert.equal(schemas.graph_id, AGENT);
      const a = await c.assistants.create({ graphId: AGENT, name: "js one", metadata: { js: true } });
      const b = await c.assistants.update(a.assistant_id, { name: "js two" });
      assert.equal(b.version, 2);
      const versions = await c.assistants.getVersions(a.assistant_id);
      assert.deepEqual(versions.map((v) => v.version), [2, 1]);
      assert.equal((await c.assistants.setLatest(a.assistant_id, 1)).name, "js one");
      const page = await c.assistants.search({ graphId: AGENT, limit: 1, includePagination: true });
      assert.equal(page.assistants.length, 1);
      await c.assistants.delete(a.assistant_id, { deleteThreads: false });
      await rejectsWith(404, () => c.assistants.get(a.assistant_id));
      await rejectsWith(404, () => c.assistants.create({ graphId: "no_such_graph" }));
    });

    test("store: put, get (null on a miss), search, namespaces, delete", async () => {
      const ns = ["js", randomUUID()];
      assert.equal(await c.store.getItem(ns, "missing"), null);
      await c.store.putItem([...ns, "a"], "k1", { n: 1 });
      await c.store.putItem([...ns, "b"], "k2", { n: 2 });
      const item = await c.store.getItem([...ns, "a"], "k1");
      assert.deepEqual(item.value, { n: 1 });
      assert.ok(item.createdAt || item.created_at);
      const found = await c.store.searchItems(ns, { filter: { n: 2 } });
      assert.deepEqual(found.items.map((i) => i.key), ["k2"]);
      const spaces = await c.store.listNamespaces({ prefix: ns });
      assert.deepEqual(spaces.namespaces.map((n) => n.join("/")).sort(), [`${ns.join("/")}/a`, `${ns.join("/")}/b`]);
      await c.store.deleteItem([...ns, "a"], "k1");
      assert.equal(await c.store.getItem([...ns, "a"], "k1"), null);
    });

    test("crons", async () => {
      const tag = randomUUID();
      const cron = await c.crons.create(AGENT, { schedule: "*/5 * * * *", input: user("tick"), metadata: { tag } });
      const found = await c.crons.search({ assistantId: AGENT, limit: 100 });
      assert.ok(found.some((x) => x.cron_id === cron.cron_id));
      await c.crons.delete(cron.cron_id);
      await rejectsWith(404, () => c.crons.delete(cron.cron_id));
    });

    test("errors are 4xx with a JSON detail (never retried)", async () => {
      const { thread_id } = await c.threads.create();
      await rejectsWith(404, () => c.threads.get(randomUUID()));
      await rejectsWith(422, () => c.threads.get("not-a-uuid"));
      await rejectsWith(422, () => c.runs.create(thread_id, AGENT, { input: user("x"), streamMode: "nonsense" }));
      await rejectsWith(422, () => c.runs.create(thread_id, "no such graph", { input: user("x") }));
      await rejectsWith(404, () => c.runs.create(randomUUID(), AGENT, { input: user("x") }));
      await assert.rejects(
        collect(c.runs.stream(thread_id, AGENT, { input: user("x"), streamMode: "nonsense" })),
        (e) => e.status === 422,
      );
      const bad = await api(url, "/threads", { method: "POST", body: "{oops", headers: { "content-type": "application/json" } });
      assert.equal(bad.status, 400);
      assert.ok((await bad.json()).detail);
      assert.deepEqual(await c.runs.list(thread_id), []);
    });
  });
}
