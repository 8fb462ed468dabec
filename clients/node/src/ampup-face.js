// @ts-check
/**
 * How `AmpUpClient`'s arguments become a request: option names to wire names, ACL
 * defaults, ids as path segments. Each rule lives here once; `ampup.js` only lists routes.
 */

import { ValidationError } from "./errors.js";
import { pathSegment } from "./transport.js";

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
 */

export const READ_AT = Object.freeze(["branch", "atCommit", "pin", "snapshot"]);

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
  for (const [name, value] of Object.entries(options ?? {})) {
    if (!names.includes(name)) {
      throw new ValidationError(`unknown option ${name} (this method takes ${names.join(", ")})`);
    }
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
