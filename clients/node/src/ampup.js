// @ts-check
/**
 * `AmpUpClient`: the AmpUp routes (the server's root, beside `/amp/v1`), with the Python
 * `AmpUpClient`'s methods in camelCase. Same transport and errors as `AMPClient`. Every
 * method answers the server's JSON body as a plain object (snake_case); the `iter*`
 * methods walk a listing's pages and yield its items.
 */

import { READ_AT, nameList, scopePath, segments, take } from "./ampup-face.js";
import { ValidationError } from "./errors.js";
import { DEFAULT_SERVER_URL, Transport, pathSegment } from "./transport.js";

/**
 * @typedef {import("./ampup-face.js").JSONObject} JSONObject
 * @typedef {import("./ampup-face.js").Names} Names
 * @typedef {import("./ampup-face.js").Time} Time
 * @typedef {import("./ampup-face.js").ReadAt} ReadAt
 * @typedef {import("./transport.js").QueryParams} QueryParams
 *
 * @typedef {Object} AmpUpOptions
 * @property {string} [agentId]     Keys on: the key's agent, sent as `X-AMP-Agent-ID`.
 * @property {string} [apiKey]      Keys on: a key bound to a user (`keys create --user`).
 * @property {string} [adminToken]  Sent as `X-AMP-Admin-Token`, for the admin routes.
 * @property {number} [timeoutMs]   Per-request timeout (default 30000).
 * @property {Record<string, string>} [headers]  Extra headers sent with every request.
 *
 * @typedef {{ pageSize?: number }} Walk
 * @typedef {AsyncGenerator<JSONObject, void, undefined>} Items
 */

const ADMIN_TOKEN_HEADER = "X-AMP-Admin-Token";
const PAGE_SIZE = 1000;

/** @param {string} pin */
const pinPath = (pin) => `/pin/${pathSegment(pin, "pin")}`;
/** @param {string} snapshot */
const snapshotPath = (snapshot) => `/snapshots/${pathSegment(snapshot, "snapshot")}`;
/** @param {string} workspace */
const workspacePath = (workspace) => `/workspaces/${pathSegment(workspace, "workspace")}`;

export class AmpUpClient extends Transport {
  /**
   * Keys off, `user` is sent as `X-AmpUp-User`. Keys on, pass a key bound to a user as
   * `agentId` and `apiKey`: the server takes the key's user and ignores `X-AmpUp-User`.
   * `user` is also the default ACL of the episodes you `remember` (`["user:<user>"]`).
   *
   * @param {string} [serverUrl]  The server's root; a trailing `/amp/v1` is dropped.
   * @param {string} [user]
   * @param {AmpUpOptions} [options]
   */
  constructor(serverUrl = DEFAULT_SERVER_URL, user, options = {}) {
    const { agentId, apiKey, adminToken, ...transport } = options;
    super(serverUrl, "", agentId, apiKey, transport);
    this.user = user;
    this.adminToken = adminToken;
  }

  /** @returns {Record<string, string>} */
  identityHeaders() {
    const headers = super.identityHeaders();
    if (this.user) headers["X-AmpUp-User"] = this.user;
    if (this.adminToken) headers[ADMIN_TOKEN_HEADER] = this.adminToken;
    return headers;
  }

  /**
   * `acl` as a list, or this client's user alone (`user:<user>`) when left out.
   * @param {Names | undefined} acl
   * @returns {string[]}
   */
  _acl(acl) {
    if (acl !== undefined && acl !== null) return nameList(acl);
    if (!this.user) {
      throw new ValidationError("acl is required: this client names no user whose "
        + "private ACL (user:<id>) could be the default");
    }
    return [`user:${this.user}`];
  }

  /**
   * @param {string} path
   * @param {QueryParams} [query]
   * @returns {Promise<JSONObject>}
   */
  _get(path, query) {
    return this._request("GET", path, { query });
  }

