// Conditional writes through both Node clients, against a real server process: an answer's
// `etag`, sent back as `ifMatch`, lets two writers holding one version never overwrite each
// other (the second gets PreconditionFailedError and changes nothing); `ifNoneMatch` on a
// read answers NotModifiedError while the version is current.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  AMPClient,
  AMPError,
  AmpUpClient,
  NotModifiedError,
  PreconditionFailedError,
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

describe("conditional requests against a real server", () => {
  const server = new ServerProcess({ AMP_ADMIN_TOKEN: ADMIN_TOKEN });
  before(() => server.start());
  after(() => server.stop());

  test("AMP: two writers holding one cell version; a 304 read", async () => {
    const agent = `agent_nc_${uid()}`;
    const owner = `user_${uid()}`;
    const first = new AMPClient(server.url, agent);
    const second = new AMPClient(server.url, agent);
    const made = await first.remember("Meeting on Tuesday.", owner);
    const [readA, readB] = [await first.getMemory(made.id), await second.getMemory(made.id)];
    assert.ok(readA.etag);
    assert.equal(readA.etag, readB.etag);   // reads do not move the tag
    assert.equal(made.etag, readA.etag);    // remember answers it (null made ifMatch a no-op)
    assert.ok(!Object.keys(readA).includes("etag"));   // not part of the body
    assert.ok(!JSON.stringify(readA).includes(readA.etag));

    const moved = await first.update(made.id, { content: { text: "Meeting on Thursday." } },
      { ifMatch: readA.etag });
    assert.ok(moved.etag && moved.etag !== readA.etag);
    await rejects(second.update(made.id, { content: { text: "Meeting on Friday." } },
      { ifMatch: readB.etag }), PreconditionFailedError, 412, "PRECONDITION_FAILED");
    const again = await second.getMemory(made.id);
    assert.equal(again.content.text, "Meeting on Thursday.");   // the loser changed nothing
    assert.equal(again.etag, moved.etag);

    const same = await rejects(first.getMemory(made.id, { ifNoneMatch: moved.etag }),
      NotModifiedError, 304, null);
    assert.equal(same.etag, moved.etag);
    assert.equal(same.message,   // not "HTTP error 304: " (no body to quote)
      "Not modified: the version you named in ifNoneMatch is still the current one.");
    const changed = await first.getMemory(made.id, { ifNoneMatch: readA.etag });
    assert.equal(changed.etag, moved.etag);

    await rejects(second.forget(made.id, { ifMatch: readB.etag }), PreconditionFailedError,
      412, "PRECONDITION_FAILED");   // forget checks on its archive
    assert.equal((await first.getMemory(made.id)).lifecycle.status, "active");
    const archived = await first.archive(made.id, { ifMatch: again.etag });
    assert.equal(archived.lifecycle.status, "archived");
    assert.equal(await second.forget(made.id, { ifMatch: archived.etag }), true);

    // A misspelt condition is refused, never sent as an unconditional write.
    await assert.rejects(first.update(made.id, {}, /** @type {any} */ ({ ifmatch: "x" })),
      ValidationError);
  });

  test("AMP: of three writers racing on one tag, one lands", async () => {
    const client = new AMPClient(server.url, `agent_nr_${uid()}`);
    const made = await client.remember("Budget 10k.", `user_${uid()}`);
    const tag = (await client.getMemory(made.id)).etag;
    const outcomes = await Promise.allSettled([20, 30, 40].map((n) =>
      client.update(made.id, { content: { text: `Budget ${n}k.` } }, { ifMatch: tag })));
    const landed = outcomes.filter((o) => o.status === "fulfilled");
    assert.equal(landed.length, 1);
    for (const o of outcomes) {
      if (o.status === "rejected") assert.ok(o.reason instanceof PreconditionFailedError);
    }
    const final = await client.getMemory(made.id);
    assert.deepEqual(final.content, /** @type {any} */ (landed[0]).value.content);
  });

  test("AmpUp: an episode's ACL, a schema, a principal, procedure sources", async () => {
    const ana = new AmpUpClient(server.url, "ana");
    const admin = new AmpUpClient(server.url, "ana", { adminToken: ADMIN_TOKEN });
    const scope = `nc${uid()}/team`;

    const written = await ana.remember(scope, "Shared note.", { source: "doc:nc" });
    const read = await ana.getEpisode(scope, written.id);
    assert.ok(read.etag);
    await rejects(ana.getEpisode(scope, written.id, { ifNoneMatch: read.etag }),
      NotModifiedError, 304, null);
    const changed = await ana.setAcl(scope, written.id, ["user:ana", "group:ops"],
      { ifMatch: read.etag });
    assert.ok(changed.etag && changed.etag !== read.etag);
    await rejects(ana.setAcl(scope, written.id, "*", { ifMatch: read.etag }),
      PreconditionFailedError, 412, "PRECONDITION_FAILED");
    assert.deepEqual((await ana.getEpisode(scope, written.id)).acl, ["group:ops", "user:ana"]);

    assert.equal((await ana.schema(scope)).etag, null);   // no schema, no version
    const put = await admin.setSchema(scope, { builtin: "sales", ifNoneMatch: "*" });
    assert.equal(put.etag, `"${put.commit}"`);
    await rejects(admin.setSchema(scope, { builtin: "engineering", ifNoneMatch: "*" }),
      PreconditionFailedError, 412, "PRECONDITION_FAILED");   // create-only: it exists now
    const schema = await ana.schema(scope);
    await rejects(ana.schema(scope, { ifNoneMatch: schema.etag }), NotModifiedError, 304, null);
    await admin.setSchema(scope, { builtin: "engineering", ifMatch: schema.etag });
    await rejects(admin.setSchema(scope, { builtin: "corpus", ifMatch: schema.etag }),
      PreconditionFailedError, 412, "PRECONDITION_FAILED");
    assert.equal((await ana.schema(scope)).name, "engineering");

    const user = `erin${uid()}`;
    const principal = await admin.principal(user);
    assert.ok(principal.etag);   // a user never set has a version too
    await admin.setPrincipal(user, { groups: "ops", ifMatch: principal.etag });
    await rejects(admin.setPrincipal(user, { groups: "sales", ifMatch: principal.etag }),
      PreconditionFailedError, 412, "PRECONDITION_FAILED");
    assert.deepEqual((await admin.principal(user)).groups, ["ops"]);

    await admin.remember(scope, "Step one.", { source: "doc:runbook", document: "runbook" });
    const sources = await admin.procedureSources(scope);
    assert.deepEqual(sources, { scope, documents: [] });
    const chosen = await admin.setProcedureSources(scope, "runbook", { ifMatch: sources.etag });
    assert.deepEqual(chosen.documents, ["runbook"]);
    await rejects(admin.setProcedureSources(scope, "other", { ifMatch: sources.etag }),
      PreconditionFailedError, 412, "PRECONDITION_FAILED");
    await rejects(admin.procedureSources(scope, { ifNoneMatch: chosen.etag }),
      NotModifiedError, 304, null);
  });
});
