// The Node client against a real server process: every method and every error class.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  AMPClient,
  AMPConnectionError,
  AMPError,
  AccessDeniedError,
  AuthenticationError,
  ConflictError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitedError,
  ServerError,
  ValidationError,
} from "../src/index.js";
import { ServerProcess } from "../testing/server.js";

const uid = () => randomUUID().replaceAll("-", "").slice(0, 10);
const ids = (cells) => cells.map((c) => c.id);

/** Assert `promise` rejects with `Cls`, `status` and `code`; returns the error. */
async function rejects(promise, Cls, status, code) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err?.name}: ${err?.message}`);
    assert.ok(err instanceof AMPError);
    assert.equal(err.statusCode, status);
    assert.equal(err.status, status);
    assert.equal(err.code, code);
    return err;
  }
  assert.fail(`expected ${Cls.name}`);
}

describe("AMPClient against a real server (keys off)", () => {
  const server = new ServerProcess();
  before(() => server.start());
  after(() => server.stop());

  test("the reference methods, end to end", async () => {
    const owner = `user_${uid()}`;
    const agent = `agent_node_${uid()}`;
    const client = new AMPClient(server.url, agent);
    assert.equal(await client.health(), true);

    const cell = await client.remember("User prefers email correspondence.", owner, {
      type: "semantic", importance: 0.7, readableBy: ["agent_billing_*"],
    });
    assert.match(cell.id, /^mem_[0-9A-HJKMNP-TV-Z]{26}$/);
    assert.deepEqual(cell.identity, {
      owner_id: owner, owner_type: "user", created_by: agent, session_id: null,
    });
    assert.equal(cell.scoring.importance, 0.7);
    assert.deepEqual(cell.access_policy.readable_by, ["agent_billing_*"]);
    const other = await client.remember({ text: "Prefers tea to coffee", metadata: { k: 1 } },
      owner, { type: "episodic" });
    assert.deepEqual(other.content.metadata, { k: 1 });

    assert.equal((await client.getMemory(cell.id)).scoring.access_count, 1);
    assert.equal((await client.getMemory(cell.id)).scoring.access_count, 2);

    const hits = await client.recall("email correspondence", owner);
    assert.equal(hits[0].id, cell.id);
    assert.deepEqual(new Set(ids(hits)), new Set([cell.id, other.id]));
    assert.equal((await client.recall("email", owner, { limit: 1 })).length, 1);
    assert.deepEqual(ids(await client.recall("email correspondence", owner,
      { limit: 1, offset: 1, includeStale: true })), [hits[1].id]);

    assert.deepEqual(ids(await client.listMemories(owner)), [other.id, cell.id]);
    assert.deepEqual(ids(await client.listMemories(owner, { type: "episodic" })), [other.id]);
    assert.deepEqual(ids(await client.listMemories(owner, { limit: 1, offset: 1 })), [cell.id]);

    // forget = archive then delete; afterwards the cell is gone for everyone.
    assert.equal(await client.forget(cell.id), true);
    const denied = await rejects(client.getMemory(cell.id), AccessDeniedError, 403,
      "ACCESS_DENIED");
    assert.equal(denied.message, "ACCESS_DENIED: Access denied.");
    assert.equal(denied.request.method, "GET");
    assert.ok(denied.request.url.endsWith(`/amp/v1/memories/${cell.id}`));
    assert.ok(!ids(await client.listMemories(owner)).includes(cell.id));
    const everywhere = await client.search("email", {
      ownerId: owner, status: ["active", "stale", "archived", "deleted"],
    });
    assert.ok(!ids(everywhere.results).includes(cell.id));
    await rejects(client.forget(cell.id), AccessDeniedError, 403, "ACCESS_DENIED");
  });

  test("forget works from active, stale and archived", async () => {
    const owner = `user_${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    for (const status of ["active", "stale", "archived"]) {
      const cell = await client.remember(`${status} cell`, owner);
      if (status !== "active") await client.update(cell.id, { lifecycle: { status } });
      assert.equal(await client.forget(cell.id), true);
      await rejects(client.getMemory(cell.id), AccessDeniedError, 403, "ACCESS_DENIED");
    }
  });

  test("forget by an agent that may write but not read", async () => {
    // The reference Node client GETs the cell first, so it fails here; this client does not.
    const u = uid();
    const owner = new AMPClient(server.url, `agent_owner_${u}`);
    const cell = await owner.remember("editable, not readable", `user_${u}`, {
      writableBy: [`agent_ed_${u}`],
    });
    const editor = new AMPClient(server.url, `agent_ed_${u}`);
    await rejects(editor.getMemory(cell.id), AccessDeniedError, 403, "ACCESS_DENIED");
    assert.equal(await editor.forget(cell.id), true);
    await rejects(owner.getMemory(cell.id), AccessDeniedError, 403, "ACCESS_DENIED");
  });

  test("URL forms and defaults", async () => {
    for (const url of [server.url, `${server.url}/`, `${server.url}/amp/v1`, `${server.url}/amp/v1/`]) {
      const c = new AMPClient(url, "agent_x");
      assert.equal(c.serverUrl, `${server.url}/amp/v1`);
      assert.equal(await c.health(), true);
    }
    assert.equal(new AMPClient().serverUrl, "http://127.0.0.1:8765/amp/v1");
  });

  test("remember with every option", async () => {
    const owner = `user_${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const cell = await client.remember("Call after 5pm", owner, {
      type: "procedural", importance: 0.4, ownerType: "organization",
      metadata: { channel: "phone" }, writableBy: ["agent_w*"], public: true,
      confidence: 0.8, decayRate: 0.05, sessionId: "s1",
      provenance: { source_type: "conversation", source_ref: "turn-9" },
      expiresAt: new Date("2099-01-01T00:00:00Z"),
    });
    assert.equal(cell.type, "procedural");
    assert.equal(cell.identity.owner_type, "organization");
    assert.equal(cell.identity.session_id, "s1");
    assert.deepEqual(cell.content.metadata, { channel: "phone" });
    assert.deepEqual(cell.access_policy, { readable_by: [], writable_by: ["agent_w*"], public: true });
    assert.deepEqual(cell.scoring, { importance: 0.4, confidence: 0.8, decay_rate: 0.05, access_count: 0 });
    assert.equal(cell.provenance.source_ref, "turn-9");
    assert.ok(cell.lifecycle.expires_at.startsWith("2099-01-01T00:00:00"));
  });

  test("an unknown option or a list for a listing filter is refused unsent; readableBy takes one pattern", async () => {
    // `readable_by` (Python's spelling) was dropped: the cell was stored private, sent.
    const owner = `user_${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const refused = async (promise, text) => {
      const err = await rejects(promise, ValidationError, null, null);
      assert.match(err.message, text);
    };
    await refused(client.remember("Shared?", owner, { readable_by: ["agent_b*"] }),
      /unknown option readable_by/);
    await refused(client.recall("x", owner, { include_stale: true }), /unknown option include_stale/);
    await refused(client.listMemories(owner, { ownerId: "user_other" }), /unknown option ownerId/);
    await refused(client.listPage({ owner_id: owner }), /unknown option owner_id/);
    await refused(client.search("x", { owner_id: owner }), /unknown option owner_id/);
    await refused(client.iterMemories({ page_size: 5 }).next(), /unknown option page_size/);
    await refused(client.iterSearch("x", { limit: 5 }).next(), /unknown option limit/);
    await refused(client.listMemories([owner, "user_other"]), /a listing takes one owner_id/);
    await refused(client.listMemories(owner, { type: ["semantic"] }), /a listing takes one type/);
    assert.deepEqual(await client.listMemories(owner), []);

    // One pattern as a string, as in Python (`readable_by="agent_billing_*"`): it was sent
    // as a string and refused (422 "Input should be a valid array").
    const shared = await client.remember("Shared.", owner,
      { readableBy: "agent_b*", writableBy: "agent_w*" });
    assert.deepEqual(shared.access_policy,
      { readable_by: ["agent_b*"], writable_by: ["agent_w*"], public: false });
  });

  test("update deep-merges; archive; a forbidden transition is a ConflictError", async () => {
    const owner = `user_${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const cell = await client.remember("original text", owner, { readableBy: ["agent_r"] });
    const updated = await client.update(cell.id, {
      scoring: { importance: 0.9 }, content: { metadata: { tag: "x" } },
    });
    assert.deepEqual(updated.scoring, { ...cell.scoring, importance: 0.9 });
    assert.deepEqual(updated.content, { text: "original text", metadata: { tag: "x" } });
    assert.deepEqual(updated.access_policy.readable_by, ["agent_r"]);
    assert.ok(updated.lifecycle.last_updated_at > cell.lifecycle.last_updated_at);
    assert.equal((await client.archive(cell.id)).lifecycle.status, "archived");
    const conflict = await rejects(client.update(cell.id, { lifecycle: { status: "active" } }),
      ConflictError, 409, "INVALID_TRANSITION");
    assert.deepEqual(conflict.details, { from: "archived", to: "active" });
  });

  test("search filters, listPage and status", async () => {
    const owner = `user_${uid()}`;
    const word = `zebra${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const sem = await client.remember(`${word} semantic fact`, owner);
    const epi = await client.remember(`${word} episode`, owner, { type: "episodic" });
    const stale = await client.remember(`${word} stale note`, owner);
    await client.update(stale.id, { lifecycle: { status: "stale" } });
    const arch = await client.remember(`${word} archived note`, owner);
    await client.archive(arch.id);
    const foreign = await client.remember(`${word} someone else's`, `other_${owner}`);

    const page = await client.search(word, { ownerId: owner });
    assert.deepEqual(new Set(ids(page.results)), new Set([sem.id, epi.id]));
    assert.equal(page.query, word);
    assert.equal(page.limit, 10);
    assert.equal(page.has_more, false);
    assert.deepEqual(ids((await client.search(word, { ownerId: owner, types: ["episodic"] })).results), [epi.id]);
    // One type as a string, as one status (and as Python's `types="episodic"`): it was sent
    // as a string, the server's 422.
    assert.deepEqual(ids((await client.search(word, { ownerId: owner, types: "episodic" })).results), [epi.id]);
    const walked = [];
    for await (const cell of client.iterSearch(word, { ownerId: owner, types: "episodic" })) walked.push(cell.id);
    assert.deepEqual(walked, [epi.id]);
    assert.deepEqual(new Set(ids((await client.search(word, { ownerId: owner, includeStale: true })).results)),
      new Set([sem.id, epi.id, stale.id]));
    assert.deepEqual(ids((await client.search(word, { ownerId: owner, status: "archived" })).results), [arch.id]);
    const everyone = ids((await client.search(word, { limit: 100 })).results);
    assert.ok([sem.id, epi.id, foreign.id].every((id) => everyone.includes(id)));
    const first = await client.search(word, { ownerId: owner, limit: 1 });
    assert.equal(first.returned, 1);
    assert.equal(first.has_more, true);

    assert.deepEqual(ids(await client.listMemories(owner, { status: "archived" })), [arch.id]);
    const listed = await client.listPage({ ownerId: owner, status: "stale", limit: 5 });
    assert.deepEqual([listed.returned, listed.has_more, listed.limit], [1, false, 5]);
  });

  test("iterators walk every page", async () => {
    const owner = `user_${uid()}`;
    const word = `walrus${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const made = [];
    for (let i = 0; i < 7; i++) made.push((await client.remember(`${word} note ${i}`, owner)).id);
    assert.equal((await client.listPage({ ownerId: owner, limit: 3 })).has_more, true);
    const walked = [];
    for await (const cell of client.iterMemories({ ownerId: owner, pageSize: 3 })) walked.push(cell.id);
    assert.deepEqual(walked, [...made].reverse());
    const found = [];
    for await (const cell of client.iterSearch(word, { ownerId: owner, pageSize: 3 })) found.push(cell.id);
    assert.deepEqual([...found].sort(), [...made].sort());
    const none = [];
    for await (const cell of client.iterMemories({ ownerId: `nobody_${uid()}` })) none.push(cell);
    assert.deepEqual(none, []);
  });

  test("spec", async () => {
    const spec = await new AMPClient(server.url, "agent_x").spec();
    assert.equal(spec.amp_version, "0.1.0");
    assert.equal(spec.capabilities.max_page_size, 100);
  });

  test("403 for other agents, with one identical body", async () => {
    const owner = `user_${uid()}`;
    const u = uid();
    const client = new AMPClient(server.url, `agent_cs_${u}`);
    const cell = await client.remember("private", owner, { readableBy: ["agent_billing_*"] });
    const stranger = new AMPClient(server.url, `agent_marketing_${u}`);
    for (const attempt of [
      () => stranger.getMemory(cell.id),
      () => stranger.update(cell.id, { content: { text: "x" } }),
      () => stranger.forget(cell.id),
      () => stranger.getMemory("mem_01NOSUCHCELL00000000000000"),
    ]) {
      const err = await rejects(attempt(), AccessDeniedError, 403, "ACCESS_DENIED");
      assert.equal(err.serverMessage, "Access denied.");
      assert.deepEqual(err.details, {});
    }
    assert.deepEqual((await stranger.search("private", { ownerId: owner })).results, []);
    const billing = new AMPClient(server.url, `agent_billing_${u}`);
    assert.equal((await billing.getMemory(cell.id)).id, cell.id);
    await rejects(billing.archive(cell.id), AccessDeniedError, 403, "ACCESS_DENIED");
  });

  test("422, 413 and 401 MISSING_AGENT_ID", async () => {
    const owner = `user_${uid()}`;
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const invalid = await rejects(client.remember("", owner), ValidationError, 422, "VALIDATION_ERROR");
    assert.deepEqual(invalid.errors[0].loc, ["body", "content", "text"]);
    await rejects(client.remember("x", owner, { importance: 1.5 }), ValidationError, 422, "VALIDATION_ERROR");
    await rejects(client.listMemories(owner, { limit: 101 }), ValidationError, 422, "VALIDATION_ERROR");
    const big = await rejects(client.remember("x".repeat(70000), owner), PayloadTooLargeError, 413,
      "CELL_TOO_LARGE");
    assert.equal(big.details.max_cell_size_bytes, 65536);
    const anonymous = new AMPClient(server.url);
    assert.equal(await anonymous.health(), true);
    await rejects(anonymous.listMemories(owner), AuthenticationError, 401, "MISSING_AGENT_ID");
  });

  test("429 from scoring patches, with retryAfter", async () => {
    const client = new AMPClient(server.url, `agent_${uid()}`);
    const cell = await client.remember("tuned often", `user_${uid()}`);
    for (let i = 1; i <= 5; i++) await client.update(cell.id, { scoring: { importance: i / 10 } });
    const limited = await rejects(client.update(cell.id, { scoring: { importance: 0.9 } }),
      RateLimitedError, 429, "RATE_LIMITED");
    assert.ok(limited.retryAfter > 0 && limited.retryAfter <= 3600);
    assert.equal(limited.details.retry_after_seconds, limited.retryAfter);
    const edited = await client.update(cell.id, { content: { text: "still editable" } });
    assert.equal(edited.content.text, "still editable");
  });

  test("404 on an unknown prefix; connection failures", async () => {
    const lost = new AMPClient(`${server.url}/no-such-prefix`, "agent_x");
    await rejects(lost.listMemories("u"), NotFoundError, 404, "NOT_FOUND");
    assert.equal(await lost.health(), false);

    const port = await new Promise((resolve) => {
      const probe = createServer();
      probe.listen(0, "127.0.0.1", () => {
        const p = probe.address().port;
        probe.close(() => resolve(p));
      });
    });
    const dead = new AMPClient(`http://127.0.0.1:${port}`, "agent_x", undefined, { timeoutMs: 2000 });
    assert.equal(await dead.health(), false);
    const refused = await rejects(dead.getMemory("mem_x"), AMPConnectionError, null, null);
    assert.equal(refused.retryAfter, null);
    // It said only "HTTP request failed: fetch failed"; fetch keeps the reason in `cause`.
    assert.match(refused.message, /ECONNREFUSED/);

    // A server URL fetch cannot parse threw a TypeError, no AMPError (Python: AMPConnectionError).
    for (const url of ["127.0.0.1:8765", "http://[::1"]) {
      const broken = await rejects(new AMPClient(url, "agent_x").listMemories("u"),
        AMPConnectionError, null, null);
      assert.match(broken.message, /^invalid server URL/);
    }
  });
});