  /**
   * @param {string} path
   * @param {JSONObject} [body]
   * @returns {Promise<JSONObject>}
   */
  _post(path, body) {
    return this._request("POST", path, { body });
  }

  /**
   * @param {string} path
   * @param {JSONObject} body
   * @returns {Promise<JSONObject>}
   */
  _put(path, body) {
    return this._request("PUT", path, { body });
  }

  /**
   * @param {string} path
   * @param {QueryParams} [query]
   * @returns {Promise<JSONObject>}
   */
  _delete(path, query) {
    return this._request("DELETE", path, { query });
  }

  /**
   * A cursor-paged listing: the answer's `next_<cursor>` is the next request's `<cursor>`,
   * until it is null or a page comes back empty.
   *
   * @param {string} path
   * @param {string} items   The answer's field holding the page's items.
   * @param {string} cursor  `after` or `before`.
   * @param {QueryParams} query
   * @returns {Items}
   */
  async *_walk(path, items, cursor, query) {
    /** @type {string | undefined} */
    let position;
    for (;;) {
      const page = await this._get(path, { ...query, [cursor]: position });
      yield* page[items];
      position = page[`next_${cursor}`];
      if (!position || !page[items].length) return;
    }
  }

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
      ...(about === undefined ? {} : { about: nameList(about) }),
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
   * Change an episode's ACL (its writer, or admin): `{ id, acl, commit }`.
   *
   * @param {string} scope
   * @param {string} id
   * @param {Names} acl
   * @param {{ branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setAcl(scope, id, acl, options) {
    return this._put(`/episodes/${pathSegment(id, "id")}/acl`,
      { scope, acl: nameList(acl), ...take(options, ["branch"]) });
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
   * One episode with its body and numbered units.
   *
   * @param {string} scope
   * @param {string} id
   * @param {ReadAt} [options]
   * @returns {Promise<JSONObject>}
   */
  async getEpisode(scope, id, options) {
    return this._get(`/episodes/${pathSegment(id, "id")}`, { scope, ...take(options, READ_AT) });
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
      ...(acl === undefined ? {} : { acl: nameList(acl) }),
      ...take(rest, ["value", "branch"]),
    });
  }

  // ---- schemas and extraction ---------------------------------------------------------

  /**
   * The scope's schema in force (`schema: null` for none); `history: true` adds every
   * version with its window.
   *
   * @param {string} scope  `org/team`.
   * @param {{ branch?: string, atCommit?: string, asOf?: Time, history?: boolean }} [options]
   * @returns {Promise<JSONObject>}
   */
  async schema(scope, options) {
    return this._get(`/schemas/${scopePath(scope)}`,
      take(options, ["branch", "atCommit", "asOf", "history"]));
  }

  /**
   * Admin: set the scope's schema, a built-in by name or a schema body, as a commit.
   *
   * @param {string} scope  `org/team`.
   * @param {{ builtin?: string, schema?: JSONObject, branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setSchema(scope, options) {
    return this._put(`/schemas/${scopePath(scope)}`,
      take(options, ["builtin", "schema", "branch"]));
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
   * Admin: a user's `{ user, groups, roles }`.
   * @param {string} user
   * @returns {Promise<JSONObject>}
   */
  async principal(user) {
    return this._get(`/principals/${pathSegment(user, "user")}`);
  }

  /**
   * Admin: replace a user's groups and roles: `{ user, groups, roles }`.
   *
   * @param {string} user
   * @param {{ groups?: Names, roles?: Names }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setPrincipal(user, options = {}) {
    const { groups = [], roles = [], ...rest } = options;
    take(rest, ["groups", "roles"]);
    return this._put(`/principals/${pathSegment(user, "user")}`,
      { groups: nameList(groups), roles: nameList(roles) });
  }

  /**
   * Admin: what the server is made of and how it is doing (`GET /status`).
   * @returns {Promise<JSONObject>}
   */
  async status() {
    return this._get("/status");
  }

  // ---- advice, runs and sessions ------------------------------------------------------

  /**
   * The advice for `task` (recorded on `session`): `{ advice }`.
   *
   * @param {string} scope
   * @param {string} task
   * @param {string} [session]
   * @returns {Promise<JSONObject>}
   */
  async advice(scope, task, session) {
    return this._post("/advice", { scope, task, ...take({ session }, ["session"]) });
  }

  /**
   * Record finished work: `{ id, commit }`. Without `acl` only you may read it.
   *
   * @param {string} scope
   * @param {string} task
   * @param {{ trace?: string, outcome?: string, adviceKey?: string, acl?: Names, branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async recordRun(scope, task, options = {}) {
    const { acl, ...rest } = options;
    return this._post("/runs", {
      scope, task, ...(acl === undefined ? {} : { acl: nameList(acl) }),
      ...take(rest, ["trace", "outcome", "adviceKey", "branch"]),
    });
  }

  /**
   * Reward a run or an ended session, in [-1, 1]: `{ id, reward, commit }`.
   *
   * @param {string} run
   * @param {number} reward
   * @param {string} reason
   * @returns {Promise<JSONObject>}
   */
  async rewardRun(run, reward, reason) {
    return this._post("/runs/reward", { run, reward, reason });
  }

  /**
   * The run with its `trace` and `rewards`.
   * @param {string} run
   * @returns {Promise<JSONObject>}
   */
  async getRun(run) {
    return this._get(`/runs/${pathSegment(run, "run")}`);
  }

  /**
   * One page of the runs you may read, newest first: `{ runs, next_before }`.
   *
   * @param {string} scope
   * @param {{ branch?: string, limit?: number, before?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async runs(scope, options) {
    return this._get("/runs", { scope, ...take(options, ["branch", "limit", "before"]) });
  }

  /**
   * Every run you may read, newest first, page by page.
   *
   * @param {string} scope
   * @param {{ branch?: string } & Walk} [options]
   * @returns {Items}
   */
  iterRuns(scope, options = {}) {
    const { pageSize = PAGE_SIZE, ...rest } = options;
    return this._walk("/runs", "runs", "before",
      { scope, limit: pageSize, ...take(rest, ["branch"]) });
  }

  /**
   * Open a session (advice served on it is recorded): `{ id }`.
   *
   * @param {string} scope
   * @param {string} [task]
   * @param {{ acl?: Names, branch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async startSession(scope, task, options = {}) {
    const { acl, ...rest } = options;
    return this._post("/sessions/start", {
      scope, ...take({ task }, ["task"]),
      ...(acl === undefined ? {} : { acl: nameList(acl) }), ...take(rest, ["branch"]),
    });
  }

  /**
   * End it; with `reward` that is its explicit reward. Answers the ended session.
   *
   * @param {string} session
   * @param {string} transcript
   * @param {string} outcome
   * @param {{ reward?: number, reason?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async endSession(session, transcript, outcome, options) {
    return this._post("/sessions/end",
      { session, transcript, outcome, ...take(options, ["reward", "reason"]) });
  }

  /**
   * @param {string} session
   * @returns {Promise<JSONObject>}
   */
  async getSession(session) {
    return this._get(`/sessions/${pathSegment(session, "session")}`);
  }

  /**
   * One page of the sessions you may read, newest first: `{ sessions, next_before }`.
   *
   * @param {string} scope
   * @param {{ branch?: string, limit?: number, before?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async sessions(scope, options) {
    return this._get("/sessions", { scope, ...take(options, ["branch", "limit", "before"]) });
  }

  /**
   * Every session you may read, newest first, page by page.
   *
   * @param {string} scope
   * @param {{ branch?: string } & Walk} [options]
   * @returns {Items}
   */
  iterSessions(scope, options = {}) {
    const { pageSize = PAGE_SIZE, ...rest } = options;
    return this._walk("/sessions", "sessions", "before",
      { scope, limit: pageSize, ...take(rest, ["branch"]) });
  }

  // ---- what the loop learned ----------------------------------------------------------

  /**
   * The scope's latest situation map.
   * @param {string} scope
   * @returns {Promise<JSONObject>}
   */
  async situations(scope) {
    return this._get("/situations", { scope });
  }

  /**
   * The scope's notes (of one situation), oldest first: `{ scope, notes }`.
   * @param {string} scope
   * @param {string} [situation]
   * @returns {Promise<JSONObject>}
   */
  async notes(scope, situation) {
    return this._get("/notes", { scope, situation });
  }

  /**
   * The scope's latest compiled procedures.
   * @param {string} scope
   * @returns {Promise<JSONObject>}
   */
  async procedures(scope) {
    return this._get("/procedures", { scope });
  }

  /**
   * Admin: the documents compiled into the scope's procedures (replaces the list):
   * `{ scope, documents, commit }`.
   *
   * @param {string} scope
   * @param {Names} documents
   * @returns {Promise<JSONObject>}
   */
  async setProcedureSources(scope, documents) {
    return this._put("/procedures/sources", { scope, documents: nameList(documents) });
  }

  /**
   * One page of the items a model pass set aside (`kind`: extract, judge, learn,
   * compile), oldest first: `{ scope, items, next_after }`.
   *
   * @param {string} scope
   * @param {{ kind?: string, limit?: number, after?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setAside(scope, options) {
    return this._get("/set-aside", { scope, ...take(options, ["kind", "limit", "after"]) });
  }

  /**
   * Every item set aside, oldest first, page by page.
   *
   * @param {string} scope
   * @param {{ kind?: string } & Walk} [options]
   * @returns {Items}
   */
  iterSetAside(scope, options = {}) {
    const { pageSize = PAGE_SIZE, ...rest } = options;
    return this._walk("/set-aside", "items", "after",
      { scope, limit: pageSize, ...take(rest, ["kind"]) });
  }

  // ---- branches -----------------------------------------------------------------------

  /**
   * `{ scope, branches }`: `main` first, then every live branch.
   * @param {string} scope
   * @returns {Promise<JSONObject>}
   */
  async branches(scope) {
    return this._get("/branches", { scope });
  }

  /**
   * Fork `name` from `from` (default `main`) at `atCommit` (default its head).
   *
   * @param {string} scope
   * @param {string} name
   * @param {{ from?: string, atCommit?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async createBranch(scope, name, options) {
    return this._post("/branches", { scope, name, ...take(options, ["from", "atCommit"]) });
  }

  /**
   * `{ scope, name, deleted, commit }`; the branch's commits stay in the ledger.
   * @param {string} scope
   * @param {string} name
   * @returns {Promise<JSONObject>}
   */
  async deleteBranch(scope, name) {
    return this._delete(`/branches/${segments(name, "name")}`, { scope });
  }

  /**
   * Three-way merge of branch `from` into `into` (default `main`); a conflict is a
   * `ConflictError` whose `details.conflicts` lists them.
   *
   * @param {string} scope
   * @param {string} from
   * @param {{ into?: string, message?: string, dryRun?: boolean }} [options]
   * @returns {Promise<JSONObject>}
   */
  async merge(scope, from, options) {
    return this._post("/merge", { scope, from, ...take(options, ["into", "message", "dryRun"]) });
  }

  // ---- pins ---------------------------------------------------------------------------

  /**
   * Hold one scope and branch at one commit (default its head now) for `ttl` (`"15m"`,
   * `"1d12h"`): the pin. Pass its id as `pin` to a read.
   *
   * @param {string} scope
   * @param {string} ttl
   * @param {{ branch?: string, atCommit?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async pin(scope, ttl, options) {
    return this._post("/pin", { scope, ttl, ...take(options, ["branch", "atCommit"]) });
  }

  /**
   * The pin with its `state`: live, expired or released.
   * @param {string} pin
   * @returns {Promise<JSONObject>}
   */
  async getPin(pin) {
    return this._get(pinPath(pin));
  }

  /**
   * Creator only: the pin, now expiring `ttl` from now.
   * @param {string} pin
   * @param {string} ttl
   * @returns {Promise<JSONObject>}
   */
  async renewPin(pin, ttl) {
    return this._post(`${pinPath(pin)}/renew`, { ttl });
  }

  /**
   * Creator only: release it now (reads through it answer 410 from then on).
   * @param {string} pin
   * @returns {Promise<JSONObject>}
   */
  async releasePin(pin) {
    return this._delete(pinPath(pin));
  }

  // ---- snapshots ----------------------------------------------------------------------

  /**
   * Hold the heads of several scopes under one id until released. Pass its id as
   * `snapshot` to a read.
   * @param {Names} scopes
   * @returns {Promise<JSONObject>}
   */
  async snapshot(scopes) {
    return this._post("/snapshots", { scopes: nameList(scopes) });
  }

  /**
   * The snapshot with its heads and `state`.
   * @param {string} snapshot
   * @returns {Promise<JSONObject>}
   */
  async getSnapshot(snapshot) {
    return this._get(snapshotPath(snapshot));
  }

  /**
   * Creator only: release it (reads through it answer 410 from then on).
   * @param {string} snapshot
   * @returns {Promise<JSONObject>}
   */
  async releaseSnapshot(snapshot) {
    return this._delete(snapshotPath(snapshot));
  }

  /**
   * Every scope of your workspace under one snapshot (`workspace` set).
   * @param {string} workspace
   * @returns {Promise<JSONObject>}
   */
  async snapshotWorkspace(workspace) {
    return this._post(`${workspacePath(workspace)}/snapshots`);
  }

  /**
   * The snapshots taken of the workspace, newest first, released ones too: `{ snapshots }`.
   * @param {string} workspace
   * @returns {Promise<JSONObject>}
   */
  async workspaceSnapshots(workspace) {
    return this._get(`${workspacePath(workspace)}/snapshots`);
  }

  // ---- workspaces ---------------------------------------------------------------------

  /**
   * A disposable org with caps (`scopes`, `episodes`, `facts`, `bytes`) and a time to
   * live; its scopes are `<id>/<team>`.
   *
   * @param {string} name
   * @param {string} ttl
   * @param {{ caps?: JSONObject }} [options]
   * @returns {Promise<JSONObject>}
   */
  async createWorkspace(name, ttl, options) {
    return this._post("/workspaces", { name, ttl, ...take(options, ["caps"]) });
  }

  /**
   * Your live workspaces with their usage (every user's: admin and `allUsers: true`).
   * @param {{ allUsers?: boolean }} [options]
   * @returns {Promise<JSONObject>}
   */
  async workspaces(options) {
    return this._get("/workspaces", { all: take(options, ["allUsers"]).all_users });
  }

  /**
   * One live workspace of yours with its usage and `scopes`.
   * @param {string} workspace
   * @returns {Promise<JSONObject>}
   */
  async getWorkspace(workspace) {
    return this._get(workspacePath(workspace));
  }

  /**
   * The workspace, now expiring `ttl` from now.
   * @param {string} workspace
   * @param {string} ttl
   * @returns {Promise<JSONObject>}
   */
  async renewWorkspace(workspace, ttl) {
    return this._post(`${workspacePath(workspace)}/renew`, { ttl });
  }

  /**
   * Drop it and every scope in it: `{ id, deleted, dropped, scopes }`.
   * @param {string} workspace
   * @returns {Promise<JSONObject>}
   */
  async deleteWorkspace(workspace) {
    return this._delete(workspacePath(workspace));
  }
}
