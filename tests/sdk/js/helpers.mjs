// Shared helpers for the JS SDK suite. The servers are started by ../harness.py, which
// exports their URLs as FAWN_SDK_SERVERS (`make sdk-test` runs it for you).
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

export const AGENT = "lead_agent";

export function servers() {
  const raw = process.env.FAWN_SDK_SERVERS;
  if (!raw) {
    throw new Error(
      "FAWN_SDK_SERVERS is not set: run the suite through tests/sdk/harness.py (make sdk-test)",
    );
  }
  const parsed = JSON.parse(raw);
  assert.ok(Object.keys(parsed).length > 0, "no servers in FAWN_SDK_SERVERS");
  return Object.entries(parsed);
}

/** A client that never retries, so a 5xx shows as a failure instead of a duplicate run. */
export function client(url) {
  return new Client({ apiUrl: url, apiKey: null, callerOptions: { maxRetries: 0 } });
}

export const mock = (directive) => `@mock ${JSON.stringify(directive)}`;
export const user = (text) => ({ messages: [{ role: "user", content: text }] });
export const toolCall = (after = "Listed the files.") =>
  mock({ tool: "ls", args: { path: "/mnt/user-data" }, after_tool: after });
export const slow = (words = 60, delayMs = 40) =>
  mock({ text: Array.from({ length: words }, (_, i) => `w${i}`).join(" "), delay_ms: delayMs });

export async function collect(iterable) {
  const out = [];
  for await (const part of iterable) out.push(part);
  return out;
}

export function lastAi(values) {
  const ais = (values.messages ?? []).filter((m) => m.type === "ai");
  assert.ok(ais.length, `no AI message in ${JSON.stringify(values)}`);
  return ais[ais.length - 1];
}

export async function eventually(check, what, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await check();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

export async function waitStatus(c, threadId, runId, statuses) {
  return eventually(async () => {
    const run = await c.runs.get(threadId, runId);
    return statuses.includes(run.status) ? run : null;
  }, `run ${runId} to reach ${statuses}`);
}

/** Runs `fn` expecting the SDK to throw an HTTPError with `status` and a JSON `detail`. */
export async function rejectsWith(status, fn) {
  await assert.rejects(fn, (err) => {
    assert.equal(err?.status, status, String(err?.message ?? err));
    assert.ok(JSON.parse(err.text).detail, err.text);
    return true;
  });
}
