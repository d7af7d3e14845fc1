// Authentication through the real JS SDK: the servers run with it on (../harness.py mints an
// API key per account); the SDK sends `apiKey` as `x-api-key`.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AGENT, api, client, rejectsWith, servers, user } from "./helpers.mjs";

for (const [backend, url] of servers()) {
  describe(`auth (${backend})`, () => {
    test("anonymous is a 401, a wrong key too; a key acts for its account", async () => {
      const anonymous = client(url, { apiKey: null });
      await rejectsWith(401, () => anonymous.threads.search());
      await rejectsWith(401, () => anonymous.threads.create());
      await rejectsWith(401, () => client(url, { apiKey: `fawn_${"A".repeat(43)}` }).threads.count());

      const c = client(url);
      const me = await (await api(url, "/api/v1/auth/me")).json();
      assert.equal(me.system_role, "admin");
      const t = await c.threads.create();
      assert.equal(t.metadata.owner, me.id);
      assert.ok((await c.threads.search({ limit: 100 })).some((x) => x.thread_id === t.thread_id));
      await c.runs.wait(t.thread_id, AGENT, { input: user("keyed") });

      // another user's thread is a 404, and not listed
      const other = client(url, { role: "other" });
      await rejectsWith(404, () => other.threads.get(t.thread_id));
      assert.ok(!(await other.threads.search({ limit: 100 })).some((x) => x.thread_id === t.thread_id));
    });
  });
}