test("a 503 while storage is down is a ServerError with retryAfter, as in Python", async () => {
  // The server's answer when its storage does not answer (api.md: 503 UNAVAILABLE with
  // Retry-After); retryAfter was only on RateLimitedError.
  const down = createHttpServer((req, res) => {
    res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "5" });
    res.end(JSON.stringify({ error: { code: "UNAVAILABLE", message: "storage is down",
      details: { retry_after_seconds: 5 } } }));
  });
  await new Promise((resolve) => down.listen(0, "127.0.0.1", resolve));
  try {
    const client = new AMPClient(`http://127.0.0.1:${down.address().port}`, "agent_x");
    const err = await rejects(client.listMemories("u"), ServerError, 503, "UNAVAILABLE");
    assert.equal(err.retryAfter, 5);
  } finally {
    await new Promise((resolve) => down.close(resolve));
  }
});

describe("AMPClient with API keys required", () => {
  const server = new ServerProcess({ AMP_REQUIRE_KEYS: "1" });
  const keys = {};
  before(async () => {
    await server.start();
    await Promise.all(["agent_keyed_a", "agent_keyed_b"].map(async (agent) => {
      keys[agent] = await server.createKey(agent);
    }));
  });
  after(() => server.stop());

  test("a key for its own agent works; every other combination is the same 401", async () => {
    const owner = `user_${uid()}`;
    const a = "agent_keyed_a";
    const client = new AMPClient(server.url, a, keys[a]);
    const cell = await client.remember("keyed memory", owner);
    assert.equal(cell.identity.created_by, a);
    assert.equal((await client.getMemory(cell.id)).id, cell.id);
    assert.equal(await client.forget(cell.id), true);
    for (const bad of [
      new AMPClient(server.url, a),
      new AMPClient(server.url, a, "ampk_wrong"),
      new AMPClient(server.url, a, keys.agent_keyed_b),
      new AMPClient(server.url, undefined, keys[a]),
    ]) {
      await rejects(bad.listMemories(owner), AuthenticationError, 401, "UNAUTHENTICATED");
      assert.equal(await bad.health(), true);
    }
  });
});
