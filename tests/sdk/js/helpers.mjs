// Shared helpers for the JS SDK suite. The servers are started by ../harness.py, which
// exports their URLs as FAWN_SDK_SERVERS and the API keys it minted for each as
// FAWN_SDK_KEYS (`make sdk-test` runs it for you). The servers run with authentication on:
// `client(url)` and `api(url, …)` act as the admin account.
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

export const AGENT = "lead_agent";

export function servers() {
  const parsed = env("FAWN_SDK_SERVERS");
  assert.ok(Object.keys(parsed).length > 0, "no servers in FAWN_SDK_SERVERS");
  return Object.entries(parsed);
}

function env(name) {
  const raw = process.env[name];
  if (!raw) {
    throw new Error(`${name} is not set: run the suite through tests/sdk/harness.py (make sdk-test)`);
  }
  return JSON.parse(raw);
}

/** The API key the harness minted on the server at `url` for `role` ("admin" or "other"). */
export function apiKey(url, role = "admin") {
  const backend = Object.entries(env("FAWN_SDK_SERVERS")).find(([, u]) => u === url)?.[0];
  const key = env("FAWN_SDK_KEYS")[backend]?.[role];
  assert.ok(key, `no ${role} key for ${url} in FAWN_SDK_KEYS`);
  return key;
}

/**
 * A client that never retries, so a 5xx shows as a failure instead of a duplicate run.
 * It acts as the admin; `{ role: "other" }` for the plain user, `{ apiKey: null }` for anonymous;
 * `{ fetch }` replaces the fetch it sends requests with (to watch them).
 */
export function client(url, { role = "admin", apiKey: key, fetch } = {}) {
  return new Client({
    apiUrl: url,
    apiKey: key === undefined ? apiKey(url, role) : key,
    callerOptions: fetch ? { maxRetries: 0, fetch } : { maxRetries: 0 },
  });
}

/** A raw `fetch` of `path` on the server at `url`, authenticated as `role` (x-api-key). */
export function api(url, path, init = {}, role = "admin") {
  return fetch(`${url}${path}`, {
    ...init,
    headers: { ...(init.headers ?? {}), "x-api-key": apiKey(url, role) },
  });
}

/** Thread metadata without the `owner` (the creating user's id) the server stamps on it. */
export function withoutOwner(metadata) {
  const { owner: _owner, ...rest } = metadata;
  return rest;
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
