// AmpUpClient against a real server process: each area with an effect read back, the page
// walkers, keys on, and the error classes.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  AMPClient,
  AMPError,
  AccessDeniedError,
  AmpUpClient,
  AuthenticationError,
  ConflictError,
  GoneError,
  NotFoundError,
  ValidationError,
} from "../src/index.js";
import { ServerProcess } from "../testing/server.js";

const uid = () => randomUUID().replaceAll("-", "").slice(0, 10);
const ADMIN_TOKEN = `admin-${uid()}`;

/** Assert `promise` rejects with `Cls`, `status` and `code`; returns the error. */
async function rejects(promise, Cls, status, code) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err?.name}: ${err?.message}`);
    assert.ok(err instanceof AMPError);
    assert.equal(err.statusCode, status);
    assert.equal(err.code, code);
    return err;
  }
  assert.fail(`expected ${Cls.name}`);
}

/** Every item of an async iterator. */
async function all(iterator) {
  const items = [];
  for await (const item of iterator) items.push(item);
  return items;
}

// One server per mode, shared by its tests; started one after the other (two starts at
// once took longer than two in a row on a loaded 2-core machine: 13-14 s against 5-6 s each).
describe("AmpUpClient against a real server (keys off)", () => {
  const server = new ServerProcess({ AMP_ADMIN_TOKEN: ADMIN_TOKEN });
  /** @type {AmpUpClient} */
  let ana;
  /** @type {AmpUpClient} */
  let bob;
  before(async () => {
    await server.start();
    ana = new AmpUpClient(server.url, "ana");
    bob = new AmpUpClient(`${server.url}/amp/v1/`, "bob");   // the AMP URL names the same root
  });
  after(() => server.stop());

  test("episodes: remember, batch, read back, document, ACL, walker", async () => {
    const scope = `acme${uid()}/support`;
    const note = await ana.remember(scope, "Acme renews on 2027-03-01 with 40 seats.", {
      source: "doc:acme-renewal", about: "acme", occurredAt: new Date("2026-11-01T00:00:00Z"),
    });
    assert.equal(note.created, true);
    const episode = await ana.getEpisode(scope, note.id);
    assert.equal(episode.body, "Acme renews on 2027-03-01 with 40 seats.");
    assert.deepEqual(episode.acl, ["user:ana"]);   // the client's user is the default ACL
    assert.deepEqual(episode.about, ["acme"]);      // one name sent as a list
    assert.equal(Date.parse(episode.occurred_at), Date.parse("2026-11-01T00:00:00Z"));
    assert.ok(episode.units.length >= 1);

    const batch = await ana.rememberBatch(scope, [
      { source: "doc:one", body: "First batch note." },
      { source: "doc:two", body: "Second batch note.", acl: ["user:ana", "user:bob"] },
    ]);
    assert.equal(batch.episodes.length, 2);
    const [first, shared] = batch.episodes.map((/** @type {any} */ e) => e.id);
    assert.deepEqual((await ana.getEpisode(scope, first)).acl, ["user:ana"]);

    // bob reads only what is shared with him; ana's alone is as if it did not exist.
    assert.equal((await bob.getEpisode(scope, shared)).body, "Second batch note.");
    const missing = await rejects(bob.getEpisode(scope, note.id), NotFoundError, 404,
      "NOT_FOUND");
    assert.equal(missing.request.method, "GET");
    await ana.setAcl(scope, note.id, ["user:ana", "user:bob"]);
    assert.equal((await bob.getEpisode(scope, note.id)).body, episode.body);

    await ana.remember(scope, "Runbook v1: restart the worker.",
      { source: "doc:runbook", document: "runbook.md" });
    await ana.remember(scope, "Runbook v2: drain, then restart.",
      { source: "doc:runbook", document: "runbook.md" });
    assert.equal((await ana.document(scope, "runbook.md")).body,
      "Runbook v2: drain, then restart.");

    const page = await ana.episodes(scope, { limit: 2 });
    assert.equal(page.episodes.length, 2);
    assert.equal(page.total, 5);
    assert.ok(page.next_after);
    const walked = await all(ana.iterEpisodes(scope, { pageSize: 2 }));
    assert.equal(walked.length, 5);
    assert.equal(new Set(walked.map((e) => e.id)).size, 5);
    assert.deepEqual(walked.slice(0, 2).map((e) => e.id), page.episodes.map((e) => e.id));
    assert.equal((await all(bob.iterEpisodes(scope, { pageSize: 1 }))).length, 2);

    const scopes = (await ana.scopes()).scopes.map((/** @type {any} */ s) => s.scope);
    assert.ok(scopes.includes(scope));
    assert.ok(Array.isArray((await ana.episodeTypes()).types));
  });

  test("facts: add, list, close; search, query, entities", async () => {
    const scope = `acme${uid()}/facts`;
    const note = await ana.remember(scope, "Acme has 40 seats and is based in Lyon.",
      { source: "doc:acme" });
    const cites = [{ episode: note.id, unit: 1 }];
    await ana.addFact(scope, "acme", "seats", 40, { quote: "40 seats", cites });
    const added = await ana.addFacts(scope, [
      { entity: "acme", predicate: "city", value: "Lyon", quote: "based in Lyon", cites },
    ]);
    assert.equal(added.ids.length, 1);
    const facts = (await ana.facts(scope, "acme")).facts;
    assert.deepEqual(facts.map((/** @type {any} */ f) => [f.predicate, f.value]).sort(),
      [["city", "Lyon"], ["seats", 40]]);
    assert.equal((await ana.facts(scope, "acme", { predicate: "seats" })).facts.length, 1);

    assert.equal((await ana.search(scope, "how many seats")).results[0].predicate, "seats");
    const passages = await ana.query(scope, "where is acme based");
    assert.match(passages.results[0].text, /Lyon/);
    const typed = await ana.query(scope, undefined,
      { find: "facts", entity: "acme", predicate: ["city"] });
    assert.deepEqual(typed.facts.map((/** @type {any} */ f) => f.value), ["Lyon"]);
    assert.deepEqual((await all(ana.iterEntities(scope, { pageSize: 1 })))
      .map((e) => e.entity), ["acme"]);
    assert.equal((await ana.entities(scope)).total, 1);

    const closed = await ana.closeFact(scope, "acme", "city", "Acme moved out of Lyon.");
    assert.ok(closed.closed);
    const current = (await ana.facts(scope, "acme")).facts;
    assert.deepEqual(current.map((/** @type {any} */ f) => f.predicate), ["seats"]);
    const history = (await ana.facts(scope, "acme", { predicate: "city", history: true })).facts;
    assert.ok(history.length >= 1);
    assert.equal((await bob.facts(scope, "acme")).facts.length, 0);
  });

  test("advice, runs and sessions", async () => {
    const scope = `acme${uid()}/ops`;
    const run = await ana.recordRun(scope, "restart the worker",
      { trace: "ran systemctl restart", outcome: "worker back" });
    await ana.rewardRun(run.id, 1, "it worked");
    const read = await ana.getRun(run.id);
    assert.equal(read.trace, "ran systemctl restart");
    assert.equal(read.rewards.length, 1);
    await ana.recordRun(scope, "second run");
    assert.equal((await ana.runs(scope, { limit: 1 })).runs.length, 1);
    assert.equal((await all(ana.iterRuns(scope, { pageSize: 1 }))).length, 2);
    assert.equal((await all(bob.iterRuns(scope))).length, 0);

    const session = (await ana.startSession(scope, "answer a renewal question")).id;
    assert.ok("advice" in await ana.advice(scope, "answer a renewal question", session));
    const ended = await ana.endSession(session, "looked up the date", "answered",
      { reward: 1 });
    assert.equal(ended.id, session);
    assert.equal((await ana.getSession(session)).outcome, "answered");
    assert.deepEqual((await all(ana.iterSessions(scope))).map((s) => s.id), [session]);
    assert.equal((await ana.sessions(scope)).sessions.length, 1);
    await rejects(ana.endSession(session, "again", "answered"), ConflictError, 409,
      "SESSION_ENDED");

    assert.equal((await ana.situations(scope)).scope, scope);
    assert.ok(Array.isArray((await ana.notes(scope)).notes));
    assert.equal((await ana.procedures(scope)).scope, scope);
    assert.deepEqual(await all(ana.iterSetAside(scope)), []);
    assert.ok(Array.isArray((await ana.setAside(scope, { kind: "judge" })).items));
  });

  test("branches and merge, ledger", async () => {
    const scope = `acme${uid()}/kb`;
    await ana.remember(scope, "On main.", { source: "doc:main" });
    await ana.createBranch(scope, "team/draft");
    await rejects(ana.createBranch(scope, "team/draft"), ConflictError, 409, "BRANCH_EXISTS");
    await ana.remember(scope, "On the draft.", { source: "doc:draft", branch: "team/draft" });
    const names = (await ana.branches(scope)).branches.map((/** @type {any} */ b) => b.name);
    assert.deepEqual(names, ["main", "team/draft"]);
    assert.equal((await ana.episodes(scope)).total, 1);
    await ana.merge(scope, "team/draft", { message: "take the draft" });
    assert.equal((await ana.episodes(scope)).total, 2);
    const deleted = await ana.deleteBranch(scope, "team/draft");
    assert.equal(deleted.deleted, true);
    assert.deepEqual((await ana.branches(scope)).branches.map((/** @type {any} */ b) => b.name),
      ["main"]);

    const commits = await all(ana.iterLedger(scope, { pageSize: 1 }));
    assert.ok(commits.length >= 2);
    assert.equal((await ana.ledger(scope, { limit: 1 })).commits[0].id, commits[0].id);
  });

  test("a merge conflict is data the caller can act on", async () => {
    const scope = `acme${uid()}/plans`;
    /** @param {string} value @param {string} [branch] */
    const budget = async (value, branch) => {
      const said = await ana.remember(scope, `Acme budget is ${value}.`,
        { source: `doc:${value}`, branch });
      await ana.addFact(scope, "acme", "budget", value, {
        quote: `budget is ${value}`, cites: [{ episode: said.id, unit: 1 }], branch,
      });
    };
    await budget("50k");
    await ana.createBranch(scope, "plan");
    await budget("90k", "plan");
    await budget("60k");
    const head = (await ana.ledger(scope, { limit: 1 })).commits[0].id;

    const refused = await rejects(ana.merge(scope, "plan"), ConflictError, 409,
      "MERGE_CONFLICT");
    assert.deepEqual(refused.details.conflicts, [
      { entity: "acme", predicate: "budget", base: "50k", ours: "60k", theirs: "90k" }]);
    assert.equal((await ana.ledger(scope, { limit: 1 })).commits[0].id, head);  // nothing written
    const blind = await rejects(bob.merge(scope, "plan"), ConflictError, 409, "MERGE_CONFLICT");
    assert.deepEqual(blind.details.conflicts, [   // bob may read no side: nothing is named
      { entity: "hidden", predicate: "hidden", base: "hidden", ours: "hidden", theirs: "hidden" }]);

    await budget("60k", "plan");   // resolved on the branch: it takes main's value
    const merged = await ana.merge(scope, "plan");
    assert.equal(merged.merged, true);
    assert.ok(merged.commit);
    const facts = (await ana.facts(scope, "acme", { predicate: "budget" })).facts;
    assert.deepEqual(facts.map((/** @type {any} */ f) => f.value), ["60k"]);
  });

  test("pins, snapshots and workspaces", async () => {
    const scope = `acme${uid()}/ops`;
    await ana.remember(scope, "Restart the worker.", { source: "doc:runbook-v1" });
    const pin = await ana.pin(scope, "15m");
    await ana.remember(scope, "Drain, then restart.", { source: "doc:runbook-v2" });
    const held = await ana.episodes(scope, { pin: pin.id });
    assert.deepEqual(held.episodes.map((/** @type {any} */ e) => e.source), ["doc:runbook-v1"]);
    assert.equal((await ana.getPin(pin.id)).state, "live");
    const renewed = await ana.renewPin(pin.id, "1h");
    assert.ok(renewed.expires_at > pin.expires_at);
    await rejects(bob.releasePin(pin.id), AccessDeniedError, 403, "ACCESS_DENIED");
    assert.equal((await ana.releasePin(pin.id)).state, "released");
    await rejects(ana.episodes(scope, { pin: pin.id }), GoneError, 410, "PIN_RELEASED");

    const snap = await ana.snapshot(scope);
    await ana.remember(scope, "Third version.", { source: "doc:runbook-v3" });
    assert.equal((await ana.episodes(scope, { snapshot: snap.id })).total, 2);
    assert.equal((await ana.getSnapshot(snap.id)).state, "live");
    await ana.releaseSnapshot(snap.id);
    await rejects(ana.episodes(scope, { snapshot: snap.id }), GoneError, 410,
      "SNAPSHOT_RELEASED");

    const ws = (await ana.createWorkspace("eval run", "1h", { caps: { scopes: 2 } })).id;
    await ana.remember(`${ws}/eval`, "Scratch work.", { source: "doc:scratch" });
    const wsSnap = await ana.snapshotWorkspace(ws);
    assert.deepEqual(Object.keys(wsSnap.heads), [`${ws}/eval@main`]);
    assert.deepEqual((await ana.workspaceSnapshots(ws)).snapshots.map(
      (/** @type {any} */ s) => s.id), [wsSnap.id]);
    assert.deepEqual((await ana.getWorkspace(ws)).scopes, [`${ws}/eval`]);
    assert.ok((await ana.workspaces()).workspaces.some((/** @type {any} */ w) => w.id === ws));
    assert.equal((await bob.workspaces()).workspaces.length, 0);
    await ana.renewWorkspace(ws, "2h");
    assert.equal((await ana.deleteWorkspace(ws)).deleted, true);
    await rejects(ana.getWorkspace(ws), NotFoundError, 404, "NOT_FOUND");
  });

  test("schemas, principals and status need admin", async () => {
    const scope = `acme${uid()}/crm`;
    const builtins = (await ana.builtinSchemas()).schemas;
    const name = builtins[0].name;
    assert.equal((await ana.schema(scope)).schema, null);
    await rejects(ana.setSchema(scope, { builtin: name }), AccessDeniedError, 403,
      "ACCESS_DENIED");
    const admin = new AmpUpClient(server.url, "ana", { adminToken: ADMIN_TOKEN });
    const set = await admin.setSchema(scope, { builtin: name });
    assert.equal(set.name, name);
    assert.equal((await ana.schema(scope)).schema.name, name);
    const held = (await ana.pin(scope, "15m")).id;   // the schema at the held commit
    const other = builtins[1].name;
    assert.equal((await admin.setSchema(scope, { builtin: other })).name, other);
    assert.equal((await ana.schema(scope, { pin: held })).name, name);
    assert.equal((await ana.schema(scope)).name, other);

    await admin.setPrincipal("carol", { groups: "sales", roles: ["reader"] });
    assert.deepEqual(await admin.principal("carol"),
      { user: "carol", groups: ["sales"], roles: ["reader"] });
    assert.ok(typeof (await admin.status()) === "object");
    assert.ok("episodes_pending" in await ana.extractionStatus(scope));
    assert.ok(Array.isArray((await ana.extractionSetAside(scope)).items));
  });

  test("a list option left null is not sent, as every other option", async () => {
    // `acl`, `about`, `groups` and `roles` set to null threw "names is not iterable" (a
    // TypeError, nothing sent) where the README promises the server's default.
    const scope = `acme${uid()}/nulls`;
    const note = await ana.remember(scope, "Acme budget is 5k.",
      { source: "doc:nulls", about: null, acl: null });
    assert.deepEqual((await ana.getEpisode(scope, note.id)).about, []);
    await ana.addFact(scope, "acme", "budget", "5k",
      { quote: "budget is 5k", cites: [{ episode: note.id, unit: 1 }] });
    const closed = await ana.closeFact(scope, "acme", "budget", "Budget withdrawn.", { acl: null });
    assert.deepEqual((await ana.getEpisode(scope, closed.episode)).acl, ["user:ana"]);
    const run = await ana.recordRun(scope, "plan", { acl: null });
    assert.deepEqual((await ana.getRun(run.id)).acl, ["user:ana"]);
    const session = await ana.startSession(scope, "plan", { acl: null });
    assert.equal((await ana.getSession(session.id)).id, session.id);
    const admin = new AmpUpClient(server.url, "ana", { adminToken: ADMIN_TOKEN });
    assert.deepEqual(await admin.setPrincipal(`zed${uid()}`, { groups: null, roles: null })
      .then(({ groups, roles }) => ({ groups, roles })), { groups: [], roles: [] });
  });

  test("bad input: 422 from the server, refused before sending by the client", async () => {
    const scope = `acme${uid()}/bad`;
    const err = await rejects(ana.remember(scope, "no source", /** @type {any} */ ({})),
      ValidationError, 422, "VALIDATION_ERROR");
    assert.ok(err.errors.length >= 1);
    await rejects(ana.episodes(scope, { limit: -1 }), ValidationError, 422, "VALIDATION_ERROR");

    // A dot segment would resolve to another route: nothing is sent.
    for (const id of [".", "..", ""]) {
      await rejects(ana.getEpisode(scope, id), ValidationError, null, null);
      await rejects(ana.getPin(id), ValidationError, null, null);
    }
    await rejects(ana.deleteBranch(scope, "a/../b"), ValidationError, null, null);
    await rejects(ana.deleteBranch(scope, /** @type {any} */ (undefined)), ValidationError,
      null, null);
    await rejects(ana.schema("no-team"), ValidationError, null, null);
    await rejects(new AMPClient(server.url, "agent_x").getMemory(".."), ValidationError,
      null, null);
    // An id with a slash stays one segment: an unknown episode, not another route.
    await rejects(ana.getEpisode(scope, "x/../../scopes"), NotFoundError, 404, "NOT_FOUND");
    await rejects(new AmpUpClient(server.url).remember(scope, "t", { source: "doc:x" }),
      ValidationError, null, null);
    await rejects(ana.episodes(scope, /** @type {any} */ ({ limt: 2 })), ValidationError,
      null, null);
    await rejects(new AmpUpClient(server.url).scopes(), AuthenticationError, 401,
      "MISSING_USER");
  });
});

describe("AmpUpClient with API keys required", () => {
  const server = new ServerProcess({ AMP_REQUIRE_KEYS: "1" });
  /** @type {Record<string, string>} */
  const keys = {};
  after(() => server.stop());
  before(async () => {
    await server.start();
    [keys.ana, keys.bob] = await Promise.all([
      server.createKey("agent_ana", "ana"), server.createKey("agent_bob", "bob")]);
  });

  test("the caller is the key's user; a user naming anyone else is refused", async () => {
    const scope = `acme${uid()}/keys`;
    // Claims to be bob, holds ana's key: refused, not read as either.
    const posing = new AmpUpClient(server.url, "bob", { agentId: "agent_ana", apiKey: keys.ana });
    await rejects(posing.remember(scope, "Written with ana's key.", { source: "doc:k" }),
      AuthenticationError, 401, "UNAUTHENTICATED");
    const ana = new AmpUpClient(server.url, "ana", { agentId: "agent_ana", apiKey: keys.ana });
    const note = await ana.remember(scope, "Written with ana's key.", { source: "doc:k" });
    assert.deepEqual((await ana.getEpisode(scope, note.id)).acl, ["user:ana"]);
    const anaOnly = new AmpUpClient(server.url, undefined,
      { agentId: "agent_ana", apiKey: keys.ana });
    assert.equal((await anaOnly.getEpisode(scope, note.id)).body, "Written with ana's key.");
    const bobKey = new AmpUpClient(server.url, undefined, { agentId: "agent_bob", apiKey: keys.bob });
    await rejects(bobKey.getEpisode(scope, note.id), NotFoundError, 404, "NOT_FOUND");
    await rejects(new AmpUpClient(server.url, "ana").getEpisode(scope, note.id),
      AuthenticationError, 401, "UNAUTHENTICATED");
  });
});
