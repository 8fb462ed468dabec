// @ts-check
/**
 * The AmpUp memory routes of `AmpUpClient`: episodes, browsing, the ledger, facts, search
 * and typed queries, schemas, extraction, principals and status.
 */

import {
  AmpUpFace, PAGE_SIZE, READ_AT, listOption, nameList, scopePath, take,
} from "./ampup-face.js";
import { pathSegment, refuseUnknown } from "./transport.js";

/**
 * @typedef {import("./ampup-face.js").JSONObject} JSONObject
 * @typedef {import("./ampup-face.js").Names} Names
 * @typedef {import("./ampup-face.js").Time} Time
 * @typedef {import("./ampup-face.js").ReadAt} ReadAt
 * @typedef {import("./ampup-face.js").Walk} Walk
 * @typedef {import("./ampup-face.js").Items} Items
 */

export class MemoryCalls extends AmpUpFace {
  // ---- episodes -----------------------------------------------------------------------

  /**
   * Write one episode: `{ id, commit, created }`.
   *
   * @param {string} scope
   * @param {string} text
   * @param {{ source: string, acl?: Names, about?: Names, occurredAt?: Time, document?: string, branch?: string }} options
   * @returns {Promise<JSONObject>}
   */
  async remember(scope, text, options) {
    const { acl, about, ...rest } = options ?? {};
    return this._post("/episodes", {
      scope, body: text, acl: this._acl(acl),
      ...listOption("about", about),
      ...take(rest, ["source", "occurredAt", "document", "branch"]),
    });
  }

  /**
   * Write several episodes in one commit (each a wire object `{ source, body, acl?, about?,
   * occurred_at?, document? }`; `acl` left out is `remember`'s default):
   * `{ commit, episodes: [{ id, status }] }`. Any conflict refuses them all.
   *
   * @param {string} scope
   * @param {JSONObject[]} episodes
   * @param {{ branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async rememberBatch(scope, episodes, options) {
    const sent = episodes.map((episode) => ({ ...episode, acl: this._acl(episode.acl) }));
    return this._post("/episodes/batch", { scope, episodes: sent, ...take(options, ["branch"]) });
  }

  /**
   * Change an episode's ACL (its writer, or admin): `{ id, acl, commit }`. `ifMatch`
   * (`getEpisode`'s `etag`): only over that ACL, else `PreconditionFailedError`.
   *
   * @param {string} scope
   * @param {string} id
   * @param {Names} acl
   * @param {{ branch?: string, ifMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setAcl(scope, id, acl, options = {}) {
    const { ifMatch, ...rest } = options;
    return this._put(`/episodes/${pathSegment(id, "id")}/acl`,
      { scope, acl: nameList(acl), ...take(rest, ["branch"]) }, { ifMatch });
  }

  /**
   * The newest version of `document` you may read (as of `asOf`), as an episode.
   *
   * @param {string} scope
   * @param {string} document
   * @param {ReadAt & { asOf?: Time }} [options]
   * @returns {Promise<JSONObject>}
   */
  async document(scope, document, options) {
    return this._post("/document", { scope, document, ...take(options, [...READ_AT, "asOf"]) });
  }

  /**
   * One episode with its body and numbered units; its `etag` is its ACL's version (for
   * `setAcl`'s `ifMatch`; `ifNoneMatch`: `NotModifiedError` while current).
   *
   * @param {string} scope
   * @param {string} id
   * @param {ReadAt & { ifNoneMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async getEpisode(scope, id, options = {}) {
    const { ifNoneMatch, ...rest } = options;
    return this._get(`/episodes/${pathSegment(id, "id")}`, { scope, ...take(rest, READ_AT) },
      { ifNoneMatch });
  }

  /**
   * One page of the episodes you may read: `{ episodes, total, next_after }`.
   *
   * @param {string} scope
   * @param {ReadAt & { limit?: number, after?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async episodes(scope, options) {
    return this._get("/episodes", { scope, ...take(options, [...READ_AT, "limit", "after"]) });
  }

  /**
   * Every episode you may read, newest first, page by page.
   *
   * @param {string} scope
   * @param {ReadAt & Walk} [options]
   * @returns {Items}
   */
  iterEpisodes(scope, options = {}) {
    const { pageSize = PAGE_SIZE, ...rest } = options;
    return this._walk("/episodes", "episodes", "after",
      { scope, limit: pageSize, ...take(rest, READ_AT) });
  }

  // ---- browsing -----------------------------------------------------------------------

