// @ts-check
/**
 * The AmpUp advice routes of `AmpUpClient`: advice, runs, sessions, situations, notes,
 * procedures and the items a model pass set aside.
 */

import { MemoryCalls } from "./ampup-memory.js";
import { PAGE_SIZE, listOption, nameList, take } from "./ampup-face.js";
import { pathSegment, refuseUnknown } from "./transport.js";

/**
 * @typedef {import("./ampup-face.js").JSONObject} JSONObject
 * @typedef {import("./ampup-face.js").Names} Names
 * @typedef {import("./ampup-face.js").Time} Time
 * @typedef {import("./ampup-face.js").ReadAt} ReadAt
 * @typedef {import("./ampup-face.js").Walk} Walk
 * @typedef {import("./ampup-face.js").Items} Items
 */

export class AdviceCalls extends MemoryCalls {
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
   * Record finished work: `{ id, commit, created }`. Without `acl` only you may read it.
   * With `idempotencyKey` (e.g. a UUID you made), a retry answers the run the first
   * recording made (`created: false`) instead of recording it twice.
   *
   * @param {string} scope
   * @param {string} task
   * @param {{ trace?: string, outcome?: string, adviceKey?: string, acl?: Names, branch?: string, idempotencyKey?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async recordRun(scope, task, options = {}) {
    const { acl, ...rest } = options;
    return this._post("/runs", {
      scope, task, ...listOption("acl", acl),
      ...take(rest, ["trace", "outcome", "adviceKey", "branch", "idempotencyKey"]),
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
   * Open a session (advice served on it is recorded): `{ id, commit, created }`;
   * `idempotencyKey` as for `recordRun`.
   *
   * @param {string} scope
   * @param {string} [task]
   * @param {{ acl?: Names, branch?: string, idempotencyKey?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async startSession(scope, task, options = {}) {
    const { acl, ...rest } = options;
    return this._post("/sessions/start", {
      scope, ...take({ task }, ["task"]),
      ...listOption("acl", acl), ...take(rest, ["branch", "idempotencyKey"]),
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
   * Admin: the documents compiled into the scope's procedures: `{ scope, documents }`,
   * with its `etag` (for `setProcedureSources`' `ifMatch`).
   *
   * @param {string} scope
   * @param {{ ifNoneMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async procedureSources(scope, options = {}) {
    refuseUnknown(options, ["ifNoneMatch"]);
    const { ifNoneMatch } = options;
    return this._get("/procedures/sources", { scope }, { ifNoneMatch });
  }

  /**
   * Admin: the documents compiled into the scope's procedures (replaces the list):
   * `{ scope, documents, commit }`. `ifMatch`: only over that list, else
   * `PreconditionFailedError`.
   *
   * @param {string} scope
   * @param {Names} documents
   * @param {{ ifMatch?: string }} [options]
   * @returns {Promise<JSONObject>}
   */
  async setProcedureSources(scope, documents, options = {}) {
    refuseUnknown(options, ["ifMatch"]);
    const { ifMatch } = options;
    return this._put("/procedures/sources", { scope, documents: nameList(documents) },
      { ifMatch });
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
}
