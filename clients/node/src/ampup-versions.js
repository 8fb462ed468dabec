// @ts-check
/**
 * The AmpUp routes of `AmpUpClient` that name versions of memory: branches and merge,
 * pins, snapshots and workspaces.
 */

import { AdviceCalls } from "./ampup-advice.js";
import { nameList, segments, take } from "./ampup-face.js";
import { pathSegment } from "./transport.js";

/**
 * @typedef {import("./ampup-face.js").JSONObject} JSONObject
 * @typedef {import("./ampup-face.js").Names} Names
 * @typedef {import("./ampup-face.js").Time} Time
 * @typedef {import("./ampup-face.js").ReadAt} ReadAt
 * @typedef {import("./ampup-face.js").Walk} Walk
 * @typedef {import("./ampup-face.js").Items} Items
 */

/** @param {string} pin */
const pinPath = (pin) => `/pin/${pathSegment(pin, "pin")}`;
/** @param {string} snapshot */
const snapshotPath = (snapshot) => `/snapshots/${pathSegment(snapshot, "snapshot")}`;
/** @param {string} workspace */
const workspacePath = (workspace) => `/workspaces/${pathSegment(workspace, "workspace")}`;

export class VersionCalls extends AdviceCalls {
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
  }}