  /**
   * Every scope where you may read an episode on `main`: `{ scopes }`.
   * @returns {Promise<JSONObject>}
   */
  async scopes() {
    return this._get("/scopes");
  }

  /**
   * One page of the entities with facts you may see: `{ entities, total, next_after }`.
   *
   * @param {string} scope
   * @param {ReadAt & { limit?: number, after?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async entities(scope, options) {
    return this._get("/entities", { scope, ...take(options, [...READ_AT, "limit", "after"]) });
  }

  /**
   * Every entity with facts you may see, by name, page by page.
   *
   * @param {string} scope
   * @param {ReadAt & Walk} [options]
   * @returns {Items}
   */
  iterEntities(scope, options = {}) {
    const { pageSize = PAGE_SIZE, ...rest } = options;
    return this._walk("/entities", "entities", "after",
      { scope, limit: pageSize, ...take(rest, READ_AT) });
  }

  /**
   * The episode types the server knows (by `source` prefix): `{ types }`.
   * @returns {Promise<JSONObject>}
   */
  async episodeTypes() {
    return this._get("/episode-types");
  }

  /**
   * One page of the branch's commits, newest first: `{ commits, next_before }`.
   *
   * @param {string} scope
   * @param {{ branch?: string, limit?: number, before?: string, pin?: string, snapshot?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async ledger(scope, options) {
    return this._get("/ledger",
      { scope, ...take(options, ["branch", "limit", "before", "pin", "snapshot"]) });
  }

  /**
   * Every commit of the branch's chain, newest first, page by page.
   *
   * @param {string} scope
   * @param {{ branch?: string, pin?: string, snapshot?: string } & Walk} [options]
   * @returns {Items}
   */
  iterLedger(scope, options = {}) {
    const { pageSize = PAGE_SIZE, ...rest } = options;
    return this._walk("/ledger", "commits", "before",
      { scope, limit: pageSize, ...take(rest, ["branch", "pin", "snapshot"]) });
  }

  // ---- facts and search ---------------------------------------------------------------

  /**
   * Facts matching `query` and the source text no fact cites (`POST /search`).
   *
   * @param {string} scope
   * @param {string} query
   * @param {ReadAt & { limit?: number, asOf?: Time, tz?: string, rerank?: boolean }} [options]
   * @returns {Promise<JSONObject>}
   */
  async search(scope, query, options) {
    return this._post("/search",
      { scope, query, ...take(options, [...READ_AT, "limit", "asOf", "tz", "rerank"]) });
  }

  /**
   * `POST /query`: ranked passages (`find: "passages"`, the default, needs `query`), or
   * typed `find: "facts"` / `"entities"` with `type`, `entity`, `predicate`, `where`,
   * `select`, `orderBy`, `offset`, `asOf`.
   *
   * @param {string} scope
   * @param {string | null} [query]  Left out for a typed query.
   * @param {ReadAt & { find?: "passages" | "facts" | "entities", limit?: number, tz?: string,
   *   rerank?: boolean, type?: string, entity?: string, predicate?: string[],
   *   where?: JSONObject[], select?: string[], orderBy?: JSONObject[], offset?: number,
   *   asOf?: Time }} [options]
   * @returns {Promise<JSONObject>}
   */
  async query(scope, query, options = {}) {
    const { find = "passages", ...rest } = options;
    return this._post("/query", {
      scope, find, ...(query === undefined || query === null ? {} : { query }),
      ...take(rest, [...READ_AT, "limit", "tz", "rerank", "type", "entity", "predicate",
        "where", "select", "orderBy", "offset", "asOf"]),
    });
  }

  /**
   * An entity's current facts (every version with `history: true`): `{ facts }`.
   *
   * @param {string} scope
   * @param {string} entity
   * @param {ReadAt & { predicate?: string, asOf?: Time, history?: boolean }} [options]
   * @returns {Promise<JSONObject>}
   */
  async facts(scope, entity, options) {
    return this._get("/facts",
      { scope, entity, ...take(options, [...READ_AT, "predicate", "asOf", "history"]) });
  }

  /**
   * Post one fact citing episode units (`cites: [{ episode, unit }]`); `quote` must occur
   * in a cited unit: `{ id, commit }`.
   *
   * @param {string} scope
   * @param {string} entity
   * @param {string} predicate
   * @param {string | number | boolean | JSONObject} value
   * @param {{ quote: string, cites: Array<{ episode: string, unit: number }>, validFrom?: Time, validTo?: Time, branch?: string }} options
   * @returns {Promise<JSONObject>}
   */
  async addFact(scope, entity, predicate, value, options) {
    return this._post("/facts", {
      scope, entity, predicate, value,
      ...take(options, ["quote", "cites", "validFrom", "validTo", "branch"]),
    });
  }

