// @ts-check
/**
 * What every `AmpUpClient` method shares: the caller's identity and how arguments become a
 * request (option names to wire names, ACL defaults, ids as path segments, cursor paging).
 * Each rule lives here once; the `ampup-*.js` method groups only list routes.
 */

import { ValidationError } from "./errors.js";
import { DEFAULT_SERVER_URL, Transport, pathSegment, refuseUnknown } from "./transport.js";

/**
 * @typedef {Record<string, any>} JSONObject  A JSON body exactly as the server sends it.
 * @typedef {string | string[]} Names  A list of names, or one name as a string.
 * @typedef {Date | string} Time  A Date is sent as its ISO string.
 *
 * @typedef {Object} ReadAt  Which version a read sees (api.md, "Pins and snapshots").
 * @property {string} [branch]
 * @property {string} [atCommit]
 * @property {string} [pin]       A pin's id: read exactly the commit it holds.
 * @property {string} [snapshot]  A snapshot's id.
 *
 * @typedef {Object} AmpUpOptions
 * @property {string} [agentId]     Keys on: the key's agent, sent as `X-AMP-Agent-ID`.
 * @property {string} [apiKey]      Keys on: a key bound to a user (`keys create --user`).
 * @property {string} [adminToken]  Sent as `X-AMP-Admin-Token`, for the admin routes.
 * @property {number} [timeoutMs]   Per-request timeout (default 30000).
 * @property {Record<string, string>} [headers]  Extra headers sent with every request.
 *
 * @typedef {{ pageSize?: number }} Walk  Items asked per page (default 1000).
 * @typedef {AsyncGenerator<JSONObject, void, undefined>} Items
 * @typedef {import("./transport.js").QueryParams} QueryParams
 * @typedef {import("./transport.js").Conditions} Conditions
 */

export const READ_AT = Object.freeze(["branch", "atCommit", "pin", "snapshot"]);
export const PAGE_SIZE = 1000;
const ADMIN_TOKEN_HEADER = "X-AMP-Admin-Token";

/** @param {string} name */
function wireName(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * The options given, under their wire (snake_case) names: one left undefined or null is
 * not sent, so the server's default applies; a Date becomes its ISO string. An option the
 * method does not take is refused, rather than silently dropped.
 *
 * @param {object | undefined} options
 * @param {readonly string[]} names  The options the method takes (camelCase).
 * @returns {JSONObject}
 */
export function take(options, names) {
  /** @type {JSONObject} */
  const wire = {};
  refuseUnknown(options, names);
  for (const [name, value] of Object.entries(options ?? {})) {
    if (value === undefined || value === null) continue;
    wire[wireName(name)] = value instanceof Date ? value.toISOString() : value;
  }
  return wire;
}

/**
 * @param {Names} names
 * @returns {string[]}
 */
export function nameList(names) {
  return typeof names === "string" ? [names] : [...names];
}

/**
 * `{ [name]: list }` for a list option given (a list or one string), `{}` for one left
 * undefined or null: not sent, so the server's default applies, as `take` leaves out every
 * other option.
 *
 * @param {string} name  The wire name.
 * @param {Names | undefined | null} value
 * @returns {JSONObject}
 */
export function listOption(name, value) {
  return value === undefined || value === null ? {} : { [name]: nameList(value) };
}

/**
 * A name that may hold `/` separators (a branch) as path segments, each encoded.
 * @param {unknown} value
 * @param {string} name
 */
export function segments(value, name) {
  const parts = typeof value === "string" ? value.split("/") : [value];
  return parts.map((part) => pathSegment(part, name)).join("/");
}

/**
 * `org/team` as the two segments of `/schemas/{org}/{team}`.
 * @param {string} scope
 */
export function scopePath(scope) {
  const parts = typeof scope === "string" ? scope.split("/") : [];
  if (parts.length !== 2) {
    throw new ValidationError(`scope must be org/team, got ${JSON.stringify(scope)}`);
  }
  return parts.map((part) => pathSegment(part, "scope")).join("/");
}

/**
 * Identity and request building of the AmpUp routes, under the method groups
 * (`MemoryCalls`, `AdviceCalls`, `VersionCalls`) that make up `AmpUpClient`.
 */
export class AmpUpFace extends Transport {
  /**
   * Keys off, `user` is sent as `X-AmpUp-User`. Keys on, pass a key bound to a user as
   * `agentId` and `apiKey`: the server takes the key's user (a `user` naming anyone else
   * is refused with a 401).
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
   * @param {Conditions} [conditions]
   * @returns {Promise<JSONObject>}
   */
  _get(path, query, conditions) {
    return this._request("GET", path, { query, conditions });
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
   * @param {Conditions} [conditions]
   * @returns {Promise<JSONObject>}
   */
  _put(path, body, conditions) {
    return this._request("PUT", path, { body, conditions });
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
}