  /**
   * Post several facts (each a wire object shaped as `addFact`'s body) in one commit:
   * `{ ids, commit }`; one invalid fact refuses them all.
   *
   * @param {string} scope
   * @param {JSONObject[]} facts
   * @param {{ branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async addFacts(scope, facts, options) {
    return this._post("/facts/batch", { scope, facts, ...take(options, ["branch"]) });
  }

  /**
   * End an attribute's current value (`POST /close`; `reason` becomes its own episode):
   * `{ episode, commit, closed, fact }`. `acl` left out is the server's default.
   *
   * @param {string} scope
   * @param {string} entity
   * @param {string} predicate
   * @param {string} reason
   * @param {{ value?: string | number | boolean, acl?: Names, branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async closeFact(scope, entity, predicate, reason, options = {}) {
    const { acl, ...rest } = options;
    return this._post("/close", {
      scope, entity, predicate, reason,
      ...listOption("acl", acl), ...take(rest, ["value", "branch"]),
    });
  }

  // ---- schemas and extraction ---------------------------------------------------------

  /**
   * The scope's schema in force (`schema: null` for none); `history: true` adds every
   * version with its window. `etag`: the commit that set it (null without a schema);
   * `ifNoneMatch` with it: `NotModifiedError` while it is in force.
   *
   * @param {string} scope  `org/team`.
   * @param {ReadAt & { asOf?: Time, history?: boolean, ifNoneMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async schema(scope, options = {}) {
    const { ifNoneMatch, ...rest } = options;
    return this._get(`/schemas/${scopePath(scope)}`,
      take(rest, [...READ_AT, "asOf", "history"]), { ifNoneMatch });
  }

  /**
   * Admin: set the scope's schema, a built-in by name or a schema body, as a commit.
   * `ifMatch` (`schema`'s `etag`): only over that version; `ifNoneMatch: "*"`: only where
   * the branch has no schema yet; else `PreconditionFailedError`.
   *
   * @param {string} scope  `org/team`.
   * @param {{ builtin?: string, schema?: JSONObject, branch?: string, ifMatch?: string,
   *   ifNoneMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setSchema(scope, options = {}) {
    const { ifMatch, ifNoneMatch, ...rest } = options;
    return this._put(`/schemas/${scopePath(scope)}`,
      take(rest, ["builtin", "schema", "branch"]), { ifMatch, ifNoneMatch });
  }

  /**
   * The built-in schemas, in full: `{ schemas }`.
   * @returns {Promise<JSONObject>}
   */
  async builtinSchemas() {
    return this._get("/schemas");
  }

  /**
   * How far extraction has read the branch (counts of what you may read).
   *
   * @param {string} scope
   * @param {{ branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async extractionStatus(scope, options) {
    return this._get("/extraction/status", { scope, ...take(options, ["branch"]) });
  }

  /**
   * The branch's episodes extraction set aside: `{ items }`.
   *
   * @param {string} scope
   * @param {{ branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async extractionSetAside(scope, options) {
    return this._get("/extraction/set-aside", { scope, ...take(options, ["branch"]) });
  }

  // ---- principals and status (admin) --------------------------------------------------

  /**
   * Admin: a user's `{ user, groups, roles }`, with its `etag`.
   * @param {string} user
   * @param {{ ifNoneMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async principal(user, options = {}) {
    refuseUnknown(options, ["ifNoneMatch"]);
    const { ifNoneMatch } = options;
    return this._get(`/principals/${pathSegment(user, "user")}`, undefined, { ifNoneMatch });
  }

  /**
   * Admin: replace a user's groups and roles: `{ user, groups, roles }`. `ifMatch`
   * (`principal`'s `etag`): only over that version, else `PreconditionFailedError`.
   *
   * @param {string} user
   * @param {{ groups?: Names, roles?: Names, ifMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setPrincipal(user, options = {}) {
    const { groups, roles, ifMatch, ...rest } = options;
    take(rest, ["groups", "roles", "ifMatch"]);
    // Replaces both lists: one left out (or null) is empty.
    return this._put(`/principals/${pathSegment(user, "user")}`,
      { groups: nameList(groups ?? []), roles: nameList(roles ?? []) }, { ifMatch });
  }

  /**
   * Admin: what the server is made of and how it is doing (`GET /status`).
   * @returns {Promise<JSONObject>}
   */
  async status() {
    return this._get("/status");
  }
}
